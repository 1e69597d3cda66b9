"""Exceptions raised by multicluster_source.

The tree::

    MultiClusterSourceError            root of everything this library raises on purpose
    ├── ConfigurationError (+ValueError) an option, a client property or an open() argument is wrong
    ├── MetadataError                  metadata could not be read or is invalid (names file, line, key)
    │   └── MetadataValidationError    the content parsed but breaks a rule (duplicate cluster, ...)
    ├── DeserializationError           the deserializer raised; names cluster, topic, partition, offset
    ├── CheckpointError                a checkpoint could not be written, read or restored, or its directory
    │                                  is owned by another running source (names the directory and pid)
    ├── StreamClosedError (+RuntimeError) poll, poll_batches or iteration on a stream already closed
    ├── HandoverGapError               a hybrid handover position is below the live partition's earliest
    │                                  offset (the archive ends before retention); names the split
    ├── ClusterIdentityError           a cluster id of the metadata now points at another Kafka cluster
    │                                  than the positions of an exactly-once sink were read from
    ├── ProducerFencedError            another job opened the same exactly-once sink (``transactional_id``)
    └── SourceFailedError              a reader or the enumerator failed; ``__cause__`` holds the original
        └── OffsetOutOfRangeError      a position left the log and ``auto.offset.reset=error`` forbids a reset

Every exception that wraps another chains it with ``raise ... from`` so the cause is never lost.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ClusterIdentityError",
    "ConfigurationError",
    "DeserializationError",
    "HandoverGapError",
    "MetadataError",
    "MetadataValidationError",
    "MultiClusterSourceError",
    "OffsetOutOfRangeError",
    "ProducerFencedError",
    "SourceFailedError",
    "StreamClosedError",
]


class MultiClusterSourceError(Exception):
    """Root of every error this library raises on purpose."""


class ConfigurationError(MultiClusterSourceError, ValueError):
    """An option, a client property or an argument is invalid; the message names it and what is allowed."""


class MetadataError(MultiClusterSourceError):
    """Stream metadata could not be read or is invalid.

    ``source`` names where the metadata came from (a file path, a topic, ``"static"``); ``line`` is the
    1-based line where the parser gives one; ``key`` is the offending key path, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        key: str | None = None,
    ) -> None:
        self.reason = message
        self.source = source
        self.line = line
        self.key = key
        self.problems: list[MetadataError] = [self]
        """Every problem found in the same content, this one first (the parser goes on past a bad stream or
        cluster entry to find the others; ``python -m multicluster_source check`` lists them)."""
        where = []
        if source is not None:
            where.append(str(source))
        if line is not None:
            where.append(f"line {line}")
        if key is not None:
            where.append(f"key {key!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class MetadataValidationError(MetadataError):
    """Metadata parsed but breaks a rule: duplicate cluster ids, invalid topic names, empty topics, ..."""


class DeserializationError(MultiClusterSourceError):
    """The user's deserializer raised for a record; the message names cluster, topic, partition, offset."""

    def __init__(self, cluster_id: str, topic: str, partition: int, offset: int) -> None:
        self.cluster_id = cluster_id
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(
            f"deserializer failed for record cluster={cluster_id} topic={topic} "
            f"partition={partition} offset={offset}"
        )


class CheckpointError(MultiClusterSourceError):
    """A checkpoint could not be written, read or restored, or its directory is owned by another source.

    The message names the file, or the directory and the pid of the source holding it.
    """


class StreamClosedError(MultiClusterSourceError, RuntimeError):
    """``poll``, ``poll_batches`` or iteration was called on a stream that is already closed."""


class HandoverGapError(MultiClusterSourceError):
    """A hybrid handover position is below the live partition's earliest offset (names the split).

    The records in between are neither in the previous stage nor on the cluster any more. Fails the source
    with ``set_gap_policy("fail")`` (the default).
    """


class SourceFailedError(MultiClusterSourceError):
    """A reader or the enumerator failed; the original exception is the ``__cause__``."""


class OffsetOutOfRangeError(SourceFailedError):
    """A position is no longer in the log and ``auto.offset.reset=error`` forbids moving it."""

    def __init__(self, cluster_id: str, topic: str, partition: int, offset: int) -> None:
        self.cluster_id = cluster_id
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(
            f"cluster={cluster_id} topic={topic} partition={partition}: offset {offset} is out of range "
            f"(no longer in the log) and auto.offset.reset=error"
        )


class ClusterIdentityError(MultiClusterSourceError):
    """A cluster id of the metadata now points at another Kafka cluster than an exactly-once sink's positions.

    Its Kafka ``cluster.id`` is not the one the positions were written for: starting there would read
    offsets that mean nothing, so the source fails instead. Names the cluster and both Kafka cluster ids.
    """


class ProducerFencedError(MultiClusterSourceError):
    """Another job opened an exactly-once sink with the same ``transactional_id``.

    This job's open transaction was aborted and it can commit nothing more: close it; the other job goes on.
    """
