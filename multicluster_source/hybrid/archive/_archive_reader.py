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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Message

from multicluster_source.framework._records import MessageBatch, SourceRecord
from multicluster_source.hybrid._stage import HandoverMode, StageHandover
from multicluster_source.hybrid.archive._archive_pieces import (
    SNAPSHOT_VERSION,
    ArchivedColumns,
    Piece,
    SplitPosition,
    SplitProducer,
)

log = logging.getLogger("multicluster_source.hybrid.archive")

_QUEUE_PIECES_PER_READER = 4


@dataclass(frozen=True)
class _Failure:
    error: BaseException


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

    def _take(self, timeout: float, max_records: int) -> list[tuple[Piece, int, int]]:
        """Parts ``(piece, lo, hi)`` of up to ``max_records`` records, positions moved past them."""
        if self._error is not None:
            raise self._error
        parts: list[tuple[Piece, int, int]] = []
        count = 0
        wait: float | None = timeout
        while count < max_records and self._open_splits:
            if self._piece is None:
                self._piece = self._next_piece(wait if not parts else None)
                self._taken = 0
                if self._piece is None:
                    break
                wait = None
            piece = self._piece
            if piece.done:
                self._finish(piece.split_id)
                self._piece = None
                continue
            end = min(len(piece), self._taken + max_records - count)
            parts.append((piece, self._taken, end))
            count += end - self._taken
            self._taken = end
            self._advance(piece, end)
            if end == len(piece):
                self._piece = None
        return parts

    def poll(self, timeout: float, max_records: int) -> list[SourceRecord]:
        """Up to ``max_records`` records, waiting up to ``timeout`` seconds for the first."""
        parts = self._take(timeout, max_records)
        if len(parts) == 1:
            piece, lo, hi = parts[0]
            return piece.records(lo, hi)
        out: list[SourceRecord] = []
        for piece, lo, hi in parts:
            out.extend(piece.records(lo, hi))
        return out

    def poll_columns(self, timeout: float, max_records: int) -> list[ArchivedColumns]:
        """The same as :meth:`poll`, as columns: no object per record (Parquet: Arrow batch slices).
        Positions, snapshots and the handover cover them as they cover records."""
        return [piece.columns(lo, hi) for piece, lo, hi in self._take(timeout, max_records)]

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
        return self._snapshot_of(self._positions)

    def snapshot_later(self) -> Callable[[], dict[str, Any]]:
        """:meth:`snapshot` as of now, built when called: positions are frozen values, replaced as they move,
        so a shallow copy of the table (one C-level dict copy) is the state now."""
        positions = dict(self._positions)
        return lambda: self._snapshot_of(positions)

    def _snapshot_of(self, positions: Mapping[str, SplitPosition]) -> dict[str, Any]:
        return {
            "v": SNAPSHOT_VERSION,
            "stage": self._name,
            "splits": {s: p.to_dict() for s, p in sorted(positions.items())},
            **({"extra": dict(self._extra)} if self._extra else {}),
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
