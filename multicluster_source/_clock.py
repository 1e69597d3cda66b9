"""The one clock of the periodic work: the metadata watcher's polls, the coordinator's timers (the
enumerator's metadata polls and discovery), the window after which a reader closes an idle fetcher,
heartbeats (pull readers, push workers and their driver) and the checkpoint interval (pull stream, push
driver).

Each of those takes :func:`clock` when it is made and keeps it, so that no record pays for the indirection:
they read the time per loop, per poll or per batch, never per record. :class:`SystemClock` is
``time.monotonic``; a test makes a :class:`ManualClock` current with :func:`use`, and its time moves only by
:meth:`ManualClock.advance`, which wakes whoever waits for it (``on_advance``). Waits of real time that
nothing here measures (a client's poll timeout, a queue's) are not the clock's.

This module sits below every layer of the package (it imports nothing of it), so that the metadata layer's
watcher takes it too.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

__all__ = ["Clock", "ManualClock", "SystemClock", "clock", "use"]


class Clock(Protocol):
    """Monotonic time in seconds, and a way to be woken when it moves other than by itself."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (only differences mean something)."""
        ...

    def on_advance(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` (on the advancing thread) whenever the time jumps: a loop that waits for a
        deadline of this clock re-reads the time then. Time that passes by itself calls nothing."""
        ...


class SystemClock:
    """``time.monotonic``: time passes by itself, so ``on_advance`` never calls anything."""

    monotonic = staticmethod(time.monotonic)

    def on_advance(self, wake: Callable[[], None]) -> None:
        """Nothing to do: loops wake by their own timeouts."""


class ManualClock:
    """A clock for tests: it stands still until :meth:`advance` moves it, then wakes the loops that wait
    on it (thread-safe)."""

    def __init__(self, start: float = 1_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()
        self._wakes: list[Callable[[], None]] = []

    def monotonic(self) -> float:
        """The time the last :meth:`advance` left."""
        with self._lock:
            return self._now

    def on_advance(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` after each :meth:`advance`."""
        with self._lock:
            self._wakes.append(wake)

    def advance(self, seconds: float) -> None:
        """Move the time on by ``seconds`` and wake every loop that waits on this clock."""
        if seconds < 0:
            raise ValueError(f"a monotonic clock does not go back ({seconds} s)")
        with self._lock:
            self._now += seconds
            wakes = list(self._wakes)
        for wake in wakes:
            wake()


_current: Clock = SystemClock()
_C = TypeVar("_C", bound=Clock)


def clock() -> Clock:
    """The clock that what is made now takes (the system's, unless a test made another current)."""
    return _current


@contextlib.contextmanager
def use(replacement: _C) -> Iterator[_C]:
    """Make ``replacement`` the current clock for what is made inside the ``with`` block (tests)."""
    global _current
    before, _current = _current, replacement
    try:
        yield replacement
    finally:
        _current = before
