"""The one clock (``multicluster_source._clock``): a manual clock stands still until a test advances it, and
each of the periodic parts that take it (the coordinator's timers, the metadata watcher's polls, a reader's
heartbeat, the stream's checkpoint interval) moves with it: these tests wait on events, never for time to
pass. The reader's idle-fetcher window is driven the same way in ``tests/unit/reader/test_idle_fetchers.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from multicluster_source import MultiClusterKafkaSource
from multicluster_source._clock import ManualClock, SystemClock, clock, use
from multicluster_source.metadata._watch import DirectoryWatcher
from multicluster_source.runtime.core._handoff import Handoff, PositionTracker
from multicluster_source.runtime.core._local import Coordinator, ReaderRunner
from multicluster_source.runtime.pull._status import fail_silent_readers
from multicluster_source.testing import InMemoryMetadataService

# What "did not happen" waits for in real time: the parts under test poll at most every 0.5 s.
QUIET_S = 0.3


@pytest.fixture
def manual() -> Iterator[ManualClock]:
    with use(ManualClock()) as current:
        yield current


def test_a_manual_clock_stands_still_until_advanced_and_wakes_its_waiters() -> None:
    manual = ManualClock(start=5.0)
    woken = threading.Event()
    manual.on_advance(woken.set)
    assert manual.monotonic() == manual.monotonic() == 5.0
    manual.advance(2.5)
    assert manual.monotonic() == 7.5 and woken.is_set()
    with pytest.raises(ValueError, match="does not go back"):
        manual.advance(-1.0)


def test_use_makes_a_clock_current_and_restores_the_one_before() -> None:
    assert isinstance(clock(), SystemClock)
    manual = ManualClock()
    with use(manual):
        assert clock() is manual
    assert isinstance(clock(), SystemClock)


def test_the_coordinators_timers_run_when_the_clock_reaches_them(manual: ManualClock) -> None:
    coordinator = Coordinator("clock", 1, PositionTracker(), on_fail=lambda exc: None)
    ran = threading.Event()
    coordinator.start()
    try:
        coordinator.run_in_coordinator(ran.set, delay=60.0)
        coordinator.call_sync(lambda: None)  # the timer is queued
        manual.advance(59.0)
        assert not ran.wait(QUIET_S)
        manual.advance(1.0)
        assert ran.wait(5.0)
    finally:
        coordinator.stop()


def test_the_metadata_watcher_polls_when_the_clock_says_so(manual: ManualClock, tmp_path: Path) -> None:
    state = {"version": 1}
    changed = threading.Event()
    watcher = DirectoryWatcher(
        tmp_path,
        ["streams.yaml"],
        lambda: state["version"],
        changed.set,
        poll_interval=30.0,
        use_events=False,
    )
    watcher.start()
    try:
        state["version"] = 2  # a change no file-system event reports: only a poll finds it
        manual.advance(29.0)
        assert not changed.wait(QUIET_S)
        manual.advance(1.0)
        assert changed.wait(5.0)
    finally:
        watcher.close()


def test_a_reader_that_stops_looping_fails_when_the_clock_passes_the_heartbeat_timeout(
    manual: ManualClock,
) -> None:
    coordinator = Coordinator("clock", 1, PositionTracker(), on_fail=lambda exc: None)
    runner = ReaderRunner(0, "clock", coordinator, Handoff(4), on_fail=lambda exc: None)
    runner.reader = object()  # type: ignore[assignment]  # never started: its thread never loops
    coordinator.start()
    try:
        manual.advance(10.0)
        fail_silent_readers([runner], heartbeat_s=10.0)
        assert runner.failed is None and runner.silent_s() == 10.0
        manual.advance(0.5)
        fail_silent_readers([runner], heartbeat_s=10.0)
        assert isinstance(runner.failed, TimeoutError)
    finally:
        coordinator.stop()


def test_the_streams_periodic_checkpoint_comes_when_the_clock_reaches_the_interval(
    manual: ManualClock, tmp_path: Path
) -> None:
    source = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(InMemoryMetadataService())
        .set_stream_ids(["orders"])
        .set_property("partition.discovery.interval.ms", "-1")
        # the readers' threads loop in real time: a jump of the clock must not look like a silent reader
        .set_property("reader.heartbeat.timeout.ms", "3600000")
        .build()
    )
    ckpt = tmp_path / "ckpt"
    with source.open(checkpoint_dir=str(ckpt), checkpoint_interval=60.0) as stream:
        stream.poll(timeout=0.05)
        manual.advance(59.0)
        stream.poll(timeout=0.05)
        assert sorted(ckpt.glob("chk-*.json")) == []
        manual.advance(1.0)
        stream.poll(timeout=0.05)  # due: taken in the background
        done = threading.Event()

        def written() -> None:
            while not list(ckpt.glob("chk-*.json")) and not done.is_set():
                done.wait(0.01)
            done.set()

        waiter = threading.Thread(target=written, name="test-checkpoint-written", daemon=True)
        waiter.start()
        assert done.wait(10.0) and list(ckpt.glob("chk-*.json"))
