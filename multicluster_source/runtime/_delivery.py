"""Taking records or batches out of the hand-off, with exactly the positions of what was taken.

A :class:`Delivery` belongs to one consumer of a :class:`~._handoff.Handoff` (the caller's thread of a stream,
or the handler thread of a push worker) and is used from that thread only. It keeps the batch it is in the
middle of, so that ``poll`` and ``poll_batches`` may be mixed and ``max_records`` may cut a batch: a batch
taken whole moves the delivered positions by its own positions (no per-message work), a part of one by the
offsets of the messages in that part.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from multicluster_source.framework._interfaces import RecordBatch
from multicluster_source.framework._records import MessageBatch, SourceRecord
from multicluster_source.framework._watermarks import BatchEventTimes, part_event_times
from multicluster_source.runtime._handoff import Handoff

RecordMaker = Callable[[str, Sequence[Any]], list[SourceRecord]]
OnDelivered = Callable[
    [str, Sequence[Any], "Mapping[str, tuple[int, int]] | None", "list[SourceRecord] | None"], None
]
"""``(cluster_id, messages, event_times or None, records or None)`` after each chunk returned (event time:
:class:`~multicluster_source.runtime._watermarks.WatermarkTracker`); a part of a batch has its event times
cut from the batch's (:func:`~multicluster_source.framework._watermarks.part_event_times`)."""


def part_positions(cluster_id: str, messages: Sequence[Any]) -> dict[str, int]:
    """split id -> next offset after the last of ``messages`` of that split (a part of a batch)."""
    last: dict[tuple[str, int], int] = {}
    for m in messages:
        last[(m.topic(), m.partition())] = m.offset()
    return {f"{cluster_id}/{t}/{p}": o + 1 for (t, p), o in last.items()}


class Delivery:
    """Hands out what fetch threads put into ``handoff``; ``advance(positions)`` is called for what was taken.

    ``stopped()`` ends a wait early (the stream failed, a bounded source finished).
    """

    def __init__(
        self,
        handoff: Handoff,
        make_records: RecordMaker,
        advance: Callable[[Mapping[str, int]], None],
        on_delivered: OnDelivered | None = None,
    ) -> None:
        self._handoff = handoff
        self._make_records = make_records
        self._advance = advance
        self._on_delivered = on_delivered
        self._event_times: Mapping[str, tuple[int, int]] | None = None
        self._batch: RecordBatch | None = None
        self._start = 0  # messages of self._batch before this index were handed out

    @property
    def holding(self) -> bool:
        """Whether part of a batch is still to be handed out."""
        return self._batch is not None

    def _next(self, deadline: float, have: bool, stopped: Callable[[], bool]) -> RecordBatch | None:
        while self._batch is None:
            wait = 0.0 if have else deadline - time.monotonic()
            batch = self._handoff.get(min(wait, 0.1) if wait > 0 else 0.0)
            if batch is not None:
                if not batch.messages:  # positions alone (an offset reset): nothing to hand out
                    self._advance(batch.positions)
                    continue
                self._batch, self._start = batch, 0
                break
            if have or time.monotonic() >= deadline or stopped():
                return None
        return self._batch

    def _take(self, room: int) -> tuple[str, Sequence[Any], Mapping[str, int]]:
        """Up to ``room`` messages of the current batch and the positions they reach; the caller advances
        the delivered positions once it handed them out."""
        batch = self._batch
        assert batch is not None
        messages, start = batch.messages, self._start
        if start == 0 and len(messages) <= room:
            self._batch = None
            self._event_times = batch.event_times
            return batch.cluster_id, messages, batch.positions
        end = min(len(messages), start + room)
        part = messages[start:end]
        times = batch.event_times
        self._event_times = (
            part_event_times(times, part, start) if isinstance(times, BatchEventTimes) else None
        )
        if end == len(messages):
            self._batch = None
            return batch.cluster_id, part, batch.positions
        self._start = end
        return batch.cluster_id, part, part_positions(batch.cluster_id, part)

    def records(self, timeout: float, max_records: int, stopped: Callable[[], bool]) -> list[SourceRecord]:
        """Records that are ready (at most ``max_records``), ``[]`` after ``timeout`` seconds.

        When the record maker raises (a deserializer under policy ``fail``), the records of that batch part
        are not returned and their positions do not count as delivered.
        """
        out: list[SourceRecord] = []
        deadline = time.monotonic() + timeout
        while len(out) < max_records and self._next(deadline, bool(out), stopped) is not None:
            batch, start = self._batch, self._start
            cluster_id, messages, positions = self._take(max_records - len(out))
            try:
                made = self._make_records(cluster_id, messages)
                if self._on_delivered is not None:
                    self._on_delivered(cluster_id, messages, self._event_times, made)
            except BaseException:
                self._batch, self._start = batch, start
                raise
            out.extend(made)
            self._advance(positions)
        return out

    def batches(self, timeout: float, max_records: int, stopped: Callable[[], bool]) -> list[MessageBatch]:
        """Batches that are ready (at most ``max_records`` messages in all), ``[]`` after ``timeout``."""
        out: list[MessageBatch] = []
        n = 0
        deadline = time.monotonic() + timeout
        while n < max_records and self._next(deadline, bool(out), stopped) is not None:
            batch, start = self._batch, self._start
            cluster_id, messages, positions = self._take(max_records - n)
            if self._on_delivered is not None:
                try:
                    self._on_delivered(cluster_id, messages, self._event_times, None)
                except BaseException:
                    self._batch, self._start = batch, start
                    raise
            out.append(MessageBatch(cluster_id, messages if isinstance(messages, list) else list(messages)))
            self._advance(positions)
            n += len(messages)
        return out
