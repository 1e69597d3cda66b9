"""Holding off Python's cyclic garbage collector while a client answer of many short-lived objects is read.

A large client answer (a ``describe_topics`` of 12,000 partitions: about 74,000 Python objects, made at once
on the client's thread when the answer arrives) lives for a fraction of a second. When the collector's young
passes run meanwhile, they find it alive and move it to the oldest generation; that generation's growth
then sets off full collections, which stop every thread of the process for as long as it takes to walk every
object (0.2-0.9 s at 36,000 splits, measured, once or more every discovery round). With the collector held
off while the answer is read, the objects go the way short-lived objects go, by reference counting, and no
pass sees them: nothing is lost, a collection that came due meanwhile runs at the next allocation after.

:func:`collector_held` holds it off for at most ``at_most_s`` (a cluster that answers slowly does not keep
it off longer: the hold ends at the next :meth:`Hold.check`). Holds of several threads nest: the collector
is re-enabled when the last one ends, and only if it was enabled when the first began (an application
that disabled it keeps it disabled). Holds that overlap one another without end (many clusters) do not keep
it off for more than :data:`CONTINUOUS_AT_MOST_S` in a row: it is then on until every open hold has ended.

A column taker holds it for each batch (:meth:`~multicluster_source.runtime.core._delivery.Delivery.columns`):
the client's messages live from ``consume()`` to the end of the Arrow build, and the young passes they set
off (two or three a batch of 2,000, promoting it to older generations, whose growth sets off full
collections) took 14-15 % of a column drain's time, measured. When the last hold ends and the young
generation is due (other threads allocated meanwhile), its pass runs at once (:func:`_collect_if_due`):
back-to-back holds put off no other thread's collections for longer than a hold.

Threads: any; the module keeps one count of open holds under a lock.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["CONTINUOUS_AT_MOST_S", "Hold", "collector_held"]

CONTINUOUS_AT_MOST_S = 2.0
"""The collector is never held off longer than this in a row, however holds overlap."""

_now = time.monotonic
_lock = threading.Lock()
_open = 0  # holds open now
_disabled_by_us = False  # the first hold found the collector enabled and disabled it
_disabled_at = 0.0


def _begin() -> None:
    global _open, _disabled_by_us, _disabled_at
    with _lock:
        if _open == 0:
            _disabled_by_us = gc.isenabled()
            if _disabled_by_us:
                gc.disable()
                _disabled_at = _now()
        _open += 1
        _cap_locked()


def _cap_locked() -> None:
    global _disabled_by_us
    if _disabled_by_us and _now() - _disabled_at > CONTINUOUS_AT_MOST_S:
        _disabled_by_us = False  # on until every open hold has ended
        gc.enable()


def _end() -> None:
    global _open, _disabled_by_us
    with _lock:
        _open -= 1
        if not (_open == 0 and _disabled_by_us):
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


class Hold:
    """One open hold of the collector (see :func:`collector_held`)."""

    def __init__(self, at_most_s: float) -> None:
        self._until = _now() + at_most_s
        self._held = True
        _begin()

    @property
    def held(self) -> bool:
        """Whether this hold still counts (it ends after ``at_most_s`` at the next :meth:`check`)."""
        return self._held

    def check(self) -> None:
        """End the hold when its time is up (call it before and between waits)."""
        if self._held and _now() >= self._until:
            self.end()
        with _lock:
            _cap_locked()

    def end(self) -> None:
        """End the hold now (idempotent)."""
        if self._held:
            self._held = False
            _end()


@contextmanager
def collector_held(at_most_s: float) -> Iterator[Hold]:
    """Hold off the cyclic garbage collector for the block, or until ``at_most_s`` have passed and
    :meth:`Hold.check` is called, whichever comes first."""
    hold = Hold(at_most_s)
    try:
        yield hold
    finally:
        hold.end()
