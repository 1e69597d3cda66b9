"""Between fetch threads and whoever takes their batches: the bounded hand-off, and delivered positions.

:class:`Handoff` is filled by fetch threads (``ReaderContext.emit``) and drained by one consumer (the caller's
thread of a stream, or a push worker's handler thread). :class:`PositionTracker` holds, per split, the offset
after the last message that consumer handed out; checkpoints are taken from it. Both are thread-safe.
"""

from __future__ import annotations

import queue
import threading
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
    """The bounded buffer of record batches between fetch threads and the caller."""

    def __init__(self, max_batches: int) -> None:
        self._q: queue.Queue[RecordBatch] = queue.Queue(maxsize=max_batches)
        self.closed = threading.Event()
        self.on_put: Callable[[], None] | None = None
        """Called (on the fetch thread) after every put: an asyncio consumer's wake-up; must not block."""

    def put(self, batch: RecordBatch, should_stop: Callable[[], bool]) -> bool:
        """Wait for room; False when stopping or closed first."""
        while not self.closed.is_set():
            try:
                self._q.put(batch, timeout=0.05)
                notify = self.on_put
                if notify is not None:
                    notify()
                return True
            except queue.Full:
                if should_stop():
                    return False
        return False

    def get(self, timeout: float) -> RecordBatch | None:
        """The next batch, or None after ``timeout`` seconds."""
        try:
            if timeout <= 0:
                return self._q.get_nowait()
            return self._q.get(timeout=timeout)
        except queue.Empty:
            return None

    def full(self) -> bool:
        """Whether there is no room right now."""
        return self._q.full()

    def empty(self) -> bool:
        """Whether nothing waits."""
        return self._q.empty()
