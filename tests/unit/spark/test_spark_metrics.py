"""The data-loss counter: what ``failOnDataLoss=false`` went on without, counted where it was found."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from unit.spark.test_spark_read import _PartitionLog, _task

from multicluster_source import ClusterMetadata, KafkaStream
from multicluster_source.spark import _read
from multicluster_source.spark._driver import Planner
from multicluster_source.spark._metrics import DATA_LOSS, DATA_LOSS_DOC, count_data_loss
from multicluster_source.spark._options import parse_options
from multicluster_source.spark._read import _read as read_with
from multicluster_source.testing import write_metadata_file

ROOT = Path(__file__).resolve().parents[3]


def _lost(cluster: str, topic: str) -> float:
    value = REGISTRY.get_sample_value(DATA_LOSS + "_total", {"cluster": cluster, "topic": topic})
    return value or 0.0


def test_records_deleted_before_and_while_an_executor_reads_them_are_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = _lost("east", "orders")
    list(read_with(_task(0, 8, fail=False), _PartitionLog(list(range(8)), low=3, stable=8)))
    assert _lost("east", "orders") == before + 3  # offsets 0..2
    monkeypatch.setattr(_read, "ROWS_PER_BATCH", 2)
    log = _PartitionLog(list(range(10)), low=0, stable=10, deleted_to=6)
    list(read_with(_task(0, 10, fail=False), log))  # 0 and 1 read, then 2..5 are gone
    assert _lost("east", "orders") == before + 3 + 4


def test_a_range_beyond_a_truncated_partition_is_counted() -> None:
    before = _lost("east", "orders")
    list(read_with(_task(2, 9, fail=False), _PartitionLog(list(range(5)), low=0, stable=5)))
    assert _lost("east", "orders") == before + 4  # offsets 5..8


def test_a_planned_range_of_a_cluster_gone_is_counted_on_the_driver(tmp_path: Path) -> None:
    parts = {"east": ClusterMetadata("east", "east:9092", frozenset({"orders"}))}
    path = write_metadata_file(tmp_path / "streams.yaml", [KafkaStream("s", parts)])
    planner = Planner(parse_options({"metadataFile": str(path), "streamIds": "s", "failOnDataLoss": "false"}))
    before = _lost("gone", "payments")
    planner.plan({"gone/payments/0": 3, "east/orders/0": 0}, {"gone/payments/0": 9, "east/orders/0": 1})
    assert _lost("gone", "payments") == before + 6
    planner.close()


def test_nothing_lost_counts_nothing_and_a_registry_gets_one_counter() -> None:
    registry = CollectorRegistry()
    count_data_loss("east", "orders", 0, registry)
    count_data_loss("east", "orders", 2, registry)
    count_data_loss("east", "orders", 5, registry)
    sample = {"cluster": "east", "topic": "orders"}
    assert registry.get_sample_value(DATA_LOSS + "_total", sample) == 7


def test_the_metrics_reference_has_the_counter() -> None:
    page = (ROOT / "docs" / "reference" / "metrics.md").read_text(encoding="utf-8")
    assert f"| `{DATA_LOSS}_total` | counter | `cluster`, `topic` | {DATA_LOSS_DOC} |" in page
