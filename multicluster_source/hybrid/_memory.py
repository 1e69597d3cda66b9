"""An archive held in memory, as a bounded hybrid stage: for testing jobs (and this library's own tests).

:class:`InMemoryArchiveStage` takes the archived records as a list per split and serves them through the
stage protocol (:mod:`multicluster_source.hybrid._stage`) exactly as an archive on disk would: positions,
an exact (or, without offsets, timestamp) handover, versioned snapshots and restore. Everything runs on the
caller's thread; the stage starts no thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from multicluster_source.exceptions import CheckpointError, ConfigurationError
from multicluster_source.framework._records import MessageBatch, SourceRecord
from multicluster_source.hybrid._stage import HandoverMode, StageHandover

__all__ = ["InMemoryArchiveStage", "InMemoryStageReader"]


def _split_parts(split_id: str) -> tuple[str, str, int]:
    cluster, topic, partition = split_id.rsplit("/", 2) if split_id.count("/") >= 2 else ("", "", "x")
    if not cluster or not topic or not partition.isdigit():
        raise ConfigurationError(
            f"InMemoryArchiveStage: split id {split_id!r} must be 'cluster/topic/partition'"
        )
    return cluster, topic, int(partition)


class InMemoryArchiveStage:
    """A bounded stage over records given as a list per split id (``"cluster/topic/partition"``).

    Each item is a :class:`SourceRecord` (its offset and timestamp are used; cluster, topic and partition
    must match the split) or any other value, which becomes a record's ``value`` with the next offset
    (from ``first_offsets.get(split, 0)``) and no timestamp, key or headers. ``with_offsets=False`` plays an
    archive whose records carry no offsets: the handover is then a timestamp (the largest returned), and
    ``mode`` marks exact handovers as ``"estimated"`` when you want to play one that guesses low.
    ``out_of_orderness_ms`` gives the stage a watermark (the smallest over unfinished splits of the largest
    timestamp returned, minus it); None: no watermark. ``parallelism`` is ignored (one reader).

    Example::

        archive = InMemoryArchiveStage({"east/orders/0": [b"a", b"b"], "east/orders/1": [b"c"]})
        hybrid = HybridSource.builder(archive).add_source(live_source).build()
    """

    def __init__(
        self,
        records: Mapping[str, Iterable[Any]],
        *,
        name: str = "archive",
        first_offsets: Mapping[str, int] | None = None,
        with_offsets: bool = True,
        mode: HandoverMode = "exact",
        out_of_orderness_ms: int | None = None,
    ) -> None:
        self._name = name
        self._with_offsets = with_offsets
        self._mode: HandoverMode = mode
        self._bound = out_of_orderness_ms
        self.opened = 0
        """How many times the stage was opened (tests read it)."""
        starts = dict(first_offsets or {})
        self._records: dict[str, list[SourceRecord]] = {}
        for split_id, items in records.items():
            cluster, topic, partition = _split_parts(split_id)
            out: list[SourceRecord] = []
            next_offset = int(starts.get(split_id, 0))
            for item in items:
                if isinstance(item, SourceRecord):
                    if (item.cluster_id, item.topic, item.partition) != (cluster, topic, partition):
                        raise ConfigurationError(
                            f"InMemoryArchiveStage: record {item!r} listed under split {split_id!r}"
                        )
                    record = item
                else:
                    record = SourceRecord(cluster, topic, partition, next_offset, None, None, item, None)
                if out and record.offset <= out[-1].offset:
                    raise ConfigurationError(
                        f"InMemoryArchiveStage: split {split_id!r}: offset {record.offset} after "
                        f"{out[-1].offset}"
                    )
                out.append(record)
                next_offset = record.offset + 1
            self._records[split_id] = out

    @property
    def bounded(self) -> bool:
        """Always True: an archive ends."""
        return True

    @property
    def name(self) -> str:
        """The name given (default ``archive``)."""
        return self._name

    def open_stage(
        self,
        *,
        parallelism: int,
        start: StageHandover | None,
        restored: Mapping[str, Any] | None,
        registry: CollectorRegistry | None,
        work_dir: str | None,
    ) -> InMemoryStageReader:
        """A reader over the records, from ``restored`` (a snapshot) when given, else from the first."""
        self.opened += 1
        return InMemoryStageReader(self, restored, start)


class InMemoryStageReader:
    """The reader of an :class:`InMemoryArchiveStage` (caller's thread only)."""

    def __init__(
        self,
        stage: InMemoryArchiveStage,
        restored: Mapping[str, Any] | None,
        start: StageHandover | None = None,
    ) -> None:
        self._stage = stage
        self._records = stage._records
        self._next: dict[str, int] = dict.fromkeys(self._records, 0)
        if start is not None and restored is None:  # a later stage: skip what the previous one returned
            for split_id, position in start.positions.items():
                if split_id in self._next:
                    records = self._records[split_id]
                    self._next[split_id] = next(
                        (i for i, r in enumerate(records) if r.offset >= position), len(records)
                    )
        if restored is not None:
            if restored.get("v") != 1:
                raise CheckpointError(f"in-memory stage snapshot: unknown version {restored.get('v')!r}")
            for split_id, index in dict(restored.get("next", {})).items():
                if split_id in self._next:
                    self._next[split_id] = min(int(index), len(self._records[split_id]))
        self._order = sorted(self._records)
        self._turn = 0
        self._max_ts: dict[str, int] = {}
        for split_id, index in self._next.items():
            stamps = [r.timestamp for r in self._records[split_id][:index] if r.timestamp is not None]
            if stamps:
                self._max_ts[split_id] = max(stamps)
        self._watermark: int | None = None
        self.closed = False

    def _take(self, max_records: int) -> list[SourceRecord]:
        out: list[SourceRecord] = []
        live = [s for s in self._order if self._next[s] < len(self._records[s])]
        while live and len(out) < max_records:
            at = self._turn % len(live)
            split_id = live[at]
            self._turn += 1
            index = self._next[split_id]
            records = self._records[split_id]
            record = records[index]
            self._next[split_id] = index + 1
            if record.timestamp is not None:
                self._max_ts[split_id] = max(record.timestamp, self._max_ts.get(split_id, record.timestamp))
            out.append(record)
            if index + 1 >= len(records):  # only this split can have ended: O(1) a record, not O(splits)
                del live[at]
        self._advance_watermark()
        return out

    def _advance_watermark(self) -> None:
        bound = self._stage._bound
        if bound is None:
            return
        unfinished = [s for s in self._order if self._next[s] < len(self._records[s])]
        holding = unfinished or [s for s in self._order if s in self._max_ts]
        if not holding or any(s not in self._max_ts for s in holding):
            return
        candidate = min(self._max_ts[s] for s in holding) - bound
        if self._watermark is None or candidate > self._watermark:
            self._watermark = candidate

    def poll(self, timeout: float, max_records: int) -> list[SourceRecord]:
        """The next records, round robin over the splits; ``[]`` once every record was returned."""
        return self._take(max_records)

    def poll_batches(self, timeout: float, max_records: int) -> list[MessageBatch]:
        """The next records as batches of ``confluent_kafka.Message`` objects, one batch per cluster."""
        from confluent_kafka import Message

        by_cluster: dict[str, list[Any]] = {}
        for r in self._take(max_records):
            stamp = (0, -1) if r.timestamp is None else (1, r.timestamp)
            message = Message(
                topic=r.topic,
                partition=r.partition,
                offset=r.offset,
                key=r.key,
                timestamp=stamp,
                headers=r.headers,  # type: ignore[arg-type]
            )
            message.set_value(r.value)
            by_cluster.setdefault(r.cluster_id, []).append(message)
        return [MessageBatch(cluster, messages) for cluster, messages in by_cluster.items()]

    @property
    def finished(self) -> bool:
        """Every record returned."""
        return all(self._next[s] >= len(self._records[s]) for s in self._order)

    @property
    def watermark(self) -> int | None:
        """The stage's watermark (with ``out_of_orderness_ms``), else None."""
        return self._watermark

    def positions(self) -> dict[str, int]:
        """Split id -> the offset after the last record returned (splits with a record returned)."""
        return {s: self._records[s][i - 1].offset + 1 for s, i in self._next.items() if i > 0}

    def handover(self) -> StageHandover:
        """Exact positions (``mode`` as given), or, without offsets, the largest timestamp returned."""
        if not self._stage._with_offsets:
            return StageHandover(timestamp_ms=max(self._max_ts.values(), default=None))
        positions = self.positions()
        return StageHandover(positions=positions, modes=dict.fromkeys(positions, self._stage._mode))

    def snapshot(self) -> dict[str, Any]:
        """``{"v": 1, "next": {split: index of the next record}}``."""
        return {"v": 1, "next": dict(self._next)}

    def snapshot_later(self) -> Callable[[], dict[str, Any]]:
        """:meth:`snapshot` as of now, built anew each time it is called."""
        taken = dict(self._next)
        return lambda: {"v": 1, "next": dict(taken)}

    def commit(self, snapshot_id: int) -> None:
        """Nothing to commit."""

    def status(self) -> dict[str, Any]:
        """Per split: the next offset and how many records are left."""
        return {
            "kind": "in-memory archive",
            "splits": {
                s: {"position": self.positions().get(s), "left": len(self._records[s]) - self._next[s]}
                for s in self._order
            },
        }

    def close(self) -> None:
        """Nothing to release."""
        self.closed = True
