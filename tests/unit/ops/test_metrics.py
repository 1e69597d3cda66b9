from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter, generate_latest

from multicluster_source.ops._metric_families import METRIC_NAMES
from multicluster_source.ops._metrics import SourceMetrics

PREFIX = "multicluster_source_"

CONTRACT = {
    "multicluster_source_records_consumed_total": ("counter", ("cluster", "topic")),
    "multicluster_source_bytes_consumed_total": ("counter", ("cluster", "topic")),
    "multicluster_source_records_lag": ("gauge", ("cluster", "topic", "partition")),
    "multicluster_source_current_offset": ("gauge", ("cluster", "topic", "partition")),
    "multicluster_source_committed_offset": ("gauge", ("cluster", "topic", "partition")),
    "multicluster_source_assigned_splits": ("gauge", ("cluster",)),
    "multicluster_source_active_clusters": ("gauge", ()),
    "multicluster_source_metadata_failures_total": ("counter", ()),
    "multicluster_source_reconciliations_total": ("counter", ()),
    "multicluster_source_reader_restarts_total": ("counter", ("cluster",)),
    "multicluster_source_deserialization_errors_total": ("counter", ("cluster", "topic")),
    "multicluster_source_failovers_total": ("counter", ("cluster",)),
    "multicluster_source_offset_resets_total": ("counter", ("cluster", "topic")),
    "multicluster_source_stalled_partitions_total": ("counter", ("cluster",)),
    # API.md section 8
    "multicluster_source_late_records_total": ("counter", ("cluster", "topic")),
    "multicluster_source_watermark_ms": ("gauge", ()),
    "multicluster_source_paused_splits": ("gauge", ()),
    # API.md section 9 (issue #22)
    "multicluster_source_handovers_total": ("counter", ("mode",)),
    "multicluster_source_handover_repeat_bound": ("gauge", ()),
    # API.md section 11 (issue #34)
    "multicluster_source_sink_transactions_total": ("counter", ("outcome",)),
    "multicluster_source_sink_commit_seconds_total": ("counter", ()),
    "multicluster_source_sink_records_total": ("counter", ()),
    "multicluster_source_sink_positions_total": ("counter", ()),
}


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> Iterator[SourceMetrics]:
    m = SourceMetrics(registry, "test")
    yield m
    m.close()


def exercise(m: SourceMetrics, cluster: str = "east", topic: str = "orders") -> None:
    m.record_consumed(cluster, topic, 3, 300)
    m.set_offsets(cluster, topic, 0, current=10, lag=5, committed=8)
    m.set_assigned_splits(cluster, 2)
    m.set_active_clusters(1)
    m.metadata_failure()
    m.reconciliation()
    m.reader_restart(cluster)
    m.deserialization_error(cluster, topic)
    m.failover(cluster)
    m.offset_reset(cluster, topic)
    m.stalled_partition(cluster)
    m.late_records(cluster, topic, 2)
    m.set_watermark(1_700_000_000_000)
    m.set_paused_splits(1)
    m.handover("conservative", 3)
    m.transaction("committed", 0.01, 5, 2)


def source_samples(registry: CollectorRegistry) -> list[tuple[str, dict[str, str]]]:
    """Every sample of every multicluster_source_* family, as (sample name, labels)."""
    return [(s.name, s.labels) for f in registry.collect() if f.name.startswith(PREFIX) for s in f.samples]


def exposed_families(registry: CollectorRegistry) -> dict[str, str]:
    """name in the text exposition -> type, from the # TYPE lines."""
    out = {}
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("# TYPE " + PREFIX):
            _, _, name, kind = line.split()
            out[name] = kind
    return out


def test_metric_names_constant_is_the_contract() -> None:
    assert {name: labels for name, (_, labels) in CONTRACT.items()} == METRIC_NAMES


def test_names_types_and_labels_exact(registry: CollectorRegistry, metrics: SourceMetrics) -> None:
    exercise(metrics)
    families = exposed_families(registry)
    for name, (kind, _) in CONTRACT.items():
        assert families[name] == kind
    # prometheus-client also exposes <counter>_created gauges; nothing else.
    extra = set(families) - set(CONTRACT)
    assert all(n.endswith("_created") and n.replace("_created", "_total") in CONTRACT for n in extra)
    seen: dict[str, set[tuple[str, ...]]] = {}
    for name, labels in source_samples(registry):
        seen.setdefault(name, set()).add(tuple(sorted(labels)))
    for name, (_, label_names) in CONTRACT.items():
        assert seen[name] == {tuple(sorted(label_names))}, name


def test_values(registry: CollectorRegistry, metrics: SourceMetrics) -> None:
    exercise(metrics)
    exercise(metrics)
    get = registry.get_sample_value
    ct = {"cluster": "east", "topic": "orders"}
    ctp = {**ct, "partition": "0"}
    assert get("multicluster_source_records_consumed_total", ct) == 6
    assert get("multicluster_source_bytes_consumed_total", ct) == 600
    assert get("multicluster_source_current_offset", ctp) == 10
    assert get("multicluster_source_records_lag", ctp) == 5
    assert get("multicluster_source_committed_offset", ctp) == 8
    assert get("multicluster_source_assigned_splits", {"cluster": "east"}) == 2
    assert get("multicluster_source_active_clusters") == 1
    assert get("multicluster_source_metadata_failures_total") == 2
    assert get("multicluster_source_reconciliations_total") == 2
    assert get("multicluster_source_reader_restarts_total", {"cluster": "east"}) == 2
    assert get("multicluster_source_deserialization_errors_total", ct) == 2
    assert get("multicluster_source_failovers_total", {"cluster": "east"}) == 2
    assert get("multicluster_source_offset_resets_total", ct) == 2
    assert get("multicluster_source_stalled_partitions_total", {"cluster": "east"}) == 2


def test_set_offsets_none_leaves_gauge_unchanged(registry: CollectorRegistry, metrics: SourceMetrics) -> None:
    metrics.set_offsets("east", "orders", 1, current=10, lag=3)
    metrics.set_offsets("east", "orders", 1, committed=7)
    metrics.set_offsets("east", "orders", 1, lag=0)
    ctp = {"cluster": "east", "topic": "orders", "partition": "1"}
    assert registry.get_sample_value("multicluster_source_current_offset", ctp) == 10
    assert registry.get_sample_value("multicluster_source_records_lag", ctp) == 0
    assert registry.get_sample_value("multicluster_source_committed_offset", ctp) == 7
    metrics.set_offsets("east", "orders", 2, current=1)
    ctp2 = {**ctp, "partition": "2"}
    assert registry.get_sample_value("multicluster_source_records_lag", ctp2) is None


def test_remove_partition(registry: CollectorRegistry, metrics: SourceMetrics) -> None:
    metrics.set_offsets("east", "orders", 0, current=1, lag=1, committed=1)
    metrics.set_offsets("east", "orders", 1, current=1, lag=1, committed=1)
    metrics.record_consumed("east", "orders", 1, 1)
    metrics.remove_partition("east", "orders", 0)
    samples = source_samples(registry)
    assert not [s for s in samples if s[1].get("partition") == "0"]
    assert [s for s in samples if s[1].get("partition") == "1"]
    assert registry.get_sample_value(
        "multicluster_source_records_consumed_total", {"cluster": "east", "topic": "orders"}
    )


def test_remove_topic(registry: CollectorRegistry, metrics: SourceMetrics) -> None:
    exercise(metrics, "east", "orders")
    exercise(metrics, "east", "refunds")
    metrics.set_offsets("east", "orders", 7, lag=1)
    metrics.remove_topic("east", "orders")
    samples = source_samples(registry)
    assert not [s for s in samples if s[1].get("topic") == "orders"]
    assert [s for s in samples if s[1].get("topic") == "refunds"]
    assert registry.get_sample_value("multicluster_source_assigned_splits", {"cluster": "east"}) == 2
    # Recording again after removal starts from zero.
    metrics.record_consumed("east", "orders", 1, 1)
    assert (
        registry.get_sample_value(
            "multicluster_source_records_consumed_total", {"cluster": "east", "topic": "orders"}
        )
        == 1
    )


def test_remove_cluster_leaves_no_sample_with_its_label(
    registry: CollectorRegistry, metrics: SourceMetrics
) -> None:
    exercise(metrics, "east", "orders")
    exercise(metrics, "east", "refunds")
    exercise(metrics, "west", "orders")
    metrics.set_offsets("east", "orders", 3, current=1)
    metrics.remove_cluster("east")
    samples = source_samples(registry)
    assert not [s for s in samples if s[1].get("cluster") == "east"]
    assert {s[0] for s in samples if s[1].get("cluster") == "west"} >= {
        n for n, (_, labels) in CONTRACT.items() if "cluster" in labels
    }
    assert 'cluster="east"' not in generate_latest(registry).decode()
    # Unlabelled metrics stay.
    assert registry.get_sample_value("multicluster_source_metadata_failures_total") == 3


def test_remove_unknown_is_harmless(metrics: SourceMetrics) -> None:
    metrics.remove_cluster("nowhere")
    metrics.remove_topic("nowhere", "t")
    metrics.remove_partition("nowhere", "t", 0)


def test_close_unregisters(registry: CollectorRegistry) -> None:
    m = SourceMetrics(registry, "a")
    exercise(m)
    m.close()
    m.close()  # idempotent
    assert source_samples(registry) == []
    assert list(registry.collect()) == []
    # After close every method is a no-op and creates nothing.
    exercise(m)
    m.remove_cluster("east")
    assert list(registry.collect()) == []
    assert m.closed
    # The registry can host a new source afterwards.
    m2 = SourceMetrics(registry, "b")
    m2.record_consumed("east", "orders", 1, 1)
    assert (
        registry.get_sample_value(
            "multicluster_source_records_consumed_total", {"cluster": "east", "topic": "orders"}
        )
        == 1
    )
    m2.close()


def test_two_sources_share_a_registry(registry: CollectorRegistry) -> None:
    a = SourceMetrics(registry, "a")
    b = SourceMetrics(registry, "b")
    ct = {"cluster": "east", "topic": "orders"}
    a.record_consumed("east", "orders", 2, 20)
    b.record_consumed("east", "orders", 3, 30)
    a.record_consumed("west", "orders", 1, 1)
    a.set_assigned_splits("east", 2)
    b.set_assigned_splits("east", 5)
    a.set_active_clusters(2)
    b.set_active_clusters(1)
    get = registry.get_sample_value
    assert get("multicluster_source_records_consumed_total", ct) == 5
    assert get("multicluster_source_assigned_splits", {"cluster": "east"}) == 7
    assert get("multicluster_source_active_clusters") == 3

    # Removing a cluster in one source keeps the other's label sets.
    a.remove_cluster("east")
    assert get("multicluster_source_records_consumed_total", ct) == 5
    assert get("multicluster_source_assigned_splits", {"cluster": "east"}) == 5

    a.close()
    assert get("multicluster_source_records_consumed_total", ct) == 5
    assert get("multicluster_source_records_consumed_total", {"cluster": "west", "topic": "orders"}) is None
    assert get("multicluster_source_active_clusters") == 1

    b.remove_cluster("east")
    assert not [s for s in source_samples(registry) if s[1].get("cluster") == "east"]
    b.close()
    assert list(registry.collect()) == []


def test_global_registry_default() -> None:
    a = SourceMetrics(None, "a")
    b = SourceMetrics(None, "b")
    try:
        assert a.registry is REGISTRY
        a.record_consumed("east", "orders", 1, 1)
        b.record_consumed("east", "orders", 1, 1)
        labels = {"cluster": "east", "topic": "orders"}
        assert REGISTRY.get_sample_value("multicluster_source_records_consumed_total", labels) == 2
    finally:
        a.close()
        b.close()
    assert not [f for f in REGISTRY.collect() if f.name.startswith(PREFIX)]


def test_name_clash_leaves_registry_untouched(registry: CollectorRegistry) -> None:
    other = Counter("multicluster_source_failovers", "someone else's", registry=registry)
    with pytest.raises(ValueError):
        SourceMetrics(registry, "a")
    assert [f.name for f in registry.collect()] == ["multicluster_source_failovers"]
    registry.unregister(other)
    SourceMetrics(registry, "a").close()


def test_concurrent_recording_and_removal(registry: CollectorRegistry, metrics: SourceMetrics) -> None:
    def record() -> None:
        for _ in range(2000):
            metrics.record_consumed("east", "t", 1, 2)

    threads = [threading.Thread(target=record) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    labels = {"cluster": "east", "topic": "t"}
    assert registry.get_sample_value("multicluster_source_records_consumed_total", labels) == 16_000
    assert registry.get_sample_value("multicluster_source_bytes_consumed_total", labels) == 32_000

    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            metrics.set_offsets("west", "t", 0, current=1)
            metrics.reader_restart("west")

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        for _ in range(200):
            metrics.remove_cluster("west")
    finally:
        stop.set()
        worker.join()
    metrics.remove_cluster("west")
    assert not [s for s in source_samples(registry) if s[1].get("cluster") == "west"]


def test_offset_resets_follow_topic_and_cluster_removal(
    registry: CollectorRegistry, metrics: SourceMetrics
) -> None:
    metrics.offset_reset("east", "orders")
    metrics.offset_reset("east", "refunds")
    metrics.offset_reset("west", "orders")
    name = "multicluster_source_offset_resets_total"
    metrics.remove_topic("east", "orders")
    assert registry.get_sample_value(name, {"cluster": "east", "topic": "orders"}) is None
    assert registry.get_sample_value(name, {"cluster": "east", "topic": "refunds"}) == 1
    metrics.remove_cluster("east")
    assert not [s for s in source_samples(registry) if s[1].get("cluster") == "east"]
    assert registry.get_sample_value(name, {"cluster": "west", "topic": "orders"}) == 1


def test_offsets_of_many_partitions_set_the_gauges_set_offsets_would() -> None:
    registries = {"one": CollectorRegistry(), "many": CollectorRegistry()}
    one, many = SourceMetrics(registries["one"], "one"), SourceMetrics(registries["many"], "many")
    rows = [("t", 0, 5, 2), ("t", 1, 7, None), ("u", 0, 9, 0)]
    for topic, partition, current, lag in rows:
        one.set_offsets("east", topic, partition, current=current, lag=lag)
    many.set_partition_offsets(
        "east", {(t, p): c for t, p, c, _l in rows}, {(t, p): g for t, p, _c, g in rows if g is not None}
    )
    many.set_partition_offsets("east", {("t", 0): 6}, {("t", 0): 1})  # set again

    def value(metrics: SourceMetrics, name: str, topic: str, partition: int) -> float | None:
        labels = {"cluster": "east", "topic": topic, "partition": str(partition)}
        registry = registries["one" if metrics is one else "many"]
        return registry.get_sample_value(f"multicluster_source_{name}", labels)

    assert [value(many, "current_offset", t, p) for t, p, _c, _l in rows] == [6.0, 7.0, 9.0]
    assert [value(one, "current_offset", t, p) for t, p, _c, _l in rows] == [5.0, 7.0, 9.0]
    assert value(many, "records_lag", "t", 0) == 1.0 and value(many, "records_lag", "t", 1) is None
    many.close()
    many.set_partition_offsets("east", {("t", 9): 1}, {("t", 9): 1})  # closed: nothing is made again
    assert value(many, "current_offset", "t", 9) is None
    one.close()


def test_partition_gauges_shared_by_two_sources(registry: CollectorRegistry) -> None:
    a, b = SourceMetrics(registry, "a"), SourceMetrics(registry, "b")
    labels = {"cluster": "east", "topic": "orders", "partition": "0"}
    get = registry.get_sample_value
    a.set_partition_offsets("east", {("orders", 0): 5}, {("orders", 0): 2})
    b.set_partition_offsets("east", {("orders", 0): 7}, {})
    b.set_committed("east", {("orders", 0): 6})
    assert get("multicluster_source_current_offset", labels) == 7  # the value written last
    assert get("multicluster_source_records_lag", labels) == 2
    assert get("multicluster_source_committed_offset", labels) == 6

    a.remove_cluster("east")  # b still reads the partition: its samples stay
    assert get("multicluster_source_current_offset", labels) == 7
    assert get("multicluster_source_records_lag", labels) is None  # only a had set it
    b.remove_partition("east", "orders", 0)
    assert not [s for s in source_samples(registry) if s[1].get("cluster") == "east"]
    a.close()
    b.close()
    assert list(registry.collect()) == []


def test_partition_gauge_name_clash_leaves_registry_untouched(registry: CollectorRegistry) -> None:
    from prometheus_client import Gauge

    other = Gauge("multicluster_source_records_lag", "someone else's", registry=registry)
    with pytest.raises(ValueError):
        SourceMetrics(registry, "a")
    assert [f.name for f in registry.collect()] == ["multicluster_source_records_lag"]
    registry.unregister(other)


def test_partition_offsets_cost_no_tracked_objects_per_partition(metrics: SourceMetrics) -> None:
    """The garbage collector's full passes walk every tracked object: 10,000 partitions' three gauges must
    not add objects per partition (prometheus-client children made three each: 30,000 for these)."""
    import gc

    keys = [(f"t{i // 100}", i % 100) for i in range(10_000)]
    gc.collect()
    before = len(gc.get_objects())
    metrics.set_partition_offsets("east", {k: 1 for k in keys}, {k: 0 for k in keys})
    metrics.set_committed("east", {k: 1 for k in keys})
    metrics.set_partition_offsets("east", {k: 2 for k in keys}, {})
    gc.collect()
    assert len(gc.get_objects()) - before < 100
    assert sum(1 for s in source_samples(metrics.registry) if s[0].endswith("_offset")) == 20_000
