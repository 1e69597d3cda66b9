"""Look-ups a translation makes on one cluster: a partition's log start and end, the first offset at a time,
and the records of a bounded offset range (to recognise a record's copy). One assign-only consumer per
cluster, created on first use and closed by :meth:`ClusterLookup.close`; it never commits.

**Batches.** A handover moves every partition of a topic or cluster at once, and one look-up at a time costs
a round trip each, reads a fetch wait more (0.1-0.4 s a partition for a ``mirrormaker2`` translation on
local brokers: ``benchmarks/bench_handover_scale.py``). Inside :meth:`ClusterLookup.batch` a look-up that
was not fetched yet is *deferred*: it is noted and :class:`LookupDeferred` is raised;
:meth:`ClusterLookup.fetch_deferred` then asks for every noted one together (log starts and ends in
requests of up to 1,000 partitions, reads with every partition assigned at once), and the caller replays
what it was doing, now served from what was fetched (answers and errors alike).
:meth:`~multicluster_source.replicas._base.BaseTranslator.translate` drives the replays.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from multicluster_source.framework._clientconf import cluster_client_config
from multicluster_source.metadata._model import ClusterMetadata
from multicluster_source.ops._clientlog import client_logging
from multicluster_source.replicas._errors import ReplicaLookupError, passing, passing_error, text_of

__all__ = ["BATCH_PARTITIONS", "ClusterLookup", "LookupDeferred", "RecordCopy", "ReplicaLookupError"]

_log = logging.getLogger("multicluster_source.replicas")


BATCH_PARTITIONS = 1000
"""At most this many partitions in one batched request (a batched read assigns at most this many)."""
_BATCH_RECORDS = 200_000
"""A batched read holds the records of at most this many partitions' limits together."""


class LookupDeferred(Exception):
    """Inside :meth:`ClusterLookup.batch`: the look-up is noted, to be fetched with the others first."""


_Read = tuple[str, int, int, int, int]  # topic, partition, start, end, limit


@dataclass
class _Batch:
    """Answers fetched for one batch, and what is noted for the next fetch (one thread)."""

    deferring: bool = True
    marks: dict[tuple[str, int], tuple[int, int] | ReplicaLookupError] = field(default_factory=dict)
    reads: dict[_Read, list[RecordCopy] | ReplicaLookupError] = field(default_factory=dict)
    times: dict[tuple[str, int, int], int | ReplicaLookupError | None] = field(default_factory=dict)
    want_marks: set[tuple[str, int]] = field(default_factory=set)
    want_reads: dict[_Read, float] = field(default_factory=dict)  # with its time-out


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
        self._batch: _Batch | None = None

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Look-ups inside are deferred until :meth:`fetch_deferred` (see the module text); what was fetched
        is forgotten at the end."""
        self._batch = _Batch()
        try:
            yield
        finally:
            self._batch = None

    def defer(self, deferring: bool) -> None:
        """Inside :meth:`batch`: whether a look-up not fetched yet is deferred (True) or made at once."""
        if self._batch is not None:
            self._batch.deferring = deferring

    def fetch_deferred(self) -> int:
        """Fetch every look-up deferred since the last call, together; returns how many were noted."""
        batch = self._batch
        if batch is None:
            return 0
        marks, batch.want_marks = sorted(batch.want_marks), set()
        reads, batch.want_reads = batch.want_reads, {}
        for start in range(0, len(marks), BATCH_PARTITIONS):
            batch.marks.update(self._watermarks_of(marks[start : start + BATCH_PARTITIONS]))
        for group in _read_groups(sorted(reads)):
            timeout_s = max(reads[key] for key in group)
            batch.reads.update(self._read_many(group, timeout_s))
        return len(marks) + len(reads)

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
        """``(log start, end)`` of a partition (inside :meth:`batch`: as fetched, or deferred)."""
        batch = self._batch
        if batch is not None:
            known = batch.marks.get((topic, partition))
            if isinstance(known, ReplicaLookupError):
                raise known
            if known is not None:
                return known
            if batch.deferring:
                batch.want_marks.add((topic, partition))
                raise LookupDeferred(self._what(topic, partition, "watermarks"))
        try:
            low, high = self._client().get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s or self.timeout_s, cached=False
            )
        except KafkaException as exc:
            raise ReplicaLookupError(
                self._what(topic, partition, f"watermarks: {text_of(exc)}"), retriable=passing(exc)
            ) from None
        return int(low), int(high)

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose timestamp is at or after ``timestamp_ms``; None when there is none. Asked
        at once (never deferred); inside :meth:`batch` the answer is kept, so a replay does not ask again."""
        batch = self._batch
        key = (topic, partition, timestamp_ms)
        if batch is not None and key in batch.times:
            known = batch.times[key]
            if isinstance(known, ReplicaLookupError):
                raise known
            return known
        try:
            answer: int | ReplicaLookupError | None = self._offset_for_time(topic, partition, timestamp_ms)
        except ReplicaLookupError as exc:
            answer = exc
        if batch is not None:
            batch.times[key] = answer
        if isinstance(answer, ReplicaLookupError):
            raise answer
        return answer

    def _offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        try:
            found = self._client().offsets_for_times(
                [TopicPartition(topic, partition, timestamp_ms)], timeout=self.timeout_s
            )
        except KafkaException as exc:
            raise ReplicaLookupError(
                self._what(topic, partition, f"offsets for times: {text_of(exc)}"), retriable=passing(exc)
            ) from None
        tp = found[0]
        if tp.error is not None:
            raise ReplicaLookupError(
                self._what(topic, partition, f"offsets for times: {tp.error.str()}"),
                retriable=passing_error(tp.error),
            )
        return None if tp.offset < 0 else int(tp.offset)

    def read(
        self, topic: str, partition: int, start: int, end: int, *, limit: int, timeout_s: float | None = None
    ) -> list[RecordCopy]:
        """The records at offsets ``start`` up to (excluding) ``end``, at most ``limit``, in order; fewer when
        the partition ends first or the time runs out (offsets of compacted or control records are absent).
        Inside :meth:`batch`: as fetched, or deferred."""
        if end <= start or limit <= 0:
            return []
        batch = self._batch
        key = (topic, partition, start, end, limit)
        if batch is not None:
            known = batch.reads.get(key)
            if isinstance(known, ReplicaLookupError):
                raise known
            if known is not None:
                return known
            if batch.deferring:
                batch.want_reads[key] = timeout_s or self.timeout_s
                raise LookupDeferred(self._what(topic, partition, f"read {start}..{end - 1}"))
        got = self._read_many([key], timeout_s or self.timeout_s)[key]
        if isinstance(got, ReplicaLookupError):
            raise got
        return got

    def _watermarks_of(
        self, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], tuple[int, int] | ReplicaLookupError]:
        """Log starts and ends of ``partitions``: two ListOffsets requests (earliest, latest) for all."""
        out: dict[tuple[str, int], tuple[int, int] | ReplicaLookupError] = {}
        try:
            consumer = self._client()
            ends = [
                consumer.offsets_for_times(
                    [TopicPartition(t, p, which) for t, p in partitions], timeout=self.timeout_s
                )
                for which in (_EARLIEST, _LATEST)
            ]
        except KafkaException as exc:
            for t, p in partitions:
                out[(t, p)] = ReplicaLookupError(
                    self._what(t, p, f"watermarks: {text_of(exc)}"), retriable=passing(exc)
                )
            return out
        for low, high in zip(*ends, strict=True):
            key = (low.topic, low.partition)
            error = low.error or high.error
            if error is not None or low.offset < 0 or high.offset < 0:
                why = error.str() if error is not None else "no offsets in the answer"
                out[key] = ReplicaLookupError(
                    self._what(key[0], key[1], f"watermarks: {why}"),
                    retriable=error is not None and passing_error(error),
                )
            else:
                out[key] = (int(low.offset), int(high.offset))
        return out

    def _read_many(
        self, reads: list[_Read], timeout_s: float
    ) -> dict[_Read, list[RecordCopy] | ReplicaLookupError]:
        """:meth:`read` of several partitions (one range each) with all of them assigned at once; a
        partition is paused once its range is read, and every one is resumed before the unassign."""
        records: dict[_Read, list[RecordCopy]] = {key: [] for key in reads}
        got: dict[_Read, list[RecordCopy] | ReplicaLookupError] = dict(records)  # a failure replaces its list
        open_: dict[tuple[str, int], _Read] = {(key[0], key[1]): key for key in reads}
        consumer = self._client()
        deadline = time.monotonic() + timeout_s
        try:
            consumer.assign([TopicPartition(t, p, start) for t, p, start, _e, _l in reads])
            while open_ and time.monotonic() < deadline:
                ended: list[tuple[str, int]] = []
                for msg in consumer.consume(500, timeout=0.05):
                    where = (str(msg.topic()), int(msg.partition() or 0))
                    key = open_.get(where)
                    if key is None:
                        continue
                    try:
                        done = _take(msg, key, records[key])
                    except ReplicaLookupError as exc:
                        got[key], done = ReplicaLookupError(self._what(*where, f"read: {exc}")), True
                    if done:
                        del open_[where]
                        ended.append(where)
                if ended:
                    consumer.pause([TopicPartition(t, p) for t, p in ended])
        except KafkaException as exc:
            for key in open_.values():
                got[key] = ReplicaLookupError(
                    self._what(key[0], key[1], f"read: {text_of(exc)}"), retriable=passing(exc)
                )
        finally:
            with contextlib.suppress(KafkaException):  # a partition stays paused past its unassign
                consumer.resume([TopicPartition(t, p) for t, p, *_rest in reads])
            with contextlib.suppress(KafkaException):
                consumer.unassign()
        return got

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


_EARLIEST, _LATEST = -2, -1  # ListOffsets' special timestamps


def _take(msg: Any, key: _Read, records: list[RecordCopy]) -> bool:
    """One message of a batched read into ``records``; True when that partition's range is done. Raises
    :class:`ReplicaLookupError` with the broker's words on a hard error."""
    _t, _p, _start, end, limit = key
    error = msg.error()
    if error is not None:
        if error.code() == KafkaError._PARTITION_EOF:
            return True
        if not passing_error(error):
            raise ReplicaLookupError(error.str())
        return False
    offset = msg.offset() or 0
    if offset >= end:
        return True
    _kind, ts = msg.timestamp()
    records.append(RecordCopy(offset, msg.key(), msg.value(), _headers(msg.headers()), int(ts)))
    return offset + 1 >= end or len(records) >= limit


def _read_groups(reads: list[_Read]) -> Iterator[list[_Read]]:
    """Reads in groups of one range per partition, at most :data:`BATCH_PARTITIONS` partitions and about
    :data:`_BATCH_RECORDS` records each (a second range of a partition goes in a later group)."""
    left = list(reads)
    while left:
        group: list[_Read] = []
        later: list[_Read] = []
        seen: set[tuple[str, int]] = set()
        records = 0
        for key in left:
            t, p, start, end, limit = key
            size = min(limit, end - start)
            full = len(group) >= BATCH_PARTITIONS or (group and records + size > _BATCH_RECORDS)
            if (t, p) in seen or full:
                later.append(key)
            else:
                group.append(key)
                seen.add((t, p))
                records += size
        yield group
        left = later


def _headers(raw: object) -> tuple[tuple[str, bytes | None], ...]:
    if not raw:
        return ()
    pairs: Any = raw.items() if isinstance(raw, dict) else raw
    return tuple((str(name), value.encode() if isinstance(value, str) else value) for name, value in pairs)
