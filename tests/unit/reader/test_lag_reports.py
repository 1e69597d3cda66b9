"""Lag reports cost what moved since the last one plus a bounded slice of the other partitions.

What a user sees is the ``current_offset`` and ``records_lag`` gauges; these tests read them from a real
``SourceMetrics`` and count the watermark lookups a fake consumer answers from its cache.
"""

from __future__ import annotations

import math
import time
from typing import Any

from confluent_kafka import Message, TopicPartition
from prometheus_client import CollectorRegistry

from harness.fake_consumer import FakeConsumer, FakeReaderContext
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.ops._metrics import SourceMetrics
from multicluster_source.reader import _lag
from multicluster_source.reader._batches import SplitProgress
from multicluster_source.reader._fetcher import ClusterFetcher
from multicluster_source.reader._lag import LagReports
from multicluster_source.reader._settings import FetchSettings


class _Gauges:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.metrics = SourceMetrics(self.registry, "s")

    def _get(self, name: str, topic: str, partition: int) -> float | None:
        labels = {"cluster": "east", "topic": topic, "partition": str(partition)}
        return self.registry.get_sample_value(f"multicluster_source_{name}", labels)

    def current(self, topic: str, partition: int) -> float | None:
        return self._get("current_offset", topic, partition)

    def lag(self, topic: str, partition: int) -> float | None:
        return self._get("records_lag", topic, partition)


def _assignment(n: int, topic: str = "t") -> tuple[dict[tuple[str, int], SplitProgress], list[Any]]:
    progress = {(topic, p): SplitProgress(KafkaPartitionSplit("east", topic, p, 0)) for p in range(n)}
    return progress, [TopicPartition(t, p) for t, p in progress]


def _new_reports(
    n: int, slice_size: int
) -> tuple[LagReports, FakeConsumer, _Gauges, dict[tuple[str, int], SplitProgress]]:
    """n partitions of topic t, added and reported until every one has its gauges (as a fetcher does when
    splits come: a slice of them a report)."""
    gauges = _Gauges()
    progress, tps = _assignment(n)
    reports = LagReports("east", gauges.metrics, slice_size)
    reports.moved(progress)
    reports.assigned(tps, progress)
    consumer = FakeConsumer({"t": n})
    for _ in range(math.ceil(n / slice_size)):
        reports.report(consumer, progress)
    return reports, consumer, gauges, progress


def test_added_splits_are_reported_a_slice_at_a_time_until_all_are() -> None:
    gauges = _Gauges()
    progress, tps = _assignment(50)
    reports = LagReports("east", gauges.metrics, 10)
    reports.moved(progress)
    reports.assigned(tps, progress)
    consumer = FakeConsumer({"t": 50})
    shown: list[int] = []
    for _ in range(5):
        assert reports.report(consumer, progress) <= 20  # the added ones due and one slice of the ring
        shown.append(sum(1 for p in range(50) if gauges.current("t", p) == 0))
    assert shown[-1] == 50 and shown == sorted(shown)
    assert all(gauges.lag("t", p) == 0 for p in range(50))


def test_moved_partitions_show_their_position_and_lag_at_the_next_report() -> None:
    reports, consumer, gauges, progress = _new_reports(100, 10)
    consumer.highs = {("t", p): 40 for p in range(100)}
    for p in (3, 57, 98):
        progress[("t", p)].next_offset = 25
    reports.moved([("t", 3), ("t", 57), ("t", 98)])
    reports.report(consumer, progress)
    for p in (3, 57, 98):
        assert (gauges.current("t", p), gauges.lag("t", p)) == (25, 15)


def test_an_unmoved_partition_whose_high_watermark_grew_is_refreshed_within_ceil_n_over_slice_reports() -> (
    None
):
    n, slice_size = 100, 30
    reports, consumer, gauges, progress = _new_reports(n, slice_size)
    consumer.highs = {("t", p): 7 for p in range(n)}  # records arrived; nothing was read (paused, say)
    rounds = math.ceil(n / slice_size)
    refreshed_after: list[int] = []
    for _ in range(rounds):
        reports.report(consumer, progress)
        refreshed_after.append(sum(1 for p in range(n) if gauges.lag("t", p) == 7))
    assert refreshed_after == [30, 60, 90, 100]  # a slice a report, round robin: every partition in 4
    assert all(gauges.current("t", p) == 0 for p in range(n))


def test_a_report_with_few_moved_partitions_among_many_looks_up_those_and_one_slice() -> None:
    n = 5000
    reports, consumer, gauges, progress = _new_reports(n, _lag.LAG_SLICE)
    before = consumer.cached_lookups
    assert all(gauges.current("t", p) == 0 for p in (0, 1, n // 2, n - 1))  # (each look-up walks them all)
    moved = range(n - 10, n)  # not in the ring's next slice (0-999)
    for p in moved:
        progress[("t", p)].next_offset = 1
    reports.moved(("t", p) for p in moved)
    reports.report(consumer, progress)
    assert consumer.cached_lookups - before == 10 + _lag.LAG_SLICE  # not 5000
    assert gauges.current("t", n - 1) == 1


def test_moved_partitions_in_the_slice_are_looked_up_once() -> None:
    reports, consumer, _gauges, progress = _new_reports(20, 10)
    before = consumer.cached_lookups
    reports.moved([("t", 0), ("t", 1), ("t", 13)])  # the ring went round once: 0-9 is its next slice
    assert reports.report(consumer, progress) == 11
    assert consumer.cached_lookups - before == 11


def test_an_unknown_high_watermark_leaves_the_lag_as_it_was_and_a_failed_lookup_is_skipped() -> None:
    reports, consumer, gauges, progress = _new_reports(3, 10)
    consumer.highs = {("t", 0): -1001}
    progress[("t", 0)].next_offset = 4
    reports.moved([("t", 0)])
    reports.report(consumer, progress)
    assert (gauges.current("t", 0), gauges.lag("t", 0)) == (4, 0)

    class _Failing(FakeConsumer):
        def get_watermark_offsets(self, tp: Any, timeout: float = -1, cached: bool = False) -> Any:
            if tp.partition == 1:
                raise RuntimeError("not known")
            return super().get_watermark_offsets(tp, timeout, cached)

    failing = _Failing({"t": 3})
    failing.highs = {("t", 2): 9}
    assert reports.report(failing, progress) == 2
    assert gauges.lag("t", 2) == 9


def test_partitions_that_went_are_forgotten_and_their_gauges_not_set_again() -> None:
    reports, consumer, gauges, progress = _new_reports(10, 10)
    reports.moved([("t", 1), ("t", 8)])
    gauges.metrics.remove_topic("east", "t")  # as the fetcher does when the topic is removed
    progress.clear()
    reports.assigned([], progress)
    before = consumer.cached_lookups
    assert reports.report(consumer, progress) == 0
    assert consumer.cached_lookups == before
    assert gauges.current("t", 1) is None and gauges.current("t", 8) is None

    progress, tps = _assignment(5, "u")  # another topic comes: the ring is its partitions now
    reports.moved(progress)
    reports.assigned(tps, progress)
    assert reports.report(consumer, progress) == 5


# --------------------------------------------------------------------------- through a fetcher


class _Feed(FakeConsumer):
    """Partitions of topic t; :meth:`feed` makes records of one partition ready for the next ``consume``."""

    def __init__(self, n: int) -> None:
        super().__init__({"t": n})
        self.ready: list[Any] = []
        self.positions: dict[tuple[str, int], int] = {}

    def feed(self, partition: int, count: int) -> None:
        with self.lock:
            start = self.positions.get(("t", partition), 0)
            self.ready.extend(
                Message(topic="t", partition=partition, offset=o, key=None, value=b"v", timestamp=(1, o))
                for o in range(start, start + count)
            )
            self.highs[("t", partition)] = start + count + 2  # two more records than were read

    def consume(self, n: int, timeout: float) -> list[Any]:
        with self.lock:
            out, self.ready = self.ready[:n], self.ready[n:]
            for m in out:
                self.positions[(m.topic(), m.partition())] = m.offset() + 1
        if not out:
            time.sleep(timeout)
        return out

    def position(self, tps: list[Any]) -> list[Any]:
        with self.lock:
            return [
                TopicPartition(t.topic, t.partition, self.positions.get((t.topic, t.partition), -1001))
                for t in tps
            ]


def test_a_fetcher_reports_the_partitions_that_moved_and_a_slice_of_the_others(monkeypatch: Any) -> None:
    monkeypatch.setattr(_lag, "LAG_SLICE", 50)
    n = 2000
    feed = _Feed(n)
    gauges = _Gauges()
    settings = FetchSettings("s", 0, 100, gauges.metrics, poll_timeout_s=0.01, lag_interval_s=0.01)
    fetcher = ClusterFetcher("east", {}, settings, FakeReaderContext(), lambda ids: None, consumer=feed)
    per_report: list[int] = []
    report = fetcher._lag.report

    def counted(consumer: Any, progress: Any) -> int:
        done = report(consumer, progress)
        per_report.append(done)
        return done

    monkeypatch.setattr(fetcher._lag, "report", counted)
    fetcher.start()
    try:
        fetcher.add_splits([KafkaPartitionSplit("east", "t", p, 0) for p in range(n)])
        _until(lambda: sum(per_report) >= 2 * n)  # every added split in turn (and the ring once round)
        assert all(gauges.current("t", p) == 0 for p in (0, 1, n // 2, n - 2, n - 1))
        feed.feed(1234, 10)
        _until(lambda: gauges.current("t", 1234) == 10)
        assert gauges.lag("t", 1234) == 2
        reports = list(per_report)
    finally:
        fetcher.stop()
    assert reports and all(
        k <= 2 * 50 for k in reports
    )  # at most a slice due and one of the ring, never 2,000


def _until(condition: Any) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "condition not met within 10 s"
        time.sleep(0.01)
