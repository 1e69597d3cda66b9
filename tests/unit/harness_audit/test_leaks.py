"""The leak checks of long tests (``harness.leaks``) and the chaos soak's leak report, on made-up facts:
each kind of leak is named, and a clean close is not."""

from __future__ import annotations

import threading

from harness.leaks import (
    ProcessFacts,
    RunHealth,
    leak_report,
    leaks_after_close,
    memory_growth,
    settle_after_close,
)


def facts(
    fds: int = 10, rdk_clients: int = 0, rdk_threads: int = 0, mcs: tuple[str, ...] = (), rss: float = 50.0
) -> ProcessFacts:
    return ProcessFacts(
        rss_mb=rss, fds=fds, rdk_clients=rdk_clients, rdk_threads=rdk_threads, mcs_threads=mcs
    )


def test_a_clean_close_leaves_nothing() -> None:
    before = facts(fds=10, rdk_clients=1, rdk_threads=8, mcs=("mcs-old",))
    assert leaks_after_close(before, facts(fds=11, rdk_clients=1, rdk_threads=8, mcs=("mcs-old",))) == []


def test_threads_clients_and_descriptors_left_after_close_are_named() -> None:
    before = facts(fds=10)
    after = facts(fds=13, rdk_clients=2, rdk_threads=16, mcs=("mcs-commit-east", "mcs-reader-s-0"))
    problems = leaks_after_close(before, after)
    assert problems == [
        "2 mcs- thread(s) still alive after close: ['mcs-commit-east', 'mcs-reader-s-0']",
        "2 librdkafka client(s) not closed (rdk:main threads 0 -> 2)",
        "file descriptors 10 -> 13 after close (slack 2)",
    ]
    assert leaks_after_close(before, facts(rdk_threads=3)) == ["librdkafka threads 0 -> 3 after close"]


def test_the_facts_of_this_process_see_a_new_mcs_thread_and_settle_when_it_ends() -> None:
    before = ProcessFacts.now()
    done = threading.Event()
    thread = threading.Thread(target=done.wait, name="mcs-test-leak")
    thread.start()
    try:
        during = ProcessFacts.now()
        assert "mcs-test-leak" in during.mcs_threads
        assert during.fds > 0 and during.rss_mb > 0
        assert leaks_after_close(before, settle_after_close(before, timeout=0.3)) != []
    finally:
        done.set()
        thread.join()
    assert leaks_after_close(before, settle_after_close(before, timeout=5.0)) == []
    assert ProcessFacts.from_dict(before.as_dict()) == before


def test_memory_that_levels_off_is_bounded_and_memory_that_keeps_climbing_is_not() -> None:
    flat = [(float(t), 60.0 + min(t, 20)) for t in range(0, 120, 2)]  # buffers fill, then flat
    verdict = memory_growth(flat)
    assert verdict is not None and verdict.bounded, verdict
    climbing = [(float(t), 60.0 + t) for t in range(0, 120, 2)]  # 1 MB a second
    verdict = memory_growth(climbing)
    assert verdict is not None and not verdict.bounded
    assert "GROWING" in verdict.describe()
    late_backlog = [(float(t), 60.0 + (40 if t > 90 else 0)) for t in range(0, 120, 2)]
    verdict = memory_growth(late_backlog)
    assert verdict is not None and verdict.bounded, "one rise at the end is a backlog, not a leak"
    assert memory_growth([(float(t), 60.0 + t) for t in range(0, 40, 2)]) is None, "too short to judge"


def test_the_soak_leak_report_judges_the_last_run_after_close_and_each_long_runs_memory() -> None:
    wall0 = 1000.0
    killed = RunHealth(0, facts(), [(wall0 + t, facts(rss=60.0 + t)) for t in range(0, 100, 2)])
    last = RunHealth(1, facts(), [(wall0 + 100 + t, facts(rss=70.0)) for t in range(0, 30, 2)], facts())
    report = leak_report([killed, last], [20.0, 95.0], wall0)
    assert [start for start, _peak in report.windows] == [0.0, 20.0, 95.0]
    assert report.windows[0][1] == 78.0  # run 0's samples before the first fault
    assert [run for run, _v in report.memory] == [0], "run 1 is too short to judge"
    assert report.problems == [f"run 0: {report.memory[0][1].describe()}"]
    assert "GROWING in every third" in report.summary()
    unreported = leak_report([RunHealth(0, facts())], [], wall0)
    assert unreported.problems == ["run 0 did not report its process after closing its stream"]
