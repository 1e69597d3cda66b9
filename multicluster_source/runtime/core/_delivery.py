"""Taking records or batches out of the hand-off, with exactly the positions of what was taken.

A :class:`Delivery` belongs to one consumer of a :class:`~._handoff.Handoff` (the caller's thread of a stream,
or the handler thread of a push worker) and is used from that thread only. It keeps the batch it is in the
middle of, so that ``poll``, ``poll_batches`` and iteration may be mixed and ``max_records`` may cut a batch:
a batch taken whole moves the delivered positions by its own positions (no per-message work), a part of one
by the offsets of the messages in that part.

Iteration (:meth:`Delivery.iterate`) makes each record only as the caller takes it, so a record the caller
is done with is freed before the next is made (the garbage collector never sees a batch's worth of records
alive). What it took counts as delivered when :meth:`Delivery.settle` looks at how far it got: at the end of
the batch, on a checkpoint, and before ``poll`` or ``poll_batches`` take over (which also end the iterator
over that batch, so nothing is handed out twice).

Given a :class:`~._handoff.PositionTracker` (rather than a bare ``advance`` callable), the records of fenced
splits (a replica handover, or the split left the metadata) are dropped from what ``poll`` and
``poll_batches`` return, and so are those of a guarded split (fenced, then assigned anew) below the position
already delivered: a batch fetched before the fence that still waited in the hand-off. The tracker refuses
their positions under the same lock the handover took the split's position with, so a record either counts
in that position or is never handed out; batches taken after the fence lose those splits' messages at once.
(The for loop hands a record out before it counts: a handover in the middle of the batch it iterates may
repeat what it handed out of that batch of the origin split from the replica.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from multicluster_source.framework._columns import mark_columns, value_bytes
from multicluster_source.framework._gcpause import Hold
from multicluster_source.framework._interfaces import RecordBatch
from multicluster_source.framework._records import MessageBatch, SourceRecord
from multicluster_source.framework._watermarks import BatchEventTimes, kafka_event_times, part_event_times
from multicluster_source.runtime.core._handoff import Handoff, PositionTracker, last_times


class RecordMaker(Protocol):
    """Makes records of one cluster's messages (:class:`~multicluster_source.reader._records.RecordMaker`)."""

    @property
    def views(self) -> bool:
        """Whether records are made by C-level calls alone (no deserializer: making one cannot raise)."""
        ...

    def __call__(self, cluster_id: str, messages: Sequence[Any], /) -> list[SourceRecord]:
        """The records of ``messages``, in order."""
        ...

    def iterate(
        self, cluster_id: str, messages: Sequence[Any], start: int, /
    ) -> tuple[Iterator[SourceRecord], Any]:
        """Records of ``messages[start:]`` made as they are taken; the list iterator they are taken from."""
        ...


OnDelivered = Callable[
    [str, Sequence[Any], "Mapping[str, tuple[int, int]] | None", "list[SourceRecord] | None"], None
]
"""``(cluster_id, messages, event_times or None, records or None)`` after each chunk returned (event time:
:class:`~multicluster_source.runtime.eventtime._watermarks.WatermarkTracker`); a part of a batch has its
event times cut from the batch's (:func:`~multicluster_source.framework._watermarks.part_event_times`)."""


def part_positions(cluster_id: str, messages: Sequence[Any]) -> dict[str, int]:
    """split id -> next offset after the last of ``messages`` of that split (a part of a batch)."""
    last: dict[tuple[str, int], int] = {}
    for m in messages:
        last[(m.topic(), m.partition())] = m.offset()
    return {f"{cluster_id}/{t}/{p}": o + 1 for (t, p), o in last.items()}


class Delivery:
    """Hands out what fetch threads put into ``handoff``; ``advance(positions)`` is called for what was taken.

    ``stopped()`` ends a wait early (the stream failed, a bounded source finished). ``gather``: once a
    :meth:`records` call holds this many records it returns, leaving further ready batches to the next call
    (a list of records stays alive until the caller drops it; the larger it is, the more of it the garbage
    collector walks again and again).
    """

    def __init__(
        self,
        handoff: Handoff,
        make_records: RecordMaker,
        advance: Callable[[Mapping[str, int]], object] | PositionTracker,
        on_delivered: OnDelivered | None = None,
        gather: int | None = None,
    ) -> None:
        self._handoff = handoff
        self._gather = gather
        self._make_records = make_records
        self._tracker = advance if isinstance(advance, PositionTracker) else None
        self._advance_to = advance.advance if isinstance(advance, PositionTracker) else advance
        self._on_delivered = on_delivered
        self._event_times: Mapping[str, tuple[int, int]] | None = None
        self._batch: RecordBatch | None = None
        self._start = 0  # messages of self._batch before this index were handed out
        self._taken: Any = None  # iteration's list iterator over self._batch.messages (None: not iterating)
        self._iterating = 0  # thread id of the iterating caller
        self._ready: Iterator[SourceRecord] | None = None  # next_ready's records of the current batch

    def _advance(
        self, positions: Mapping[str, int], cluster_id: str = "", messages: Sequence[Any] = ()
    ) -> frozenset[str]:
        """Count ``messages`` (reaching ``positions``) as delivered; the fenced splits among them."""
        tracker = self._tracker
        if tracker is None:
            self._advance_to(positions)
            return frozenset()
        watched = tracker.watched
        if watched and not watched.isdisjoint(positions):
            return tracker.advance(positions, last_times(cluster_id, messages, watched & positions.keys()))
        return tracker.advance(positions)

    @property
    def views(self) -> bool:
        """Whether :meth:`iterate`'s records are made by C-level calls alone (no deserializer)."""
        views: bool = getattr(self._make_records, "views", False)  # a maker without it: not known
        return views

    @property
    def holding(self) -> bool:
        """Whether part of a batch is still to be handed out (read from any thread)."""
        taken = self._taken
        return self._batch is not None and (taken is None or taken.__length_hint__() > 0)

    def iterate(self, timeout: float, stopped: Callable[[], bool]) -> Iterator[SourceRecord] | None:
        """The records of the rest of the current batch (or of the next one ready within ``timeout``), each
        made as it is taken; None when nothing came. Ends the previous iterator; :meth:`settle` counts what
        was taken as delivered."""
        self.detach()
        if self._next(time.monotonic() + timeout, False, stopped) is None:
            return None
        batch = self._batch
        assert batch is not None
        records, self._taken = self._make_records.iterate(batch.cluster_id, batch.messages, self._start)
        self._iterating = threading.get_ident()
        return records

    def next_ready(self, stopped: Callable[[], bool]) -> SourceRecord | None:
        """The next record ready now, made as it is taken (``async for``: one at a time, never waiting)."""
        while True:
            records = self._ready
            if records is not None:
                record = next(records, None)
                if record is not None:
                    return record
                self._ready = None
                self.settle()
            self._ready = self.iterate(0.0, stopped)
            if self._ready is None:
                return None

    def settle(self) -> None:
        """Count the records iteration took so far as delivered: their positions, then ``on_delivered``."""
        taken, batch = self._taken, self._batch
        if taken is None or batch is None:
            return
        end = len(batch.messages) - taken.__length_hint__()
        if end > self._start:
            cluster_id, messages, positions = self._take_noted(end - self._start)
            self._advance(positions, cluster_id, messages)
        if self._batch is None:
            self._taken = None

    def settle_if_iterating_here(self) -> None:
        """:meth:`settle` when called from the thread that iterates (a watermark read in the loop)."""
        if self._taken is not None and self._iterating == threading.get_ident():
            self.settle()

    def detach(self) -> None:
        """:meth:`settle`, then end the iterator: what it did not hand out, what comes next hands out."""
        self.settle()
        taken, self._taken = self._taken, None
        if taken is not None and self._batch is not None:
            taken.__setstate__(len(self._batch.messages))

    def _next(
        self, deadline: float, have: bool, stopped: Callable[[], bool], more: bool = False
    ) -> RecordBatch | None:
        while self._batch is None:
            wait = 0.0 if have else deadline - time.monotonic()
            # with records in hand, only what is buffered: no fetching inline for more (memory, GC), unless
            # ``more`` (columns: what is in hand is Arrow buffers, nothing for the collector)
            batch = self._handoff.get(min(wait, 0.1) if wait > 0 else 0.0, fetch=more or not have)
            if batch is not None:
                if not batch.messages:  # positions alone (an offset reset): nothing to hand out
                    if batch.positions:
                        self._advance_alone(batch)
                    continue
                batch = self._unfenced(batch)
                if not batch.messages:
                    if batch.positions:
                        self._advance(batch.positions)
                    continue
                self._batch, self._start = batch, 0
                break
            if have or time.monotonic() >= deadline or stopped():
                return None
        return self._batch

    def _advance_alone(self, batch: RecordBatch) -> None:
        """Positions without messages, as the fetcher handed them on (an offset reset's, say)."""
        if self._tracker is None:
            self._advance_to(batch.positions)
        else:
            self._tracker.advance(batch.positions, reset=batch.reset)

    def _unfenced(self, batch: RecordBatch) -> RecordBatch:
        """``batch`` without the messages of splits that are fenced (a replica handover, or removed from the
        metadata: fetched before), nor those of guarded splits below their delivered positions (fetched
        before a fence, and handed out already or again from the split's resume position)."""
        tracker = self._tracker
        if tracker is None:
            return batch
        fenced, guarded = tracker.fenced, tracker.guarded
        fenced_here = bool(fenced) and not fenced.isdisjoint(batch.positions)
        floors = tracker.guarded_positions(batch.positions.keys()) if guarded else {}
        if not fenced_here and not floors:
            return batch
        if not fenced_here and len(batch.positions) == 1 and batch.messages:
            # the usual batch, of one split (the client hands over one partition's fetch at a time): its
            # offsets rise, so the first one tells whether anything of it is a repeat
            [floor] = floors.values()
            if batch.messages[0].offset() >= floor:
                return batch
        cid = batch.cluster_id
        kept = []
        left: set[str] = set()  # splits with a message kept
        for m in batch.messages:
            sid = f"{cid}/{m.topic()}/{m.partition()}"
            if sid in fenced or m.offset() < floors.get(sid, -1):
                continue
            kept.append(m)
            left.add(sid)
        dropped = {s for s in batch.positions if s in fenced or (s in floors and s not in left)}
        if batch.count_bytes is not None:  # fetched: counted here, all of it, as the fetcher would have
            batch.count_bytes(sum(map(len, batch.messages)))
        times = batch.event_times
        if isinstance(times, BatchEventTimes):
            times = kafka_event_times(cid, kept, ends_only=times.ends_only)
        elif times is not None:
            times = {s: t for s, t in times.items() if s not in dropped}
        positions = {s: p for s, p in batch.positions.items() if s not in dropped}
        return RecordBatch(cid, kept, positions, times)

    def _take(self, room: int, *, count: bool = True) -> tuple[str, Sequence[Any], Mapping[str, int]]:
        """Up to ``room`` messages of the current batch and the positions they reach; the caller advances
        the delivered positions once it handed them out. Counts their value bytes when the fetcher left
        that to the taker, unless ``count`` is False (a column taker counts them off its Arrow batch)."""
        batch = self._batch
        assert batch is not None
        messages, start = batch.messages, self._start
        whole = start == 0 and len(messages) <= room
        end = len(messages) if whole else min(len(messages), start + room)
        part = messages if whole else messages[start:end]
        if count and batch.count_bytes is not None:
            batch.count_bytes(sum(map(len, part)))
        if whole:
            self._batch = None
            self._event_times = batch.event_times
            return batch.cluster_id, messages, batch.positions
        times = batch.event_times
        self._event_times = (
            part_event_times(times, part, start) if isinstance(times, BatchEventTimes) else None
        )
        if end == len(messages):
            self._batch = None
            return batch.cluster_id, part, batch.positions
        self._start = end
        return batch.cluster_id, part, part_positions(batch.cluster_id, part)

    def _take_noted(self, room: int) -> tuple[str, Sequence[Any], Mapping[str, int]]:
        """:meth:`_take`, then ``on_delivered`` for the messages taken (no records made here); when that
        raises, the batch is left as it was."""
        batch, start = self._batch, self._start
        cluster_id, messages, positions = self._take(room)
        if self._on_delivered is not None:
            try:
                self._on_delivered(cluster_id, messages, self._event_times, None)
            except BaseException:
                self._batch, self._start = batch, start
                raise
        return cluster_id, messages, positions

    def records(self, timeout: float, max_records: int, stopped: Callable[[], bool]) -> list[SourceRecord]:
        """Records that are ready (at most ``max_records``, and no further batch once ``gather`` are in
        hand), ``[]`` after ``timeout`` seconds.

        When the record maker raises (a deserializer under policy ``fail``), the records of that batch part
        are not returned and their positions do not count as delivered.
        """
        self.detach()
        out: list[SourceRecord] = []
        deadline = time.monotonic() + timeout
        enough = max_records if self._gather is None else min(max_records, self._gather)
        while len(out) < enough and self._next(deadline, bool(out), stopped) is not None:
            batch, start = self._batch, self._start
            cluster_id, messages, positions = self._take(max_records - len(out))
            try:
                made = self._make_records(cluster_id, messages)
                if self._on_delivered is not None:
                    self._on_delivered(cluster_id, messages, self._event_times, made)
            except BaseException:
                self._batch, self._start = batch, start
                raise
            refused = self._advance(positions, cluster_id, messages)
            if refused:  # fenced by a replica handover meanwhile: never handed out
                made = [r for r in made if f"{r.cluster_id}/{r.topic}/{r.partition}" not in refused]
            if out:
                out.extend(made)
            else:
                out = made
        return out

    def batches(self, timeout: float, max_records: int, stopped: Callable[[], bool]) -> list[MessageBatch]:
        """Batches that are ready (at most ``max_records`` messages in all), ``[]`` after ``timeout``."""
        self.detach()
        out: list[MessageBatch] = []
        n = 0
        deadline = time.monotonic() + timeout
        while n < max_records and self._next(deadline, bool(out), stopped) is not None:
            cluster_id, messages, positions = self._take_noted(max_records - n)
            n += len(messages)
            refused = self._advance(positions, cluster_id, messages)
            if refused:  # fenced by a replica handover meanwhile: never handed out
                messages = [m for m in messages if f"{cluster_id}/{m.topic()}/{m.partition()}" not in refused]
                if not messages:
                    continue
            out.append(MessageBatch(cluster_id, messages if isinstance(messages, list) else list(messages)))
        return out

    def columns(
        self, timeout: float, max_records: int, stopped: Callable[[], bool], build: ColumnMaker
    ) -> list[Any]:
        """Arrow record batches of what is ready (at most ``max_records`` rows in all), one per batch part
        taken (``build(cluster_id, messages, split)``, see
        :class:`~multicluster_source.framework._columns.ColumnBuilder`); ``[]`` after ``timeout``.

        Unlike :meth:`records` it goes on fetching inline while it holds rows: each part's messages are
        dropped once its Arrow batch is made, and the garbage collector is held off from the fetch to the
        build (``framework._gcpause``). A part counts as delivered once its batch is made; when ``build``
        raises, the part is left as it was.
        """
        self.detach()
        before = mark_columns(True)  # what is fetched inline now leaves its value bytes to value_bytes()
        try:
            return self._columns(timeout, max_records, stopped, build)
        finally:
            mark_columns(before)

    def _columns(
        self, timeout: float, max_records: int, stopped: Callable[[], bool], build: ColumnMaker
    ) -> list[Any]:
        out: list[Any] = []
        n = 0
        deadline = time.monotonic() + timeout
        while n < max_records:
            # held off until the part's messages die (a few ms: nothing checks it), never while waiting
            hold = Hold(1.0)
            try:
                if self._next(deadline, True, stopped, more=True) is None:  # nothing ready now
                    hold.end()
                    if out or self._next(deadline, False, stopped, more=True) is None:
                        break
                taken, made = self._column_part(max_records - n, build)
            finally:
                hold.end()
            n += taken
            if made is not None:
                out.append(made)
        return out

    def _column_part(self, room: int, build: ColumnMaker) -> tuple[int, Any]:
        """Up to ``room`` messages of the current batch, delivered: (how many, their Arrow batch or None
        when a replica handover fenced every one meanwhile)."""
        batch, start = self._batch, self._start
        assert batch is not None
        cluster_id, messages, positions = self._take(room, count=False)
        try:
            made = build(cluster_id, messages, _one_split(positions, messages))
            if self._on_delivered is not None:
                self._on_delivered(cluster_id, messages, self._event_times, None)
        except BaseException:
            self._batch, self._start = batch, start
            raise
        if batch.count_bytes is not None:
            batch.count_bytes(value_bytes(made))
        refused = self._advance(positions, cluster_id, messages)
        if refused:  # fenced by a replica handover meanwhile: never handed out
            kept = [m for m in messages if f"{cluster_id}/{m.topic()}/{m.partition()}" not in refused]
            return len(messages), build(cluster_id, kept, None) if kept else None
        return len(messages), made


ColumnMaker = Callable[[str, Sequence[Any], "tuple[str, int] | None"], Any]
"""``(cluster_id, messages, (topic, partition) or None) -> pyarrow.RecordBatch``: see
:class:`~multicluster_source.framework._columns.ColumnBuilder`."""


def _one_split(positions: Mapping[str, int], messages: Sequence[Any]) -> tuple[str, int] | None:
    """``(topic, partition)`` when every message is of one split: the positions a batch (or a part of one)
    reaches name every split it has a message of, so one position means one split."""
    if len(positions) != 1 or not messages:
        return None
    first = messages[0]
    return first.topic(), first.partition()
