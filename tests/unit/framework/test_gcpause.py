"""Holds of the garbage collector nest across threads, end in time, and keep an application's choice."""

from __future__ import annotations

import gc
import threading

import pytest

from multicluster_source.framework import _gcpause
from multicluster_source.framework._gcpause import Hold, collector_held


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
    _gcpause._begin()
    # objects the collector tracks, kept alive: a young pass is due
    kept: list[list[int]] = [[] for _ in range(threshold * 3)]
    assert gc.get_count()[0] > threshold
    _gcpause._end()
    _gcpause._begin()  # the next hold at once, nothing allocated in between (a column taker's next part)
    young = gc.get_count()[0]
    _gcpause._end()
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
            _gcpause._begin()
            kept.append([[] for _ in range(threshold * 2)])
            _gcpause._end()
    finally:
        gc.callbacks.remove(seen)
    assert passes.count(0) >= gc.get_threshold()[1] and max(passes) >= 1  # not young passes alone
