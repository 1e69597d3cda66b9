"""Exactly once against at-least-once, and against a raw confluent-kafka exactly-once loop (issue 34).

Three Apache Kafka clusters: ``east`` and ``west`` hold the input (``--records`` 100-byte records each, 4
partitions), ``central`` is the sink. The same consume-transform-produce job (one result per input record)
runs, paired in one invocation, at checkpoint intervals of 0.1, 1 and 5 s:

- ``at-least-once``: this source over both clusters with ``checkpoint_dir`` and periodic checkpoints, the
  results through a plain producer (what a crash repeats);
- ``exactly-once``: this source with an :class:`ExactlyOnceKafkaSink` on ``central``;
- ``raw one-cluster EOS``: the anchor, a hand-written confluent-kafka loop over the same number of records
  in one topic *on the sink cluster* (``consume``, ``produce``, ``send_offsets_to_transaction``,
  ``commit_transaction`` every interval): what Kafka Streams-style exactly-once does, possible only there.

For each: records a second (from the first record taken to the last result committed or flushed, median
of ``--repeats``), and how long after a result was produced a ``read_committed`` reader saw it (p50 and
p99, from the results' own timestamps; a reader runs in the background of every run). Prints one table and
writes ``benchmarks/results/exactly-once.json`` (``--no-save``: not).

    python benchmarks/bench_exactly_once.py [--records 300000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._brokers import RESULTS_DIR, Cluster, machine_info, started_clusters

INTERVALS = (0.1, 1.0, 5.0)
JOBS = ("at-least-once", "exactly-once", "raw one-cluster EOS")
VALUE = b"v" * 100


def _fill(cluster: Cluster, topic: str, n: int) -> None:
    producer = cluster.producer(**{"linger.ms": 50, "batch.num.messages": 10000})
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value=VALUE, key=str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def _probe_main(bootstrap: str, topic: str, expected: int, partitions: int, out: Any, ready: Any) -> None:
    """The probe process: a ``read_committed`` consumer of ``topic`` until ``expected`` results were seen;
    puts ``(seen, lags_ms)`` on ``out``."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"probe-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": "false",
        }
    )
    # assigned, not subscribed: a group join would add seconds to the first results' visibility
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    consumer.list_topics(topic, timeout=10)
    ready.set()
    seen, lags = 0, []
    deadline = time.monotonic() + 600
    while seen < expected and time.monotonic() < deadline:
        for msg in consumer.consume(10_000, timeout=0.1):
            if msg.error() is not None:
                continue
            now_ms = time.time() * 1000
            seen += 1
            if seen % 50 == 0:
                lags.append(now_ms - msg.timestamp()[1])
    consumer.close()
    out.put((seen, lags))


class VisibilityProbe:
    """A ``read_committed`` consumer of the output in a process of its own (so that it takes no time from
    the job it measures): how long after each result's timestamp (set when it was produced) it became
    readable, sampled, and how many results it saw."""

    def __init__(self, bootstrap: str, topic: str, expected: int, partitions: int = 4) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self._out: Any = ctx.Queue()
        ready = ctx.Event()
        self._proc = ctx.Process(
            target=_probe_main,
            args=(bootstrap, topic, expected, partitions, self._out, ready),
            name="bench-visibility-probe",
            daemon=True,
        )
        self._proc.start()
        ready.wait(60)
        self.lags_ms: list[float] = []
        self.seen = 0

    def finish(self, timeout: float = 120.0) -> None:
        """Wait until every result was seen (or ``timeout``)."""
        import contextlib
        import queue

        with contextlib.suppress(queue.Empty):
            self.seen, self.lags_ms = self._out.get(timeout=timeout)
        self._proc.join(5)
        if self._proc.is_alive():
            self._proc.kill()


def _source(east: Cluster, west: Cluster, te: str, tw: str) -> Any:
    from multicluster_source import (
        ClusterMetadata,
        KafkaStream,
        MultiClusterKafkaSource,
        StaticMetadataService,
    )

    clusters = {
        "east": ClusterMetadata("east", east.bootstrap_servers, frozenset({te})),
        "west": ClusterMetadata("west", west.bootstrap_servers, frozenset({tw})),
    }
    return (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([KafkaStream("s", clusters)]))
        .set_stream_ids(["s"])
        .set_group_id(f"bench-eos-{uuid.uuid4().hex[:8]}")
        .build()
    )


def _ours(
    mode: str, clusters: list[Cluster], te: str, tw: str, total: int, interval: float
) -> dict[str, Any]:
    from confluent_kafka import Producer

    from multicluster_source import ExactlyOnceKafkaSink

    east, west, central = clusters
    out = central.create_topic("bench-eos-out", partitions=4)
    probe = VisibilityProbe(central.bootstrap_servers, out, total)
    source = _source(east, west, te, tw)
    handled = 0
    with tempfile.TemporaryDirectory() as ckpt:
        if mode == "exactly-once":
            name = f"bench-eos-{uuid.uuid4().hex[:8]}"
            sink = ExactlyOnceKafkaSink(
                {"bootstrap.servers": central.bootstrap_servers, "linger.ms": "5"},
                transactional_id=name,
                positions_topic=f"{name}.positions",
            )
            with source.open(sink=sink, checkpoint_interval=interval) as stream:
                started = None
                while handled < total:
                    records = stream.poll(timeout=1.0)
                    if started is None and records:
                        started = time.perf_counter()
                    for record in records:
                        stream.produce(out, value=record.value, key=record.key)
                    handled += len(records)
                stream.checkpoint()  # the last results commit
                elapsed = time.perf_counter() - (started or time.perf_counter())
        else:
            producer = Producer({"bootstrap.servers": central.bootstrap_servers, "linger.ms": "5"})
            with source.open(checkpoint_dir=ckpt, checkpoint_interval=interval) as stream:
                started = None
                while handled < total:
                    records = stream.poll(timeout=1.0)
                    if started is None and records:
                        started = time.perf_counter()
                    for record in records:
                        while True:
                            try:
                                producer.produce(out, value=record.value, key=record.key)
                                break
                            except BufferError:
                                producer.poll(0.05)
                    producer.poll(0)
                    handled += len(records)
                producer.flush(60)
                stream.checkpoint()
                elapsed = time.perf_counter() - (started or time.perf_counter())
    probe.finish()
    return _result(total, elapsed, probe)


def _raw(clusters: list[Cluster], topic: str, total: int, interval: float) -> dict[str, Any]:
    """The anchor: consume, produce, send_offsets_to_transaction, commit_transaction, on one cluster."""
    from confluent_kafka import Consumer, Producer

    central = clusters[2]
    out = central.create_topic("bench-eos-raw-out", partitions=4)
    probe = VisibilityProbe(central.bootstrap_servers, out, total)
    group = f"bench-raw-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(
        {
            "bootstrap.servers": central.bootstrap_servers,
            "group.id": group,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": "false",
        }
    )
    producer = Producer(
        {"bootstrap.servers": central.bootstrap_servers, "transactional.id": group, "linger.ms": "5"}
    )
    producer.init_transactions(30)
    consumer.subscribe([topic])
    handled = 0
    started = None
    producer.begin_transaction()
    last_commit = time.perf_counter()
    while handled < total:
        msgs = consumer.consume(10_000, timeout=1.0)
        if started is None and msgs:
            started = time.perf_counter()
        for msg in msgs:
            if msg.error() is not None:
                continue
            while True:
                try:
                    producer.produce(out, value=msg.value(), key=msg.key())
                    break
                except BufferError:
                    producer.poll(0.05)
            handled += 1
        if time.perf_counter() - last_commit >= interval or handled >= total:
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata()
            )
            producer.commit_transaction(30)
            producer.begin_transaction()
            last_commit = time.perf_counter()
    producer.abort_transaction(30)  # the empty one begun last
    elapsed = time.perf_counter() - (started or time.perf_counter())
    consumer.close()
    probe.finish()
    return _result(total, elapsed, probe)


def _result(total: int, elapsed: float, probe: VisibilityProbe) -> dict[str, Any]:
    lags = sorted(probe.lags_ms)

    def pct(p: float) -> float | None:
        return round(lags[min(len(lags) - 1, int(p / 100 * len(lags)))], 1) if lags else None

    return {
        "records_per_s": round(total / elapsed) if elapsed > 0 else None,
        "visible_p50_ms": pct(50),
        "visible_p99_ms": pct(99),
        "results_seen": probe.seen,
    }


def format_table(result: dict[str, Any]) -> str:
    """One row per interval and job, with the ratios the issue's goals name at the 1 s interval."""
    rows = [
        "| interval | job | records/s | vs at-least-once | vs raw EOS | visible p50 | visible p99 |",
        "|---|---|---|---|---|---|---|",
    ]
    for interval, jobs in result["intervals"].items():
        base = jobs["at-least-once"]["records_per_s"] or 1
        raw = jobs["raw one-cluster EOS"]["records_per_s"] or 1
        for job in JOBS:
            r = jobs[job]
            rows.append(
                f"| {interval} s | {job} | {r['records_per_s']:,} | {r['records_per_s'] / base:.2f} | "
                f"{r['records_per_s'] / raw:.2f} | {r['visible_p50_ms']} ms | {r['visible_p99_ms']} ms |"
            )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Exactly-once sink against at-least-once and raw EOS.")
    parser.add_argument("--records", type=int, default=300_000, help="records per source cluster")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each job at each interval (median)")
    parser.add_argument("--intervals", type=float, nargs="*", default=list(INTERVALS))
    parser.add_argument("--no-save", action="store_true", help="do not write benchmarks/results/")
    args = parser.parse_args(argv)
    n = args.records
    with started_clusters("kafka", 3) as clusters:
        east, west, central = clusters
        te, tw = (
            east.create_topic("bench-eos-in", partitions=4),
            west.create_topic("bench-eos-in", partitions=4),
        )
        raw_in = central.create_topic("bench-eos-raw-in", partitions=4)
        for cluster, topic, count in ((east, te, n), (west, tw, n), (central, raw_in, 2 * n)):
            _fill(cluster, topic, count)
        out: dict[str, Any] = {"records": 2 * n, "repeats": args.repeats, "intervals": {}}
        for interval in args.intervals:
            runs: dict[str, list[dict[str, Any]]] = {job: [] for job in JOBS}
            for _ in range(args.repeats):  # paired: the three jobs alternate within each repeat
                runs["at-least-once"].append(_ours("at-least-once", clusters, te, tw, 2 * n, interval))
                runs["exactly-once"].append(_ours("exactly-once", clusters, te, tw, 2 * n, interval))
                runs["raw one-cluster EOS"].append(_raw(clusters, raw_in, 2 * n, interval))
            out["intervals"][str(interval)] = {
                job: {
                    key: statistics.median(r[key] for r in results if r[key] is not None)
                    if any(r[key] is not None for r in results)
                    else None
                    for key in ("records_per_s", "visible_p50_ms", "visible_p99_ms", "results_seen")
                }
                | {"runs": [r["records_per_s"] for r in results]}
                for job, results in runs.items()
            }
            print(f"interval {interval} s done", flush=True)
    out["machine"] = machine_info("kafka")
    print(format_table(out))
    if not args.no_save:
        RESULTS_DIR.mkdir(exist_ok=True)
        (RESULTS_DIR / "exactly-once.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
