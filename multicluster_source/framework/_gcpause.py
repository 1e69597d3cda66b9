"""Holding off Python's cyclic garbage collector while a client answer of many short-lived objects is read.

A large client answer (a ``describe_topics`` of 12,000 partitions: about 74,000 Python objects, made at once
on the client's thread when the answer arrives) lives for a fraction of a second. When the collector's young
passes run meanwhile, they find it alive and move it to the oldest generation; that generation's growth
then sets off full collections, which stop every thread of the process for as long as it takes to walk every
object (0.2-0.9 s at 36,000 splits, measured, once or more every discovery round). With the collector held
off while the answer is read, the objects go the way short-lived objects go, by reference counting, and no
pass sees them: nothing is lost, a collection that came due meanwhile runs at the next allocation after.

:func:`collector_held` holds it off for at most ``at_most_s``: a watchdog thread (``mcs-gc-watch``, started
with the first hold, ending once no hold has been open for :data:`_WATCH_IDLE_S`, or when a source closes:
:func:`stop_watchdog`) ends a hold whose time is up, so a caller that never comes back does not keep it off
(:meth:`Hold.check` ends it at once). Holds of several threads nest: the collector is re-enabled when the
last one ends, and only if it was enabled when the first began (an application that disabled it keeps it
disabled). Holds that overlap one another without end (many clusters, several handler threads) do not keep
it off for more than :data:`CONTINUOUS_AT_MOST_S` in a row: it is then on until every open hold has ended.

A column taker holds it for each batch (:meth:`~multicluster_source.runtime.core._delivery.Delivery.columns`):
the client's messages live from ``consume()`` to the end of the Arrow build, and the young passes they set
off (two or three a batch of 2,000, promoting it to older generations, whose growth sets off full
collections) took 14-15 % of a column drain's time, measured. A record taker's messages and records live
until the caller comes back for more, so :class:`TakerHold` holds it from the fetch until then (the
caller's loop body included): by then the batch is gone, and the young count (allocations less
deallocations) is back where it was, so no pass is due at all. When the last hold ends and the young
generation is due (the caller kept what it took, or other threads allocated meanwhile), its pass runs at
once (:func:`_collect_if_due`): back-to-back holds put off no other thread's collections for longer than a
hold.

Threads: any; the module keeps its count of open holds under a lock. The watchdog only ends holds.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["CONTINUOUS_AT_MOST_S", "TAKER_AT_MOST_S", "Hold", "TakerHold", "collector_held", "stop_watchdog"]

CONTINUOUS_AT_MOST_S = 2.0
"""The collector is never held off longer than this in a row, however holds overlap."""

TAKER_AT_MOST_S = 0.5
"""A record taker's hold (:class:`TakerHold`) ends at the latest this long after its fetch."""

_WATCH_EVERY_S = 0.25
"""The watchdog looks at the open holds at least this often while any is open."""

_WATCH_IDLE_S = 5.0
"""The watchdog thread ends once no hold has been open for this long (the next hold starts a new one)."""

_now = time.monotonic
_lock = threading.Lock()
_open: set[Hold] = set()  # holds open now
_disabled_by_us = False  # the first hold found the collector enabled and disabled it
_disabled_at = 0.0
_watchdog: threading.Thread | None = None  # the watchdog thread, while it runs
_watch_idle = False  # ... and waits for a hold (``_watch_wake``)
_watch_exit = False  # ... and is to end once no hold is open
_watch_wake = threading.Event()
_T = TypeVar("_T")


def _begin(hold: Hold) -> None:
    global _disabled_by_us, _disabled_at, _watchdog
    with _lock:
        if not _open:
            _disabled_by_us = gc.isenabled()
            if _disabled_by_us:
                gc.disable()
                _disabled_at = _now()
        _open.add(hold)
        _cap_locked()
        if _watchdog is None:
            _watchdog = threading.Thread(target=_watch, name="mcs-gc-watch", daemon=True)
            _watchdog.start()
        elif _watch_idle:
            _watch_wake.set()


def _cap_locked() -> None:
    global _disabled_by_us
    if _disabled_by_us and _now() - _disabled_at > CONTINUOUS_AT_MOST_S:
        _disabled_by_us = False  # on until every open hold has ended
        gc.enable()


def _end(hold: Hold) -> None:
    global _disabled_by_us
    with _lock:
        if hold not in _open:
            return  # ended already (its owner and the watchdog may both end it)
        _open.remove(hold)
        if _open or not _disabled_by_us:
            return
        _disabled_by_us = False
        gc.enable()
    _collect_if_due()  # outside the lock: a finalizer the pass runs may hold the collector itself


def _collect_if_due() -> None:
    """The collector's pass now, when allocations made while it was off made one due. It would run at the
    next allocation anyway, unless a hold began first: a thread that holds it batch after batch would put off
    the passes of every other thread for as long as it keeps on. The pass is the collector's own (it runs at
    an allocation it tracks, and picks the generation: older ones get their turn as they would)."""
    threshold = gc.get_threshold()[0]
    if threshold > 0 and gc.isenabled() and gc.get_count()[0] > threshold:
        tracked = [None]  # an allocation the collector tracks: the pass runs here
        del tracked


def _watch() -> None:
    """The watchdog thread: ends holds whose time is up, applies the cap; ends once no hold has been open
    for :data:`_WATCH_IDLE_S`, or at once when :func:`stop_watchdog` asks."""
    global _watchdog, _watch_idle, _watch_exit
    while True:
        with _lock:
            now = _now()
            due = [hold for hold in _open if hold.until <= now]
            _cap_locked()
            if not _open and _watch_exit:
                _watchdog, _watch_exit, _watch_idle = None, False, False
                return
            wait = min([_WATCH_EVERY_S, *(hold.until - now for hold in _open)]) if _open else None
            _watch_idle = wait is None
            _watch_wake.clear()
        for hold in due:
            hold.end()
        if due:
            continue
        if wait is not None:
            time.sleep(max(wait, 0.001))
        elif not _watch_wake.wait(_WATCH_IDLE_S):
            with _lock:
                _watch_exit = _watch_exit or not _open


def stop_watchdog(timeout: float = 1.0) -> None:
    """End the watchdog thread now when no hold is open (a source's close: no thread of it outlives it); the
    next hold starts another. Waits for it at most ``timeout`` seconds."""
    global _watch_exit
    with _lock:
        thread = _watchdog
        if thread is None or _open:
            return
        _watch_exit = True
        _watch_wake.set()
    if thread is not threading.current_thread():
        thread.join(timeout)


def _after_fork() -> None:  # the watchdog thread is not in the child; the next hold starts one there
    global _watchdog, _watch_idle, _watch_exit
    _watchdog, _watch_idle, _watch_exit = None, False, False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class Hold:
    """One open hold of the collector (see :func:`collector_held`)."""

    __slots__ = ("until",)

    def __init__(self, at_most_s: float) -> None:
        self.until = _now() + at_most_s
        """Monotonic time at which the hold ends by itself (the watchdog ends it)."""
        _begin(self)

    @property
    def held(self) -> bool:
        """Whether this hold still counts (it ends after ``at_most_s``)."""
        return self in _open

    def check(self) -> None:
        """End the hold when its time is up (call it before and between waits: the watchdog may be later)."""
        if _now() >= self.until:
            self.end()
        with _lock:
            _cap_locked()

    def end(self) -> None:
        """End the hold now (idempotent; any thread)."""
        _end(self)


@contextmanager
def collector_held(at_most_s: float) -> Iterator[Hold]:
    """Hold off the cyclic garbage collector for the block, or for ``at_most_s``, whichever ends first."""
    hold = Hold(at_most_s)
    try:
        yield hold
    finally:
        hold.end()


class TakerHold:
    """The collector held off from the fetch of what a caller takes until the caller comes back for more
    (or :meth:`end`, or ``at_most_s``): see the module's docstring. Never held while the caller waits."""

    def __init__(self, at_most_s: float = TAKER_AT_MOST_S) -> None:
        self._at_most_s = at_most_s
        self._hold: Hold | None = None

    def take(self, take: Callable[[float], _T], timeout: float) -> _T:
        """``take(0.0)`` (what is ready now, fetched inline) under a new hold, kept when it took something
        (a non-empty list, an iterator); else ``take(timeout)``, the wait without the hold (what came is
        then held from there on). Ends the previous hold first."""
        self.end()
        hold = Hold(self._at_most_s)
        try:
            got = take(0.0)
            if not got and timeout > 0:
                hold.end()
                got = take(timeout)
                if got:
                    hold = Hold(self._at_most_s)
        except BaseException:
            hold.end()
            raise
        if got:
            self._hold = hold
        else:
            hold.end()
        return got

    def end(self) -> None:
        """End the current hold (the caller came back, left the loop or closed the stream; any thread)."""
        hold, self._hold = self._hold, None
        if hold is not None:
            hold.end()
