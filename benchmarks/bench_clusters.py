"""Many clusters in one source: what each cluster costs, how fast a change to one of them is applied among
many, and whether memory comes back after ``close()`` (issue 24).

For each count N of ``--clusters`` (default 1, 10, 40, 100) a source reads one stream over N independent
single-node clusters (tansu by default: 100 JVMs do not fit here; ``--brokers kafka`` for fewer), each with
one topic of 2 partitions and one record per partition, with ``open(parallelism=2)`` and a
``FileMetadataService`` (the file watch applies changes; discovery every 10 minutes). Figures:

- **all assigned**, **first record of every split**: seconds from ``open()``;
- **per cluster**: OS threads (``/proc/self/task``, librdkafka's and ours), open descriptors and RSS of the
  process with everything read, minus the same before ``open()``, divided by N;
- **change**: ``--changes`` times, the file is rewritten to add one more cluster (its topic has a new record
  in each partition each time) and then to remove it; *add* is the time from the file write to the first
  record of the added cluster, *remove* the time until no reader holds a split of it. A change touches one
  cluster of N + 1: its cost should not grow with N;
- **checkpoint()**, **close()**: seconds on the caller's thread; threads and descriptors left after close
  (must be the ones of before ``open()``).

Then ``--cycles`` open/read/close cycles of the largest size measure memory after close: RSS after each
close, after ``gc.collect()``, and after glibc's ``malloc_trim(0)`` (which hands freed heap pages back to
the system), beside the memory Python itself holds (``tracemalloc``) and the count of live objects. RSS that
grows while Python's traced memory and objects stay flat, and that ``malloc_trim`` gives back, is the
allocator keeping freed pages (librdkafka frees its buffers on close), not a leak.

Run: ``python benchmarks/bench_clusters.py [--clusters 1,10,40,100] [--changes 5] [--cycles 5]
[--property fetch.wait.max.ms=500]``; writes ``benchmarks/results/clusters.json`` (with ``--property``:
``clusters-with-properties.json``). Nothing asserts on speed.

The brokers share this machine's cores with the source: 100 tansu brokers answering the idle fetches of 200
consumers (10 a second each at the source's ``fetch.wait.max.ms=100``) use more than one of the two cores,
so at 100 clusters a change also waits for a core; ``--property fetch.wait.max.ms=500`` (librdkafka's
default) shows the source with that load taken away.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

from benchmarks._brokers import Cluster, add_broker_argument, machine_info, started_clusters
from benchmarks.bench_soak import open_fds, rdk_threads, rss_mb, write_json
from multicluster_source import (
    ClusterMetadata,
    FileMetadataService,
    KafkaStream,
    MultiClusterKafkaSource,
    OffsetsInitializer,
)
from multicluster_source.testing import write_metadata_file

STREAM_ID = "many"
PARTITIONS = 2
PARALLELISM = 2
DISCOVERY_INTERVAL_MS = 600_000
TIMEOUT_S = 120.0
IDLE_S = 5.0
"""Seconds the idle CPU of the source and of the brokers is measured over."""


def log(message: str) -> None:
    """Progress on stderr."""
    print(message, file=sys.stderr, flush=True)


def os_threads() -> int:
    """OS threads of this process."""
    return len(os.listdir("/proc/self/task"))


def ours() -> int:
    """Python threads the source started (named ``mcs-``) or its file watch (``metadata-watch``)."""
    return sum(1 for t in threading.enumerate() if t.name.startswith(("mcs-", "metadata-watch")))


def snapshot() -> dict[str, float]:
    """Threads, descriptors and RSS of this process now."""
    return {
        "threads": os_threads(),
        "rdk_threads": rdk_threads(),
        "mcs_threads": ours(),
        "fds": open_fds(),
        "rss_mb": rss_mb(),
    }


def produce(cluster: Cluster, topic: str) -> None:
    """One record to each partition of ``topic``."""
    producer = cluster.producer()
    for p in range(PARTITIONS):
        producer.produce(topic, value=f"{topic}/{p}".encode(), partition=p)
    if producer.flush(30):
        raise TimeoutError(f"records to {topic} on {cluster.cluster_id} not delivered")


def streams(parts: dict[str, tuple[Cluster, str]]) -> list[KafkaStream]:
    """One stream over ``parts``: cluster id -> (cluster, its topic)."""
    return [
        KafkaStream(
            STREAM_ID,
            {cid: ClusterMetadata(cid, c.bootstrap_servers, frozenset({t})) for cid, (c, t) in parts.items()},
        )
    ]


PROPERTIES: dict[str, str] = {}
"""Client properties given with ``--property`` (every client of the source)."""


def open_source(path: Path, name: str, ckpt: Path) -> Any:
    """A source over the metadata file ``path``, opened with 2 readers."""
    builder = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(FileMetadataService(path))
        .set_stream_ids([STREAM_ID])
        .set_group_id(f"bench-clusters-{uuid.uuid4().hex[:8]}")
        .set_starting_offsets(OffsetsInitializer.earliest())
        .set_property("stream-metadata-discovery-interval-ms", str(DISCOVERY_INTERVAL_MS))
        .set_name(name)
    )
    for key, value in PROPERTIES.items():
        builder = builder.set_property(key, value)
    return builder.build().open(PARALLELISM, checkpoint_dir=str(ckpt), registry=CollectorRegistry())


def assigned_clusters(stream: Any) -> set[str]:
    """Clusters of which some reader holds a split."""
    return {sid.split("/", 1)[0] for ids in stream.assignments().values() for sid in ids}


def read_all(stream: Any, started: float, total: int) -> tuple[float | None, float | None]:
    """Poll until every one of ``total`` splits gave a record: (all assigned s, all first records s)."""
    seen: set[str] = set()
    assigned_at = None
    deadline = time.monotonic() + TIMEOUT_S
    next_check = 0.0
    while time.monotonic() < deadline and len(seen) < total:
        for r in stream.poll(timeout=0.02):
            seen.add(r.split_id)
        now = time.perf_counter()
        if assigned_at is None and now >= next_check:
            next_check = now + 0.02
            if sum(len(ids) for ids in stream.assignments().values()) >= total:
                assigned_at = now - started
    done = time.perf_counter() - started if len(seen) >= total else None
    if assigned_at is None and done is not None:
        assigned_at = done  # every split gave its record before a look at the assignments saw them all
    return assigned_at, done


def change_one(
    stream: Any, path: Path, base: dict[str, tuple[Cluster, str]], extra: str, spare: Any
) -> dict[str, Any]:
    """Add the spare cluster (after a new record in each of its partitions), then remove it."""
    produce(*spare)
    write_metadata_file(path, streams({**base, extra: spare}))
    t0 = time.perf_counter()
    added = assigned = None
    deadline = time.monotonic() + TIMEOUT_S
    while added is None and time.monotonic() < deadline:
        for r in stream.poll(timeout=0.005):
            if r.split_id.startswith(extra + "/"):
                added = time.perf_counter() - t0
        if assigned is None and extra in assigned_clusters(stream):
            assigned = time.perf_counter() - t0
    time.sleep(0.3)
    stream.poll(timeout=0)
    write_metadata_file(path, streams(base))
    t1 = time.perf_counter()
    removed = None
    while removed is None and time.monotonic() < deadline:
        stream.poll(timeout=0.005)
        if extra not in assigned_clusters(stream):
            removed = time.perf_counter() - t1
    time.sleep(0.3)
    return {"add_s": added, "add_assigned_s": assigned, "remove_s": removed}


def _summary(values: Sequence[float | None]) -> dict[str, float | None]:
    got = [v for v in values if v is not None]
    if not got:
        return {"median": None, "max": None, "n": 0}
    return {"median": statistics.median(got), "max": max(got), "n": len(got)}


def measure(
    clusters: Sequence[Cluster], spare: Cluster, n: int, changes: int, workdir: Path
) -> dict[str, Any]:
    """One source over the first ``n`` clusters: see the module docs."""
    tag = uuid.uuid4().hex[:6]
    base = {
        f"c{i:03d}": (c, c.create_topic(f"many-{tag}-", partitions=PARTITIONS))
        for i, c in enumerate(clusters[:n])
    }
    for cluster, topic in base.values():
        produce(cluster, topic)
    spare_part = (spare, spare.create_topic(f"spare-{tag}-", partitions=PARTITIONS))
    path = workdir / f"streams-{n}.yaml"
    write_metadata_file(path, streams(base))
    gc.collect()
    before = snapshot()
    started = time.perf_counter()
    stream = open_source(path, f"many{n}", workdir / f"ckpt-{n}")
    out: dict[str, Any] = {"clusters": n, "splits": n * PARTITIONS, "before_open": before}
    try:
        out["open_s"] = time.perf_counter() - started
        out["all_assigned_s"], out["all_first_records_s"] = read_all(stream, started, n * PARTITIONS)
        running = snapshot()
        out["running"] = running
        out["per_cluster"] = {k: (running[k] - before[k]) / n for k in running}
        out["idle_cpu"] = idle_cpu(stream)
        t0 = time.perf_counter()
        stream.checkpoint()
        out["checkpoint_s"] = time.perf_counter() - t0
        done = [change_one(stream, path, base, "spare", spare_part) for _ in range(changes)]
        out["changes"] = done
        out["add_s"] = _summary([d["add_s"] for d in done])
        out["add_assigned_s"] = _summary([d["add_assigned_s"] for d in done])
        out["remove_s"] = _summary([d["remove_s"] for d in done])
    finally:
        t0 = time.perf_counter()
        stream.close()
        out["close_s"] = time.perf_counter() - t0
    gc.collect()
    out["after_close"] = snapshot()
    return out


def _cpu_s(pid: int | str) -> float:
    """CPU seconds (user + system) of process ``pid`` so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children() -> list[str]:
    """This process's child processes (the brokers, when they run as processes)."""
    out: list[str] = []
    for task in Path("/proc/self/task").iterdir():
        try:
            out += (task / "children").read_text().split()
        except OSError:
            continue
    return out


def idle_cpu(stream: Any, seconds: float = IDLE_S) -> dict[str, float]:
    """Cores the source's process and the brokers' processes use while the stream is polled and nothing is
    written (the cost of idle consumers: their fetches and what answers them)."""
    kids = _children()
    me0, kids0, t0 = _cpu_s(os.getpid()), sum(map(_cpu_s, kids)), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        stream.poll(timeout=0.05)
    elapsed = time.perf_counter() - t0
    return {
        "source_cores": (_cpu_s(os.getpid()) - me0) / elapsed,
        "brokers_cores": (sum(map(_cpu_s, kids)) - kids0) / elapsed,
    }


def malloc_trim() -> bool:
    """glibc's ``malloc_trim(0)``: freed heap pages back to the system (False where there is no glibc)."""
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


def memory_cycles(clusters: Sequence[Cluster], cycles: int, workdir: Path) -> list[dict[str, Any]]:
    """``cycles`` open/read/close cycles over ``clusters``: memory after each close (see the module docs)."""
    tag = uuid.uuid4().hex[:6]
    base = {
        f"c{i:03d}": (c, c.create_topic(f"cyc-{tag}-", partitions=PARTITIONS)) for i, c in enumerate(clusters)
    }
    for cluster, topic in base.values():
        produce(cluster, topic)
    path = workdir / "cycles.yaml"
    write_metadata_file(path, streams(base))
    tracemalloc.start()
    rows = []
    try:
        for cycle in range(cycles):
            started = time.perf_counter()
            stream = open_source(path, f"cycle{cycle}", workdir / f"ckpt-cycle-{cycle}")
            try:
                read_all(stream, started, len(base) * PARTITIONS)
                running = rss_mb()
            finally:
                stream.close()
            row: dict[str, Any] = {"cycle": cycle + 1, "running_rss_mb": running}
            row["after_close_rss_mb"] = rss_mb()
            gc.collect()
            row["after_gc_rss_mb"] = rss_mb()
            row["python_traced_mb"] = tracemalloc.get_traced_memory()[0] / 2**20
            row["live_objects"] = len(gc.get_objects())
            row["trimmed"] = malloc_trim()
            row["after_trim_rss_mb"] = rss_mb()
            rows.append(row)
            log(
                f"  cycle {cycle + 1}: RSS running {running:.0f}, "
                f"after close {row['after_close_rss_mb']:.0f}, "
                f"after malloc_trim {row['after_trim_rss_mb']:.0f} MiB; Python traced "
                f"{row['python_traced_mb']:.1f} MiB, {row['live_objects']} objects"
            )
    finally:
        tracemalloc.stop()
    return rows


def _f(value: Any, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(result: dict[str, Any]) -> str:
    """The figures as a Markdown table, one row per cluster count."""
    lines = [
        "| clusters | splits | all assigned s | first record of every split s | threads / cluster "
        "(librdkafka, ours) | fds / cluster | RSS MiB / cluster | add one cluster s (median, max) | "
        "remove s (median, max) | checkpoint() s | close() s | threads, fds left after close |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["sizes"]:
        pc, before, after = r["per_cluster"], r["before_open"], r["after_close"]
        lines.append(
            f"| {r['clusters']} | {r['splits']} | {_f(r['all_assigned_s'])} | "
            f"{_f(r['all_first_records_s'])} | "
            f"{pc['threads']:.1f} ({pc['rdk_threads']:.1f}, {pc['mcs_threads']:.1f}) | {pc['fds']:.1f} | "
            f"{pc['rss_mb']:.2f} | {_f(r['add_s']['median'], 3)}, {_f(r['add_s']['max'], 3)} | "
            f"{_f(r['remove_s']['median'], 3)}, {_f(r['remove_s']['max'], 3)} | {_f(r['checkpoint_s'], 3)} | "
            f"{_f(r['close_s'])} | {after['threads'] - before['threads']:+.0f}, "
            f"{after['fds'] - before['fds']:+.0f} |"
        )
    if result.get("cycles"):
        lines += [
            "",
            "| cycle | RSS running | after close | after gc | after malloc_trim | Python traced MiB "
            "| live objects |",
            "|---|---|---|---|---|---|---|",
        ]
        for c in result["cycles"]:
            lines.append(
                f"| {c['cycle']} | {c['running_rss_mb']:.0f} | {c['after_close_rss_mb']:.0f} | "
                f"{c['after_gc_rss_mb']:.0f} | {c['after_trim_rss_mb']:.0f} | {c['python_traced_mb']:.1f} | "
                f"{c['live_objects']} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Per-cluster cost, changes among many clusters, memory after close."
    )
    add_broker_argument(parser)
    parser.set_defaults(brokers="tansu")
    parser.add_argument("--clusters", default="1,10,40,100", help="cluster counts")
    parser.add_argument("--changes", type=int, default=5, help="add/remove cycles of one cluster per count")
    parser.add_argument(
        "--cycles", type=int, default=5, help="open/close cycles at the largest count (0 skips)"
    )
    parser.add_argument(
        "--property", action="append", default=[], help="KEY=VALUE client property (repeatable)"
    )
    args = parser.parse_args(argv)
    PROPERTIES.update(dict(p.split("=", 1) for p in args.property))
    counts = sorted({int(c) for c in args.clusters.split(",") if c})
    workdir = Path(tempfile.mkdtemp(prefix="mcs-bench-clusters-"))
    result: dict[str, Any] = {
        "benchmark": "clusters",
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info(args.brokers),
        "config": {
            "partitions_per_cluster": PARTITIONS,
            "parallelism": PARALLELISM,
            "changes": args.changes,
            "properties": dict(PROPERTIES),
        },
        "sizes": [],
    }
    log(f"clusters: starting {max(counts) + 1} {args.brokers} clusters...")
    with started_clusters(args.brokers, max(counts) + 1) as clusters:
        spare = clusters[-1]
        for n in counts:
            r = measure(clusters[:-1], spare, n, args.changes, workdir)
            result["sizes"].append(r)
            log(
                f"{n} clusters: assigned {_f(r['all_assigned_s'])} s, "
                f"all read {_f(r['all_first_records_s'])} s, "
                f"{r['per_cluster']['threads']:.1f} threads/cluster, add {_f(r['add_s']['median'], 3)} s "
                f"(max {_f(r['add_s']['max'], 3)}), close {_f(r['close_s'])} s"
            )
        if args.cycles:
            result["cycles"] = memory_cycles(clusters[: max(counts)], args.cycles, workdir)
    write_json("clusters-with-properties" if PROPERTIES else "clusters", result)
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
