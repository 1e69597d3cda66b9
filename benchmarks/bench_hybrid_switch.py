"""The hybrid switch: how long from the last archived record to the first live one, and what it is made of.

An in-memory archive (``multicluster_source.testing.InMemoryArchiveStage``) of the first A records of each
of 4 partitions (2 topics of 2 partitions, on two clusters), then the live source on both clusters, which
hold A + L records per partition. Per repeat, a fresh ``HybridSource`` is opened (with a checkpoint
directory, so the switch writes its state durably) and polled until the first live record:

* ``latency_ms``: from the poll that returned the last archived record to the poll that returned the
  first live record (what a job sees: the hybrid state write, closing the archive, opening the live source
  with its handover offsets, and its first fetch);
* ``open_ms``: the part of it from the archive's end until the live stage was open (state write included).

``--iterate``: also the records per second of ``for record in stream`` over every record in Kafka, a
hybrid with an empty archive (its iterator takes one record per step, so a checkpoint in the loop covers
exactly what it got) against the plain source's iterator on the same records. Nothing here asserts on speed.

Run: ``python benchmarks/bench_hybrid_switch.py [--repeats 7] [--archived 2000] [--live 2000] [--iterate]``;
writes ``benchmarks/results/hybrid_switch.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

from benchmarks._brokers import RESULTS_DIR, Cluster, add_broker_argument, machine_info, started_clusters
from multicluster_source import (
    ClusterMetadata,
    HybridSource,
    KafkaStream,
    MultiClusterKafkaSource,
    OffsetsInitializer,
    StaticMetadataService,
)
from multicluster_source.testing import InMemoryArchiveStage


def _produce(cluster: Cluster, topic: str, n: int) -> None:
    producer = cluster.producer(**{"linger.ms": 5})
    for p in (0, 1):
        for i in range(n):
            producer.produce(topic, value=f"v{i}".encode() * 10, partition=p)
            if i % 10_000 == 0:
                producer.poll(0)
    producer.flush(60)


def _live(clusters: list[Cluster], topics: list[str], bounded: bool = False) -> MultiClusterKafkaSource:
    metadata = {
        c.cluster_id: ClusterMetadata(c.cluster_id, c.bootstrap_servers, frozenset({t}))
        for c, t in zip(clusters, topics, strict=True)
    }
    builder = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([KafkaStream("s", metadata)]))
        .set_stream_ids(["s"])
        .set_starting_offsets(OffsetsInitializer.earliest())
    )
    if bounded:
        builder = builder.set_bounded(OffsetsInitializer.latest())
    return builder.build()


def _archive(clusters: list[Cluster], topics: list[str], archived: int) -> InMemoryArchiveStage:
    return InMemoryArchiveStage(
        {
            f"{c.cluster_id}/{t}/{p}": [f"v{i}".encode() * 10 for i in range(archived)]
            for c, t in zip(clusters, topics, strict=True)
            for p in (0, 1)
        }
    )


def switch_once(clusters: list[Cluster], topics: list[str], archived: int) -> dict[str, float]:
    """One switch: latency and open time in ms."""
    hybrid = (
        HybridSource.builder(_archive(clusters, topics, archived)).add_source(_live(clusters, topics)).build()
    )
    with tempfile.TemporaryDirectory() as ckpt, hybrid.open(parallelism=2, checkpoint_dir=ckpt) as stream:
        while stream.stage == 0 or not stream.status()["hybrid"]["switches"][0]["latency_ms"]:
            stream.poll(1.0, 2000)
        switch = stream.status()["hybrid"]["switches"][0]
    return {"latency_ms": switch["latency_ms"], "open_ms": switch["open_ms"]}


def iterate_once(clusters: list[Cluster], topics: list[str], archived: int, live: int, hybrid: bool) -> float:
    """Records per second of ``for record in stream`` over the live records (hybrid or the plain source)."""
    source = _live(clusters, topics, bounded=True)
    expected = 4 * (archived + live)  # every record is read from Kafka: the archive stage is empty here
    opened: Any = (
        HybridSource.builder(_archive(clusters, topics, 0))
        .add_source(source)
        .build()
        .open(parallelism=2, registry=CollectorRegistry())
        if hybrid
        else source.open(parallelism=2, registry=CollectorRegistry())
    )
    count = 0
    with opened as stream:
        started = time.perf_counter()
        for record in stream:
            count += 1 if record.value else 0  # touch the value
        seconds = time.perf_counter() - started
    if count != expected:
        raise RuntimeError(f"read {count} records, expected {expected}")
    return count / seconds


def main() -> None:
    """Run the benchmark."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_broker_argument(parser)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--archived", type=int, default=2000, help="archived records per partition")
    parser.add_argument("--live", type=int, default=2000, help="live records per partition after the archive")
    parser.add_argument("--iterate", action="store_true")
    args = parser.parse_args()
    with started_clusters(args.brokers, 2) as clusters:
        topics = [c.create_topic("hyb-switch", 2) for c in clusters]
        for c, t in zip(clusters, topics, strict=True):
            _produce(c, t, args.archived + args.live)
        switch_once(clusters, topics, args.archived)  # warm-up
        runs = [switch_once(clusters, topics, args.archived) for _ in range(args.repeats)]
        report: dict[str, Any] = {
            "machine": machine_info(args.brokers),
            "archived_per_partition": args.archived,
            "partitions": 4,
            "repeats": args.repeats,
            "latency_ms_median": statistics.median(r["latency_ms"] for r in runs),
            "latency_ms_max": max(r["latency_ms"] for r in runs),
            "open_ms_median": statistics.median(r["open_ms"] for r in runs),
            "runs": runs,
        }
        if args.iterate:
            pairs = [
                (
                    iterate_once(clusters, topics, args.archived, args.live, True),
                    iterate_once(clusters, topics, args.archived, args.live, False),
                )
                for _ in range(args.repeats)
            ]
            report["iterate_hybrid_rps_median"] = statistics.median(h for h, _ in pairs)
            report["iterate_source_rps_median"] = statistics.median(s for _, s in pairs)
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "hybrid_switch.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k not in ("runs", "machine")}, indent=2))


if __name__ == "__main__":
    main()
