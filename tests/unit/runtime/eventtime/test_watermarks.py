"""Event time without brokers: the strategy values, event times of batches, the combiner and the tracker."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from confluent_kafka import Message
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from harness.timestamps import messages_of, msg, plain_times
from multicluster_source import ConfigurationError, WatermarkStrategy
from multicluster_source.exceptions import SourceFailedError
from multicluster_source.framework._records import records_of
from multicluster_source.framework._watermarks import kafka_event_times
from multicluster_source.metadata import ClusterMetadata
from multicluster_source.ops._metrics import SourceMetrics
from multicluster_source.runtime.eventtime._watermarks import WatermarkCombiner, WatermarkTracker

NOT_A_NUMBER: Any = "5"
NOT_CALLABLE: Any = 5


# ------------------------------------------------------------------------------------------- strategy


def test_default_is_no_watermarks_and_values_are_frozen() -> None:
    none = WatermarkStrategy.no_watermarks()
    assert not none.enabled
    strategy = (
        WatermarkStrategy.for_bounded_out_of_orderness(5.0)
        .with_idleness(30)
        .with_alignment("orders", max_drift=60.0)
    )
    assert (strategy.enabled, strategy.out_of_orderness_ms, strategy.idleness_ms) == (True, 5000, 30000)
    assert strategy.alignment is not None and strategy.alignment.max_drift_s == 60.0
    assert strategy.alignment.update_interval_s == 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        strategy.idleness_s = 1.0  # type: ignore[misc]
    assert WatermarkStrategy.for_monotonous_timestamps().out_of_orderness_ms == 0


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (lambda: WatermarkStrategy.for_bounded_out_of_orderness(-1), "for_bounded_out_of_orderness"),
        (
            lambda: WatermarkStrategy.for_bounded_out_of_orderness(NOT_A_NUMBER),
            "for_bounded_out_of_orderness",
        ),
        (lambda: WatermarkStrategy.for_monotonous_timestamps().with_idleness(0), "with_idleness"),
        (lambda: WatermarkStrategy.for_monotonous_timestamps().with_idleness(float("nan")), "with_idleness"),
        (lambda: WatermarkStrategy.for_monotonous_timestamps().with_alignment("", 1.0), "with_alignment"),
        (lambda: WatermarkStrategy.for_monotonous_timestamps().with_alignment("g", -1.0), "max_drift"),
        (
            lambda: WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(NOT_CALLABLE),
            "assigner",
        ),
    ],
)
def test_bad_arguments_are_named(make: Any, where: str) -> None:
    with pytest.raises(ConfigurationError, match=where):
        make()


# ---------------------------------------------------------------------------------------- event times


def test_event_times_per_split_smallest_and_largest() -> None:
    messages = [
        msg("a", 0, 0, 50),
        msg("a", 0, 1, 40),
        msg("a", 1, 0, 70),
        msg("b", 0, 0, 5),
        msg("a", 0, 2, 90),
    ]
    assert kafka_event_times("east", messages) == {
        "east/a/0": (40, 90),
        "east/a/1": (70, 70),
        "east/b/0": (5, 5),
    }
    one_topic = [msg("a", 0, 0, 50), msg("a", 1, 0, 10), msg("a", 0, 1, 60)]
    assert kafka_event_times("east", one_topic, topic="a") == {"east/a/0": (50, 60), "east/a/1": (10, 10)}
    assert kafka_event_times("east", one_topic[::2], ["east/a/0"], "a") == {"east/a/0": (50, 60)}


def test_messages_without_timestamp_have_no_event_time() -> None:
    assert kafka_event_times("east", [msg("a", 0, 0, None)], ["east/a/0"]) == {}
    assert kafka_event_times("east", [msg("a", 0, 0, None), msg("a", 0, 1, 7)], ["east/a/0"]) == {
        "east/a/0": (7, 7)
    }
    assert kafka_event_times("east", [msg("a", 0, 0, None), msg("a", 1, 0, 3)]) == {"east/a/1": (3, 3)}


# ------------------------------------------------------------------------------------------- combiner


def test_combiner_minimum_idleness_and_release() -> None:
    c = WatermarkCombiner(idleness_s=10.0)
    c.add("e/t/0", 0.0)
    c.add("w/t/0", 0.0)
    c.advance("e/t/0", 100, 1.0)
    assert c.compute(1.0) is None  # w/t/0 has no watermark yet and is not idle
    c.advance("w/t/0", 40, 2.0)
    assert c.compute(2.0) == 40
    assert c.compute(11.5) == 40  # e/t/0 idle since 11.0: w/t/0 alone
    assert c.compute(12.5) == 40  # both idle: the watermark stays
    c.advance("e/t/0", 100, 13.0)  # e/t/0 back; w/t/0 idle
    assert c.compute(13.0) == 100
    c.advance("w/t/0", 60, 14.0)  # w/t/0 back, behind: the watermark does not go back
    assert c.compute(14.0) == 100
    c.add("n/t/0", 14.0)  # a new split holds the watermark until its first record or idleness
    c.advance("w/t/0", 500, 15.0)
    c.advance("e/t/0", 600, 15.0)
    assert c.compute(15.0) == 100
    assert c.compute(24.5) == 500  # n/t/0 idle
    c.release("w/t/0")
    c.advance("w/t/0", 10**9, 24.5)  # records of a released split no longer count
    assert c.compute(24.5) == 600
    assert sorted(c.split_ids()) == ["e/t/0", "n/t/0"]


def test_released_split_stops_holding_at_once() -> None:
    c = WatermarkCombiner()
    for sid in ("old/t/0", "new/t/0"):
        c.add(sid, 0.0)
    c.advance("old/t/0", 10, 0.0)
    c.advance("new/t/0", 1000, 0.0)
    assert c.compute(0.0) == 10
    c.release("old/t/0")
    assert c.compute(0.0) == 1000


def test_failover_keeps_a_splits_watermark() -> None:
    c = WatermarkCombiner()
    c.add("e/t/0", 0.0)
    c.advance("e/t/0", 70, 0.0)
    c.add("e/t/0", 5.0)  # assigned again (to another reader)
    assert c.compute(5.0) == 70


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 5)),
        st.tuples(st.just("release"), st.integers(0, 5)),
        st.tuples(st.just("advance"), st.integers(0, 5), st.integers(0, 10_000)),
        st.tuples(st.just("wait"), st.floats(0.0, 20.0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(_ops, st.sampled_from([None, 5.0]))
def test_combiner_properties(ops: list[tuple[Any, ...]], idleness: float | None) -> None:
    """Monotonic; never above the watermark of an active, non-idle split at the time it was computed;
    None only while some active split has none (or no split ever had one)."""
    c = WatermarkCombiner(idleness)
    now = 0.0
    previous: int | None = None
    wm: dict[str, int | None] = {}
    for op in ops:
        if op[0] == "add":
            sid = f"c/t/{op[1]}"
            c.add(sid, now)
            wm.setdefault(sid, None)
        elif op[0] == "release":
            sid = f"c/t/{op[1]}"
            c.release(sid)
            wm.pop(sid, None)
        elif op[0] == "advance":
            sid = f"c/t/{op[1]}"
            c.advance(sid, op[2], now)
            if sid in wm:
                old = wm[sid]
                wm[sid] = op[2] if old is None else max(old, op[2])
        else:
            now += op[1]
        value = c.compute(now)
        if previous is not None:
            assert value is not None and value >= previous
        active = [sid for sid in wm if not c.is_idle(sid, now)]
        if value is not None and value != previous:  # it moved now: bounded by every active split
            for sid in active:
                split_wm = wm[sid]
                assert split_wm is not None and value <= split_wm
        if active and all(wm[s] is not None for s in active):
            lowest = min(w for s in active if (w := wm[s]) is not None)
            assert value is not None and value >= lowest
        previous = value


# -------------------------------------------------------------------------------------------- tracker


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def late_total(registry: CollectorRegistry, cluster: str, topic: str) -> float:
    value = registry.get_sample_value(
        "multicluster_source_late_records_total", {"cluster": cluster, "topic": topic}
    )
    return value or 0.0


def test_tracker_late_records_gauge_and_removal() -> None:
    registry = CollectorRegistry()
    metrics = SourceMetrics(registry, "t")
    clock = Clock()
    tracker = WatermarkTracker(WatermarkStrategy.for_bounded_out_of_orderness(0.01), metrics, clock=clock)
    tracker.assigned(["east/a/0", "west/a/0"])
    east = [msg("a", 0, 0, 1000), msg("a", 0, 1, 1200)]
    tracker.delivered("east", east, kafka_event_times("east", east))
    assert tracker.watermark is None  # west/a/0 has nothing yet
    tracker.delivered("west", [msg("a", 0, 0, 900)], None)  # part of a batch: computed here
    assert tracker.watermark == 890
    assert registry.get_sample_value("multicluster_source_watermark_ms") == 890
    late = [msg("a", 0, 1, 890), msg("a", 0, 2, 891), msg("a", 0, 3, 100), msg("a", 0, 4, None)]
    tracker.delivered("west", late, None)
    assert late_total(registry, "west", "a") == 2  # 890 and 100: at or below the watermark
    # west leaves the metadata: east alone decides at once
    tracker.metadata({"east": ClusterMetadata("east", "localhost:1", frozenset({"a"}))}, version=2)
    assert tracker.watermark == 1190
    tracker.metadata({}, version=1)  # stale: ignored
    assert tracker.status()["splits"].keys() == {"east/a/0"}
    tracker.assigned(["east/b/0"])
    tracker.metadata({"east": ClusterMetadata("east", "localhost:1", frozenset({"b"}))}, version=3)
    assert tracker.status()["splits"].keys() == {"east/b/0"}  # a removed topic releases its splits too
    metrics.close()


def test_tracker_with_assigner_reads_deserialized_records_and_names_a_bad_one() -> None:
    metrics = SourceMetrics(CollectorRegistry(), "t")

    def assign(record: Any) -> Any:
        return int(record.value.decode()) if record.value != b"bad" else "x"

    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(assign)
    tracker = WatermarkTracker(strategy, metrics, make_records=records_of)
    tracker.assigned(["east/a/0"])
    messages = [
        Message(topic="a", partition=0, offset=0, value=b"5", timestamp=(1, 999)),
        Message(topic="a", partition=0, offset=1, value=b"7", timestamp=(1, 1)),
    ]
    tracker.delivered("east", messages, None)  # batch path: records made here
    assert tracker.watermark == 7
    bad = [Message(topic="a", partition=0, offset=2, value=b"bad", timestamp=(1, 1))]
    with pytest.raises(SourceFailedError, match="cluster=east topic=a partition=0 offset=2"):
        tracker.delivered("east", bad, None)
    metrics.close()


def test_no_watermarks_keeps_stream_watermark_none() -> None:
    tracker = WatermarkTracker(WatermarkStrategy.no_watermarks(), SourceMetrics(CollectorRegistry(), "t"))
    assert not tracker.enabled and tracker.watermark is None


def test_builder_takes_a_strategy_and_names_a_wrong_one() -> None:
    from multicluster_source import MultiClusterKafkaSource, StaticMetadataService

    def builder() -> Any:
        return (
            MultiClusterKafkaSource.builder()
            .set_kafka_metadata_service(StaticMetadataService([]))
            .set_stream_ids("s")
        )

    assert not builder().build().watermark_strategy.enabled
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(1.0).with_idleness(5.0)
    assert builder().set_watermark_strategy(strategy).build().watermark_strategy == strategy
    with pytest.raises(
        ConfigurationError, match="set_watermark_strategy\\(\\): needs a WatermarkStrategy, got float"
    ):
        builder().set_watermark_strategy(NOT_A_STRATEGY)
    aligned = strategy.with_alignment("g", 60.0)
    assert builder().set_watermark_strategy(aligned).build().watermark_strategy.alignment is not None


NOT_A_STRATEGY: Any = 5.0


def test_monotonous_reads_only_the_ends_of_each_run() -> None:
    messages = [
        msg("a", 0, 0, 10),
        msg("a", 0, 1, 99),
        msg("a", 0, 2, 20),
        msg("a", 1, 0, 5),
        msg("a", 0, 3, 30),
    ]
    assert kafka_event_times("c", messages, topic="a", ends_only=True) == {"c/a/0": (10, 30), "c/a/1": (5, 5)}
    assert kafka_event_times("c", messages, topic="a") == {"c/a/0": (10, 99), "c/a/1": (5, 5)}
    gap = [msg("a", 0, 0, None), msg("a", 0, 1, 4), msg("a", 0, 2, 8)]
    assert kafka_event_times("c", gap, ["c/a/0"], ends_only=True) == {"c/a/0": (4, 8)}
    assert WatermarkStrategy.for_monotonous_timestamps().monotonous


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from(["a", "b"]), st.one_of(st.none(), st.integers(0, 10**6)))
    )
)
def test_event_times_match_a_plain_computation(rows: list[tuple[int, str, int | None]]) -> None:
    messages = messages_of(rows)
    expected = plain_times(rows)
    assert kafka_event_times("c", messages) == expected
    only_a = [m for m in messages if m.topic() == "a"]
    assert kafka_event_times("c", only_a, topic="a") == {k: v for k, v in expected.items() if "/a/" in k}


def test_alignment_holds_splits_ahead_of_the_group_and_lets_go_when_behind_ones_idle() -> None:
    c = WatermarkCombiner(idleness_s=5.0)
    for sid in ("old/t/0", "new/t/0", "fresh/t/0"):
        c.add(sid, 0.0)
    assert c.ahead(1000, 0.0) == (frozenset(), -1)  # nothing has a watermark yet: whatever fetches waits
    c.advance("old/t/0", 100_000, 1.0)  # live cluster, far ahead
    c.advance("new/t/0", 10_000, 1.0)  # backlog
    # fresh/t/0 has no watermark yet: it holds the group, every split with one waits
    assert c.ahead(60_000, 1.0) == (frozenset({"old/t/0", "new/t/0"}), -1)
    c.release("fresh/t/0")
    assert c.ahead(60_000, 1.0) == (frozenset({"old/t/0"}), 70_000)
    c.advance("new/t/0", 40_000, 2.0)
    assert c.ahead(60_000, 2.0) == (frozenset(), 100_000)  # caught up within the drift
    c.advance("old/t/0", 200_000, 3.0)
    assert c.ahead(60_000, 3.0) == (frozenset({"old/t/0"}), 100_000)
    assert c.ahead(60_000, 7.5) == (frozenset(), 260_000)  # the backlog split went idle: alone, old leads


class FakeConsumer:
    def __init__(self) -> None:
        self.paused: set[tuple[str, int]] = set()

    def pause(self, tps: list[Any]) -> None:
        self.paused |= {(tp.topic, tp.partition) for tp in tps}

    def resume(self, tps: list[Any]) -> None:
        self.paused -= {(tp.topic, tp.partition) for tp in tps}

    def assignment(self) -> list[Any]:
        from confluent_kafka import TopicPartition

        return [TopicPartition("t", p) for p in (0, 1)]


def test_a_fetcher_pauses_a_split_fetched_past_the_limit_at_once() -> None:
    from types import SimpleNamespace

    from multicluster_source.reader._pauses import AlignmentPauses

    progress = {("t", 0): SimpleNamespace(split_id="c/t/0"), ("t", 1): SimpleNamespace(split_id="c/t/1")}
    consumer = FakeConsumer()
    pauses = AlignmentPauses("c", bound_ms=100)
    pauses.want(frozenset(), 1000)
    pauses.apply(consumer, progress)
    pauses.fetched(consumer, {"c/t/0": (0, 1100), "c/t/1": (0, 1101)}, progress)  # watermarks 1000, 1001
    assert consumer.paused == {("t", 1)}
    pauses.want(frozenset({"c/t/0"}), 5000)  # the group moved on; the coordinator holds another split
    pauses.apply(consumer, progress)
    assert consumer.paused == {("t", 0)}


def test_a_topic_whose_splits_are_not_assigned_yet_holds_the_watermark() -> None:
    clock = Clock()
    tracker = WatermarkTracker(
        WatermarkStrategy.for_monotonous_timestamps().with_idleness(10.0),
        SourceMetrics(CollectorRegistry(), "t"),
        clock=clock,
    )
    clusters = {
        "east": ClusterMetadata("east", "localhost:1", frozenset({"a"})),
        "west": ClusterMetadata("west", "localhost:2", frozenset({"a"})),
    }
    tracker.assigned(["east/a/0"])
    tracker.metadata(clusters, version=1)  # west's partitions are still being discovered
    tracker.delivered("east", [msg("a", 0, 0, 5000)], None)
    assert tracker.watermark is None
    tracker.assigned(["west/a/0"])  # discovered: the split holds until its first record
    tracker.delivered("west", [msg("a", 0, 0, 300)], None)
    assert tracker.watermark == 300
    clusters["west"] = ClusterMetadata("west", "localhost:2", frozenset({"a", "b"}))
    tracker.metadata(clusters, version=2)  # a topic added: held until its splits come (or idleness)
    tracker.delivered("west", [msg("a", 0, 1, 400)], None)
    tracker.delivered("east", [msg("a", 0, 1, 6000)], None)
    assert tracker.watermark == 300
    clock.now = 11.0
    assert tracker.watermark == 300  # everything idle: unchanged
    tracker.delivered("west", [msg("a", 0, 2, 450)], None)
    assert tracker.watermark == 450  # west/b/* idle: no longer holds
