"""Between fetch threads and whoever takes their batches: the bounded hand-off, and delivered positions.

:class:`Handoff` is filled by fetch threads (``ReaderContext.emit``) and drained by one consumer (the caller's
thread of a stream, or a push worker's handler thread). :class:`PositionTracker` holds, per split, the offset
after the last message that consumer handed out; checkpoints are taken from it. Both are thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from multicluster_source.framework._interfaces import RecordBatch


class PositionTracker:
    """Split id -> next offset after the last record delivered to the caller. Thread-safe."""

    def __init__(self, initial: Mapping[str, int] | None = None) -> None:
        self._lock = threading.Lock()
        self._positions: dict[str, int] = dict(initial or {})

    def advance(self, positions: Mapping[str, int]) -> None:
        """Record positions reached by delivered records."""
        with self._lock:
            self._positions.update(positions)

    def get(self, split_ids: Sequence[str]) -> dict[str, int]:
        """Positions of the named splits that have one."""
        with self._lock:
            return {s: self._positions[s] for s in split_ids if s in self._positions}

    def forget(self, split_ids: Sequence[str]) -> None:
        """Drop positions."""
        with self._lock:
            for s in split_ids:
                self._positions.pop(s, None)

    def snapshot(self) -> dict[str, int]:
        """A copy of every position."""
        with self._lock:
            return dict(self._positions)


class Handoff:
    """The bounded buffer of record batches between fetch threads and the caller.

    Fair to the fetch threads that wait for room: they put in the order they came (first come, first
    served). With :class:`queue.Queue` a thread woken for a free slot could lose it to one that just called
    ``put`` again, and one cluster's fetcher could starve behind the others for as long as the caller is the
    slower side.
    """

    def __init__(self, max_batches: int) -> None:
        self._max = max_batches
        self._items: deque[RecordBatch] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._turns: deque[object] = deque()  # fetch threads waiting for room, in the order they came
        self.closed = threading.Event()
        self.on_put: Callable[[], None] | None = None
        """Called (on the fetch thread) after every put: an asyncio consumer's wake-up; must not block."""

    def put(self, batch: RecordBatch, should_stop: Callable[[], bool]) -> bool:
        """Wait for room (and for the threads that waited before); False when stopping or closed first."""
        cond = self._cond
        with cond:
            if self._turns or len(self._items) >= self._max:
                turn = object()
                self._turns.append(turn)
                try:
                    while self._turns[0] is not turn or len(self._items) >= self._max:
                        if self.closed.is_set() or should_stop():
                            return False
                        cond.wait(0.05)
                finally:
                    self._turns.remove(turn)
            if self.closed.is_set():
                return False
            self._items.append(batch)
            cond.notify_all()  # the caller waiting for a batch, and the next thread in turn
        notify = self.on_put
        if notify is not None:
            notify()
        return True

    def get(self, timeout: float) -> RecordBatch | None:
        """The next batch, or None after ``timeout`` seconds."""
        cond = self._cond
        with cond:
            if not self._items and timeout > 0:
                deadline = time.monotonic() + timeout
                while not self._items:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    cond.wait(left)
            if not self._items:
                return None
            batch = self._items.popleft()
            if self._turns:
                cond.notify_all()  # room for the thread whose turn it is
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
