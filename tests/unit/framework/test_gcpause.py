"""Holds of the garbage collector nest across threads, end in time, and keep an application's choice."""

from __future__ import annotations

import gc
import threading

import pytest

from harness.scenario import wait_for
from multicluster_source.framework import _gcpause
from multicluster_source.framework._gcpause import Hold, TakerHold, collector_held


def test_holds_nest_and_the_last_one_turns_it_back_on() -> None:
    assert gc.isenabled()
    outer = Hold(60.0)
    with collector_held(60.0):
        assert not gc.isenabled()
    assert not gc.isenabled()  # the outer hold is still open
    outer.end()
    outer.end()  # idempotent
    assert gc.isenabled()


def test_a_hold_ends_at_the_first_check_after_its_time() -> None:
    with collector_held(0.0) as hold:
        assert not gc.isenabled() and hold.held
        hold.check()
        assert gc.isenabled() and not hold.held
    assert gc.isenabled()


def test_an_application_that_disabled_the_collector_keeps_it_disabled() -> None:
    gc.disable()
    try:
        with collector_held(60.0):
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_holds_of_many_threads_leave_it_enabled() -> None:
    start = threading.Barrier(8)

    def work() -> None:
        start.wait()
        for _ in range(200):
            with collector_held(60.0):
                pass

    threads = [threading.Thread(target=work, name=f"hold-{i}") for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert gc.isenabled()


def test_overlapping_holds_do_not_keep_it_off_longer_than_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(_gcpause, "_now", lambda: now[0])
    first = Hold(60.0)
    for _ in range(5):  # a new hold opens before the last one ends, again and again
        now[0] += 1.0
        following = Hold(60.0)
        first.end()
        first = following
        if now[0] - 1000.0 > _gcpause.CONTINUOUS_AT_MOST_S:
            assert gc.isenabled()
    assert gc.isenabled()  # on while holds are still open
    first.end()
    assert gc.isenabled()
    with collector_held(60.0):  # every hold ended: the next one holds it off again
        assert not gc.isenabled()


def test_a_young_pass_that_came_due_during_a_hold_runs_as_it_ends() -> None:
    threshold = gc.get_threshold()[0]
    first = Hold(60.0)
    # objects the collector tracks, kept alive: a young pass is due
    kept: list[list[int]] = [[] for _ in range(threshold * 3)]
    assert gc.get_count()[0] > threshold
    first.end()
    following = Hold(60.0)  # the next hold at once, nothing allocated in between (a column taker's next part)
    young = gc.get_count()[0]
    following.end()
    assert young < threshold  # it ran as the first hold ended, not at some allocation while none is held
    assert len(kept) == threshold * 3


def test_back_to_back_holds_leave_the_older_generations_their_turn() -> None:
    threshold = gc.get_threshold()[0]
    passes: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            passes.append(info["generation"])

    kept: list[object] = []
    gc.callbacks.append(seen)
    try:
        for _ in range(gc.get_threshold()[1] * 3):  # a taker's parts, each allocating more than a young pass
            hold = Hold(60.0)
            kept.append([[] for _ in range(threshold * 2)])
            hold.end()
    finally:
        gc.callbacks.remove(seen)
    assert passes.count(0) >= gc.get_threshold()[1] and max(passes) >= 1  # not young passes alone


def test_a_hold_nobody_checks_or_ends_ends_by_itself_when_its_time_is_up() -> None:
    hold = Hold(0.05)  # a caller that took records and never came back
    assert not gc.isenabled()
    assert wait_for(lambda: gc.isenabled() and not hold.held)
    watchdogs = [t for t in threading.enumerate() if t.name == "mcs-gc-watch"]
    assert len(watchdogs) == 1 and watchdogs[0].daemon
    hold.end()  # its owner ends it later: nothing more happens
    assert gc.isenabled()
    with collector_held(60.0):
        assert not gc.isenabled()


def test_the_watchdog_thread_ends_once_no_hold_is_open_and_the_next_hold_starts_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def watchdogs() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "mcs-gc-watch"]

    monkeypatch.setattr(_gcpause, "_WATCH_IDLE_S", 0.05)
    with collector_held(60.0):
        pass
    assert wait_for(lambda: not watchdogs())
    hold = Hold(0.05)
    assert len(watchdogs()) == 1
    assert wait_for(lambda: gc.isenabled() and not hold.held)


def test_the_cap_applies_to_a_hold_that_nobody_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_gcpause, "CONTINUOUS_AT_MOST_S", 0.05)
    with collector_held(60.0):
        assert not gc.isenabled()
        assert wait_for(gc.isenabled)  # the watchdog turned it on; the hold still counts
    assert gc.isenabled()


class _Taker:
    """Takes what ``ready`` holds; waits ``timeout`` for what ``later`` holds; notes the collector's state."""

    def __init__(self, ready: list[int], later: list[int] | None = None) -> None:
        self.ready, self.later = ready, later or []
        self.seen: list[tuple[float, bool]] = []

    def __call__(self, timeout: float) -> list[int]:
        self.seen.append((timeout, gc.isenabled()))
        if self.ready:
            got, self.ready = self.ready, []
            return got
        if timeout > 0:
            got, self.later = self.later, []
            return got
        return []


def test_a_taker_hold_keeps_the_collector_off_until_the_caller_comes_back() -> None:
    held = TakerHold(60.0)
    taker = _Taker([1, 2])
    assert held.take(taker, 1.0) == [1, 2]
    assert taker.seen == [(0.0, False)]  # fetched under the hold, no wait
    assert not gc.isenabled()  # the caller has the records
    assert held.take(taker, 0.0) == []  # it came back: nothing ready, nothing held
    assert gc.isenabled()
    held.take(_Taker([3]), 1.0)
    held.end()
    held.end()
    assert gc.isenabled()


def test_a_taker_hold_is_never_held_while_the_caller_waits() -> None:
    held = TakerHold(60.0)
    taker = _Taker([], later=[7])
    assert held.take(taker, 0.5) == [7]
    assert taker.seen == [(0.0, False), (0.5, True)]
    assert not gc.isenabled()  # what came during the wait is held from there on
    held.end()
    nothing = _Taker([])
    assert held.take(nothing, 0.5) == [] and nothing.seen == [(0.0, False), (0.5, True)]
    assert gc.isenabled()


def test_a_taker_that_raises_leaves_nothing_held() -> None:
    def failing(timeout: float) -> list[int]:
        raise ValueError("a deserializer failed")

    held = TakerHold(60.0)
    with pytest.raises(ValueError):
        held.take(failing, 1.0)
    assert gc.isenabled()


def test_a_taker_hold_keeps_an_applications_disabled_collector_disabled() -> None:
    gc.disable()
    try:
        held = TakerHold(60.0)
        held.take(_Taker([1]), 1.0)
        held.end()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_closing_source_stops_the_watchdog_unless_a_hold_is_open() -> None:
    def watchdogs() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "mcs-gc-watch"]

    hold = Hold(60.0)
    _gcpause.stop_watchdog()
    assert len(watchdogs()) == 1  # another source holds it off now: the watchdog stays
    hold.end()
    _gcpause.stop_watchdog()
    assert watchdogs() == []
    with collector_held(60.0):
        assert len(watchdogs()) == 1  # the next hold starts another
