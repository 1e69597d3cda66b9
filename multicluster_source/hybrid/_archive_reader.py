"""The reader side of the archive stages: reader threads fill a queue with pieces of splits, the hybrid
stream's caller thread takes records from it and keeps each split's position.

Threads: ``parallelism`` reader threads named ``mcs-archive-<i>`` (``mcs-iceberg-<i>`` for Iceberg) each
read the splits given to them (round robin by split id), one split at a time, in offset order, and put
:class:`Piece` objects in one bounded queue (so a slow caller holds the readers back, not memory). Every
:class:`StageReader` method is called from the hybrid stream's caller thread; :meth:`close` stops the
readers and joins them.

Positions are kept by the caller thread from what it returned, never from what was read ahead: the split's
file, the number of records of that file returned, the offset after the last one and how that offset is
known (``exact`` or ``estimated``). :meth:`ArchiveStageReader.snapshot` is that state, versioned (``v`` 2);
version 1, ``{"v": 1, "positions": {split: next_offset}}``, an offset-only form, is still read (the split
then goes on from the first file that may hold that offset).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import Message

from multicluster_source.exceptions import CheckpointError
from multicluster_source.framework._records import Headers, MessageBatch, SourceRecord
from multicluster_source.hybrid._archive_rows import RowColumns, archived_records
from multicluster_source.hybrid._stage import HandoverMode, StageHandover

log = logging.getLogger("multicluster_source.hybrid.archive")

SNAPSHOT_VERSION = 2
_QUEUE_PIECES_PER_READER = 4


@dataclass(frozen=True)
class SplitPosition:
    """Where a split is: ``record`` records of ``file`` returned, ``next_offset`` after the last one."""

    file: str | None = None
    record: int = 0
    next_offset: int | None = None
    mode: HandoverMode = "estimated"
    done: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (inside a versioned snapshot)."""
        return {
            "file": self.file,
            "record": self.record,
            "next_offset": self.next_offset,
            "mode": self.mode,
            "done": self.done,
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> SplitPosition:
        """The form :meth:`to_dict` wrote."""
        nxt = data.get("next_offset")
        return SplitPosition(
            data.get("file"),
            int(data.get("record", 0)),
            None if nxt is None else int(nxt),
            data.get("mode", "estimated"),
            bool(data.get("done", False)),
        )


@dataclass(frozen=True)
class Piece:
    """Records of one split, all from one file, from record ``position`` of that file on, as columns: the
    caller thread makes records of the part it returns (:meth:`records`), so only records a caller holds
    are alive. A piece with ``done`` set and no offsets ends its split."""

    split_id: str
    file: str | None
    position: int
    exact_from: int  # records i >= exact_from carry offsets known exactly
    cluster_id: str = ""
    topic: str = ""
    partition: int = 0
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int | None] | None = None
    keys: list[bytes | None] | None = None
    headers: list[Headers] | None = None
    values: list[Any] | None = None  # record i's value; None: row base + i of rows
    rows: RowColumns | None = None
    base: int = 0
    done: bool = False

    def __len__(self) -> int:
        return len(self.offsets)

    def records(self, lo: int, hi: int) -> list[SourceRecord]:
        """Records ``lo`` to ``hi`` of the piece."""
        return archived_records(
            self.cluster_id,
            self.topic,
            self.partition,
            self.offsets,
            self.timestamps,
            self.keys,
            self.values,
            self.headers,
            lo,
            hi,
            self.rows,
            self.base,
        )


@dataclass(frozen=True)
class _Failure:
    error: BaseException


class SplitProducer(Protocol):
    """Reads one split (called from a reader thread)."""

    def pieces(
        self, start: SplitPosition | None, skip_before: int | None, stop: threading.Event
    ) -> Iterator[Piece]:
        """The split's pieces from ``start`` (a snapshot's position) or else from the first record that may
        have offset ``skip_before`` or later (None: from the beginning); ends with a ``done`` piece."""
        ...


def restored_positions(
    name: str, restored: Mapping[str, Any] | None
) -> tuple[dict[str, SplitPosition], dict[str, int]]:
    """Split positions (version 2) or bare next offsets (version 1) from a snapshot."""
    if restored is None:
        return {}, {}
    version = restored.get("v")
    if version == 1:
        return {}, {str(k): int(v) for k, v in restored.get("positions", {}).items()}
    if version == SNAPSHOT_VERSION:
        splits = restored.get("splits", {})
        return {str(k): SplitPosition.from_dict(v) for k, v in splits.items()}, {}
    raise CheckpointError(f"{name} stage snapshot has version {version!r}; this library reads 1 and 2")


def starting_state(
    name: str, restored: Mapping[str, Any] | None, start: StageHandover | None
) -> tuple[dict[str, SplitPosition], dict[str, int]]:
    """Split positions to go on from, and per split the offset before which records are not returned
    again. A position handed over by the previous stage is carried (a split this stage holds nothing more
    of hands the same position on)."""
    positions, offsets = restored_positions(name, restored)
    skip_before = dict(start.positions) if start is not None else {}
    skip_before.update(offsets)
    if restored is None and start is not None:
        for split, offset in start.positions.items():
            positions[split] = SplitPosition(None, 0, offset, start.modes.get(split, "exact"))
    for split, offset in offsets.items():
        positions.setdefault(split, SplitPosition(None, 0, offset, "estimated"))
    return positions, skip_before


class ArchiveStageReader:
    """A bounded stage's reader over :class:`SplitProducer` objects, one per split."""

    def __init__(
        self,
        name: str,
        producers: Mapping[str, SplitProducer],
        *,
        parallelism: int,
        positions: Mapping[str, SplitPosition],
        skip_before: Mapping[str, int],
        details: dict[str, Any],
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Start ``parallelism`` reader threads over ``producers`` (split id -> producer)."""
        self._name = name
        self._details = details  # stage-wide facts for status() (files, left out, skipped)
        self._extra = dict(extra or {})  # stage-wide state kept in snapshots (Iceberg: snapshot ids)
        self._positions: dict[str, SplitPosition] = dict(positions)
        self._last_ts: dict[str, int] = {}
        self._queue: queue.Queue[Piece | _Failure] = queue.Queue(_QUEUE_PIECES_PER_READER * parallelism)
        self._stop = threading.Event()
        self._piece: Piece | None = None
        self._taken = 0
        self._closed = False
        self._error: BaseException | None = None  # a reader's failure, raised again on every poll
        todo = [s for s in sorted(producers) if not self._positions.get(s, SplitPosition()).done]
        self._open_splits = set(todo)
        self._threads = [
            threading.Thread(
                target=self._read,
                args=(
                    [(s, producers[s], self._positions.get(s)) for s in todo[i::parallelism]],
                    dict(skip_before),
                ),
                name=f"mcs-{name}-{i}",
                daemon=True,
            )
            for i in range(max(1, parallelism))
        ]
        for t in self._threads:
            t.start()

    # -- reader threads --

    def _read(
        self, splits: list[tuple[str, SplitProducer, SplitPosition | None]], skip_before: Mapping[str, int]
    ) -> None:
        try:
            for split_id, producer, start in splits:
                for piece in producer.pieces(start, skip_before.get(split_id), self._stop):
                    if not self._put(piece):
                        return
        except BaseException as e:  # handed to the caller thread, which raises it
            self._put(_Failure(e))

    def _put(self, item: Piece | _Failure) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    # -- caller thread --

    def _next_piece(self, timeout: float | None) -> Piece | None:
        try:
            item = self._queue.get(timeout=timeout) if timeout else self._queue.get_nowait()
        except queue.Empty:
            return None
        if isinstance(item, _Failure):
            self._stop.set()
            self._error = item.error
            raise item.error
        return item

    def poll(self, timeout: float, max_records: int) -> list[SourceRecord]:
        """Up to ``max_records`` records, waiting up to ``timeout`` seconds for the first."""
        if self._error is not None:
            raise self._error
        out: list[SourceRecord] = []
        wait: float | None = timeout
        while len(out) < max_records and self._open_splits:
            if self._piece is None:
                self._piece = self._next_piece(wait if not out else None)
                self._taken = 0
                if self._piece is None:
                    break
                wait = None
            piece = self._piece
            if piece.done:
                self._finish(piece.split_id)
                self._piece = None
                continue
            end = min(len(piece), self._taken + max_records - len(out))
            if out:
                out.extend(piece.records(self._taken, end))
            else:
                out = piece.records(self._taken, end)
            self._taken = end
            self._advance(piece, end)
            if end == len(piece):
                self._piece = None
        return out

    def _advance(self, piece: Piece, end: int) -> None:
        self._positions[piece.split_id] = SplitPosition(
            piece.file,
            piece.position + end,
            piece.offsets[end - 1] + 1,
            "exact" if end - 1 >= piece.exact_from else "estimated",
        )
        if piece.timestamps is not None:
            ts = piece.timestamps[end - 1]
            if ts is not None:
                self._last_ts[piece.split_id] = max(ts, self._last_ts.get(piece.split_id, ts))

    def _finish(self, split_id: str) -> None:
        old = self._positions.get(split_id, SplitPosition())
        self._positions[split_id] = SplitPosition(old.file, old.record, old.next_offset, old.mode, True)
        self._open_splits.discard(split_id)
        log.info(
            "%s stage: split %s read to its end (next offset %s, %s)",
            self._name,
            split_id,
            old.next_offset,
            old.mode,
        )

    def poll_batches(self, timeout: float, max_records: int) -> list[MessageBatch]:
        """The same records as batches of ``confluent_kafka.Message`` objects, one per cluster (built per
        record here: the record path, :meth:`poll`, is the fast one for archives)."""
        by_cluster: dict[str, list[Any]] = {}
        for r in self.poll(timeout, max_records):
            ts, headers = r.timestamp, r.headers
            kafka_headers: Any = headers
            by_cluster.setdefault(r.cluster_id, []).append(
                Message(
                    topic=r.topic,
                    partition=r.partition,
                    offset=r.offset,
                    key=r.key,
                    value=r.value,
                    headers=kafka_headers,
                    timestamp=(0, 0) if ts is None else (1, ts),
                )
            )
        return [MessageBatch(c, m) for c, m in by_cluster.items()]

    @property
    def finished(self) -> bool:
        """Every split read to its end and every record returned."""
        return not self._open_splits

    @property
    def watermark(self) -> int | None:
        """The smallest of the open splits' largest timestamps returned (the largest of all once every
        split is done); None while an open split has returned no timestamp."""
        if not self._last_ts:
            return None
        open_ts = [self._last_ts.get(s) for s in self._open_splits]
        if not open_ts:
            return max(self._last_ts.values())
        return None if None in open_ts else min(t for t in open_ts if t is not None)

    def positions(self) -> dict[str, int]:
        """Split id -> the offset after the last record returned."""
        return {s: p.next_offset for s, p in sorted(self._positions.items()) if p.next_offset is not None}

    def handover(self) -> StageHandover:
        """Positions with their modes; the largest timestamp returned, when the archive has timestamps."""
        modes: dict[str, HandoverMode] = {
            s: p.mode for s, p in self._positions.items() if p.next_offset is not None
        }
        ts = max(self._last_ts.values()) if self._last_ts else None
        return StageHandover(self.positions(), modes, ts)

    def snapshot(self) -> dict[str, Any]:
        """Version 2: per split the file, the records of it returned, the next offset, its mode, done."""
        return {
            "v": SNAPSHOT_VERSION,
            "stage": self._name,
            "splits": {s: p.to_dict() for s, p in sorted(self._positions.items())},
            **({"extra": self._extra} if self._extra else {}),
        }

    def commit(self, snapshot_id: int) -> None:
        """Nothing to commit: an archive has no consumer group."""

    def status(self) -> dict[str, Any]:
        """Per split: archived, file, position (records of the file returned), next offset, mode, done."""
        splits = {
            s: {
                "archived": True,
                "file": p.file,
                "position": p.record,
                "next_offset": p.next_offset,
                "mode": p.mode,
                "done": p.done,
            }
            for s, p in sorted(self._positions.items())
        }
        for s in sorted(self._open_splits - set(splits)):
            splits[s] = {
                "archived": True,
                "file": None,
                "position": 0,
                "next_offset": None,
                "mode": None,
                "done": False,
            }
        return {
            "stage": self._name,
            "bounded": True,
            "finished": self.finished,
            "splits": splits,
            **self._details,
        }

    def close(self) -> None:
        """Stop the reader threads and join them. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        for t in self._threads:
            while t.is_alive():
                with contextlib.suppress(queue.Empty):  # room for a reader blocked on a full queue
                    self._queue.get_nowait()
                t.join(0.05)
