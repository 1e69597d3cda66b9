"""benchmarks/bench_hybrid.py without brokers: its archive writer, the archive drain and the report."""

from __future__ import annotations

from pathlib import Path

from benchmarks import bench_hybrid
from benchmarks.bench_throughput import Dataset, TopicData


def test_archive_drain_and_report(tmp_path: Path) -> None:
    dataset = Dataset([TopicData("east", "unused:9092", "bench", {0: 120, 1: 80})])
    bench_hybrid.archive_like(dataset, tmp_path)
    assert (tmp_path / "east" / "bench" / "partition=1" / "bench+1+0000000000.snappy.parquet").exists()
    runs = {kind: [bench_hybrid.archive_drain(tmp_path, dataset, kind, 2)] for kind in bench_hybrid.TOUCH}
    assert all(r[0]["records"] == 200 for r in runs.values())
    live = {"records": 200, "seconds": 1.0, "rate": 200.0, "cpu_ns": 1000.0}
    runs["live"] = [live]
    summary = {
        k: {
            "rate_median": v[0]["rate"],
            "rate_min": v[0]["rate"],
            "rate_max": v[0]["rate"],
            "cpu_ns_median": v[0]["cpu_ns"],
        }
        for k, v in runs.items()
    }
    result = {
        "rates": {
            "records": 200,
            "parallelism": 2,
            "runs": runs,
            "summary": summary,
            "paired_ratio_median": 2.5,
            "paired_ratios": [2.5],
            "paired_columns_ratio_median": 7.0,
            "paired_hybrid_columns_ratio_median": 6.5,
        },
        "switch": {
            "how": "HybridSource",
            "per_cluster": 10,
            "switch_median_s": 0.2,
            "switch_max_s": 0.3,
            "losses": 0,
            "duplicates": 0,
            "runs": [{}, {}],
        },
    }
    report = bench_hybrid.format_report(result)
    assert "| live | 200 [200-200] | 1,000 | **1.00** |" in report
    assert (
        "paired ratio archive / live (median of runs): **2.50** (goal >= 3); archive-columns / live: **7.00**"
        in report
    )
    assert "hybrid-columns (HybridStream.poll_columns) / live: **6.50** (goal >= 3)" in report
    assert "losses **0**, duplicates **0** over 2 runs" in report
