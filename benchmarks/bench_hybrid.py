"""Hybrid sources: the archive stage's rate against the live Kafka record path, and the switch to live.

Goals (issue 23): the archive stage reads Parquet at >= 3x the records per second of the live Kafka record
path on the same machine; the switch from the last archived record to the first live one takes < 1 s;
0 losses and 0 duplicates at the handover when the archive holds offsets.

1. **Rate.** One topic of ``--records`` records of 100 B on 4 partitions of a harness Kafka cluster, and
   the same number of records in a Parquet archive in the S3 sink's layout (``flush.size`` 50,000; columns
   ``id``, ``name``, ``amount``, ``payload`` (100 B), ``__offset``, ``__ts``, as Connect's ``ParquetFormat``
   and ``InsertField`` write them). Alternating runs of: *live records* (the source's ``poll`` path,
   ``record.value`` touched, as bench_throughput's record path), *archive* (``KafkaArchiveSource`` stage
   ``poll``, ``record.value`` touched), *archive, one field* (``record.value["id"]`` read: one column turned
   into Python objects per batch), *archive, dict* (``dict(record.value)``: every column of every row) and
   *archive, columns* (the stage's ``poll_columns``: Arrow batch slices and offset lists, no object per
   record) and *hybrid, columns* (the same through a hybrid stream: ``HybridStream.poll_columns``).
   Records per second from ``open`` to the last record, and process CPU per record.
2. **Switch.** Two clusters (east, west), a topic of 4 partitions on each; west written by a transactional
   producer (commit markers leave offset gaps). The first ~80% of every partition is read from Kafka with a
   raw consumer and written as the sink would (Parquet, S3 layout, ``__offset``/``__ts`` fields). Then
   ``HybridSource.builder(archive).add_source(live).build()`` reads everything (when the branch has
   ``HybridSource``; else the two stages are chained by hand: the archive stage's ``handover()`` positions
   become the live source's ``OffsetsInitializer.offsets``). Switch time: from the return of the last
   archived record to the return of the first live one. Every (split, offset) is checked against the
   raw consumer's: losses and duplicates.

Run: ``python -m benchmarks.bench_hybrid [--records N] [--repeats R] [--quick]``; writes
``benchmarks/results/hybrid.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from prometheus_client import CollectorRegistry

import multicluster_source
from benchmarks._brokers import Cluster, add_broker_argument, machine_info, started_clusters
from benchmarks.bench_throughput import (
    PARTITIONS,
    VARIANTS,
    Dataset,
    prepare,
    source_drain,
)
from multicluster_source import (
    ClusterMetadata,
    HybridSource,
    KafkaArchiveSource,
    KafkaStream,
    MultiClusterKafkaSource,
    OffsetsInitializer,
    SourceRecord,
    StaticMetadataService,
)

RESULTS = Path(__file__).resolve().parent / "results"
FLUSH_SIZE = 50_000
PROPS = VARIANTS["fast-refetch"]


# ------------------------------------------------------------------------------------------------- archives


def write_parquet_file(path: Path, offsets: Sequence[int], timestamps: Sequence[int], payloads: Any) -> None:
    n = len(offsets)
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "name": pa.array([f"n{i}" for i in range(n)], pa.string()),
            "amount": pa.array([i * 0.5 for i in range(n)], pa.float64()),
            "payload": payloads if payloads is not None else pa.array([b"x" * 100] * n, pa.binary()),
            "__offset": pa.array(offsets, pa.int64()),
            "__ts": pa.array(timestamps, pa.int64()),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="snappy")


def write_archive(
    root: Path, topic: str, partition: int, offsets: Sequence[int], timestamps: Sequence[int]
) -> int:
    """The S3 sink's files for ``offsets`` of one partition; returns how many files."""
    files = 0
    for i in range(0, len(offsets), FLUSH_SIZE):
        part = offsets[i : i + FLUSH_SIZE]
        name = f"{topic}+{partition}+{part[0]:010d}.snappy.parquet"
        write_parquet_file(
            root / topic / f"partition={partition}" / name, part, timestamps[i : i + FLUSH_SIZE], None
        )
        files += 1
    return files


def archive_like(dataset: Dataset, root: Path) -> None:
    """A Parquet archive holding as many records per partition as the live topic."""
    for part in dataset.parts:
        for p, count in part.counts.items():
            offsets = list(range(count))
            write_archive(
                root / part.cluster_id, part.topic, p, offsets, [1_700_000_000_000 + o for o in offsets]
            )


# ------------------------------------------------------------------------------------------------- rates


def _touch_value(records: list[SourceRecord]) -> None:
    for record in records:
        record.value  # noqa: B018 - as the live record path's drain does


def _touch_field(records: list[SourceRecord]) -> None:
    for record in records:
        record.value["id"]


def _touch_dict(records: list[SourceRecord]) -> None:
    for record in records:
        dict(record.value)


def _touch_columns(parts: list[Any]) -> None:
    for part in parts:
        part.batch  # noqa: B018 - the Arrow batch slice: no object per record


TOUCH: dict[str, Callable[[list[Any]], None]] = {
    "archive": _touch_value,
    "archive-field": _touch_field,
    "archive-dict": _touch_dict,
    "archive-columns": _touch_columns,
    "hybrid-columns": _touch_columns,
}


def archive_drain(root: Path, dataset: Dataset, kind: str, parallelism: int) -> dict[str, float]:
    roots = {p.cluster_id: str(root / p.cluster_id) for p in dataset.parts}
    source = KafkaArchiveSource(roots, format="parquet", offset_field="__offset", timestamp_field="__ts")
    touch = TOUCH[kind]
    start, cpu_start = time.perf_counter(), time.process_time()
    if kind == "hybrid-columns":  # through the hybrid stream: HybridStream.poll_columns
        got = 0
        with HybridSource.builder(source).build().open(parallelism=parallelism) as stream:
            while not stream.finished:
                parts = stream.poll_columns(0.5, 10_000)
                touch(parts)
                got += sum(map(len, parts))
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        if got != dataset.total:
            raise RuntimeError(f"hybrid columns read {got} records, expected {dataset.total}")
        return {"records": got, "seconds": elapsed, "rate": got / elapsed, "cpu_ns": cpu * 1e9 / got}
    reader = source.open_stage(
        parallelism=parallelism, start=None, restored=None, registry=None, work_dir=None
    )
    got = 0
    try:
        take = reader.poll_columns if kind == "archive-columns" else reader.poll  # type: ignore[attr-defined]
        while not reader.finished:
            records = take(0.5, 10_000)
            touch(records)
            got += sum(map(len, records)) if kind == "archive-columns" else len(records)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    finally:
        reader.close()
    if got != dataset.total:
        raise RuntimeError(f"archive drain read {got} records, expected {dataset.total}")
    return {"records": got, "seconds": elapsed, "rate": got / elapsed, "cpu_ns": cpu * 1e9 / got}


def live_drain(dataset: Dataset, parallelism: int) -> dict[str, float]:
    m = source_drain(dataset, "records", parallelism, PROPS)
    return {"records": m.records, "seconds": m.seconds, "rate": m.rate, "cpu_ns": m.cpu_ns_per_record}


def run_rates(cluster: Cluster, records: int, repeats: int, parallelism: int) -> dict[str, Any]:
    dataset = prepare([cluster], records)
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in ("live", *TOUCH)}
    ratios: list[float] = []
    columns: list[float] = []
    hybrid_columns: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-hybrid-") as tmp:
        archive_like(dataset, Path(tmp))
        for r in range(repeats):
            live = live_drain(dataset, parallelism)
            runs["live"].append(live)
            for kind in TOUCH:
                runs[kind].append(archive_drain(Path(tmp), dataset, kind, parallelism))
            ratios.append(runs["archive"][-1]["rate"] / live["rate"])
            columns.append(runs["archive-columns"][-1]["rate"] / live["rate"])
            hybrid_columns.append(runs["hybrid-columns"][-1]["rate"] / live["rate"])
            print(
                f"  rates run {r + 1}/{repeats}: live {live['rate']:,.0f}/s, archive "
                f"{runs['archive'][-1]['rate']:,.0f}/s (x{ratios[-1]:.2f})",
                flush=True,
            )
    summary = {
        kind: {
            "rate_median": statistics.median(m["rate"] for m in ms),
            "rate_min": min(m["rate"] for m in ms),
            "rate_max": max(m["rate"] for m in ms),
            "cpu_ns_median": statistics.median(m["cpu_ns"] for m in ms),
        }
        for kind, ms in runs.items()
    }
    return {
        "records": dataset.total,
        "parallelism": parallelism,
        "runs": runs,
        "summary": summary,
        "paired_ratio_median": statistics.median(ratios),
        "paired_ratios": ratios,
        "paired_columns_ratio_median": statistics.median(columns),
        "paired_hybrid_columns_ratio_median": statistics.median(hybrid_columns),
    }


# ------------------------------------------------------------------------------------------------- switch


def produce(cluster: Cluster, topic: str, n: int, *, transactional: bool) -> None:
    conf: dict[str, Any] = {"linger.ms": 20}
    if transactional:
        conf["transactional.id"] = f"bench-hybrid-{uuid.uuid4().hex[:8]}"
    producer = cluster.producer(**conf)
    if transactional:
        producer.init_transactions()
    for i in range(0, n, 100):
        if transactional:
            producer.begin_transaction()
        for j in range(i, min(n, i + 100)):
            producer.produce(topic, f"v{j}".encode() * 10, key=f"k{j}".encode(), partition=j % PARTITIONS)
        if transactional:
            producer.commit_transaction()
        else:
            producer.poll(0)
    producer.flush(60)


def read_all(cluster: Cluster, topic: str) -> dict[int, list[tuple[int, int]]]:
    """Every record of every partition as (offset, timestamp), read committed."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)
    }
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    found: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for m in consumer.consume(1000, 0.5):
            partition, offset = m.partition(), m.offset()
            if m.error() is None and partition is not None and offset is not None:
                found[partition].append((offset, m.timestamp()[1]))
        done = consumer.position([TopicPartition(topic, p) for p in range(PARTITIONS)])
        if all(tp.offset >= ends[tp.partition] for tp in done):
            break
    consumer.close()
    return found


def _live_source(
    clusters: Sequence[Cluster], topics: dict[str, str], starting: OffsetsInitializer
) -> MultiClusterKafkaSource:
    meta = {
        c.cluster_id: ClusterMetadata(c.cluster_id, c.bootstrap_servers, frozenset([topics[c.cluster_id]]))
        for c in clusters
    }
    return (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([KafkaStream("hybrid", meta)]))
        .set_stream_ids(["hybrid"])
        .set_group_id(f"bench-hybrid-{uuid.uuid4().hex[:8]}")
        .set_starting_offsets(starting)
        .set_properties({**PROPS, "isolation.level": "read_committed"})
        .build()
    )


def one_switch(
    clusters: Sequence[Cluster],
    topics: dict[str, str],
    archive: KafkaArchiveSource,
    expected: int,
    archived: set[tuple[str, int]],
) -> dict[str, Any]:
    """Read archive then live; returns the switch time, losses, duplicates and how the stages were chained."""
    seen: list[tuple[str, int]] = []
    last_archive_t = first_live_t = 0.0
    hybrid_cls: Any = getattr(multicluster_source, "HybridSource", None)

    def take(records: list[SourceRecord]) -> None:
        nonlocal last_archive_t, first_live_t
        now = time.perf_counter()
        for r in records:
            key = (f"{r.cluster_id}/{r.partition}", r.offset)
            seen.append(key)
            if key in archived:
                last_archive_t = now
            elif not first_live_t:
                first_live_t = now

    deadline = time.monotonic() + 120
    if hybrid_cls is not None:
        live = _live_source(clusters, topics, OffsetsInitializer.earliest())
        hybrid = hybrid_cls.builder(archive).add_source(live).build()
        with hybrid.open(parallelism=2, registry=CollectorRegistry()) as stream:
            while len(seen) < expected and time.monotonic() < deadline:
                take(stream.poll(0.2, 10_000))
        how = "HybridSource"
    else:
        reader = archive.open_stage(parallelism=2, start=None, restored=None, registry=None, work_dir=None)
        try:
            while not reader.finished:
                take(reader.poll(0.2, 10_000))
            positions = reader.handover().positions
        finally:
            reader.close()
        stream = _live_source(clusters, topics, OffsetsInitializer.offsets(positions)).open(
            parallelism=2, registry=CollectorRegistry()
        )
        with stream:
            while len(seen) < expected and time.monotonic() < deadline:
                take(stream.poll(0.2, 10_000))
        how = "stages chained by hand (no HybridSource on this branch)"
    counts: dict[tuple[str, int], int] = {}
    for key in seen:
        counts[key] = counts.get(key, 0) + 1
    return {
        "switch_s": first_live_t - last_archive_t,
        "records": len(seen),
        "duplicates": sum(c - 1 for c in counts.values()),
        "losses": expected - len(counts),
        "how": how,
    }


def run_switch(clusters: Sequence[Cluster], per_cluster: int, repeats: int) -> dict[str, Any]:
    topics = {c.cluster_id: c.create_topic("bench-hybrid", PARTITIONS) for c in clusters}
    for i, c in enumerate(clusters):
        produce(c, topics[c.cluster_id], per_cluster, transactional=i == 1)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-hybrid-switch-") as tmp:
        root = Path(tmp)
        archived: set[tuple[str, int]] = set()
        expected = 0
        for c in clusters:
            log = read_all(c, topics[c.cluster_id])
            for p, records in log.items():
                cut = records[: int(len(records) * 0.8)]
                expected += len(records)
                archived.update((f"{c.cluster_id}/{p}", o) for o, _ in cut)
                write_archive(
                    root / c.cluster_id, topics[c.cluster_id], p, [o for o, _ in cut], [t for _, t in cut]
                )
        archive = KafkaArchiveSource(
            {c.cluster_id: str(root / c.cluster_id) for c in clusters},
            format="parquet",
            offset_field="__offset",
            timestamp_field="__ts",
        )
        for r in range(repeats):
            results.append(one_switch(clusters, topics, archive, expected, archived))
            print(f"  switch run {r + 1}/{repeats}: {results[-1]}", flush=True)
    switch = [r["switch_s"] for r in results]
    return {
        "per_cluster": per_cluster,
        "runs": results,
        "switch_median_s": statistics.median(switch),
        "switch_max_s": max(switch),
        "losses": sum(r["losses"] for r in results),
        "duplicates": sum(r["duplicates"] for r in results),
        "how": results[0]["how"],
    }


# ------------------------------------------------------------------------------------------------- report


def _rate_lines(rates: dict[str, Any]) -> list[str]:
    s = rates["summary"]
    lines = [
        f"Archive stage (Parquet) against the live record path: {rates['records']:,} records, "
        f"parallelism {rates['parallelism']}, {len(rates['runs']['live'])} runs each",
        "",
        "| path | records/s median [min-max] | CPU ns/record (median) | / live (median) |",
        "|---|---|---|---|",
    ]
    live = s["live"]["rate_median"]
    for kind, row in s.items():
        lines.append(
            f"| {kind} | {row['rate_median']:,.0f} [{row['rate_min']:,.0f}-{row['rate_max']:,.0f}] | "
            f"{row['cpu_ns_median']:,.0f} | **{row['rate_median'] / live:.2f}** |"
        )
    lines.append(
        f"\npaired ratio archive / live (median of runs): **{rates['paired_ratio_median']:.2f}** "
        "(goal >= 3); "
        f"archive-columns / live: **{rates.get('paired_columns_ratio_median', 0.0):.2f}**"
    )
    if "paired_hybrid_columns_ratio_median" in rates:
        lines.append(
            "paired ratio hybrid-columns (HybridStream.poll_columns) / live: "
            f"**{rates['paired_hybrid_columns_ratio_median']:.2f}** (goal >= 3)"
        )
    return lines


def format_report(result: dict[str, Any]) -> str:
    lines = _rate_lines(result["rates"]) if "rates" in result else []
    sw = result.get("switch")
    if sw:
        lines.append(
            f"\nSwitch archive -> live ({sw['how']}), 2 clusters, {sw['per_cluster']:,} records each (west "
            f"transactional): median **{sw['switch_median_s']:.3f} s**, max {sw['switch_max_s']:.3f} s "
            "(goal < 1 s); "
            f"losses **{sw['losses']}**, duplicates **{sw['duplicates']}** over {len(sw['runs'])} runs"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Hybrid: archive stage rate and the switch to live.")
    add_broker_argument(parser)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="200,000 records, 2 runs")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument(
        "--switch-records", type=int, default=40_000, help="records per cluster for the switch"
    )
    parser.add_argument("--no-switch", action="store_true")
    parser.add_argument("--no-rates", action="store_true", help="only the switch")
    args = parser.parse_args(argv)
    records, repeats = (200_000, 2) if args.quick else (args.records, args.repeats)
    with started_clusters(args.brokers, 1 if args.no_switch else 2) as clusters:
        result: dict[str, Any] = {"machine": machine_info(args.brokers)}
        if not args.no_rates:
            result["rates"] = run_rates(clusters[0], records, repeats, args.parallelism)
        if not args.no_switch:
            result["switch"] = run_switch(clusters, args.switch_records, max(2, repeats // 2))
    report = format_report(result)
    print(report)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "hybrid.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {RESULTS / 'hybrid.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
