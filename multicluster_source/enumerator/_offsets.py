"""Where reading starts (and, bounded, stops): :class:`OffsetsInitializer` and its resolution.

Initializers are resolved to concrete offsets by the enumerator, with an admin client, before splits are
created. A split therefore always carries a real offset, and a checkpoint taken before any record of it was
read restores to the same place (a ``latest`` resolved again after a crash would skip records).

``latest`` is the end of a partition as the readers' ``isolation.level`` sees it (Kafka's ListOffsets with
that isolation level): under ``read_committed`` (librdkafka's default) the last stable offset, the first
offset of the oldest transaction still open (the high watermark when none is open); under
``read_uncommitted`` the high watermark. So a bounded read under ``read_committed`` ends where a
``read_committed`` consumer can read to now, and neither waits for an open transaction nor hangs when its
producer died; records of that transaction are past the end.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from multicluster_source.enumerator._requests import groups
from multicluster_source.exceptions import ConfigurationError, HandoverGapError, MultiClusterSourceError
from multicluster_source.framework._split import make_split_id

_log = logging.getLogger("multicluster_source.offsets")

Kind = Literal["earliest", "latest", "committed", "timestamp", "offsets"]
Reset = Literal["earliest", "latest", "none"]
GapPolicy = Literal["fail", "warn"]
_RESETS = ("earliest", "latest", "none")


@dataclass(frozen=True)
class OffsetsInitializer:
    """Chooses offsets for partitions: ``earliest()``, ``latest()``, ``committed(reset=...)``,
    ``timestamp(ms)`` or ``offsets({...})``.

    Used for starting offsets (``set_starting_offsets``) and for stopping offsets of a bounded source
    (``set_bounded``; there ``committed`` and ``earliest`` are allowed but rarely useful).
    """

    kind: Kind
    reset: Reset = "earliest"
    timestamp_ms: int | None = None
    explicit: Mapping[str, int] = field(default_factory=dict)
    fallback: OffsetsInitializer | None = None
    """Internal (hybrid handover): resolves the partitions ``explicit`` does not name (not ``reset``)."""
    gap_policy: GapPolicy | None = None
    """Internal (hybrid handover): an explicit offset below the partition's earliest offset (records lost
    between the previous stage and this cluster's retention) fails (``fail``) or starts at the earliest
    offset with a warning (``warn``); None: no check."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "explicit", MappingProxyType(dict(self.explicit)))

    def __reduce__(self) -> tuple[Any, ...]:
        # A mappingproxy cannot be pickled: runtimes send the source's settings to worker processes.
        return (
            OffsetsInitializer,
            (self.kind, self.reset, self.timestamp_ms, dict(self.explicit), self.fallback, self.gap_policy),
        )

    def __hash__(self) -> int:
        explicit = tuple(sorted(self.explicit.items()))
        return hash((self.kind, self.reset, self.timestamp_ms, explicit, self.fallback, self.gap_policy))

    @staticmethod
    def earliest() -> OffsetsInitializer:
        """The first offset still in each partition."""
        return OffsetsInitializer("earliest")

    @staticmethod
    def latest() -> OffsetsInitializer:
        """The end of each partition when the split is created (only records produced after that): the last
        stable offset under ``isolation.level=read_committed`` (librdkafka's default: an open transaction's
        first offset, else the high watermark), the high watermark under ``read_uncommitted``."""
        return OffsetsInitializer("latest")

    @staticmethod
    def committed(reset: str = "earliest") -> OffsetsInitializer:
        """The group's committed offset; ``reset`` (earliest, latest, none) where there is none.

        With ``reset="none"`` a partition without a committed offset fails the source.
        """
        if reset not in _RESETS:
            raise ConfigurationError(f"committed(reset=...): {reset!r} is not one of {', '.join(_RESETS)}")
        return OffsetsInitializer("committed", reset=reset)  # type: ignore[arg-type]

    @staticmethod
    def timestamp(ms: int) -> OffsetsInitializer:
        """The first record whose timestamp is at or after ``ms`` (the end where there is none)."""
        if not isinstance(ms, int) or ms < 0:
            raise ConfigurationError(f"timestamp(ms): must be a non-negative int, got {ms!r}")
        return OffsetsInitializer("timestamp", timestamp_ms=ms)

    @staticmethod
    def offsets(offsets: Mapping[str, int], reset: str = "earliest") -> OffsetsInitializer:
        """Explicit offsets by split id ``"cluster/topic/partition"``, or ``"topic/partition"`` for every
        cluster; other partitions use ``reset``."""
        if reset not in _RESETS:
            raise ConfigurationError(f"offsets(reset=...): {reset!r} is not one of {', '.join(_RESETS)}")
        clean: dict[str, int] = {}
        for key, value in offsets.items():
            parts = str(key).split("/")
            if len(parts) not in (2, 3) or not parts[-1].isdigit() or not all(parts):
                raise ConfigurationError(
                    f"offsets(...): key {key!r} must be 'cluster/topic/partition' or 'topic/partition'"
                )
            if not isinstance(value, int) or value < 0:
                raise ConfigurationError(
                    f"offsets(...): offset for {key!r} must be an int >= 0, got {value!r}"
                )
            clean[str(key)] = value
        return OffsetsInitializer("offsets", reset=reset, explicit=clean)  # type: ignore[arg-type]

    def describe(self) -> str:
        """A short human-readable form for logs."""
        if self.kind == "offsets" and self.fallback is not None:
            return f"handover({len(self.explicit)} positions, others {self.fallback.describe()})"
        if self.kind == "committed":
            return f"committed(reset={self.reset})"
        if self.kind == "timestamp":
            return f"timestamp({self.timestamp_ms})"
        if self.kind == "offsets":
            return f"offsets({len(self.explicit)} explicit, reset={self.reset})"
        return self.kind


def handover_offsets(
    positions: Mapping[str, int], fallback: OffsetsInitializer, gap_policy: GapPolicy = "fail"
) -> OffsetsInitializer:
    """Internal (hybrid sources): start the splits named in ``positions`` (full split ids) exactly there,
    every other partition as ``fallback`` resolves it, and check each position against the partition's
    earliest offset (``gap_policy``)."""
    clean = {str(k): int(v) for k, v in positions.items()}
    return OffsetsInitializer("offsets", explicit=clean, fallback=fallback, gap_policy=gap_policy)


class OffsetResolutionError(MultiClusterSourceError):
    """Offsets could not be resolved for a cluster (unreachable, or no committed offset with reset=none)."""


class ResolutionStopped(MultiClusterSourceError):
    """The enumerator was closed while a request waited for its answer."""


_SLICE_S = 0.1


def await_result(future: Future[Any], timeout: float, stop: threading.Event | None) -> Any:
    """``future.result(timeout)``, checking ``stop`` every 0.1 s: raises :class:`ResolutionStopped` once it
    is set (the request is abandoned; the client may be destroyed). Raises TimeoutError after ``timeout``."""
    if stop is None:
        return future.result(timeout=timeout)
    remaining = timeout
    while True:
        if stop.is_set():
            raise ResolutionStopped("closed while waiting for the cluster")
        try:
            return future.result(timeout=min(_SLICE_S, max(0.0, remaining)))
        except FutureTimeout:
            remaining -= _SLICE_S
            if remaining <= 0:
                raise


def _check_gaps(
    initializer: OffsetsInitializer,
    cluster_id: str,
    out: dict[tuple[str, int], int],
    list_offsets: Callable[[dict[tuple[str, int], Any]], dict[tuple[str, int], int]],
) -> None:
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    earliest = list_offsets({tp: OffsetSpec.earliest() for tp in out})
    for (topic, partition), first in sorted(earliest.items()):
        wanted = out[(topic, partition)]
        if wanted >= first:
            continue
        split = make_split_id(cluster_id, topic, partition)
        message = (
            f"split {split}: the previous stage ends at offset {wanted} but the cluster's earliest offset is "
            f"{first}: offsets {wanted}..{first - 1} are in neither (the archive ends before retention)"
        )
        if initializer.gap_policy == "fail":
            raise HandoverGapError(message + "; set gap_policy='warn' to go on from the earliest offset")
        _log.warning("cluster=%s: %s; going on from offset %d (gap_policy=warn)", cluster_id, message, first)
        out[(topic, partition)] = first


_NOT_READY = frozenset({3, 5, 6, 7, 9, 74, 75, 78})
"""Broker errors of a partition that is not ready yet (its topic just made, a leader being elected):
UNKNOWN_TOPIC_OR_PART, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
REPLICA_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, OFFSET_NOT_AVAILABLE."""


def _not_ready(exc: Exception) -> bool:
    """Whether ``exc`` (a KafkaException of one partition) says the partition is not ready yet."""
    error = exc.args[0] if exc.args else None
    retriable = getattr(error, "retriable", None)
    code = getattr(error, "code", None)
    return bool(callable(retriable) and retriable()) or (callable(code) and code() in _NOT_READY)


def _list_offsets(
    admin: Any,
    specs: dict[tuple[str, int], Any],
    timeout: float,
    *,
    read_committed: bool = True,
    stop: threading.Event | None = None,
    deferred: list[tuple[str, int]] | None = None,
) -> dict[tuple[str, int], int]:
    """The offsets of ``specs``; with ``deferred``, a partition the cluster cannot answer for now (a retriable
    error: its leader not available yet, a leader epoch newer than the broker's, ...) goes there instead of
    failing the whole request."""
    from confluent_kafka import IsolationLevel, KafkaException, TopicPartition

    if not specs:
        return {}
    isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
    futures: dict[Any, Future[Any]] = {}
    for group in groups(list(specs.items())):  # all sent at once, a group at a time costs far less
        request = {TopicPartition(t, p): spec for (t, p), spec in group}
        futures.update(admin.list_offsets(request, isolation_level=isolation, request_timeout=timeout))
    out: dict[tuple[str, int], int] = {}
    for tp, fut in futures.items():
        try:
            out[(tp.topic, tp.partition)] = int(await_result(fut, timeout + 5, stop).offset)
        except KafkaException as exc:
            if deferred is None or not _not_ready(exc):
                raise
            deferred.append((tp.topic, tp.partition))
    return out


def _committed(
    admin: Any, group_id: str, tps: list[tuple[str, int]], timeout: float, stop: threading.Event | None
) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    futures: list[Future[Any]] = []
    for group in groups(tps):  # all sent at once, a group at a time costs far less (see _requests)
        request = [ConsumerGroupTopicPartitions(group_id, [TopicPartition(t, p) for t, p in group])]
        futures.extend(admin.list_consumer_group_offsets(request, request_timeout=timeout).values())
    out: dict[tuple[str, int], int] = {}
    for fut in futures:
        result = await_result(fut, timeout + 5, stop)
        for tp in result.topic_partitions:
            out[(tp.topic, tp.partition)] = int(tp.offset)
    return out


def resolve_offsets(
    initializer: OffsetsInitializer,
    *,
    admin: Any,
    cluster_id: str,
    group_id: str | None,
    partitions: list[tuple[str, int]],
    timeout: float = 30.0,
    read_committed: bool = True,
    stop: threading.Event | None = None,
    deferred: list[tuple[str, int]] | None = None,
) -> dict[tuple[str, int], int]:
    """Concrete offsets for ``partitions`` of one cluster. Blocking: call it off the coordinator thread.

    ``read_committed``: the readers' isolation level (``latest`` is the last stable offset, else the high
    watermark); ``stop``: when set, a wait for the cluster ends with :class:`ResolutionStopped`;
    ``deferred``: when given, partitions the cluster cannot answer for yet (retriable errors) are put there
    and left out of the answer, instead of failing it (explicit offsets' gap checks never defer)."""
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    if not partitions:
        return {}

    def list_offsets(
        specs: dict[tuple[str, int], Any], into: list[tuple[str, int]] | None = deferred
    ) -> dict[tuple[str, int], int]:
        return _list_offsets(admin, specs, timeout, read_committed=read_committed, stop=stop, deferred=into)

    kind = initializer.kind
    if kind == "earliest":
        return list_offsets({tp: OffsetSpec.earliest() for tp in partitions})
    if kind == "latest":
        return list_offsets({tp: OffsetSpec.latest() for tp in partitions})
    if kind == "timestamp":
        assert initializer.timestamp_ms is not None
        found = list_offsets({tp: OffsetSpec.for_timestamp(initializer.timestamp_ms) for tp in partitions})
        missing = [tp for tp, off in found.items() if off < 0]
        found.update(list_offsets({tp: OffsetSpec.latest() for tp in missing}))
        return found
    out: dict[tuple[str, int], int] = {}
    if kind == "committed":
        if not group_id:
            raise OffsetResolutionError("committed offsets need a group id (set_group_id)")
        for tp, off in _committed(admin, group_id, partitions, timeout, stop).items():
            if off >= 0:
                out[tp] = off
    else:  # explicit offsets
        for topic, partition in partitions:
            for key in (make_split_id(cluster_id, topic, partition), f"{topic}/{partition}"):
                if key in initializer.explicit:
                    out[(topic, partition)] = initializer.explicit[key]
                    break
        if initializer.gap_policy is not None and out:
            _check_gaps(initializer, cluster_id, out, lambda specs: list_offsets(specs, None))
    rest = [tp for tp in partitions if tp not in out]
    if rest and initializer.fallback is not None:
        fallback = initializer.fallback
        found = resolve_offsets(
            fallback,
            admin=admin,
            cluster_id=cluster_id,
            group_id=group_id,
            partitions=rest,
            timeout=timeout,
            read_committed=read_committed,
            stop=stop,
            deferred=deferred,
        )
        out.update(found)
    elif rest:
        if initializer.reset == "none":
            names = ", ".join(make_split_id(cluster_id, t, p) for t, p in rest[:5])
            raise OffsetResolutionError(f"no {initializer.kind} offset and reset=none for: {names}")
        spec = OffsetSpec.earliest() if initializer.reset == "earliest" else OffsetSpec.latest()
        _log.info(
            "cluster=%s: %d partitions without a %s offset start at %s",
            cluster_id,
            len(rest),
            kind,
            initializer.reset,
        )
        out.update(list_offsets(dict.fromkeys(rest, spec)))
    return out
