"""Inline fetching: a taker that finds the hand-off empty runs the fetcher's step on its own thread.

The fetcher here reads one partition of a fake consumer that hands out real ``confluent_kafka.Message``
objects in order and notes which thread took each batch; the hand-off is the real one.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Message, TopicPartition

from harness.fake_consumer import FakeConsumer, FakeReaderContext
from multicluster_source.framework._columns import mark_columns
from multicluster_source.framework._interfaces import RecordBatch
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.reader._batches import SplitProgress
from multicluster_source.reader._fetcher import ClusterFetcher
from multicluster_source.reader._settings import FetchSettings
from multicluster_source.runtime.core._handoff import Handoff


class _Metrics:
    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


class _Feed(FakeConsumer):
    """Partition ``t/0`` holding ``n`` messages; ``consume``/``poll`` hand them out in order."""

    def __init__(self, n: int) -> None:
        super().__init__({"t": 1})
        self.waiting = deque(
            Message(topic="t", partition=0, offset=i, key=None, value=b"%d" % i, timestamp=(1, i))
            for i in range(n)
        )
        self.next_offset = -1001
        self.takers: list[str] = []  # the thread that took each non-empty batch
        self.sizes: list[tuple[str, int]] = []  # the thread and size of each non-empty batch
        self.fail_on: str | None = None  # consume raises on this thread
        self.fetch_thread_cost = 0.0  # seconds a batch takes on the fetch thread (a busy machine)

    def consume(self, n: int, timeout: float) -> list[Any]:
        if threading.current_thread().name == self.fail_on:
            raise RuntimeError("broken consume")
        with self.lock:
            if self.count("close"):
                raise AssertionError("consume on a closed consumer")
            out = [self.waiting.popleft() for _ in range(min(n, len(self.waiting)))]
            if out:
                self.next_offset = (out[-1].offset() or 0) + 1
                self.takers.append(threading.current_thread().name)
                self.sizes.append((threading.current_thread().name, len(out)))
        if not out:
            time.sleep(timeout)
        elif threading.current_thread().name.startswith("mcs-fetch-"):
            time.sleep(self.fetch_thread_cost)
        return out

    def count(self, call: str) -> int:
        return sum(1 for c, _ in self.calls if c == call)

    def poll(self, timeout: float) -> Any:
        got = self.consume(1, 0)
        if got:
            return got[0]
        time.sleep(min(timeout, 0.01))
        return None

    def position(self, tps: list[Any]) -> list[Any]:
        return [TopicPartition(tp.topic, tp.partition, self.next_offset) for tp in tps]


def _fetcher(
    feed: _Feed, handoff: Handoff, cluster: str = "east"
) -> tuple[ClusterFetcher, FakeReaderContext]:
    context = FakeReaderContext(handoff)
    settings = FetchSettings("src", 0, 100, _Metrics(), poll_timeout_s=0.05)
    fetcher = ClusterFetcher(cluster, {}, settings, context, lambda ids: None, consumer=feed)
    fetcher.start()
    fetcher.add_splits([KafkaPartitionSplit(cluster, "t", 0, 0)])
    return fetcher, context


def _take_all(handoff: Handoff, n: int, pause: Callable[[int], float] = lambda i: 0.0) -> list[int]:
    offsets: list[int] = []
    deadline = time.monotonic() + 30
    while len(offsets) < n and time.monotonic() < deadline:
        batch = handoff.get(0.2)
        if batch is not None:
            offsets += [m.offset() for m in batch.messages]
            time.sleep(pause(len(offsets)))
    return offsets


def test_a_taker_that_keeps_coming_fetches_on_its_own_thread_in_order() -> None:
    feed, handoff = _Feed(20_000), Handoff(4)
    fetcher, context = _fetcher(feed, handoff)
    try:
        offsets = _take_all(handoff, 20_000)
    finally:
        fetcher.stop()
    assert offsets == list(range(20_000))
    mine = feed.takers.count(threading.current_thread().name)
    assert mine > len(feed.takers) // 2, f"only {mine} of {len(feed.takers)} batches were fetched inline"
    assert context.errors == []


@pytest.mark.parametrize("columns", [False, True])
def test_a_column_taker_fetches_twice_the_batch_size_inline_a_record_taker_the_batch_size(
    columns: bool,
) -> None:
    # a column taker's messages die with the Arrow build: larger fetches halve the per-batch costs
    feed, handoff = _Feed(20_000), Handoff(4)
    fetcher, _context = _fetcher(feed, handoff)  # reader.batch.max.records 100
    before = mark_columns(columns)
    try:
        offsets = _take_all(handoff, 20_000)
    finally:
        mark_columns(before)
        fetcher.stop()
    assert offsets == list(range(20_000))
    me = threading.current_thread().name
    inline = [n for taker, n in feed.sizes if taker == me]
    assert inline and max(inline) == (200 if columns else 100)
    assert (
        max((n for taker, n in feed.sizes if taker != me), default=0) <= 100
    )  # the fetch thread's own stay as set


def test_a_slow_taker_gets_batches_fetched_ahead_then_fetches_itself_without_losing_order() -> None:
    feed, handoff = _Feed(5_000), Handoff(4)
    feed.fetch_thread_cost = 0.005
    fetcher, _context = _fetcher(feed, handoff)
    try:  # slow for the first 1,000 records (the fetch thread fills the buffer meanwhile), then faster
        offsets = _take_all(handoff, 5_000, lambda taken: 0.1 if taken < 1_000 else 0.0)
    finally:
        fetcher.stop()
    assert offsets == list(range(5_000))
    fetch_thread = [t for t in feed.takers if t.startswith("mcs-fetch-")]
    assert fetch_thread and len(fetch_thread) < len(feed.takers), "both threads should have fetched"


def test_a_taker_that_keeps_coming_fetches_itself_also_when_two_fetch_threads_filled_the_buffer() -> None:
    # Two clusters' fetch threads fill the hand-off while the taker is away; once it keeps coming, they leave
    # fetching to it (each batch it finds waiting holds them), though together they could keep the buffer
    # from ever emptying, so that it never stepped itself (the column path's slow drains, two clusters).
    feeds = {c: _Feed(40_000) for c in ("east", "west")}
    handoff = Handoff(4)
    fetchers = [_fetcher(feed, handoff, cluster)[0] for cluster, feed in feeds.items()]
    got: dict[str, list[int]] = {c: [] for c in feeds}
    try:
        time.sleep(0.3)  # the taker is away: the fetch threads fetch ahead
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < 80_000 and time.monotonic() < deadline:
            batch = handoff.get(0.2)
            if batch is not None:
                got[batch.cluster_id] += [m.offset() for m in batch.messages]
                time.sleep(
                    0.0002
                )  # the taker's work on a batch: the fetch threads refill the buffer meanwhile
    finally:
        for fetcher in fetchers:
            fetcher.stop()
    assert got == {c: list(range(40_000)) for c in feeds}
    takers = [t for feed in feeds.values() for t in feed.takers]
    mine = takers.count(threading.current_thread().name)
    assert mine > len(takers) // 2, f"only {mine} of {len(takers)} batches were fetched inline"


def test_a_failing_inline_fetch_fails_the_reader_not_the_taker() -> None:
    feed, handoff = _Feed(1_000), Handoff(4)
    feed.fail_on = threading.current_thread().name
    fetcher, context = _fetcher(feed, handoff)
    try:
        deadline = time.monotonic() + 10
        while not context.errors and time.monotonic() < deadline:
            handoff.get(0.05)  # never raises: the error goes to the fetch thread
    finally:
        fetcher.stop()
    assert len(context.errors) == 1 and "broken consume" in str(context.errors[0])


class _Log(_Feed):
    """A ``_Feed`` over a log of ``n`` messages that an assign reads from its offset; a ``consume`` on the
    thread ``cut_on`` takes its messages and raises KeyboardInterrupt (a Ctrl-C arriving as it returns)."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.log = list(self.waiting)
        self.cut_on: str | None = None

    def incremental_assign(self, tps: list[Any]) -> None:
        super().incremental_assign(tps)
        with self.lock:
            self.waiting = deque(m for m in self.log if (m.offset() or 0) >= tps[0].offset)

    def consume(self, n: int, timeout: float) -> list[Any]:
        got = super().consume(n, timeout)
        if got and threading.current_thread().name == self.cut_on:
            self.cut_on = None
            raise KeyboardInterrupt
        return got


def test_a_ctrl_c_in_an_inline_fetch_reaches_the_taker_and_nothing_is_lost() -> None:
    # The taker's KeyboardInterrupt is the caller's to handle (a CLI ends cleanly), not a reader failure; the
    # messages its consume() took are read again by a consumer made at the split's position.
    first, handoff = _Log(20_000), Handoff(4)
    first.cut_on = threading.current_thread().name
    remade: list[_Log] = []

    def factory(conf: dict[str, Any]) -> _Log:
        remade.append(_Log(20_000))
        return remade[-1]

    context = FakeReaderContext(handoff)
    settings = FetchSettings("src", 0, 100, _Metrics(), poll_timeout_s=0.05, consumer_factory=factory)
    fetcher = ClusterFetcher("east", {}, settings, context, lambda ids: None, consumer=first)
    fetcher.start()
    fetcher.add_splits([KafkaPartitionSplit("east", "t", 0, 0)])
    offsets: list[int] = []
    interrupted = 0
    try:
        deadline = time.monotonic() + 30
        while len(offsets) < 20_000 and time.monotonic() < deadline:
            try:
                batch = handoff.get(0.2)
            except KeyboardInterrupt:
                interrupted += 1
                continue
            if batch is not None:
                offsets += [m.offset() for m in batch.messages]
    finally:
        fetcher.stop()
    assert interrupted == 1 and first.cut_on is None
    assert context.errors == []
    assert offsets == list(range(20_000))
    assert first.count("close") == 1 and len(remade) == 1  # made again once, at the split's position


def test_no_step_runs_on_a_stopped_fetchers_consumer() -> None:
    feed, handoff = _Feed(1_000), Handoff(4)
    fetcher, _context = _fetcher(feed, handoff)
    assert handoff.get(5.0) is not None
    fetcher.stop()
    for _ in range(3):
        handoff.get(0.0)  # the step was withdrawn: the closed consumer is not asked (it would raise)
    assert feed.count("close") == 1


def test_lent_steps_run_until_one_fetched_a_batch_and_take_turns() -> None:
    handoff = Handoff(4)
    ran: list[str] = []
    released: list[str] = []
    has_records = {"east": True, "west": True, "north": False}

    def lend(cluster: str) -> None:
        def step() -> bool:  # True: ran and found nothing
            ran.append(cluster)
            if not has_records[cluster]:
                return True
            handoff.put_now(RecordBatch(cluster, [], {}))
            return False

        handoff.lend(step, lambda: released.append(cluster))

    for cluster in ("east", "west", "north"):
        lend(cluster)
    got = [handoff.get(0.0) for _ in range(4)]
    # one batch a call (the other fetchers' batches do not wait in the buffer), each round starting after
    # the step that fetched last; north, with nothing, is passed over on the way
    assert [b.cluster_id if b else None for b in got] == ["east", "west", "east", "west"]
    assert ran == ["east", "west", "north", "east", "west"] and handoff.empty()
    has_records.update(east=False, west=False)
    assert handoff.get(0.0) is None
    assert sorted(released) == ["east", "north", "west"]  # nothing anywhere: every step released


def test_a_taker_finding_batches_waiting_holds_the_fetchers_that_lent_it_steps() -> None:
    handoff = Handoff(4)
    held: list[str] = []
    withdraw = handoff.lend(lambda: True, lambda: None, lambda: held.append("east"))
    handoff.lend(lambda: True, lambda: None)  # a fetcher without a hold
    handoff.put_now(RecordBatch("east", [], {}))
    handoff.put_now(RecordBatch("east", [], {}))
    assert (
        handoff.get(0.0, fetch=False) is not None and held == []
    )  # records in hand: fetching is not its turn
    assert handoff.get(0.0) is not None and held == ["east"]
    assert handoff.get(0.0) is None and held == ["east"]  # nothing waited: it stepped instead
    handoff.inline = False  # an asyncio taker never steps: its fetch threads fetch
    handoff.put_now(RecordBatch("east", [], {}))
    assert handoff.get(0.0) is not None and held == ["east"]
    handoff.inline = True
    withdraw()
    handoff.put_now(RecordBatch("east", [], {}))
    assert handoff.get(0.0) is not None and held == ["east"]


def _unstarted_fetcher(feed: _Feed, handoff: Handoff) -> tuple[ClusterFetcher, FakeReaderContext]:
    """A fetcher whose thread never starts (the test plays it), reading ``t/0`` of ``feed``."""
    context = FakeReaderContext(handoff)
    fetcher = ClusterFetcher("east", {}, FetchSettings("src", 0, 100, _Metrics()), context, lambda ids: None)
    split = KafkaPartitionSplit("east", "t", 0, 0)
    fetcher._consumer = feed
    fetcher._progress[split.topic_partition] = SplitProgress(split)
    fetcher._progress_changed()
    return fetcher, context


def test_an_inline_step_waits_out_the_fetch_threads_lag_report_and_fetches() -> None:
    # The report hands nothing on: a taker that gave up its step would wait for a batch that is not coming
    # (about 50 ms, once a second, before this waited for the report).
    feed, handoff = _Feed(100), Handoff(4)
    fetcher, context = _unstarted_fetcher(feed, handoff)
    fetcher._reporting = True
    fetcher._step.acquire()
    releasing = threading.Timer(0.005, fetcher._step.release)
    releasing.start()
    try:
        assert fetcher._inline(context._emit_now) is False  # it ran and handed a batch on
    finally:
        releasing.join()
    batch = handoff.get(0.0, fetch=False)
    assert batch is not None and [m.offset() for m in batch.messages] == list(range(100))


def test_an_inline_step_leaves_a_fetch_of_the_fetch_threads_own_at_once() -> None:
    feed, handoff = _Feed(100), Handoff(4)
    fetcher, context = _unstarted_fetcher(feed, handoff)
    fetcher._step.acquire()  # a fetch step: its batch comes through the hand-off
    try:
        started = time.monotonic()
        assert fetcher._inline(context._emit_now) is False
        assert time.monotonic() - started < 0.01
    finally:
        fetcher._step.release()
    assert handoff.empty() and feed.takers == []
