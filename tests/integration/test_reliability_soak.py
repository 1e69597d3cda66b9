"""The soak's short CI variant (issue 8, part 3): ``benchmarks/bench_soak.py`` for ``MCS_SOAK_SECONDS``
(default 60) on the two shared clusters, with 4 logical clusters of 2 topics, metadata changing every 2-5 s,
one restore; then its exact audit and leak checks must hold (see the benchmark's docs for their definition).
Memory is reported, not judged. The 10-minute run is ``python benchmarks/bench_soak.py``."""

from __future__ import annotations

import os

import pytest

from benchmarks import bench_soak
from harness.cluster import Cluster

pytestmark = pytest.mark.integration

SECONDS = float(os.environ.get("MCS_SOAK_SECONDS", "60"))


@pytest.mark.timeout(SECONDS + 360)
def test_soak_with_changing_metadata_audits_clean(kafka_clusters, capsys: pytest.CaptureFixture[str]) -> None:
    clusters: list[Cluster] = kafka_clusters(2)
    config = bench_soak.SoakConfig(seconds=SECONDS, logical=4, topics=2, rate=50.0)
    result = bench_soak.run(clusters, config)
    with capsys.disabled():
        print("\n" + bench_soak.format_table(result))
    audit, leaks = result["audit"], result["leaks"]
    assert result["producer_failures"] == 0
    assert result["changes_total"] >= SECONDS / 5 - 1, "the metadata kept changing"
    assert audit["missing"] == 0, f"records of active topics never delivered: {audit['missing_examples']}"
    assert audit["unexpected_duplicates"] == 0, (
        f"duplicates without a restore: {audit['unexpected_examples']}"
    )
    assert leaks["mcs_threads_gone"], f"threads left after close: {leaks['after_close']['mcs_threads']}"
    assert leaks["rdk_thread_delta"] <= 0, "a librdkafka client was not closed"
    assert leaks["fd_delta"] <= 2, f"file descriptors leaked: {leaks}"


def test_soak_and_scale_sections_render_from_made_up_results(tmp_path) -> None:
    """The report code of both benchmarks and the run_all hook, without brokers."""
    from benchmarks import bench_scale, run_all

    soak = {
        "config": {
            "seconds": 60.0,
            "physical_clusters": 2,
            "logical_clusters": 4,
            "topics_per_cluster": 2,
            "partitions_per_topic": 2,
            "rate_per_topic": 50.0,
            "parallelism": 2,
            "change_every_s": [2.0, 5.0],
            "seed": 8,
            "stream-metadata-discovery-interval-ms": 60000,
        },
        "previous": {
            "generated": "earlier",
            "seconds": 600.0,
            "rss_mb": {"start": 40.0, "peak": 70.0, "end": 69.0, "slope_second_half_mb_per_min": 1.5},
            "first_record_after_add_s": {"median": 0.4, "max": 1.2},
        },
        "changes": {"add_topic": 3},
        "changes_total": 3,
        "produced": 100,
        "delivered": 90,
        "audit": {
            "expected": 50,
            "missing": 0,
            "duplicates": 2,
            "duplicates_allowed_by_restore": 2,
            "unexpected_duplicates": 0,
        },
        "first_record_after_add_s": {"median": 0.3, "max": 0.6},
        "leaks": {
            "baseline": {"fds": 20, "rdk_threads": 8},
            "after_close": {"fds": 20, "rdk_threads": 8, "mcs_threads": []},
        },
        "rss_mb": {"start": 50.0, "peak": 60.0, "end": 58.0, "slope_second_half_mb_per_min": 0.5},
    }
    source = {
        "open_s": 0.01,
        "all_assigned_s": 0.5,
        "all_first_records_s": 1.5,
        "checkpoint_s": {"median": 0.2, "min": 0.1, "max": 0.3},
        "checkpoint_floor_s": 0.002,
        "checkpoint_bytes": 1_100_000,
        "checkpoint_positions": 10_000,
        "restore": {"all_assigned_s": 0.3, "records_delivered_again": 0},
        "rss_mb": {"before_open": 60.0, "running": 120.0, "after_close": 140.0},
        "threads": {"python": 29, "mcs": 28, "librdkafka": 128},
        "close_s": 1.7,
    }
    scale = {
        "config": {
            "partitions": 10_000,
            "logical_clusters": 10,
            "physical_clusters": 2,
            "partitions_per_topic": 100,
            "topics": 100,
            "parallelism": 2,
            "broker_heap": "1g",
        },
        "previous": {"generated": "earlier", "partitions": 1000, "source": {"all_assigned_s": 0.2}},
        "raw": {"all_first_records_s": 0.5},
        "source": source,
        "broker_rss_mb": [350.0, 340.0],
    }
    text = "\n".join(run_all.reliability_md({"soak": soak, "scale": scale}))
    assert "## Soak:" in text and "## Scale: 10 logical clusters, 10,000 splits" in text
    assert "| audit: unexpected duplicates | 0 | 0 |" in text
    assert "previous 40.0 / 70.0 / 69.0" in text and "previous run: 600 s on earlier" in text
    assert "source / raw 3.00" in text and "previous run: 1,000 partitions on earlier" in text
    assert bench_soak.format_table(soak) and bench_scale.format_table(scale)
    out = tmp_path / "RESULTS.md"
    run_all.write_results_md(out, "kafka", ["--quick"], {"soak": soak, "scale": scale}, 1.0)
    assert out.read_text().rstrip().endswith("| close() (s) | 1.70 | - |")
