"""Scale: 10 logical clusters x 1,000 partitions = 10,000 splits in one source (issue 8, part 3).

Two physical single-node Apache Kafka clusters are started for this benchmark alone (1 GiB heap each: a
KRaft node holding 5,000 partitions needs more than the tests' 384 MiB). Logical cluster *i* lives on physical
cluster *i mod 2* and owns its own topics of 100 partitions (10 topics for 1,000 partitions), so every split
is a distinct partition on a broker. One record is produced to every partition.

Figures (seconds from ``source.open()`` unless said otherwise):

- **all splits assigned**: ``stream.assignments()`` holds every split (metadata read, partitions listed,
  starting offsets resolved for 10,000 partitions, splits placed on the readers);
- **first record of every split**: every split delivered its one record;
- **checkpoint**: time of ``stream.checkpoint()`` (write, fsync, rename, and committing 1,000 offsets to each
  logical cluster), median of 3, and the size of the checkpoint file;
- **restore**: a new source on the same checkpoint directory: all splits assigned again, and records
  delivered again within 3 s (must be 0: every position is past its record);
- **RSS** of the benchmark process before open, with everything assigned and read, and after close (the
  growth while running is the figure to compare: ``run_all.py`` runs this after other benchmarks in the same
  process); threads.

References, measured in the same run: the raw client (one confluent-kafka ``Consumer`` per logical cluster,
``assign`` at offset 0, polled round-robin until every partition gave its record), the JSON encoding and
fsync of the same positions alone (the floor of a checkpoint), and the previous run (``results/scale.json``).

Run: ``python benchmarks/bench_scale.py [--partitions 10000] [--logical 10] [--heap 1g]``. When the
machine cannot hold the requested size, lower ``--partitions``: the largest that worked is what the result
file records.

``--sweep`` measures instead ``checkpoint()`` (caller pause, durable and committed) and ``close()`` side by
side at several sizes, in-process up to 100,000 splits and on a real broker up to 10,000, before (``--baseline
<git ref>``) and after: see ``_scale_sweep.py``; results in ``results/scale_sweep.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._brokers import RESULTS_DIR, machine_info
from benchmarks._scale_sweep import run_sweep, sweep_table, wait_for_leaders
from benchmarks.bench_soak import figures_markdown, open_fds, rdk_threads, rss_mb, write_json
from multicluster_source import (
    ClusterMetadata,
    KafkaStream,
    MultiClusterKafkaSource,
    OffsetsInitializer,
    StaticMetadataService,
)

DEFAULT_PARTITIONS = 10_000
DEFAULT_LOGICAL = 10
PARTITIONS_PER_TOPIC = 100
PHYSICAL = 2
DEFAULT_HEAP = "1g"
PARALLELISM = 2
CHECKPOINTS = 3
STREAM_ID = "scale"
TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Logical:
    cluster_id: str
    physical: Any  # harness KafkaCluster
    topics: tuple[tuple[str, int], ...]  # (name, partitions)

    @property
    def partitions(self) -> int:
        return sum(n for _t, n in self.topics)

    def metadata(self) -> ClusterMetadata:
        return ClusterMetadata(
            self.cluster_id, self.physical.bootstrap_servers, frozenset(t for t, _n in self.topics)
        )


@contextlib.contextmanager
def physical_clusters(heap: str) -> Iterator[list[Any]]:
    """Two single-node Apache Kafka clusters with ``heap``, started in parallel, stopped on exit."""
    harness = importlib.import_module("harness.kafka")
    clusters = [harness.KafkaCluster(f"scale{i}", heap=heap) for i in range(PHYSICAL)]
    try:
        with ThreadPoolExecutor(PHYSICAL) as pool:
            for future in [pool.submit(c.start) for c in clusters]:
                future.result()
        yield clusters
    finally:
        for cluster in clusters:
            cluster.stop()


def create_layout(clusters: Sequence[Any], total: int, logical: int) -> list[Logical]:
    """Topics of ``PARTITIONS_PER_TOPIC`` partitions, ``total // logical`` partitions per logical cluster."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    per_logical = total // logical
    out: list[Logical] = []
    for i in range(logical):
        physical = clusters[i % len(clusters)]
        sizes = [PARTITIONS_PER_TOPIC] * (per_logical // PARTITIONS_PER_TOPIC)
        if per_logical % PARTITIONS_PER_TOPIC:
            sizes.append(per_logical % PARTITIONS_PER_TOPIC)
        tag = uuid.uuid4().hex[:6]
        topics = tuple((f"scale-lc{i}-t{j}-{tag}", n) for j, n in enumerate(sizes))
        futures = physical.admin().create_topics(
            [NewTopic(name, n, 1) for name, n in topics], operation_timeout=120, request_timeout=120
        )
        for future in futures.values():
            future.result()
        out.append(Logical(f"lc{i}", physical, topics))
    for cluster in clusters:
        names = {t for lc in out if lc.physical is cluster for t, _n in lc.topics}
        wait_for_leaders(cluster, names, sum(lc.partitions for lc in out if lc.physical is cluster))
    return out


def produce_one_per_partition(layout: Sequence[Logical]) -> int:
    n = 0
    for cluster in {id(lc.physical): lc.physical for lc in layout}.values():
        producer = cluster.producer(**{"linger.ms": 20, "batch.num.messages": 10000})
        for lc in layout:
            if lc.physical is not cluster:
                continue
            for topic, partitions in lc.topics:
                for p in range(partitions):
                    producer.produce(topic, f"{topic}/{p}".encode(), partition=p)
                    n += 1
                producer.poll(0)
        if producer.flush(120):
            raise TimeoutError("records not delivered")
        producer.close()
    return n


def _source(layout: Sequence[Logical], group: str) -> MultiClusterKafkaSource:
    streams = [KafkaStream(STREAM_ID, {lc.cluster_id: lc.metadata() for lc in layout})]
    return (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService(streams))
        .set_stream_ids([STREAM_ID])
        .set_group_id(group)
        .set_starting_offsets(OffsetsInitializer.earliest())
        .set_name(f"scale-{group[-6:]}")
        .build()
    )


def _assigned(stream: Any) -> int:
    return sum(len(ids) for ids in stream.assignments().values())


def measure_source(layout: Sequence[Logical], total: int) -> dict[str, Any]:
    group = f"scale-{uuid.uuid4().hex[:8]}"
    ckpt = Path(tempfile.mkdtemp(prefix="mcs-scale-")) / "ckpt"
    out: dict[str, Any] = {"rss_mb": {"before_open": rss_mb()}, "fds_before_open": open_fds()}
    started = time.perf_counter()
    stream = _source(layout, group).open(PARALLELISM, checkpoint_dir=str(ckpt))
    try:
        out["open_s"] = time.perf_counter() - started
        assigned_at = None
        splits: set[str] = set()
        deadline = time.monotonic() + TIMEOUT_S
        next_check = 0.0
        while time.monotonic() < deadline and len(splits) < total:
            for r in stream.poll(timeout=0.05):
                splits.add(r.split_id)
            now = time.perf_counter()
            if assigned_at is None and now >= next_check:
                next_check = now + 0.05
                if _assigned(stream) >= total:
                    assigned_at = now - started
        out["all_assigned_s"] = assigned_at
        out["all_first_records_s"] = time.perf_counter() - started if len(splits) >= total else None
        out["splits_read"] = len(splits)
        if assigned_at is None and _assigned(stream) >= total:
            out["all_assigned_s"] = time.perf_counter() - started
        out["rss_mb"]["running"] = rss_mb()
        out["threads"] = {
            "python": threading.active_count(),
            "mcs": sum(1 for t in threading.enumerate() if t.name.startswith("mcs-")),
            "librdkafka": rdk_threads(),
        }
        times = []
        for _ in range(CHECKPOINTS):
            t0 = time.perf_counter()
            stream.checkpoint()
            times.append(time.perf_counter() - t0)
        out["checkpoint_s"] = {"median": statistics.median(times), "min": min(times), "max": max(times)}
        newest = max(ckpt.glob("chk-*.json"), key=lambda p: int(p.stem.split("-")[1]))
        out["checkpoint_bytes"] = newest.stat().st_size
        positions = json.loads(newest.read_text()).get("positions", {})
        out["checkpoint_positions"] = len(positions)
        out["checkpoint_floor_s"] = _checkpoint_floor(positions, ckpt.parent / "floor.json")
    finally:
        t0 = time.perf_counter()
        stream.close()
        out["close_s"] = time.perf_counter() - t0
    # Restore: everything assigned again, nothing delivered again.
    started = time.perf_counter()
    stream = _source(layout, group).open(PARALLELISM, checkpoint_dir=str(ckpt))
    try:
        restored_at = None
        again = 0
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and restored_at is None:
            again += len(stream.poll(timeout=0.05))
            if _assigned(stream) >= total:
                restored_at = time.perf_counter() - started
        settle = time.monotonic() + 3.0
        while time.monotonic() < settle:
            again += len(stream.poll(timeout=0.1))
        out["restore"] = {"all_assigned_s": restored_at, "records_delivered_again": again}
    finally:
        stream.close()
    out["rss_mb"]["after_close"] = rss_mb()
    out["fds_after_close"] = open_fds()
    return out


def _checkpoint_floor(positions: dict[str, int], path: Path) -> float:
    """Seconds to JSON-encode ``positions`` and write them durably: what any checkpoint of them costs."""
    times = []
    for _ in range(CHECKPOINTS):
        t0 = time.perf_counter()
        data = json.dumps({"positions": positions}, separators=(",", ":")).encode()
        with open(path, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure_raw(layout: Sequence[Logical], total: int) -> dict[str, Any]:
    """One Consumer per logical cluster, assigned at offset 0, polled round-robin until every partition gave
    its record."""
    from confluent_kafka import Consumer, TopicPartition

    started = time.perf_counter()
    consumers = []
    for lc in layout:
        consumer = Consumer(
            {
                "bootstrap.servers": lc.physical.bootstrap_servers,
                "group.id": f"raw-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "fetch.queue.backoff.ms": 10,
            }
        )
        consumer.assign([TopicPartition(t, p, 0) for t, n in lc.topics for p in range(n)])
        consumers.append((lc.cluster_id, consumer))
    seen: set[tuple[str, str | None, int | None]] = set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(seen) < total and time.monotonic() < deadline:
            for cid, consumer in consumers:
                for msg in consumer.consume(1000, 0.01):
                    if msg.error() is None:
                        seen.add((cid, msg.topic(), msg.partition()))
        elapsed = time.perf_counter() - started
    finally:
        for _cid, consumer in consumers:
            consumer.close()
    return {"all_first_records_s": elapsed if len(seen) >= total else None, "partitions_read": len(seen)}


def run(
    total: int = DEFAULT_PARTITIONS, logical: int = DEFAULT_LOGICAL, heap: str = DEFAULT_HEAP
) -> dict[str, Any]:
    started = time.perf_counter()
    previous = previous_summary()
    with physical_clusters(heap) as clusters:
        t0 = time.perf_counter()
        layout = create_layout(clusters, total, logical)
        created_s = time.perf_counter() - t0
        actual = sum(lc.partitions for lc in layout)
        produced = produce_one_per_partition(layout)
        raw = measure_raw(layout, actual)
        source = measure_source(layout, actual)
        brokers_rss = [_broker_rss_mb(c) for c in clusters]
    return {
        "generated": time.strftime("%Y-%m-%d %H:%M %Z"),
        "previous": previous,
        "config": {
            "partitions": actual,
            "logical_clusters": logical,
            "physical_clusters": PHYSICAL,
            "partitions_per_topic": PARTITIONS_PER_TOPIC,
            "topics": sum(len(lc.topics) for lc in layout),
            "parallelism": PARALLELISM,
            "broker_heap": heap,
        },
        "machine": machine_info("kafka"),
        "topics_created_s": created_s,
        "records": produced,
        "raw": raw,
        "source": source,
        "broker_rss_mb": brokers_rss,
        "elapsed_s": time.perf_counter() - started,
    }


def _broker_rss_mb(cluster: Any) -> float | None:
    try:
        pid = cluster._nodes[0].proc.pid
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (AttributeError, IndexError, OSError):
        pass
    return None


# ---------------------------------------------------------------------------------------------- reports


def previous_summary() -> dict[str, Any] | None:
    """The figures of the last run written to ``results/scale.json`` (the reference of the next one)."""
    try:
        last = json.loads((RESULTS_DIR / "scale.json").read_text())
        src = last["source"]
        return {
            "generated": last.get("generated"),
            "partitions": last["config"]["partitions"],
            "source": {
                k: src.get(k)
                for k in (
                    "open_s",
                    "all_assigned_s",
                    "all_first_records_s",
                    "checkpoint_s",
                    "checkpoint_bytes",
                )
            }
            | {"rss_mb": src.get("rss_mb")},
            "raw": last.get("raw"),
        }
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _s(value: Any, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def table_rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(figure, this run, reference) rows."""
    src, raw = result["source"], result["raw"]
    prev = (result.get("previous") or {}).get("source", {})
    ratio = (
        f" (source / raw {src['all_first_records_s'] / raw['all_first_records_s']:.2f})"
        if src.get("all_first_records_s") and raw.get("all_first_records_s")
        else ""
    )
    ckpt = src["checkpoint_s"]
    per_split = src["checkpoint_bytes"] / max(1, src["checkpoint_positions"])
    rss = src["rss_mb"]
    prev_rss = prev.get("rss_mb") or {}
    prev_growth = (
        prev_rss["running"] - prev_rss["before_open"]
        if {"running", "before_open"} <= prev_rss.keys()
        else None
    )
    return [
        ("open() returns (s)", _s(src["open_s"], 3), f"previous {_s(prev.get('open_s'), 3)}"),
        ("all splits assigned (s)", _s(src["all_assigned_s"]), f"previous {_s(prev.get('all_assigned_s'))}"),
        (
            "first record of every split (s)",
            _s(src["all_first_records_s"]) + ratio,
            f"raw client {_s(raw['all_first_records_s'])}; previous {_s(prev.get('all_first_records_s'))}",
        ),
        (
            "checkpoint, median [min-max] (s)",
            f"{_s(ckpt['median'], 3)} [{_s(ckpt['min'], 3)}-{_s(ckpt['max'], 3)}]",
            f"JSON + fsync of the positions alone {_s(src['checkpoint_floor_s'], 3)}; previous "
            f"{_s(prev.get('checkpoint_s', {}).get('median'), 3)}",
        ),
        (
            "checkpoint file (bytes)",
            f"{src['checkpoint_bytes']:,} ({per_split:.0f} per split)",
            f"previous {prev.get('checkpoint_bytes', 'n/a')}",
        ),
        (
            "restore: all splits assigned (s)",
            _s(src["restore"]["all_assigned_s"]),
            f"first open {_s(src['all_assigned_s'])}",
        ),
        ("restore: records delivered again", str(src["restore"]["records_delivered_again"]), "0"),
        (
            "RSS before open / running / after close (MiB)",
            f"{rss['before_open']:.0f} / {rss['running']:.0f} / {rss['after_close']:.0f} "
            f"(+{rss['running'] - rss['before_open']:.0f} while running)",
            f"previous +{_s(prev_growth, 0)} while running",
        ),
        (
            "threads while running: Python (mcs-*) / librdkafka",
            f"{src['threads']['python']} ({src['threads']['mcs']}) / {src['threads']['librdkafka']}",
            "-",
        ),
        ("close() (s)", _s(src["close_s"]), "-"),
    ]


def describe(result: dict[str, Any]) -> str:
    """One sentence saying what the run did."""
    cfg = result["config"]
    prev = result.get("previous") or {}
    since = (
        f"; previous run: {prev['partitions']:,} partitions on {prev['generated']}"
        if prev.get("generated")
        else ""
    )
    return (
        f"{cfg['partitions']:,} splits = {cfg['logical_clusters']} logical clusters x "
        f"{cfg['partitions'] // cfg['logical_clusters']:,} partitions, each a distinct partition on one of "
        f"{cfg['physical_clusters']} single-node brokers ({cfg['topics']} topics of up to "
        f"{cfg['partitions_per_topic']} partitions, {cfg['broker_heap']} heap, broker RSS "
        + " / ".join(f"{v:.0f} MiB" for v in result["broker_rss_mb"] if v is not None)
        + f"), one record per partition, {cfg['parallelism']} readers{since}"
    )


def markdown(result: dict[str, Any]) -> list[str]:
    """The scale section body for RESULTS.md."""
    return figures_markdown(
        describe(result) + ". Seconds from `source.open()`; references measured in the same run, or the "
        "previous run (`results/scale.json`).",
        table_rows(result),
    )


def format_table(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        f"Scale: {cfg['partitions']:,} partitions = {cfg['logical_clusters']} logical clusters x "
        f"{cfg['partitions'] // cfg['logical_clusters']:,} on {cfg['physical_clusters']} brokers "
        f"({cfg['topics']} topics, {cfg['broker_heap']} heap), {cfg['parallelism']} readers",
        f"{'figure':<50} {'this run':<34} reference",
    ]
    for figure, value, ref in table_rows(result):
        lines.append(f"{figure:<50} {value:<34} {ref}")
    return "\n".join(lines)


def write_result(result: dict[str, Any]) -> Path:
    return write_json("scale", result)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time to assign, checkpoint size and time, RSS at scale.")
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS, help="splits in all")
    parser.add_argument("--logical", type=int, default=DEFAULT_LOGICAL, help="logical clusters")
    parser.add_argument("--heap", default=DEFAULT_HEAP, help="broker JVM heap")
    parser.add_argument("--sweep", action="store_true", help="checkpoint and close costs at several sizes")
    parser.add_argument(
        "--in-process", default="1000,10000,36000,100000", help="sweep: sizes without brokers"
    )
    parser.add_argument("--kafka", default="1000,4000,10000", help="sweep: sizes on a real broker ('' skips)")
    parser.add_argument("--kafka-brokers", type=int, default=1, help="sweep: single-node Kafka clusters")
    parser.add_argument("--changes", type=int, default=1000, help="sweep: positions moved per checkpoint")
    parser.add_argument(
        "--settle",
        type=float,
        default=3.0,
        help="sweep: seconds of polling after every split's record (periodic checkpoints; 45 s covers a "
        "discovery round and ~90 checkpoints for a p99)",
    )
    parser.add_argument("--baseline", default=None, help="sweep: git ref measured as 'before' on Kafka")
    args = parser.parse_args(argv)
    if args.sweep:
        sizes = [int(x) for x in args.in_process.split(",") if x]
        kafka = [int(x) for x in args.kafka.split(",") if x]
        sweep = run_sweep(
            sizes, kafka, args.changes, args.baseline, args.heap, args.kafka_brokers, args.settle
        )
        print(sweep_table(sweep))
        print(f"written: {write_json('scale_sweep', sweep)}")
        return 0
    result = run(args.partitions, args.logical, args.heap)
    print(format_table(result))
    print(f"written: {write_result(result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
