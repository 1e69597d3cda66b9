"""Event time: what watermarks cost on the batch path, and how soon a watermark covers what was returned.

``throughput``
    N records (100 B, 4 partitions, producer timestamps) on one cluster, drained with
    ``stream.poll_batches(max_records=10000)`` (parallelism 1, touching every ``msg.value()``), alternating
    and repeated, under: ``none`` (``no_watermarks()``, the default), ``bounded``
    (``for_bounded_out_of_orderness(5)``: every message's timestamp is read, in the fetch step),
    ``monotonous``, and ``floor``: no strategy, but the caller reads every message's Kafka timestamp once and
    keeps none (``deque(map(Message.timestamp, batch.messages), maxlen=0)``), the least that any event time
    per record costs through confluent-kafka (``bounded`` must read them all to count late records and find
    each split's largest time). Each run also reads ``stream.watermark`` after every call. Records/s from
    the first record to the N-th, median; the cost is ``1 - kind / none``. Also the process's CPU time per
    record over the same span (all threads), median, and its cost ``kind / none - 1``: less disturbed than
    wall-clock rates by other work on the machine. *Paired* costs are the median over the repeats of each
    repeat's own cost (the kinds of a repeat run back to back).
``propagation``
    The push API (``runtime="threads"``, one reader, one partition of N records): each batch handler notes
    when it returns and the watermark its records give; a monitor thread polls ``RunControl.watermark``
    every 0.2 ms and notes when it first covers that value. Delay percentiles (ms) and the records/s of the
    run. On the pull API the watermark is moved inside ``poll``/``poll_batches`` before they return, so the
    delay there is zero by construction (``stream.watermark`` read right after each call already covers it;
    the time of that read is reported).

``alignment``
    A migration on two clusters: the new one reads a backlog of 50k records 10 ms of event time apart, the
    live one 10k records 100 ms apart from the same start, so read at the same pace the live side races
    ahead in event time; ``for_monotonous_timestamps().with_idleness(2).with_alignment(max_drift=30)``
    (checked every 50 ms), fetch batches of 200 records (20 s of the live side's event time). After every
    ``poll`` the drift is the largest split watermark minus the smallest, from ``status()["event_time"]``;
    reported: its largest value while the backlog was read, and how many live records came meanwhile.

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
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Message
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
KINDS: dict[str, tuple[WatermarkStrategy, bool]] = {  # name -> (strategy, the caller reads every timestamp)
    **{name: (strategy, False) for name, strategy in STRATEGIES.items()},
    "floor": (STRATEGIES["none"], True),
}
_timestamp = Message.timestamp


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


def drain_batches(
    cluster: Cluster, topic: str, n: int, strategy: WatermarkStrategy, read_timestamps: bool = False
) -> dict[str, float]:
    """Records/s from the first record to the n-th, the process's CPU time per record over the same span
    (every thread: the caller's, the fetch thread's and the client's), and the mean time of a
    ``stream.watermark`` read. ``read_timestamps``: the caller also reads each message's timestamp."""
    got = 0
    reads = 0
    read_s = 0.0
    first: float | None = None
    cpu_first = 0.0
    with _source(cluster, topic, strategy).open(registry=CollectorRegistry()) as stream:
        while got < n:
            for batch in stream.poll_batches(timeout=1.0, max_records=10_000):
                for m in batch.messages:
                    m.value()
                if read_timestamps:
                    deque(map(_timestamp, batch.messages), maxlen=0)  # read each, keep none
                got += len(batch)
                if first is None:
                    first, cpu_first = time.perf_counter(), time.process_time()
            t = time.perf_counter()
            stream.watermark  # noqa: B018  (what a job reads after each call)
            read_s += time.perf_counter() - t
            reads += 1
        end, cpu_end = time.perf_counter(), time.process_time()
    assert first is not None
    return {
        "records_per_second": n / (end - first),
        "cpu_ns_per_record": (cpu_end - cpu_first) / n * 1e9,
        "watermark_read_us": read_s / reads * 1e6,
    }


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


def _produce_at(cluster: Cluster, topic: str, stamps: Sequence[int]) -> None:
    producer = cluster.producer(**{"linger.ms": 20})
    for i, ts in enumerate(stamps):
        while True:
            try:
                producer.produce(topic, value=b"%d" % i, partition=0, timestamp=ts)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def alignment(new: Cluster, old: Cluster, backlog: int = 50_000, live: int = 10_000) -> dict[str, Any]:
    base = (int(time.time()) // 60 - 60) * 60_000
    tn, to = new.create_topic("bench-align", 1), old.create_topic("bench-align", 1)
    _produce_at(new, tn, [base + i * 10 for i in range(backlog)])
    _produce_at(old, to, [base + i * 100 for i in range(live)])
    strategy = (
        WatermarkStrategy.for_monotonous_timestamps()
        .with_idleness(2.0)
        .with_alignment("orders", max_drift=30.0, update_interval=0.05)
    )
    streams = [
        KafkaStream(
            "s",
            {
                c.cluster_id: ClusterMetadata(c.cluster_id, c.bootstrap_servers, frozenset({t}))
                for c, t in ((new, tn), (old, to))
            },
        )
    ]
    source = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService(streams))
        .set_stream_ids(["s"])
        .set_group_id(f"bench-align-{uuid.uuid4().hex[:8]}")
        .set_watermark_strategy(strategy)
        .set_property("reader.batch.max.records", "200")
        .set_property("reader.buffer.max.batches", "2")
        .build()
    )
    got = {new.cluster_id: 0, old.cluster_id: 0}
    live_early = 0
    drifts: list[float] = []
    with source.open(parallelism=2, registry=CollectorRegistry()) as stream:
        deadline = time.monotonic() + 300
        while sum(got.values()) < backlog + live and time.monotonic() < deadline:
            for r in stream.poll(timeout=0.2, max_records=500):
                got[r.cluster_id] += 1
                if r.cluster_id == old.cluster_id and got[new.cluster_id] < backlog:
                    live_early += 1
            if got[new.cluster_id] >= backlog:
                continue
            marks = [s["watermark"] for s in stream.status()["event_time"]["splits"].values()]
            if len(marks) == 2 and None not in marks:
                drifts.append((max(marks) - min(marks)) / 1000)
    return {
        "backlog": backlog,
        "live": live,
        "max_drift_s": 30.0,
        "fetch_batch_event_time_s": 200 * 0.100,
        "observed_max_drift_s": max(drifts) if drifts else None,
        "samples": len(drifts),
        "live_records_before_backlog_done": live_early,
        "all_arrived": sum(got.values()) == backlog + live,
    }


def run(clusters: Sequence[Cluster], records: int, repeats: int) -> dict[str, Any]:
    cluster = clusters[0]
    data = produce_records(cluster, records)
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
    for _ in range(repeats):
        for name, (strategy, read_timestamps) in KINDS.items():
            runs[name].append(drain_batches(cluster, data.topic, records, strategy, read_timestamps))
            last = runs[name][-1]
            rate, cpu_ns = last["records_per_second"], last["cpu_ns_per_record"]
            print(f"  {name}: {rate:,.0f} rec/s, {cpu_ns:.0f} ns CPU/record", flush=True)
    medians = {k: statistics.median(r["records_per_second"] for r in v) for k, v in runs.items()}
    cpu = {k: statistics.median(r["cpu_ns_per_record"] for r in v) for k, v in runs.items()}
    reads = {k: statistics.median(r["watermark_read_us"] for r in v) for k, v in runs.items()}
    single = produce_records(cluster, records, partitions=1)
    prop = propagation(cluster, single.topic, records)
    return {
        "machine": machine_info("kafka"),
        "config": {"records": records, "repeats": repeats, "partitions": 4, "value_bytes": 100},
        "throughput": {
            "records_per_second_median": medians,
            "runs": runs,
            "cost": {k: 1 - medians[k] / medians["none"] for k in KINDS if k != "none"},
            "cpu_ns_per_record_median": cpu,
            "cpu_cost": {k: cpu[k] / cpu["none"] - 1 for k in KINDS if k != "none"},
            # the kinds of a repeat run back to back: a repeat's own ratio is less swayed by slow stretches
            "paired_cost": {
                k: statistics.median(
                    1 - a["records_per_second"] / b["records_per_second"]
                    for a, b in zip(runs[k], runs["none"], strict=True)
                )
                for k in KINDS
                if k != "none"
            },
            "paired_cpu_cost": {
                k: statistics.median(
                    a["cpu_ns_per_record"] / b["cpu_ns_per_record"] - 1
                    for a, b in zip(runs[k], runs["none"], strict=True)
                )
                for k in KINDS
                if k != "none"
            },
            "watermark_read_us_median": reads,
        },
        "propagation": prop,
        "alignment": alignment(clusters[0], clusters[1]),
    }


def format_table(result: dict[str, Any]) -> str:
    t = result["throughput"]
    cpu = t.get("cpu_ns_per_record_median", {})
    paired, paired_cpu = t.get("paired_cost", {}), t.get("paired_cpu_cost", {})
    lines = [
        "| kind | records/s (median) | cost vs none | paired cost | CPU ns/record (median) | CPU cost | "
        "paired CPU cost | `stream.watermark` read |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def pct(table: dict[str, float], k: str) -> str:
        return "" if k not in table else f"{table[k] * 100:.1f} %"

    for k, v in t["records_per_second_median"].items():
        cpu_k = f"{cpu[k]:.0f}" if k in cpu else "-"
        read_us = t["watermark_read_us_median"][k]
        lines.append(
            f"| {k} | {v:,.0f} | {pct(t['cost'], k)} | {pct(paired, k)} | {cpu_k} | "
            f"{pct(t.get('cpu_cost', {}), k)} | {pct(paired_cpu, k)} | {read_us:.1f} µs |"
        )
    p = result["propagation"]
    lines.append("")
    lines.append(
        f"push API (threads, 1 reader): watermark propagation p50 {p['delay_ms']['p50']:.2f} ms, "
        f"p99 {p['delay_ms']['p99']:.2f} ms, max {p['delay_ms']['max']:.2f} ms over {p['covered']} batches "
        f"at {p['records_per_second']:,.0f} records/s"
    )
    a = result.get("alignment")
    if a:
        drift = a["observed_max_drift_s"]
        lines.append(
            f"alignment (max_drift {a['max_drift_s']:.0f} s, one fetch batch = "
            f"{a['fetch_batch_event_time_s']:.1f} s of event time): largest drift while the backlog was read "
            f"{'-' if drift is None else f'{drift:.1f} s'} over {a['samples']} samples; "
            f"{a['live_records_before_backlog_done']} of {a['live']} live records came before the "
            f"{a['backlog']}-record backlog was read; all arrived: {a['all_arrived']}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    add_broker_argument(parser)
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with started_clusters(args.brokers, 2) as clusters:
        result = run(clusters, args.records, args.repeats)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "watermarks.json").write_text(json.dumps(result, indent=2) + "\n")
    print(format_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
