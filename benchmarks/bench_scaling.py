"""Scaling: aggregate throughput of ``source.run(..., runtime="processes")`` with 1, 2 and 4 worker processes
on 2 clusters, against a raw confluent-kafka drain with the same number of processes.

Produces N records (100-byte values, 4 partitions per topic, one topic on each of two clusters), then
measures, alternating and repeating, for each count ``n`` of 1, 2, 4:

* ``raw-n``: ``n`` processes (``spawn``), process ``r`` owning partitions ``p % n == r`` of both topics;
  in each, one ``Consumer`` per cluster on a thread of its own (as the source's fetchers), assigned at the
  low watermark, ``consume(2000, 0.5)`` touching ``msg.value()``;
* ``processes-batches-n``: ``source.run(handler, parallelism=n, runtime="processes", batches=True)``,
  bounded at the end offsets, the handler touching ``msg.value()`` of every message of each
  ``MessageBatch`` (the zero-copy path: the figure measured against ``raw-n``);
* ``processes-records-n``: the same with the record handler (``batches=False``), touching ``record.value``
  of every ``SourceRecord``;
* ``threads-n``: the batch handler on ``runtime="threads"`` (one process: the GIL's ceiling, for
  comparison).

Figures are records per second over the whole run, from starting the processes (or calling ``run``) until
they are all done (so start-up and shut-down are in), and *steady*, from the first record any worker got to
the last (workers report ``time.monotonic()``, one clock for every process on the machine). Both clients get
``fetch.queue.backoff.ms=10`` (the source's default). Nothing here asserts on speed.

Run: ``python benchmarks/bench_scaling.py [--brokers kafka|tansu] [--records N | --quick] [--repeats 3]
[--counts 1,2,4]``; writes ``benchmarks/results/scaling.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
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
from benchmarks.bench_throughput import Dataset, TopicData, _Drained, _raw_drain_one, prepare
from multicluster_source import (
    ClusterMetadata,
    KafkaStream,
    MessageBatch,
    MultiClusterKafkaSource,
    OffsetsInitializer,
    SourceRecord,
    StaticMetadataService,
)

DEFAULT_RECORDS = 2_000_000  # both sides spawn processes (about 0.3 s): a longer run leaves that less weight
QUICK_RECORDS = 200_000
COUNTS = (1, 2, 4)
KINDS = ("raw", "processes-batches", "processes-records", "threads")
#: How each source kind runs: (runtime, batches).
SOURCE_KINDS: dict[str, tuple[str, bool]] = {
    "processes-batches": ("processes", True),
    "processes-records": ("processes", False),
    "threads": ("threads", True),
}
PROPS = {"fetch.queue.backoff.ms": "10"}
STALL_TIMEOUT_S = 120.0


# ------------------------------------------------------------------------------------------- raw drain


def _raw_cluster(part: TopicData, partitions: list[int], out: dict[str, Any]) -> None:
    """The throughput benchmark's raw drain of one cluster, with times other processes can compare."""
    if not part.share(partitions):
        return
    drained = _Drained()
    try:
        _raw_drain_one(part, partitions, PROPS, drained, clock=time.monotonic)
    finally:
        out["records"] = out.get("records", 0) + drained.records
        if drained.first is not None:
            out["first"] = min(out.get("first", drained.first), drained.first)
            out["last"] = max(out.get("last", drained.last), drained.last)


def raw_worker(parts: list[TopicData], index: int, count: int, report: str) -> None:
    """One raw process: its share of the partitions of every topic, one consumer thread per cluster."""
    out: dict[str, Any] = {}
    partitions = [p for p in range(4) if p % count == index]
    threads = [
        threading.Thread(
            target=_raw_cluster, args=(part, partitions, out), name=f"raw-{index}-{part.cluster_id}"
        )
        for part in parts
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    Path(report).write_text(json.dumps({"pid": os.getpid(), **out}))


def raw_drain(dataset: Dataset, count: int, reports: Path) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    start = time.monotonic()
    processes = [
        ctx.Process(
            target=raw_worker,
            args=(dataset.parts, r, count, str(reports / f"raw-{r}.json")),
            name=f"bench-raw-{r}",
            daemon=True,
        )
        for r in range(count)
    ]
    for p in processes:
        p.start()
    for p in processes:
        p.join(STALL_TIMEOUT_S * 2)
        if p.exitcode != 0:
            p.kill()
            raise RuntimeError(f"raw worker {p.name} failed with exit code {p.exitcode}")
        p.close()
    return _measure(reports, "raw-", time.monotonic() - start, start)


# ------------------------------------------------------------------------------------------- the source


class _Counter:
    """Counts what its handler touched and reports its first/last record times when its worker closes it.

    State is kept per handler thread: on ``runtime="threads"`` one object serves every reader."""

    def __init__(self, reports: str, prefix: str) -> None:
        self.reports = reports
        self.prefix = prefix
        self._state: dict[int, dict[str, Any]] = {}

    def open(self, reader_index: int) -> None:
        self._state[threading.get_ident()] = {"index": reader_index, "records": 0, "first": None, "last": 0.0}

    def _count(self, n: int) -> None:
        now = time.monotonic()
        state = self._state[threading.get_ident()]
        if state["first"] is None:
            state["first"] = now
        state["last"] = now
        state["records"] += n

    def close(self) -> None:
        state = self._state.pop(threading.get_ident())
        report = {"pid": os.getpid(), **state}
        Path(self.reports, f"{self.prefix}{state['index']}.json").write_text(json.dumps(report))


class CountingHandler(_Counter):
    """The record handler (``batches=False``): touches ``record.value`` of every record."""

    def __call__(self, records: list[SourceRecord]) -> None:
        for record in records:
            record.value  # noqa: B018 - touch every value, as the raw drain does
        self._count(len(records))


class BatchCountingHandler(_Counter):
    """The batch handler (``batches=True``): touches ``msg.value()`` of every message of the batch, as the
    raw drain does."""

    def __call__(self, batch: MessageBatch) -> None:
        for msg in batch.messages:
            msg.value()
        self._count(len(batch))


def build_source(dataset: Dataset) -> MultiClusterKafkaSource:
    clusters = {
        t.cluster_id: ClusterMetadata(t.cluster_id, t.bootstrap_servers, frozenset([t.topic]))
        for t in dataset.parts
    }
    return (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([KafkaStream("bench", clusters)]))
        .set_stream_ids(["bench"])
        .set_group_id(f"bench-scaling-{uuid.uuid4().hex[:8]}")
        .set_starting_offsets(OffsetsInitializer.earliest())
        .set_bounded(OffsetsInitializer.latest())
        .set_properties({**PROPS, "topic.tracking.enable": "false"})
        .build()
    )


def source_drain(dataset: Dataset, count: int, kind: str, reports: Path) -> dict[str, Any]:
    """``source.run`` with ``count`` readers as ``kind`` (a key of SOURCE_KINDS) says."""
    runtime, batches = SOURCE_KINDS[kind]
    handler: CountingHandler | BatchCountingHandler = (
        BatchCountingHandler(str(reports), f"{kind}-")
        if batches
        else CountingHandler(str(reports), f"{kind}-")
    )
    source = build_source(dataset)
    start = time.monotonic()
    result = source.run(
        handler,
        count,
        runtime=runtime,
        registry=CollectorRegistry(),
        batches=batches,
    )
    elapsed = time.monotonic() - start
    if result.records != dataset.total:
        raise RuntimeError(f"{kind}-{count}: handled {result.records} of {dataset.total} records")
    return _measure(reports, f"{kind}-", elapsed, start)


def _measure(reports: Path, prefix: str, elapsed: float, start: float) -> dict[str, Any]:
    docs = [json.loads(p.read_text()) for p in sorted(reports.glob(f"{prefix}*.json"))]
    for p in reports.glob(f"{prefix}*.json"):
        p.unlink()
    records = sum(int(d.get("records") or 0) for d in docs)
    firsts = [d["first"] for d in docs if d.get("first") is not None]
    lasts = [d["last"] for d in docs if d.get("last")]
    steady_s = (max(lasts) - min(firsts)) if firsts and lasts else elapsed
    return {
        "records": records,
        "seconds": elapsed,
        "rate": records / elapsed if elapsed > 0 else 0.0,
        "steady_rate": records / steady_s if steady_s > 0 else 0.0,
        "first_record_s": (min(firsts) - start) if firsts else None,
        "processes": len({d["pid"] for d in docs}),
    }


# ------------------------------------------------------------------------------------------- the run


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def run(
    clusters: Sequence[Cluster],
    *,
    records: int,
    repeats: int = 3,
    brokers: str = "kafka",
    counts: Sequence[int] = COUNTS,
) -> dict[str, Any]:
    """Produce, then measure every kind at every count ``repeats`` times, alternating."""
    started = time.perf_counter()
    dataset = prepare(list(clusters)[:2], records)
    produce_s = time.perf_counter() - started
    runs: dict[str, list[dict[str, Any]]] = {}
    order = [f"{kind}-{n}" for n in counts for kind in KINDS]
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        reports = Path(tmp)
        for repeat in range(repeats):
            for key in order:
                kind, count_text = key.rsplit("-", 1)
                count = int(count_text)
                m = (
                    raw_drain(dataset, count, reports)
                    if kind == "raw"
                    else source_drain(dataset, count, kind, reports)
                )
                if m["records"] != dataset.total:
                    raise RuntimeError(f"{key}: {m['records']} of {dataset.total} records")
                runs.setdefault(key, []).append(m)
                print(
                    f"  [{repeat + 1}/{repeats}] {key:20s} {m['rate']:>12,.0f} rec/s "
                    f"(steady {m['steady_rate']:,.0f}) in {m['seconds']:.2f} s",
                    flush=True,
                )
    rates = {k: _summary([m["rate"] for m in v]) for k, v in runs.items()}
    steady = {k: _summary([m["steady_rate"] for m in v]) for k, v in runs.items()}
    ratios = {}
    scaling = {}
    for n in counts:
        raw, steady_raw = rates[f"raw-{n}"]["median"], steady[f"raw-{n}"]["median"]
        ratios[str(n)] = {
            # "processes" is the batch handler: the processes runtime's figure measured against raw
            "processes_over_raw": rates[f"processes-batches-{n}"]["median"] / raw,
            "steady_processes_over_raw": steady[f"processes-batches-{n}"]["median"] / steady_raw,
            "processes_records_over_raw": rates[f"processes-records-{n}"]["median"] / raw,
            "steady_processes_records_over_raw": steady[f"processes-records-{n}"]["median"] / steady_raw,
            "threads_over_raw": rates[f"threads-{n}"]["median"] / raw,
        }
        scaling[str(n)] = {
            kind: rates[f"{kind}-{n}"]["median"] / rates[f"{kind}-{counts[0]}"]["median"] for kind in KINDS
        }
    return {
        "benchmark": "scaling",
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info(brokers),
        "config": {
            "records": dataset.total,
            "clusters": len(dataset.parts),
            "partitions_per_topic": 4,
            "value_bytes": 100,
            "repeats": repeats,
            "counts": list(counts),
            "order": order,
            "client_properties": PROPS,
            "raw": "n spawn processes; partitions p % n == r of both topics; one consumer per cluster on "
            "its own thread; consume(2000, 0.5), msg.value() on each",
            "source": "source.run(handler, parallelism=n, runtime=..., batches=...), bounded at the end "
            "offsets; the batch handler touches msg.value() of each message of each MessageBatch, the record "
            "handler record.value of each record",
            "kinds": {kind: {"runtime": rt, "batches": b} for kind, (rt, b) in SOURCE_KINDS.items()},
            "ratios": "processes_over_raw and its steady_ twin: processes-batches over raw; "
            "processes_records_over_raw: processes-records over raw; threads_over_raw: threads over raw",
            "timed": "rate: start of the processes / run() call to all done; steady: first to last record",
        },
        "produce_seconds": produce_s,
        "records_per_second": rates,
        "steady_records_per_second": steady,
        "ratios": ratios,
        "scaling_over_1": scaling,
        "runs": runs,
    }


def _k(value: float) -> str:
    return f"{value / 1000:,.0f}k"


def table_rows(result: dict[str, Any]) -> list[tuple[int, str, str, str, str, str, str, str, str]]:
    """(workers, raw, processes batches, processes records, threads, batches / raw, steady batches / raw,
    records / raw, batches scaling) for every worker count."""
    rows = []
    rates, ratios, scaling = result["records_per_second"], result["ratios"], result["scaling_over_1"]
    for n in result["config"]["counts"]:

        def cell(kind: str, n: int = n) -> str:
            s = rates[f"{kind}-{n}"]
            return f"{_k(s['median'])} [{_k(s['min'])}-{_k(s['max'])}]"

        r = ratios[str(n)]
        records_over_raw = rates[f"processes-records-{n}"]["median"] / rates[f"raw-{n}"]["median"]
        rows.append(
            (
                n,
                cell("raw"),
                cell("processes-batches"),
                cell("processes-records"),
                cell("threads"),
                f"{r['processes_over_raw']:.2f}",
                f"{r['steady_processes_over_raw']:.2f}",
                f"{records_over_raw:.2f}",
                f"{scaling[str(n)]['processes-batches']:.2f}x (raw {scaling[str(n)]['raw']:.2f}x)",
            )
        )
    return rows


def format_table(result: dict[str, Any]) -> str:
    cfg = result["config"]
    head = (
        f"Scaling: {cfg['records']:,} records on {cfg['clusters']} clusters, {cfg['partitions_per_topic']} "
        f"partitions per topic, {result['machine']['cores']} cores; records/s, median [min-max] of "
        f"{cfg['repeats']}"
    )
    lines = [
        head,
        "| workers | raw confluent-kafka (n processes) | runtime=processes, batches | runtime=processes, "
        "records | runtime=threads, batches | batches / raw | steady batches / raw | records / raw "
        "| batches scaling vs 1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in table_rows(result):
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def write_result(result: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / "scaling.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Scaling: the processes runtime against raw confluent-kafka."
    )
    add_broker_argument(parser)
    parser.add_argument("--records", type=int, default=None, help=f"default {DEFAULT_RECORDS:,}")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_RECORDS:,} records")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--counts",
        default=",".join(str(n) for n in COUNTS),
        help="comma-separated worker counts, the first one the scaling base (default: "
        + ",".join(str(n) for n in COUNTS)
        + ")",
    )
    args = parser.parse_args(argv)
    try:
        counts = [int(c) for c in args.counts.split(",") if c.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        parser.error(f"--counts: positive integers, got {args.counts!r}")
    records = args.records or (QUICK_RECORDS if args.quick else DEFAULT_RECORDS)
    with started_clusters(args.brokers, 2) as clusters:
        result = run(clusters, records=records, repeats=args.repeats, brokers=args.brokers, counts=counts)
    print(format_table(result))
    print(f"written: {write_result(result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
