"""Look-ups a translation makes on one cluster: a partition's log start and end, the first offset at a time,
and the records of a bounded offset range (to recognise a record's copy). One assign-only consumer per
cluster, created on first use and closed by :meth:`ClusterLookup.close`; it never commits.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from multicluster_source.framework._clientconf import cluster_client_config
from multicluster_source.metadata._model import ClusterMetadata
from multicluster_source.ops._clientlog import client_logging

__all__ = ["ClusterLookup", "RecordCopy", "ReplicaLookupError"]

_log = logging.getLogger("multicluster_source.replicas")


class ReplicaLookupError(Exception):
    """A look-up on a cluster failed (unreachable, timed out, topic gone); the message says which."""


@dataclass(frozen=True)
class RecordCopy:
    """What MirrorMaker 2 copies unchanged from a record: key, value, headers and timestamp."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int

    def same_record(self, other: RecordCopy) -> bool:
        """Whether ``other`` carries the same key, value, headers and timestamp (offsets may differ)."""
        return (self.key, self.value, self.headers, self.timestamp_ms) == (
            other.key,
            other.value,
            other.headers,
            other.timestamp_ms,
        )


class ClusterLookup:
    """Partition look-ups on one cluster for a translator (see the module text).

    Used by one thread at a time (the enumerator's, which calls ``translate``); ``close`` may come from any
    thread and is idempotent.
    """

    def __init__(
        self,
        cluster: ClusterMetadata,
        properties: Mapping[str, str] | None,
        *,
        role: str,
        timeout_s: float = 10.0,
    ) -> None:
        self.cluster = cluster
        self._properties = dict(properties or {})
        self._role = role
        self.timeout_s = timeout_s
        self._consumer: Consumer | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def cluster_id(self) -> str:
        """The id of the cluster looked up."""
        return self.cluster.cluster_id

    def _client(self) -> Consumer:
        with self._lock:
            if self._closed:
                raise ReplicaLookupError(f"cluster {self.cluster_id}: the translator is closed")
            if self._consumer is None:
                extra: dict[str, Any] = {
                    "group.id": f"mcs-replica-{self._role}-lookup",
                    "enable.auto.commit": "false",
                    "enable.auto.offset.store": "false",
                    "enable.partition.eof": "true",
                    "auto.offset.reset": "error",
                    # a fetch the broker holds (up to fetch.wait.max.ms) delays the next request on the
                    # connection: a watermark query after a read waited 500 ms with the default
                    "fetch.wait.max.ms": "10",
                    # MirrorMaker 2 copies what its consumer reads: uncommitted records too, by default
                    "isolation.level": "read_uncommitted",
                    **client_logging(self.cluster_id, f"replica {self._role} look-up"),
                }
                conf = cluster_client_config(
                    self.cluster,
                    self._properties,
                    client_id=f"mcs-replica-{self._role}-{self.cluster_id}",
                    extra=extra,
                )
                self._consumer = Consumer(conf)
            return self._consumer

    def watermarks(self, topic: str, partition: int, *, timeout_s: float | None = None) -> tuple[int, int]:
        """``(log start, end)`` of a partition."""
        try:
            low, high = self._client().get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s or self.timeout_s, cached=False
            )
        except KafkaException as exc:
            raise ReplicaLookupError(self._what(topic, partition, f"watermarks: {_text(exc)}")) from None
        return int(low), int(high)

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose timestamp is at or after ``timestamp_ms``; None when there is none."""
        try:
            found = self._client().offsets_for_times(
                [TopicPartition(topic, partition, timestamp_ms)], timeout=self.timeout_s
            )
        except KafkaException as exc:
            raise ReplicaLookupError(
                self._what(topic, partition, f"offsets for times: {_text(exc)}")
            ) from None
        tp = found[0]
        if tp.error is not None:
            raise ReplicaLookupError(self._what(topic, partition, f"offsets for times: {tp.error}"))
        return None if tp.offset < 0 else int(tp.offset)

    def read(
        self, topic: str, partition: int, start: int, end: int, *, limit: int, timeout_s: float | None = None
    ) -> list[RecordCopy]:
        """The records at offsets ``start`` up to (excluding) ``end``, at most ``limit``, in order; fewer when
        the partition ends first or the time runs out (offsets of compacted or control records are absent)."""
        if end <= start or limit <= 0:
            return []
        consumer = self._client()
        out: list[RecordCopy] = []
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        try:
            consumer.assign([TopicPartition(topic, partition, start)])
            while len(out) < limit and time.monotonic() < deadline:
                batch = consumer.consume(min(500, limit - len(out)), timeout=0.2)
                done = False
                for msg in batch:
                    error = msg.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            done = True
                            break
                        if error.fatal() or error.code() in _HARD_ERRORS:
                            raise ReplicaLookupError(self._what(topic, partition, f"read: {error.str()}"))
                        continue
                    offset = msg.offset() or 0
                    if offset >= end:
                        done = True
                        break
                    _kind, ts = msg.timestamp()
                    out.append(RecordCopy(offset, msg.key(), msg.value(), _headers(msg.headers()), int(ts)))
                    if offset + 1 >= end or len(out) >= limit:
                        done = True
                        break
                if done:
                    break
        except KafkaException as exc:
            raise ReplicaLookupError(self._what(topic, partition, f"read: {_text(exc)}")) from None
        finally:
            with contextlib.suppress(KafkaException):
                consumer.unassign()
        return out

    def close(self) -> None:
        """Close the consumer (idempotent)."""
        with self._lock:
            consumer, self._consumer, self._closed = self._consumer, None, True
        if consumer is not None:
            try:
                consumer.close()
            except (KafkaException, RuntimeError) as exc:
                _log.debug("cluster=%s: closing the replica look-up consumer: %s", self.cluster_id, exc)

    def _what(self, topic: str, partition: int, text: str) -> str:
        return f"cluster {self.cluster_id} {topic}/{partition}: {text}"


_HARD_ERRORS = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.OFFSET_OUT_OF_RANGE,
        KafkaError._AUTO_OFFSET_RESET,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    }
)


def _text(exc: KafkaException) -> str:
    first = exc.args[0] if exc.args else None
    return first.str() if isinstance(first, KafkaError) else str(exc)


def _headers(raw: object) -> tuple[tuple[str, bytes | None], ...]:
    if not raw:
        return ()
    pairs: Any = raw.items() if isinstance(raw, dict) else raw
    return tuple((str(name), value.encode() if isinstance(value, str) else value) for name, value in pairs)
