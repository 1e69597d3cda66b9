"""Event times of a batch and its parts, and late counting by runs: each against a plain per-record
computation (property-style), so the cheap paths keep the meaning of the obvious ones."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Message
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from harness.timestamps import Row, messages_of, msg, plain_times
from multicluster_source.framework._interfaces import RecordBatch
from multicluster_source.framework._records import records_of
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.framework._watermarks import (
    BatchEventTimes,
    WatermarkStrategy,
    count_at_or_below,
    kafka_event_times,
    late_counts,
    part_event_times,
)
from multicluster_source.ops._metrics import SourceMetrics
from multicluster_source.ops._metrics_relay import MetricsRecorder, apply_metrics
from multicluster_source.reader._batches import only_split
from multicluster_source.runtime.eventtime._watermarks import WatermarkTracker, assigned_late_counts
from multicluster_source.runtime.push._push_watermarks import worker_event_times


def plain_late(rows: list[Row], watermark: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for _p, t, ts in rows:
        if ts is not None and ts <= watermark:
            out[t] = out.get(t, 0) + 1
    return out


ROWS = st.lists(
    st.tuples(st.integers(0, 2), st.sampled_from(["a", "b"]), st.one_of(st.none(), st.integers(0, 500))),
    max_size=60,
)


def monotonous(rows: list[Row]) -> list[Row]:
    """The same rows with each split's timestamps in order (what for_monotonous_timestamps() promises)."""
    stamps: dict[tuple[int, str], list[int | None]] = {}
    for p, t, ts in rows:
        stamps.setdefault((p, t), []).append(ts)
    ordered = {k: iter(sorted(v, key=lambda x: -1 if x is None else x)) for k, v in stamps.items()}
    return [(p, t, next(ordered[(p, t)])) for p, t, _ts in rows]


@settings(max_examples=200, deadline=None)
@given(ROWS, st.data())
def test_runs_cover_the_batch_and_parts_match_their_own_computation(rows: list[Row], data: Any) -> None:
    messages = messages_of(rows)
    times = kafka_event_times("c", messages)
    assert times == plain_times(rows)
    covered = [i for _sid, a, b in times.runs for i in range(a, b)]
    assert covered == list(range(len(messages)))
    for sid, a, b in times.runs:
        assert all(f"c/{m.topic()}/{m.partition()}" == sid for m in messages[a:b])
    start = data.draw(st.integers(0, len(messages)))
    end = data.draw(st.integers(start, len(messages)))
    part = part_event_times(times, messages[start:end], start)
    assert part == plain_times(rows[start:end])
    assert [i for _sid, a, b in part.runs for i in range(a, b)] == list(range(end - start))
    one_topic = [(p * 100, "a", ts) for p, _t, ts in rows]  # partitions past 255 too: not one byte each
    for kept in (one_topic, [(p, "a", ts) for p, _t, ts in rows]):
        hinted = kafka_event_times("c", messages_of(kept), topic="a")
        assert hinted == plain_times(kept)
        assert [i for _sid, a, b in hinted.runs for i in range(a, b)] == list(range(len(kept)))
    ends = kafka_event_times("c", messages_of(monotonous(rows)), ends_only=True)
    assert ends == plain_times(monotonous(rows))
    assert part_event_times(ends, messages_of(monotonous(rows))[start:end], start).ends_only


@settings(max_examples=300, deadline=None)
@given(ROWS, st.integers(-2, 520))
def test_late_counts_match_a_plain_count(rows: list[Row], watermark: int) -> None:
    messages = messages_of(rows)
    assert late_counts(messages, kafka_event_times("c", messages), watermark) == plain_late(rows, watermark)
    # without runs (a plain mapping): every message is looked at
    assert late_counts(messages, dict(kafka_event_times("c", messages)), watermark) == plain_late(
        rows, watermark
    )
    # monotonous timestamps: binary search within each run
    ordered = monotonous(rows)
    mono = messages_of(ordered)
    assert late_counts(mono, kafka_event_times("c", mono, ends_only=True), watermark) == plain_late(
        ordered, watermark
    )


def test_only_splits_at_or_below_the_watermark_are_looked_at() -> None:
    messages = [msg("a", 0, 0, 100), msg("a", 1, 0, 5), msg("a", 0, 1, 3)]
    times = kafka_event_times("c", messages, topic="a")
    assert times.runs == [("c/a/0", 0, 1), ("c/a/1", 1, 2), ("c/a/0", 2, 3)]
    assert late_counts(messages, times, 2) == {}
    assert late_counts(messages, times, 4) == {"a": 1}
    # a split whose runs are not looked at: its messages are not counted even when low enough
    only_one = BatchEventTimes()
    only_one["c/a/1"] = (5, 5)
    only_one.runs.append(("c/a/1", 1, 2))
    assert late_counts(messages, only_one, 50) == {"a": 1}


@given(st.lists(st.integers(-1, 50)), st.integers(-3, 60))
def test_count_at_or_below_leaves_out_missing_timestamps(stamps: list[int], watermark: int) -> None:
    assert count_at_or_below(list(stamps), watermark) == sum(1 for t in stamps if 0 <= t <= watermark)


def test_assigned_late_counts_per_topic() -> None:
    per_split = {"c/a/0": [5, 1, 9], "c/b/0": [20], "c/a/1": [2, 2]}
    assert assigned_late_counts(per_split, 5) == {"a": 4}
    assert assigned_late_counts(per_split, 0) == {}


def test_tracker_counts_late_records_of_a_part_of_a_batch() -> None:
    registry = CollectorRegistry()
    metrics = SourceMetrics(registry, "t")
    tracker = WatermarkTracker(WatermarkStrategy.for_monotonous_timestamps(), metrics)
    tracker.assigned(["c/a/0", "c/a/1"])
    first = [msg("a", 0, 0, 10), msg("a", 1, 0, 20)]
    tracker.delivered("c", first, kafka_event_times("c", first, topic="a", ends_only=True))
    assert tracker.watermark == 10
    batch = [msg("a", 0, 1, 10), msg("a", 0, 2, 11), msg("a", 1, 1, 9), msg("a", 1, 2, 30)]
    times = kafka_event_times("c", batch, topic="a", ends_only=True)
    tracker.delivered("c", batch[:3], part_event_times(times, batch[:3], 0))
    late = registry.get_sample_value("multicluster_source_late_records_total", {"cluster": "c", "topic": "a"})
    assert late == 2  # 10 on split 0 and 9 on split 1 (monotonous broken: still counted by its run)
    assert tracker.watermark == 11
    tracker.delivered("c", batch[3:], part_event_times(times, batch[3:], 3))
    assert tracker.watermark == 11
    metrics.close()


# ------------------------------------------------------------------------------------ push workers


class _Options:
    deserialization_error_policy = "fail"


class _Source:
    """What a push worker's event-time reporter asks of its source."""

    def __init__(self, strategy: WatermarkStrategy) -> None:
        self.watermark_strategy = strategy
        self.deserializer = None
        self.options = _Options()


def test_push_workers_count_late_records_against_the_watermark_they_heard() -> None:
    recorder = MetricsRecorder("s")
    report = worker_event_times(_Source(WatermarkStrategy.for_bounded_out_of_orderness(0)), recorder)
    assert report is not None
    messages = [msg("a", 0, 0, 10), msg("a", 0, 1, 3), msg("b", 1, 0, 20), msg("a", 0, 2, None)]
    batch = RecordBatch("c", messages, {}, kafka_event_times("c", messages))
    assert report(batch, None, None) == {"c/a/0": (3, 10), "c/b/1": (20, 20)}  # no watermark yet
    assert recorder.drain() is None
    assert report(batch, None, 10) == {"c/a/0": (3, 10), "c/b/1": (20, 20)}
    assert report(RecordBatch("c", messages), None, 10) is None  # no event times: nothing to report
    registry = CollectorRegistry()
    metrics = SourceMetrics(registry, "s")
    delta = recorder.drain()
    assert delta is not None
    apply_metrics(metrics, delta)
    late = registry.get_sample_value("multicluster_source_late_records_total", {"cluster": "c", "topic": "a"})
    assert late == 2
    assert (
        registry.get_sample_value("multicluster_source_late_records_total", {"cluster": "c", "topic": "b"})
        is None
    )
    metrics.close()


def test_push_workers_with_an_assigner_count_late_records_of_its_times() -> None:
    recorder = MetricsRecorder("s")
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        lambda r: int(r.value.decode()) if r.value != b"-" else None
    )
    report = worker_event_times(_Source(strategy), recorder)
    assert report is not None
    messages = [
        Message(topic="a", partition=0, offset=i, value=v, timestamp=(1, 999))
        for i, v in enumerate([b"5", b"7", b"-", b"2"])
    ]
    batch = RecordBatch("c", messages, {}, None)
    assert report(batch, None, 5) == {"c/a/0": (2, 7)}  # records made for the assigner
    assert report(batch, records_of("c", messages), 1) == {"c/a/0": (2, 7)}
    delta = recorder.drain()
    assert delta is not None and delta.steps == (("counts", ((("late", ("c", "a")), (2, 0)),)),)
    assert worker_event_times(_Source(WatermarkStrategy.no_watermarks()), recorder) is None


class _Progress:
    def __init__(self, topic: str, partition: int) -> None:
        self.split = KafkaPartitionSplit("c", topic, partition, 0)


def test_a_batch_is_of_one_split_only_when_one_moved_and_its_ends_agree() -> None:
    one = [msg("a", 1, i, i) for i in range(3)]
    assert only_split([_Progress("a", 1)], one) == ["c/a/1"]
    assert only_split([_Progress("a", 1), _Progress("a", 0)], one) == []  # two moved: look them up
    assert only_split([_Progress("a", 1)], []) == []
    assert only_split([_Progress("b", 1)], one) == []  # the ends say otherwise: look them up
    assert only_split([_Progress("a", 1)], [*one, msg("a", 0, 0, 0)]) == []
    times = kafka_event_times("c", one, only_split([_Progress("a", 1)], one))
    assert times == {"c/a/1": (0, 2)} and times.runs == [("c/a/1", 0, 3)]
