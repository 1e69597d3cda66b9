"""The worker-side metrics recorder and its application to the driver's metrics: sums, last values, removals
in the order they happened, and a delta that survives pickling (it crosses a pipe or a Ray call)."""

from __future__ import annotations

import pickle

from prometheus_client import CollectorRegistry

from multicluster_source.ops._metrics import SourceMetrics
from multicluster_source.ops._metrics_relay import MetricsRecorder, apply_metrics


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(f"multicluster_source_{name}", labels)


def test_counts_add_up_and_gauges_keep_the_last_value() -> None:
    recorder = MetricsRecorder("s")
    recorder.record_consumed("east", "orders", 10, 1000)
    recorder.record_consumed("east", "orders", 5, 500)
    recorder.set_offsets("east", "orders", 0, current=7, lag=3)
    recorder.set_offsets("east", "orders", 0, current=15, lag=0)
    recorder.reader_restart("east")
    recorder.offset_reset("east", "orders")
    recorder.deserialization_error("east", "orders")
    recorder.late_records("east", "orders", 3)
    recorder.late_records("east", "orders", 4)
    delta = recorder.drain()
    assert delta is not None and recorder.drain() is None
    registry = CollectorRegistry()
    metrics = SourceMetrics(registry, "s")
    apply_metrics(metrics, pickle.loads(pickle.dumps(delta)))
    assert _value(registry, "records_consumed_total", cluster="east", topic="orders") == 15
    assert _value(registry, "bytes_consumed_total", cluster="east", topic="orders") == 1500
    assert _value(registry, "current_offset", cluster="east", topic="orders", partition="0") == 15
    assert _value(registry, "records_lag", cluster="east", topic="orders", partition="0") == 0
    assert _value(registry, "reader_restarts_total", cluster="east") == 1
    assert _value(registry, "offset_resets_total", cluster="east", topic="orders") == 1
    assert _value(registry, "deserialization_errors_total", cluster="east", topic="orders") == 1
    assert _value(registry, "late_records_total", cluster="east", topic="orders") == 7
    metrics.close()


def test_a_removal_applies_between_what_came_before_and_after_it() -> None:
    recorder = MetricsRecorder("s")
    recorder.record_consumed("west", "orders", 4, 40)
    recorder.set_offsets("west", "orders", 1, current=4, lag=0)
    recorder.remove_cluster("west")
    recorder.record_consumed("east", "orders", 2, 20)
    registry = CollectorRegistry()
    metrics = SourceMetrics(registry, "s")
    delta = recorder.drain()
    assert delta is not None
    apply_metrics(metrics, delta)
    names = {
        s.labels.get("cluster")
        for family in registry.collect()
        for s in family.samples
        if s.labels.get("cluster")
    }
    assert names == {"east"}
    assert _value(registry, "records_consumed_total", cluster="east", topic="orders") == 2
    metrics.close()
