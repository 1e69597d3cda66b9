"""Event time: what watermarks cost on the batch path, and how soon a watermark covers what was returned.

``throughput``
    N records (100 B, 4 partitions, producer timestamps) on one cluster, drained with
    ``stream.poll_batches(max_records=10000)`` (parallelism 1, touching every ``msg.value()``) under three
    strategies, alternating and repeated: ``none`` (``no_watermarks()``, the default), ``bounded``
    (``for_bounded_out_of_orderness(5)``: every message's timestamp is read, in the fetch thread) and
    ``monotonous``; each run also reads ``stream.watermark`` after every call. Records/s from the first
    record to the N-th, median; the cost is ``1 - strategy / none``.
``propagation``
    The push API (``runtime="threads"``, one reader, one partition of N records): each batch handler notes
    when it returns and the watermark its records give; a monitor thread polls ``RunControl.watermark``
    every 0.2 ms and notes when it first covers that value. Delay percentiles (ms) and the records/s of the
    run. On the pull API the watermark is moved inside ``poll``/``poll_batches`` before they return, so the
    delay there is zero by construction (``stream.watermark`` read right after each call already covers it;
    the time of that read is reported).

Nothing here asserts on speed. Run: ``python benchmarks/bench_watermarks.py [--records N] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

from benchmarks._brokers import RESULTS_DIR, Cluster, add_broker_argument, machine_info, started_clusters
from benchmarks.bench_throughput import produce_records
from multicluster_source import (
    ClusterMetadata,
    KafkaStream,
    MultiClusterKafkaSource,
    RunControl,
    StaticMetadataService,
    WatermarkStrategy,
)

DEFAULT_RECORDS = 500_000
STRATEGIES: dict[str, WatermarkStrategy] = {
    "none": WatermarkStrategy.no_watermarks(),
    "bounded": WatermarkStrategy.for_bounded_out_of_orderness(5.0),
    "monotonous": WatermarkStrategy.for_monotonous_timestamps(),
}


def _source(cluster: Cluster, topic: str, strategy: WatermarkStrategy) -> MultiClusterKafkaSource:
    md = ClusterMetadata(cluster.cluster_id, cluster.bootstrap_servers, frozenset({topic}))
    return (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([KafkaStream("s", {cluster.cluster_id: md})]))
        .set_stream_ids(["s"])
        .set_group_id(f"bench-wm-{uuid.uuid4().hex[:8]}")
        .set_watermark_strategy(strategy)
        .build()
    )


def drain_batches(cluster: Cluster, topic: str, n: int, strategy: WatermarkStrategy) -> dict[str, float]:
    """Records/s from the first record to the n-th, and the mean time of a ``stream.watermark`` read."""
    got = 0
    reads = 0
    read_s = 0.0
    first: float | None = None
    with _source(cluster, topic, strategy).open(registry=CollectorRegistry()) as stream:
        while got < n:
            for batch in stream.poll_batches(timeout=1.0, max_records=10_000):
                for m in batch.messages:
                    m.value()
                got += len(batch)
                if first is None:
                    first = time.perf_counter()
            t = time.perf_counter()
            stream.watermark  # noqa: B018  (what a job reads after each call)
            read_s += time.perf_counter() - t
            reads += 1
        end = time.perf_counter()
    assert first is not None
    return {"records_per_second": n / (end - first), "watermark_read_us": read_s / reads * 1e6}


class _Notes:
    """What the handler and the monitor note (propagation)."""

    def __init__(self) -> None:
        self.returned: list[tuple[int, float]] = []
        self.records = 0
        self.lock = threading.Lock()

    def __call__(self, records: Any) -> None:
        high = max(r.timestamp for r in records if r.timestamp is not None)
        with self.lock:
            self.returned.append((high, time.perf_counter()))
            self.records += len(records)


def propagation(cluster: Cluster, topic: str, n: int) -> dict[str, Any]:
    notes = _Notes()
    control = RunControl()
    covered: list[tuple[int, float]] = []
    done = threading.Event()

    def monitor() -> None:
        last = None
        while not done.is_set():
            wm = control.watermark
            if wm is not None and wm != last:
                covered.append((wm, time.perf_counter()))
                last = wm
            time.sleep(0.0002)

    source = _source(cluster, topic, WatermarkStrategy.for_monotonous_timestamps())
    watcher = threading.Thread(target=monitor, name="bench-wm-monitor", daemon=True)
    watcher.start()
    runner = threading.Thread(
        target=lambda: source.run(notes, 1, control=control, registry=CollectorRegistry()),
        name="bench-wm-run",
        daemon=True,
    )
    started = time.perf_counter()
    runner.start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        with notes.lock:
            count, high = notes.records, (notes.returned[-1][0] if notes.returned else None)
        wm = control.watermark
        if count >= n and high is not None and wm is not None and wm >= high:
            break
        time.sleep(0.05)
    control.stop()
    runner.join(120)
    done.set()
    watcher.join(5)
    first = notes.returned[0][1] if notes.returned else started
    last = notes.returned[-1][1] if notes.returned else started
    delays = []
    for high, at in notes.returned:
        when = next((t for wm, t in covered if wm >= high and t >= at), None)
        if when is not None:
            delays.append((when - at) * 1000)
    delays.sort()

    def pct(p: float) -> float:
        return delays[min(len(delays) - 1, int(p * len(delays)))] if delays else float("nan")

    return {
        "batches": len(notes.returned),
        "covered": len(delays),
        "delay_ms": {"p50": pct(0.5), "p99": pct(0.99), "max": delays[-1] if delays else float("nan")},
        "records_per_second": n / max(1e-9, last - first),
    }


def run(clusters: Sequence[Cluster], records: int, repeats: int) -> dict[str, Any]:
    cluster = clusters[0]
    data = produce_records(cluster, records)
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in STRATEGIES}
    for _ in range(repeats):
        for name, strategy in STRATEGIES.items():
            runs[name].append(drain_batches(cluster, data.topic, records, strategy))
            print(f"  {name}: {runs[name][-1]['records_per_second']:,.0f} rec/s", flush=True)
    medians = {k: statistics.median(r["records_per_second"] for r in v) for k, v in runs.items()}
    reads = {k: statistics.median(r["watermark_read_us"] for r in v) for k, v in runs.items()}
    single = produce_records(cluster, records, partitions=1)
    prop = propagation(cluster, single.topic, records)
    return {
        "machine": machine_info("kafka"),
        "config": {"records": records, "repeats": repeats, "partitions": 4, "value_bytes": 100},
        "throughput": {
            "records_per_second_median": medians,
            "runs": runs,
            "cost": {k: 1 - medians[k] / medians["none"] for k in STRATEGIES if k != "none"},
            "watermark_read_us_median": reads,
        },
        "propagation": prop,
    }


def format_table(result: dict[str, Any]) -> str:
    t = result["throughput"]
    lines = [
        "| strategy | records/s (median) | cost vs none | `stream.watermark` read |",
        "|---|---|---|---|",
    ]
    for k, v in t["records_per_second_median"].items():
        cost = "" if k == "none" else f"{t['cost'][k] * 100:.1f} %"
        lines.append(f"| {k} | {v:,.0f} | {cost} | {t['watermark_read_us_median'][k]:.1f} µs |")
    p = result["propagation"]
    lines.append("")
    lines.append(
        f"push API (threads, 1 reader): watermark propagation p50 {p['delay_ms']['p50']:.2f} ms, "
        f"p99 {p['delay_ms']['p99']:.2f} ms, max {p['delay_ms']['max']:.2f} ms over {p['covered']} batches "
        f"at {p['records_per_second']:,.0f} records/s"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    add_broker_argument(parser)
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with started_clusters(args.brokers, 1) as clusters:
        result = run(clusters, args.records, args.repeats)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "watermarks.json").write_text(json.dumps(result, indent=2) + "\n")
    print(format_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
