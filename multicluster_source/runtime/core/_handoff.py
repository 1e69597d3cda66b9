"""Between fetch threads and whoever takes their batches: the bounded hand-off, and delivered positions.

:class:`Handoff` is filled by fetch threads (``ReaderContext.emit``) and drained by one consumer (the caller's
thread of a stream, or a push worker's handler thread); a consumer that finds it empty first runs the fetch
steps fetchers offered it (``lend``: see :mod:`multicluster_source.reader._fetcher`, inline fetching), which
append their batches at once (``put_now``). :class:`PositionTracker` holds, per split, the offset
after the last message that consumer handed out; checkpoints are taken from it. Both are thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from multicluster_source.framework._interfaces import RecordBatch

Step = Callable[[], bool]


class PositionTracker:
    """Split id -> next offset after the last record delivered to the caller. Thread-safe.

    Replica handovers (:mod:`multicluster_source.enumerator._handover`) *fence* an origin split: its position
    is taken and, from that moment, no record of it counts as delivered: :meth:`advance` refuses it, and the
    taker (:class:`~multicluster_source.runtime.core._delivery.Delivery`) drops the records it refused, so a
    record fetched from the origin before the handover is never handed out after it. The taker also notes the
    last timestamp of *watched* splits (the ones a replica copies), for the ``timestamp`` translation.

    A split that leaves the metadata is fenced the same way (nothing fetched before its removal is handed out
    after it). When it is assigned anew (:meth:`unfence`: re-added, or an origin split seen again) it resumes
    at its fenced position while batches fetched before the fence may still wait in the hand-off or in a
    fetch thread's hands: such a split is *guarded* from then on, and a message of it below its delivered
    position is a repeat (:meth:`guarded_positions`; the taker drops it, and :meth:`advance` never moves a
    guarded split's position back).

    Every change is also journaled (``None`` for a forgotten split) until :meth:`take_changes` hands the
    journal over, so a checkpoint costs the caller what moved since the last one, not a copy of every
    position. The journal starts with the initial (restored) positions: the first checkpoint after a restore
    carries, and commits, all of them again.
    """

    def __init__(self, initial: Mapping[str, int] | None = None) -> None:
        self._lock = threading.Lock()
        self._positions: dict[str, int] = dict(initial or {})
        self._fenced: frozenset[str] = frozenset()
        self._guarded: frozenset[str] = frozenset()
        self.watched: frozenset[str] = frozenset()
        """Splits whose last delivered record's timestamp is kept (read without the lock by the taker)."""
        self._times: dict[str, int] = {}
        self._changes: dict[str, int | None] = dict(self._positions)

    def advance(
        self, positions: Mapping[str, int], times: Mapping[str, int] | None = None, *, reset: bool = False
    ) -> frozenset[str]:
        """Record positions reached by delivered records (and, for watched splits, their last timestamps), or
        set by an offset reset (``reset``: a guarded split may move back); returns the fenced splits among
        them, whose positions were refused (their records must not be handed out)."""
        with self._lock:
            guarded = self._guarded
            if guarded and not reset and not guarded.isdisjoint(positions):
                current = self._positions
                positions = {s: p for s, p in positions.items() if s not in guarded or p > current.get(s, -1)}
            fenced = self._fenced
            if fenced and not fenced.isdisjoint(positions):
                refused = fenced.intersection(positions)
                kept = {s: p for s, p in positions.items() if s not in refused}
                self._positions.update(kept)
                self._changes.update(kept)
                if times:
                    self._times.update((s, t) for s, t in times.items() if s not in refused)
                return frozenset(refused)
            self._positions.update(positions)
            self._changes.update(positions)
            if times:
                self._times.update(times)
            return frozenset()

    def fence(self, split_ids: Sequence[str]) -> dict[str, tuple[int, int | None]]:
        """Stop counting records of ``split_ids`` as delivered; their positions (with the last delivered
        record's timestamp, when watched) at this moment, for those that have one."""
        with self._lock:
            self._fenced = self._fenced | frozenset(split_ids)
            if self._guarded:
                self._guarded = self._guarded - self._fenced
            return {s: (self._positions[s], self._times.get(s)) for s in split_ids if s in self._positions}

    def settle(self, fenced: Mapping[str, tuple[int, int | None]]) -> None:
        """Take the positions (and last timestamps, where not None) that a fence of the same splits found
        where their records were handed out: a push worker's own tracker, exact where this one (the driver's,
        fed by reports) lags behind the reports still on their way. Only splits still fenced change."""
        with self._lock:
            for s, (position, ts) in fenced.items():
                if s in self._fenced:
                    self._positions[s] = self._changes[s] = position
                    if ts is not None:
                        self._times[s] = ts

    @property
    def fenced(self) -> frozenset[str]:
        """The fenced splits now (read without the lock: the set is replaced, never changed)."""
        return self._fenced

    def unfence(self, split_ids: Sequence[str]) -> None:
        """Count records of ``split_ids`` again (the split was assigned anew); those that were fenced are
        guarded from now on (see the class)."""
        with self._lock:
            if self._fenced:
                back = self._fenced.intersection(split_ids)
                if back:
                    self._fenced = self._fenced - back
                    self._guarded = self._guarded | back

    @property
    def guarded(self) -> frozenset[str]:
        """The guarded splits now (read without the lock: the set is replaced, never changed)."""
        return self._guarded

    def guarded_positions(self, split_ids: AbstractSet[str]) -> dict[str, int]:
        """Delivered positions of the guarded splits among ``split_ids``: a message of one of them below its
        position was fetched before the split was fenced and has been handed out already."""
        with self._lock:
            current = self._positions
            return {s: current[s] for s in self._guarded.intersection(split_ids) if s in current}

    def watched_times(self) -> dict[str, int]:
        """Split id -> timestamp of the last delivered record, for the watched splits that have one."""
        with self._lock:
            return dict(self._times)

    def times_of(self, split_ids: Iterable[str]) -> dict[str, int]:
        """Split id -> timestamp of the last delivered record, for those of ``split_ids`` that have one."""
        with self._lock:
            times = self._times
            return {s: times[s] for s in split_ids if s in times}

    def watch(self, split_ids: Sequence[str]) -> None:
        """Keep the last delivered timestamp of exactly ``split_ids`` from now on."""
        with self._lock:
            self.watched = frozenset(split_ids)
            self._times = {s: t for s, t in self._times.items() if s in self.watched}

    def get(self, split_ids: Sequence[str]) -> dict[str, int]:
        """Positions of the named splits that have one."""
        with self._lock:
            return {s: self._positions[s] for s in split_ids if s in self._positions}

    def forget(self, split_ids: Sequence[str]) -> None:
        """Drop positions (a fence stays: what was fetched before it is never handed out)."""
        with self._lock:
            if self._guarded:
                self._guarded = self._guarded.difference(split_ids)
            for s in split_ids:
                if self._positions.pop(s, None) is not None:
                    self._changes[s] = None
                self._times.pop(s, None)

    def snapshot(self) -> dict[str, int]:
        """A copy of every position."""
        with self._lock:
            return dict(self._positions)

    def take_changes(self) -> dict[str, int | None]:
        """What changed since the last call (split id -> position, ``None`` when forgotten), in O(1): the
        journal is handed over and a fresh one started. Applied in order to the previous positions, the
        changes give :meth:`snapshot` as of this call."""
        with self._lock:
            changes, self._changes = self._changes, {}
            return changes


class PositionFencing:
    """What a runtime's enumerator context offers replica handovers over its :class:`PositionTracker`
    (a mix-in: the context keeps the tracker in ``_tracker``). Optional for an enumerator context."""

    _tracker: PositionTracker

    def fence_positions(self, split_ids: Sequence[str]) -> dict[str, tuple[int, int | None]]:
        """Fence ``split_ids`` (no record of them is handed out from now on); their positions then."""
        return self._tracker.fence(split_ids)

    def unfence_positions(self, split_ids: Sequence[str]) -> None:
        """Hand out records of ``split_ids`` again."""
        self._tracker.unfence(split_ids)

    def watch_positions(self, split_ids: Sequence[str]) -> None:
        """Keep the last delivered record's timestamp of ``split_ids``."""
        self._tracker.watch(split_ids)

    def watched_times(self) -> dict[str, int]:
        """The last delivered record's timestamp of the watched splits (for checkpoints)."""
        return self._tracker.watched_times()


def last_times(cluster_id: str, messages: Sequence[Any], wanted: AbstractSet[str]) -> dict[str, int]:
    """Split id -> timestamp of the last of ``messages`` of that split, for the ``wanted`` splits."""
    out: dict[str, int] = {}
    for m in reversed(messages):
        sid = f"{cluster_id}/{m.topic()}/{m.partition()}"
        if sid in wanted and sid not in out:
            out[sid] = m.timestamp()[1]
            if len(out) == len(wanted):
                break
    return out


_BARGE_S = 0.1
"""How long a fetch thread competes for room as it comes before it takes a place in line."""


class Handoff:
    """The bounded buffer of record batches between fetch threads and the caller.

    Fair to the fetch threads that wait for room, without a context switch on every batch: a thread first
    competes for a freed slot as it comes (cheap, and whoever runs takes it), and once it has waited
    ``_BARGE_S`` it takes a place in line; while anyone is in line, threads put in the order they came. With
    :class:`queue.Queue` alone a thread could lose every freed slot to threads that came back with their next
    batch just then, and one cluster's fetcher could starve for as long as the caller is the slower side.
    """

    def __init__(self, max_batches: int) -> None:
        self._max = max_batches
        self._items: deque[RecordBatch] = deque()
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)  # the one thread taking batches waits here
        self._not_full = threading.Condition(self._lock)  # fetch threads competing for room wait here
        self._turns: deque[threading.Event] = deque()
        """Fetch threads that waited ``_BARGE_S``, in the order they came; the first is woken for room."""
        self._steps: tuple[tuple[Step, Callable[[], None]], ...] = ()
        """Fetch steps lent to the consumer (run on its thread when it finds nothing to take)."""
        self._holds: tuple[Callable[[], None], ...] = ()
        """Called when the consumer comes for a batch and finds some waiting (see :meth:`lend`)."""
        self._first_step = 0  # where the consumer's next round of steps starts (its thread only)
        self.inline = True
        """Whether the consumer runs lent steps; an asyncio consumer does not (a step may wait on the client,
        e.g. to unassign a finished split, which must not block an event loop)."""
        self.closed = threading.Event()
        self.on_put: Callable[[], None] | None = None
        """Called (on the fetch thread) after every put: an asyncio consumer's wake-up; must not block."""

    def put(self, batch: RecordBatch, should_stop: Callable[[], bool]) -> bool:
        """Wait for room (the threads in line first); False when stopping or closed first."""
        turn: threading.Event | None = None
        with self._lock:
            deadline = time.monotonic() + _BARGE_S
            while True:
                if self.closed.is_set() or should_stop():
                    return False
                if not self._turns and len(self._items) < self._max:
                    self._append_locked(batch)
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    turn = threading.Event()
                    self._turns.append(turn)
                    break
                self._not_full.wait(min(left, 0.05))
        while turn is not None:
            turn.wait(0.05)
            with self._lock:
                if self.closed.is_set() or should_stop():
                    self._leave_locked(turn)
                    return False
                if self._turns[0] is turn and len(self._items) < self._max:
                    self._turns.popleft()
                    self._append_locked(batch)
                    break
                turn.clear()
        notify = self.on_put
        if notify is not None:
            notify()
        return True

    def put_now(self, batch: RecordBatch) -> None:
        """Append without waiting for room: from a lent step only, on the consumer's own thread (which would
        otherwise wait for itself). At most one batch a fetcher and step, and only into an empty buffer."""
        with self._lock:
            self._items.append(batch)

    def lend(
        self, step: Step, release: Callable[[], None], hold: Callable[[], None] | None = None
    ) -> Callable[[], None]:
        """Let the consumer run ``step()`` when it finds nothing to take (True: it ran and found nothing
        ready), and ``release()`` after such a step when no step found anything (the consumer is about to
        wait); ``hold()`` whenever it comes for a batch and finds some waiting (it is there, and will step
        once they are taken: the fetch thread need not fetch ahead). Returns what withdraws them (which does
        not wait for a step under way: the step's own lock does)."""
        pair = (step, release)
        with self._lock:
            self._steps = (*self._steps, pair)
            if hold is not None:
                self._holds = (*self._holds, hold)

        def withdraw() -> None:
            with self._lock:
                self._steps = tuple(p for p in self._steps if p is not pair)
                self._holds = tuple(h for h in self._holds if h is not hold)

        return withdraw

    def _append_locked(self, batch: RecordBatch) -> None:
        self._items.append(batch)
        self._not_empty.notify()
        self._room_locked()

    def _room_locked(self) -> None:
        """Tell the first in line, or else one competing thread, when there is room."""
        if len(self._items) < self._max:
            if self._turns:
                self._turns[0].set()
            else:
                self._not_full.notify()

    def _leave_locked(self, turn: threading.Event) -> None:
        self._turns.remove(turn)
        self._room_locked()  # it might have been this one's turn: pass it on

    def get(self, timeout: float, fetch: bool = True) -> RecordBatch | None:
        """The next batch, or None after ``timeout`` seconds; when nothing waits, the lent steps run first
        (unless ``fetch`` is False: the caller already has something to hand out), one after another until
        one fetched a batch, each round starting after the step that fetched last (so each fetcher gets its
        turn)."""
        with self._lock:
            lent = fetch and self.inline and not self.closed.is_set()
            steps = self._steps if lent and not self._items else ()
            holds = self._holds if lent and self._items else ()
        for hold in holds:
            # Batches wait, put by fetch threads: the consumer is here, and steps once it has taken them.
            # Without this, two fetch threads that keep the buffer from emptying never leave fetching to it,
            # and every batch crosses threads (half as much CPU a row again: column path, two clusters).
            hold()
        idle: list[Callable[[], None]] = []
        for i in range(len(steps)):  # from where the last round stopped, until one step fetched a batch
            k = (self._first_step + i) % len(steps)
            step, release = steps[k]
            if step():
                idle.append(release)
            elif self._items:
                # one batch in hand, not one a fetcher: the others' would wait in the buffer, alive, while the
                # caller makes records of this one (more objects for the garbage collector to walk)
                self._first_step = k + 1
                break
        if idle and not self._items:  # nothing anywhere: their fetch threads wait for records again
            for release in idle:
                release()
        with self._lock:
            if not self._items and timeout > 0:
                deadline = time.monotonic() + timeout
                while not self._items:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._not_empty.wait(left)
            if not self._items:
                return None
            batch = self._items.popleft()
            self._room_locked()
            return batch

    def full(self) -> bool:
        """Whether there is no room right now."""
        return len(self._items) >= self._max

    def empty(self) -> bool:
        """Whether nothing waits."""
        return not self._items

    def __len__(self) -> int:
        """Batches waiting now."""
        return len(self._items)
