"""Event time on real Kafka: records produced with their own timestamps on two clusters; the stream's
watermark is the minimum over the splits, idle splits stop holding it back, a removed cluster releases it,
late records are counted, and a restore starts without watermarks."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from harness.cluster import Cluster
from harness.event_time import WatermarkSink, records_seen, watermarks_seen
from harness.runtimes import BackgroundRun
from harness.scenario import builder, cluster_md, drain, settle, stream, wait_for
from multicluster_source import RunControl, WatermarkStrategy
from multicluster_source.testing import InMemoryMetadataService

pytestmark = [
    pytest.mark.integration,
    # Ray's own modules warn about their internals; the suite's "warnings are errors" is for ours.
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

# ms; an hour ago, so that the brokers' retention (7 days by record timestamp) keeps the records
BASE = (int(time.time()) // 60 - 60) * 60_000
ROOT = Path(__file__).resolve().parents[2]
BOUND = WatermarkStrategy.for_bounded_out_of_orderness(1.0)  # 1000 ms


def produce_at(cluster: Cluster, topic: str, stamps: list[int], partition: int = 0) -> None:
    """One record per producer-set timestamp (ms), in this order."""
    producer = cluster.producer()
    for i, ts in enumerate(stamps):
        producer.produce(topic, value=f"{ts}-{i}".encode(), partition=partition, timestamp=ts)
    assert producer.flush(30) == 0


def drain_batches(s: Any, count: int, timeout: float = 60.0) -> int:
    n = 0
    deadline = time.monotonic() + timeout
    while n < count and time.monotonic() < deadline:
        n += sum(len(b) for b in s.poll_batches(timeout=0.2))
    return n


def late_total(registry: CollectorRegistry, cluster: str, topic: str) -> float:
    labels = {"cluster": cluster, "topic": topic}
    return registry.get_sample_value("multicluster_source_late_records_total", labels) or 0.0


def test_watermark_is_the_minimum_over_splits_of_two_clusters(kafka_clusters: Any) -> None:
    east, west = kafka_clusters(2)
    te = east.create_topic("et-min", partitions=2)
    tw = west.create_topic("et-min", partitions=1)
    # out of order within each split; the largest per split: east/0 9000, east/1 7000, west/0 5000
    produce_at(east, te, [BASE + 1000, BASE + 9000, BASE + 3000], partition=0)
    produce_at(east, te, [BASE + 7000, BASE + 2000], partition=1)
    produce_at(west, tw, [BASE + 4000, BASE + 5000, BASE + 4500])
    registry = CollectorRegistry()
    source = builder([stream("s", cluster_md(east, te), cluster_md(west, tw))])
    built = source.set_watermark_strategy(BOUND).build()
    with built.open(parallelism=2, registry=registry) as s:
        assert s.watermark is None
        got = drain(s, 8)
        assert len(got) == 8
        assert s.watermark == BASE + 5000 - 1000
        assert registry.get_sample_value("multicluster_source_watermark_ms") == BASE + 4000
        assert s.status()["event_time"]["splits"][f"{west.cluster_id}/{tw}/0"]["watermark"] == BASE + 4000
        # west moves ahead: east/1 (7000) is now the slowest split
        produce_at(west, tw, [BASE + 20_000])
        assert len(drain(s, 1)) == 1
        assert s.watermark == BASE + 6000
        # a record at or below the watermark is delivered and counted late
        produce_at(east, te, [BASE + 6000, BASE + 6001], partition=1)
        late = drain(s, 2)
        assert sorted(r.timestamp for r in late) == [BASE + 6000, BASE + 6001]
        assert late_total(registry, east.cluster_id, te) == 1
        assert s.watermark == BASE + 6000  # never goes back


def test_batch_path_moves_the_watermark_too(kafka_clusters: Any) -> None:
    east, west = kafka_clusters(2)
    te = east.create_topic("et-batch", partitions=1)
    tw = west.create_topic("et-batch", partitions=1)
    produce_at(east, te, [BASE + i for i in range(0, 3000, 10)])
    produce_at(west, tw, [BASE + 500 + i for i in range(0, 3000, 10)])
    source = builder([stream("s", cluster_md(east, te), cluster_md(west, tw))])
    strategy = WatermarkStrategy.for_monotonous_timestamps()
    with source.set_watermark_strategy(strategy).build().open() as s:
        assert drain_batches(s, 600) == 600
        assert s.watermark == BASE + 2990


def test_an_idle_split_stops_holding_the_watermark(kafka_clusters: Any) -> None:
    east, west = kafka_clusters(2)
    te = east.create_topic("et-idle", partitions=1)
    tw = west.create_topic("et-idle", partitions=1)  # never gets a record
    produce_at(east, te, [BASE + 1000, BASE + 8000])
    streams = [stream("s", cluster_md(east, te), cluster_md(west, tw))]
    with builder(streams).set_watermark_strategy(BOUND).build().open() as s:
        assert len(drain(s, 2)) == 2
        settle(s, 1.5)
        assert s.watermark is None  # without idleness the empty west split holds it back
    with builder(streams).set_watermark_strategy(BOUND.with_idleness(1.0)).build().open() as s:
        assert len(drain(s, 2)) == 2
        settle(s, 1.5)  # west has been idle for a while now (and east too: nothing came since)
        produce_at(east, te, [BASE + 9000])  # east is active again; west, still idle, holds nothing back
        assert len(drain(s, 1)) == 1
        assert wait_for(lambda: s.watermark == BASE + 8000, timeout=10)
        splits = s.status()["event_time"]["splits"]
        assert splits[f"{west.cluster_id}/{tw}/0"] == {"watermark": None, "idle": True}
        # its next record makes it active again; being behind, it is late and the watermark stays
        produce_at(west, tw, [BASE + 2000])
        assert len(drain(s, 1)) == 1
        assert s.watermark == BASE + 8000
        assert s.status()["event_time"]["splits"][f"{west.cluster_id}/{tw}/0"]["idle"] is False


def test_a_removed_cluster_releases_its_watermark_at_once(kafka_clusters: Any) -> None:
    old, new = kafka_clusters(2)
    to = old.create_topic("et-migrate", partitions=1)
    tn = new.create_topic("et-migrate", partitions=1)
    produce_at(old, to, [BASE + 1000, BASE + 2000])  # the old cluster is behind
    produce_at(new, tn, [BASE + 50_000, BASE + 60_000])
    service = InMemoryMetadataService([stream("s", cluster_md(old, to), cluster_md(new, tn))])
    with builder(service, stream_ids=["s"]).set_watermark_strategy(BOUND).build().open() as s:
        assert len(drain(s, 4)) == 4
        assert s.watermark == BASE + 1000
        service.set_streams([stream("s", cluster_md(new, tn))])  # the migration ends: old is removed
        # no record is needed: the old split stops holding the watermark with the metadata update
        assert wait_for(lambda: s.watermark == BASE + 59_000, timeout=10)
        assert f"{old.cluster_id}/{to}/0" not in s.status()["event_time"]["splits"]


def test_a_restore_starts_without_watermarks_and_says_so(
    kafka_cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = kafka_cluster.create_topic("et-restore", partitions=1)
    produce_at(kafka_cluster, topic, [BASE + 1000, BASE + 2000])
    ckpt = str(tmp_path / "ckpt")
    source = builder([stream("s", cluster_md(kafka_cluster, topic))]).set_watermark_strategy(BOUND).build()
    with source.open(checkpoint_dir=ckpt) as s:
        assert len(drain(s, 2)) == 2
        assert s.watermark == BASE + 1000
        s.checkpoint()
    with caplog.at_level(logging.INFO, logger="multicluster_source"), source.open(checkpoint_dir=ckpt) as s:
        assert s.watermark is None
        assert any("watermarks are not checkpointed" in r.getMessage() for r in caplog.records)
        produce_at(kafka_cluster, topic, [BASE + 1500])
        assert len(drain(s, 1)) == 1
        assert s.watermark == BASE + 500  # from the records read after the restore only


def _east_and_west(kafka_clusters: Any, name: str) -> tuple[Any, Any, str, str]:
    """Two clusters with a topic each: east/0 at 1000, 9000; east/1 at 7000, 3000; west/0 at 4000, 12000."""
    east, west = kafka_clusters(2)
    te = east.create_topic(name, partitions=2)
    tw = west.create_topic(name, partitions=1)
    produce_at(east, te, [BASE + 1000, BASE + 9000], partition=0)
    produce_at(east, te, [BASE + 7000, BASE + 3000], partition=1)
    produce_at(west, tw, [BASE + 4000, BASE + 12_000])
    return east, west, te, tw


@pytest.mark.parametrize("runtime", ["threads", "processes", "ray"])
def test_push_workers_report_event_time_and_handlers_hear_the_watermark(
    kafka_clusters: Any, runtime: str, tmp_path: Path
) -> None:
    if runtime == "ray":
        pytest.importorskip(
            "ray", reason="Ray is not installed (pip install 'multicluster-kafka-source[ray]')"
        )
    east, west, te, tw = _east_and_west(kafka_clusters, "et-push")
    streams = [stream("s", cluster_md(east, te), cluster_md(west, tw))]
    source = builder(streams).set_watermark_strategy(BOUND).build()
    control = RunControl()
    out = tmp_path / "out"
    options: dict[str, Any] = {}
    if runtime == "ray":  # a local Ray started (and shut down) by the run; workers import the test harness
        pythonpath = os.pathsep.join([str(ROOT / "tests"), str(ROOT)])
        env = {"runtime_env": {"env_vars": {"PYTHONPATH": pythonpath}}, "include_dashboard": False}
        options["ray_address"] = "local"  # its own Ray, even when another on this machine is running
        options["ray_init"] = {**env, "num_cpus": 2, "log_to_driver": False, "logging_level": logging.WARNING}
    run = BackgroundRun(source, WatermarkSink(out), 2, runtime=runtime, control=control, **options)
    try:
        # east/1 is the slowest split: 7000 - 1000
        assert wait_for(lambda: control.watermark == BASE + 6000, timeout=60)
        assert wait_for(lambda: [BASE + 6000] in [w[-1:] for w in watermarks_seen(out)], timeout=10)
        assert records_seen(out) == 6
        seen = [w for ws in watermarks_seen(out) for w in ws]
        assert all(w <= BASE + 6000 for w in seen)  # never ahead of the run's watermark
        produce_at(east, te, [BASE + 30_000], partition=1)  # now east/0 (9000) is the slowest
        assert wait_for(lambda: control.watermark == BASE + 8000, timeout=30)
    finally:
        control.stop()
        run.join()


@pytest.mark.parametrize(("runtime", "batches"), [("threads", False), ("processes", True)])
def test_push_workers_count_late_records(
    kafka_clusters: Any, runtime: str, batches: bool, tmp_path: Path
) -> None:
    east, west, te, tw = _east_and_west(kafka_clusters, "et-push-late")
    source = builder([stream("s", cluster_md(east, te), cluster_md(west, tw))]).set_watermark_strategy(BOUND)
    control, registry, out = RunControl(), CollectorRegistry(), tmp_path / "out"
    run = BackgroundRun(
        source.build(),
        WatermarkSink(out),
        2,
        runtime=runtime,
        control=control,
        registry=registry,
        batches=batches,
    )
    try:
        assert wait_for(lambda: control.watermark == BASE + 6000, timeout=60)
        # every handler thread has heard of it (workers count late records against what they heard)
        assert wait_for(
            lambda: [ws[-1:] for ws in watermarks_seen(out)] == [[BASE + 6000]] * 2, timeout=10
        ), watermarks_seen(out)
        east_before, west_before = (
            late_total(registry, east.cluster_id, te),
            late_total(registry, west.cluster_id, tw),
        )
        # at and below the watermark: late; above it: not; none of them moves the watermark
        produce_at(east, te, [BASE + 6000, BASE + 2000, BASE + 6500], partition=1)
        produce_at(west, tw, [BASE + 5000])
        assert wait_for(lambda: records_seen(out) == 10, timeout=30)
        assert wait_for(lambda: late_total(registry, east.cluster_id, te) == east_before + 2, timeout=10)
        assert wait_for(lambda: late_total(registry, west.cluster_id, tw) == west_before + 1, timeout=10)
        assert control.watermark == BASE + 6000
    finally:
        control.stop()
        run.join()


def test_alignment_holds_the_live_cluster_while_the_new_one_reads_its_backlog(
    kafka_clusters: Any,
) -> None:
    new, old = kafka_clusters(2)
    tn = new.create_topic("et-align", partitions=1)
    to = old.create_topic("et-align", partitions=1)
    backlog, live = 20_000, 5_000
    produce_at(new, tn, [BASE + i * 10 for i in range(backlog)])  # 200 s of event time, an hour old
    produce_at(old, to, [BASE + 3_000_000 + i * 10 for i in range(live)])  # 50 minutes later
    strategy = (
        WatermarkStrategy.for_monotonous_timestamps()
        .with_idleness(2.0)
        .with_alignment("orders", max_drift=30.0, update_interval=0.05)
    )
    registry = CollectorRegistry()
    source = (
        builder([stream("s", cluster_md(new, tn), cluster_md(old, to))])
        .set_watermark_strategy(strategy)
        .set_property("reader.batch.max.records", "200")
        .set_property("reader.buffer.max.batches", "2")
        .build()
    )
    live_split = f"{old.cluster_id}/{to}/0"
    got: dict[str, list[int]] = {new.cluster_id: [], old.cluster_id: []}
    live_before_backlog_done = 0
    held_seen: set[str] = set()
    paused_metric = 0.0
    with source.open(parallelism=2, registry=registry) as s:
        deadline = time.monotonic() + 120
        next_look = 0.0
        while sum(map(len, got.values())) < backlog + live and time.monotonic() < deadline:
            for r in s.poll(timeout=0.2, max_records=500):
                got[r.cluster_id].append(r.offset)
                if r.cluster_id == old.cluster_id and len(got[new.cluster_id]) < backlog:
                    live_before_backlog_done += 1
            if time.monotonic() >= next_look and len(got[new.cluster_id]) < backlog:
                next_look = time.monotonic() + 0.2
                held_seen |= set(s.status()["event_time"]["paused"])
                paused_metric = max(
                    paused_metric, registry.get_sample_value("multicluster_source_paused_splits") or 0.0
                )
        final_paused = s.status()["event_time"]["paused"]
    # everything arrives, once, after the backlog split went idle and let the live cluster go
    assert sorted(got[new.cluster_id]) == list(range(backlog))
    assert sorted(got[old.cluster_id]) == list(range(live))
    assert held_seen == {live_split} and paused_metric == 1.0 and final_paused == []
    # while the backlog was read, the live cluster was held
    # (unaligned, all of it comes first: it is small and its records are ready at once): one fetch batch
    # (reader.batch.max.records) gives it a watermark, then it waits
    assert live_before_backlog_done <= 200, live_before_backlog_done


class _Order:
    """A thread-safe handler noting the cluster of every record, in the order handled."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.clusters: list[str] = []

    def __call__(self, records: Any) -> None:
        with self.lock:
            self.clusters.extend(r.cluster_id for r in records)


def test_alignment_on_the_push_api(kafka_clusters: Any) -> None:
    new, old = kafka_clusters(2)
    tn = new.create_topic("et-align-push", partitions=1)
    to = old.create_topic("et-align-push", partitions=1)
    backlog, live = 20_000, 5_000
    produce_at(new, tn, [BASE + i * 10 for i in range(backlog)])
    produce_at(old, to, [BASE + 3_000_000 + i * 10 for i in range(live)])
    strategy = (
        WatermarkStrategy.for_monotonous_timestamps()
        .with_idleness(2.0)
        .with_alignment("orders", max_drift=30.0, update_interval=0.05)
    )
    source = (
        builder([stream("s", cluster_md(new, tn), cluster_md(old, to))])
        .set_watermark_strategy(strategy)
        .set_property("reader.batch.max.records", "200")
        .set_property("reader.buffer.max.batches", "2")
        .build()
    )
    order, control, registry = _Order(), RunControl(), CollectorRegistry()
    run = BackgroundRun(source, order, 2, control=control, registry=registry)
    paused = 0.0
    try:
        deadline = time.monotonic() + 120
        while len(order.clusters) < backlog + live and time.monotonic() < deadline:
            paused = max(paused, registry.get_sample_value("multicluster_source_paused_splits") or 0.0)
            time.sleep(0.05)
    finally:
        control.stop()
        run.join()
    assert len(order.clusters) == backlog + live and paused == 1.0
    last_backlog = max(i for i, c in enumerate(order.clusters) if c == new.cluster_id)
    assert order.clusters[:last_backlog].count(old.cluster_id) <= 200  # one fetch batch
