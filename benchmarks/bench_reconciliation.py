"""Reconciliation: how fast a running source follows a metadata file change, and whether others pause.

Two clusters, east and west: east has one topic, west two (a first one and an "added" one); a background
thread writes to all three continuously (one record every ~2 ms per topic; the value is the producer's
``time.monotonic_ns()`` in ASCII). The source reads a ``FileMetadataService`` file and polls its metadata only
every ``stream-metadata-discovery-interval-ms`` = 600000 (10 minutes), so a reaction within seconds can only
come from the service's change notification.

It starts with east only, takes a quiet baseline, then repeats (5 times by default) a cycle of four changes,
each written atomically (temporary file + ``os.replace``) and 10 s after the previous one:

1. add cluster west (its first topic): seconds from the write to the first west record returned by ``poll``;
2. add west's second topic: seconds to the first record of that topic;
3. remove that topic again: poll until none of its records came for 3 s; seconds to the last one returned;
4. remove cluster west: the same for every west record;
5. for each change: the longest gap between consecutive east records (the cluster that did not change)
   within +-5 s of the change and the highest east end-to-end latency (arrival minus the producer's
   timestamp) there; and over all changes, the 99th percentile of east's gaps, next to the quiet baseline's.

Then, on east alone, it compares the gaps of a fresh source with the source's default ``fetch.wait.max.ms``
against one with librdkafka's 500 ms (``--no-fetch-wait`` skips that). It also notes when the west splits
appear in / disappear from ``stream.assignments()``. Nothing asserts on speed. Run:
``python benchmarks/bench_reconciliation.py [--brokers kafka|tansu] [--cycles N | --quick]``.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import math
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

from benchmarks._brokers import (
    RESULTS_DIR,
    Cluster,
    add_broker_argument,
    machine_info,
    started_clusters,
)
from multicluster_source import (
    ClusterMetadata,
    FileMetadataService,
    KafkaStream,
    MultiClusterKafkaSource,
    OffsetsInitializer,
    SourceStream,
    StaticMetadataService,
)
from multicluster_source.reader._multicluster import DEFAULT_FETCH_WAIT_MAX_MS
from multicluster_source.testing import write_metadata_file

DISCOVERY_INTERVAL_MS = 600_000
PRODUCE_INTERVAL_S = 0.002
PARTITIONS = 2
WINDOW_S = 5.0  # gaps are looked for within +-WINDOW_S of a change
SETTLE_S = 2 * WINDOW_S  # between two changes, so that their +-WINDOW_S windows do not overlap
QUIET_S = 3.0  # a removed cluster is gone when none of its records came for this long
BASELINE_S = 2 * WINDOW_S
WARMUP_S = 3.0
REACT_TIMEOUT_S = 30.0
DEFAULT_CYCLES = 5
QUICK_CYCLES = 2
STREAM_ID = "bench"
CHANGE_KINDS = ("add_cluster", "add_topic", "remove_topic", "remove_cluster")
LIBRDKAFKA_FETCH_WAIT_MAX_MS = 500


# ----------------------------------------------------------------------------------------------- producing


class Producing:
    """A thread writing ``time.monotonic_ns()`` to every topic every ``interval`` seconds until stopped."""

    def __init__(self, targets: Sequence[tuple[Cluster, str]], interval: float = PRODUCE_INTERVAL_S) -> None:
        self._producers = [(c.producer(**{"linger.ms": 0}), topic) for c, topic in targets]
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-producer", daemon=True)
        self.produced = 0
        self.late = 0  # ticks that started more than 10 ms behind schedule (the producer's own jitter)

    def __enter__(self) -> Producing:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for producer, _topic in self._producers:
            producer.flush(10.0)

    def _run(self) -> None:
        due = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if now - due > 0.010:
                self.late += 1
            for producer, topic in self._producers:
                with contextlib.suppress(BufferError):  # a full local queue: skip this tick
                    producer.produce(topic, str(time.monotonic_ns()).encode("ascii"))
                producer.poll(0)
            self.produced += 1
            due = max(due + self._interval, now - 1.0)
            pause = due - time.monotonic()
            if pause > 0:
                self._stop.wait(pause)


# ----------------------------------------------------------------------------------------------- observing


@dataclass
class Observed:
    """Arrival times (``time.monotonic()`` when ``poll`` returned) and end-to-end latencies, per cluster
    (key ``cluster``) and per topic (key ``cluster/topic``)."""

    arrivals: dict[str, list[float]] = field(default_factory=dict)
    latencies: dict[str, list[float]] = field(default_factory=dict)
    # (time, cluster) when the cluster's splits appeared in / disappeared from assignments()
    assigned: list[tuple[float, str, bool]] = field(default_factory=list)
    _assigned_now: set[str] = field(default_factory=set)

    def pump(self, stream: SourceStream, until: Callable[[float], bool], max_s: float) -> float:
        """Poll until ``until(now)`` or ``max_s`` seconds; returns the time it stopped."""
        deadline = time.monotonic() + max_s
        while True:
            records = stream.poll(timeout=0.05, max_records=10_000)
            now = time.monotonic()
            for r in records:
                produced_ns = int(r.value) if isinstance(r.value, bytes) and r.value.isdigit() else None
                for key in (r.cluster_id, f"{r.cluster_id}/{r.topic}"):
                    self.arrivals.setdefault(key, []).append(now)
                    if produced_ns is not None:
                        self.latencies.setdefault(key, []).append(now - produced_ns / 1e9)
            clusters = {
                key
                for ids in stream.assignments().values()
                for sid in ids
                for key in (sid.split("/", 1)[0], sid.rsplit("/", 1)[0])
            }
            for cid in clusters - self._assigned_now:
                self.assigned.append((now, cid, True))
            for cid in self._assigned_now - clusters:
                self.assigned.append((now, cid, False))
            self._assigned_now = clusters
            if until(now) or now >= deadline:
                return now

    def first_after(self, cluster: str, t: float) -> float | None:
        times = self.arrivals.get(cluster, [])
        i = bisect.bisect_right(times, t)
        return times[i] if i < len(times) else None

    def last(self, cluster: str) -> float | None:
        times = self.arrivals.get(cluster, [])
        return times[-1] if times else None

    def assignment_change(self, cluster: str, added: bool, after: float) -> float | None:
        for when, cid, is_added in self.assigned:
            if cid == cluster and is_added == added and when >= after:
                return when - after
        return None

    def max_gap(self, cluster: str, start: float, end: float) -> float | None:
        """Longest time between consecutive arrivals of ``cluster`` in [start, end]; the window's edges count
        as arrivals, so a pause reaching into the window is seen whole on the side it is in."""
        times = self.arrivals.get(cluster, [])
        inside = times[bisect.bisect_left(times, start) : bisect.bisect_right(times, end)]
        if not inside:
            return None
        return self.max_gap_at(cluster, start, end)[0]

    def max_gap_at(self, cluster: str, start: float, end: float) -> tuple[float | None, float | None]:
        """:meth:`max_gap` and the time that gap began (None, None without arrivals)."""
        times = self.arrivals.get(cluster, [])
        inside = times[bisect.bisect_left(times, start) : bisect.bisect_right(times, end)]
        if not inside:
            return None, None
        edges = [start, *sorted(set(inside)), end]
        gap, began = max((b - a, a) for a, b in itertools.pairwise(edges))
        return gap, began

    def gaps(self, cluster: str, start: float, end: float) -> list[float]:
        """Times between consecutive arrivals of ``cluster`` within [start, end] (records that arrived in
        the same ``poll`` count once)."""
        times = self.arrivals.get(cluster, [])
        inside = sorted(set(times[bisect.bisect_left(times, start) : bisect.bisect_right(times, end)]))
        return [b - a for a, b in itertools.pairwise(inside)]

    def max_latency(self, cluster: str, start: float, end: float) -> float | None:
        times = self.arrivals.get(cluster, [])
        lat = self.latencies.get(cluster, [])
        lo, hi = bisect.bisect_left(times, start), bisect.bisect_right(times, end)
        window = lat[lo:hi] if len(lat) == len(times) else []
        return max(window) if window else None


# ----------------------------------------------------------------------------------------------- running


def _streams(parts: dict[str, tuple[Cluster, Sequence[str]]]) -> list[KafkaStream]:
    clusters = {
        cid: ClusterMetadata(cid, cluster.bootstrap_servers, frozenset(topics))
        for cid, (cluster, topics) in parts.items()
    }
    return [KafkaStream(STREAM_ID, clusters)]


def _reconciliations(registry: CollectorRegistry) -> float | None:
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "multicluster_source_reconciliations_total":
                return float(sample.value)
    return None


def _summary(values: list[float | None]) -> dict[str, Any]:
    got = [v for v in values if v is not None]
    if not got:
        return {"median": None, "max": None, "min": None, "n": 0, "missing": len(values)}
    return {
        "median": statistics.median(got),
        "max": max(got),
        "min": min(got),
        "n": len(got),
        "missing": len(values) - len(got),
    }


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (nearest rank) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _gap_figures(gaps: Sequence[float]) -> dict[str, Any]:
    return {
        "p50_s": percentile(gaps, 50),
        "p99_s": percentile(gaps, 99),
        "max_s": max(gaps) if gaps else None,
        "gaps": len(gaps),
    }


@dataclass(frozen=True)
class _Change:
    kind: str  # one of CHANGE_KINDS
    streams: list[KafkaStream]
    key: str  # the arrivals key that the change adds or removes: a cluster id or "cluster/topic"


def _apply(
    stream: SourceStream, seen: Observed, path: Path, change: _Change, cycle: int, label: str
) -> dict[str, Any]:
    """Write ``change``'s metadata and wait for its effect; the figures of this one change."""
    write_metadata_file(path, change.streams)
    t0 = time.monotonic()
    adding = change.kind.startswith("add")
    key = change.key
    out: dict[str, Any] = {"cycle": cycle, "kind": change.kind, "change": label, "at": t0}
    if adding:
        seen.pump(stream, lambda _now: seen.first_after(key, t0) is not None, REACT_TIMEOUT_S)
        first = seen.first_after(key, t0)
        seen.pump(stream, lambda now: now >= t0 + SETTLE_S, SETTLE_S + 1)
        out["latency_s"] = None if first is None else first - t0
        out["assigned_after_s"] = seen.assignment_change(key, True, t0)
        return out

    def gone(now: float) -> bool:
        last = seen.last(key)
        quiet_since = max(t0, last if last is not None else t0)
        return now >= t0 + SETTLE_S and now - quiet_since >= QUIET_S

    seen.pump(stream, gone, REACT_TIMEOUT_S + SETTLE_S)
    last = seen.last(key)
    removed_ok = last is None or time.monotonic() - last >= QUIET_S
    out["latency_s"] = (max(0.0, last - t0) if last is not None else 0.0) if removed_ok else None
    times = seen.arrivals.get(key, [])
    out["records_after_change"] = len(times) - bisect.bisect_right(times, t0)
    out["unassigned_after_s"] = seen.assignment_change(key, False, t0)
    return out


def _source(
    service: Any,
    group: str,
    properties: dict[str, str] | None = None,
    starting: OffsetsInitializer | None = None,
) -> MultiClusterKafkaSource:
    builder = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(service)
        .set_stream_ids([STREAM_ID])
        .set_group_id(group)
        .set_starting_offsets(starting or OffsetsInitializer.earliest())
        .set_property("stream-metadata-discovery-interval-ms", str(DISCOVERY_INTERVAL_MS))
    )
    for key, value in (properties or {}).items():
        builder = builder.set_property(key, value)
    return builder.build()


def _quiet_gaps(cluster: Cluster, topic: str, properties: dict[str, str]) -> dict[str, Any]:
    """Gap figures of ``topic`` over a quiet window, read live (from its end) by a fresh source with
    ``properties``."""
    seen = Observed()
    cid = cluster.cluster_id
    service = StaticMetadataService(_streams({cid: (cluster, [topic])}))
    # from the end of the topic: the gaps of a live stream, not of catching up with what is there already
    source = _source(service, f"bench-recon-{uuid.uuid4().hex[:8]}", properties, OffsetsInitializer.latest())
    stream = source.open(parallelism=1, registry=CollectorRegistry())
    try:
        seen.pump(stream, lambda _now: seen.last(cid) is not None, REACT_TIMEOUT_S)
        t = time.monotonic()
        seen.pump(stream, lambda now: now >= t + WARMUP_S, WARMUP_S + 1)
        start = time.monotonic()
        seen.pump(stream, lambda now: now >= start + BASELINE_S, BASELINE_S + 1)
        return _gap_figures(seen.gaps(cid, start, time.monotonic()))
    finally:
        stream.close()


def gaps_by_fetch_wait(
    east: tuple[Cluster, str], log: Callable[[str], None] = print
) -> dict[str, dict[str, Any]]:
    """East's gaps over a quiet window, read by a fresh source with each ``fetch.wait.max.ms``: the source's
    default and librdkafka's. The producer must be running."""
    cluster, topic = east
    out: dict[str, dict[str, Any]] = {}
    librdkafka = {"fetch.wait.max.ms": str(LIBRDKAFKA_FETCH_WAIT_MAX_MS)}
    for label, props in (
        (f"{DEFAULT_FETCH_WAIT_MAX_MS} ms (source default)", {}),
        (f"{LIBRDKAFKA_FETCH_WAIT_MAX_MS} ms (librdkafka default)", librdkafka),
    ):
        figures = out[label] = _quiet_gaps(cluster, topic, props)
        log(
            f"reconciliation: fetch.wait.max.ms {label}: {cluster.cluster_id} gap p99 "
            f"{_fmt(figures['p99_s'])} s, max {_fmt(figures['max_s'])} s"
        )
    return out


def run(
    clusters: Sequence[Cluster],
    *,
    cycles: int = DEFAULT_CYCLES,
    brokers: str = "kafka",
    fetch_wait: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the change cycles on two clusters (the first is east, the second west); the JSON result."""
    started = time.perf_counter()
    if len(clusters) < 2:
        raise ValueError("the reconciliation benchmark needs two clusters")
    east, west = clusters[0], clusters[1]
    e_id, w_id = east.cluster_id, west.cluster_id
    e_topic = east.create_topic("bench-recon", PARTITIONS)
    w_topic = west.create_topic("bench-recon", PARTITIONS)
    w_added = west.create_topic("bench-recon-added", PARTITIONS)
    east_only = _streams({e_id: (east, [e_topic])})
    both = _streams({e_id: (east, [e_topic]), w_id: (west, [w_topic])})
    both_plus = _streams({e_id: (east, [e_topic]), w_id: (west, [w_topic, w_added])})
    cycle_changes = [
        (_Change("add_cluster", both, w_id), f"add {w_id}"),
        (_Change("add_topic", both_plus, f"{w_id}/{w_added}"), "add topic"),
        (_Change("remove_topic", both, f"{w_id}/{w_added}"), "remove topic"),
        (_Change("remove_cluster", east_only, w_id), f"remove {w_id}"),
    ]
    workdir = Path(tempfile.mkdtemp(prefix="mcs-bench-recon-"))
    path = workdir / "streams.yaml"
    write_metadata_file(path, east_only)
    registry = CollectorRegistry()
    source = _source(FileMetadataService(path), f"bench-recon-{uuid.uuid4().hex[:8]}")
    seen = Observed()
    changes: list[dict[str, Any]] = []
    by_fetch_wait: dict[str, dict[str, Any]] | None = None
    with Producing([(east, e_topic), (west, w_topic), (west, w_added)]) as producing:
        stream = source.open(parallelism=1, registry=registry)
        try:
            log(f"reconciliation: source open on {e_id} only; waiting for {e_id} records...")
            seen.pump(stream, lambda _now: seen.last(e_id) is not None, REACT_TIMEOUT_S)
            if seen.last(e_id) is None:
                raise RuntimeError(f"no record from {e_id} within {REACT_TIMEOUT_S} s")
            t = time.monotonic()
            seen.pump(stream, lambda now: now >= t + WARMUP_S, WARMUP_S + 1)
            baseline_start = time.monotonic()
            seen.pump(stream, lambda now: now >= baseline_start + BASELINE_S, BASELINE_S + 1)
            baseline_end = time.monotonic()
            baseline = {
                "window_s": baseline_end - baseline_start,
                "max_gap_s": seen.max_gap(e_id, baseline_start, baseline_end),
                "max_latency_s": seen.max_latency(e_id, baseline_start, baseline_end),
                **_gap_figures(seen.gaps(e_id, baseline_start, baseline_end)),
            }
            log(
                f"reconciliation: baseline over {baseline['window_s']:.1f} s: longest {e_id} gap "
                f"{_fmt(baseline['max_gap_s'])} s (p99 {_fmt(baseline['p99_s'])} s), highest latency "
                f"{_fmt(baseline['max_latency_s'])} s"
            )
            for cycle in range(cycles):
                done = [_apply(stream, seen, path, c, cycle + 1, label) for c, label in cycle_changes]
                changes.extend(done)
                log(
                    f"  cycle {cycle + 1}/{cycles}: "
                    + "; ".join(f"{c['change']} -> {_fmt(c['latency_s'])} s" for c in done)
                )
            reconciliations = _reconciliations(registry)
        finally:
            stream.close()
        if fetch_wait:
            by_fetch_wait = gaps_by_fetch_wait((east, e_topic), log)
        producer_late = producing.late
        produced = producing.produced
    change_gaps: list[float] = []
    for change in changes:
        at = change.pop("at")
        change["unchanged_cluster"] = e_id
        gap, began = seen.max_gap_at(e_id, at - WINDOW_S, at + WINDOW_S)
        change["max_gap_s"] = gap
        # when that gap began, from the change (negative: before the file was written)
        change["max_gap_began_s"] = None if began is None else began - at
        change["max_latency_s"] = seen.max_latency(e_id, at - WINDOW_S, at + WINDOW_S)
        change_gaps.extend(seen.gaps(e_id, at - WINDOW_S, at + WINDOW_S))
    summary: dict[str, Any] = {}
    for kind in CHANGE_KINDS:
        of_kind = [c for c in changes if c["kind"] == kind]
        after = "assigned_after_s" if kind.startswith("add") else "unassigned_after_s"
        summary[f"{kind}_latency_s"] = _summary([c["latency_s"] for c in of_kind])
        summary[f"{kind}_{after.removesuffix('_after_s')}_s"] = _summary([c[after] for c in of_kind])
        summary[f"gap_around_{kind}_s"] = _summary([c["max_gap_s"] for c in of_kind])
        summary[f"latency_around_{kind}_s"] = _summary([c["max_latency_s"] for c in of_kind])
    interval_s = DISCOVERY_INTERVAL_MS / 1000
    ratios = {
        f"{kind}_latency_s": {
            stat: (v / interval_s if (v := summary[f"{kind}_latency_s"][stat]) is not None else None)
            for stat in ("median", "max")
        }
        for kind in CHANGE_KINDS
    }
    try:
        path.unlink(missing_ok=True)
        workdir.rmdir()
    except OSError:
        pass
    return {
        "benchmark": "reconciliation",
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info(brokers),
        "config": {
            "clusters": [e_id, w_id],
            "topics": {e_id: [e_topic], w_id: [w_topic, w_added]},
            "added_topic": f"{w_id}/{w_added}",
            "metadata_service": "FileMetadataService (defaults: file watch + 1 s polling fallback)",
            "stream-metadata-discovery-interval-ms": DISCOVERY_INTERVAL_MS,
            "fetch.wait.max.ms": DEFAULT_FETCH_WAIT_MAX_MS,
            "cycles": cycles,
            "partitions_per_topic": PARTITIONS,
            "produce_interval_s": PRODUCE_INTERVAL_S,
            "window_s": WINDOW_S,
            "settle_s": SETTLE_S,
            "quiet_s": QUIET_S,
            "poll": "poll(timeout=0.05, max_records=10000) in a loop",
        },
        "baseline": baseline,
        "summary": summary,
        "gaps_around_changes": _gap_figures(change_gaps),
        "gaps_by_fetch_wait": by_fetch_wait,
        "ratios_to_discovery_interval": ratios,
        "reconciliations_total": reconciliations,
        "produced_per_cluster": produced,
        "producer_ticks_late": producer_late,
        "changes": changes,
        "benchmark_seconds": time.perf_counter() - started,
    }


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def table_rows(result: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(figure, median, max, reference, ratio) for every line of the table."""
    s = result["summary"]
    b = result["baseline"]
    interval = result["config"]["stream-metadata-discovery-interval-ms"] / 1000
    unchanged = result["config"]["clusters"][0]
    west = result["config"]["clusters"][1]

    def ratio(value: float | None, ref: float | None) -> str:
        return (
            "n/a" if value is None or not ref else f"{value / ref:.4f}" if ref >= 60 else f"{value / ref:.2f}"
        )

    names = {
        "add_cluster": (f"add {west}", f"first {west} record", f"{west} splits assigned"),
        "add_topic": ("add topic", "its first record", "its splits assigned"),
        "remove_topic": ("remove topic", "its last record", "its splits dropped"),
        "remove_cluster": (f"remove {west}", f"last {west} record", f"{west} splits dropped"),
    }
    figures: list[tuple[str, str, float | None, str]] = []
    for kind in CHANGE_KINDS:
        change, record, splits = names[kind]
        assigned = "assigned" if kind.startswith("add") else "unassigned"
        figures += [
            (f"{change}: {record}", f"{kind}_latency_s", interval, "discovery interval"),
            (f"{change}: {splits}", f"{kind}_{assigned}_s", interval, "discovery interval"),
        ]
    for kind in CHANGE_KINDS:
        label = names[kind][0]
        figures.append(
            (
                f"longest {unchanged} gap, +-5 s of {label}",
                f"gap_around_{kind}_s",
                b["max_gap_s"],
                "baseline gap",
            )
        )
    for kind in CHANGE_KINDS:
        label = names[kind][0]
        figures.append(
            (
                f"max {unchanged} latency, +-5 s of {label}",
                f"latency_around_{kind}_s",
                b["max_latency_s"],
                "baseline",
            )
        )
    rows = []
    for title, key, ref, ref_name in figures:
        st = s[key]
        if ref is None:
            ref_cell = "n/a"
        else:
            ref_cell = f"{ref:.0f} s ({ref_name})" if ref >= 60 else f"{ref:.3f} s ({ref_name})"
        rows.append(
            (
                title,
                _fmt(st["median"]),
                _fmt(st["max"]),
                ref_cell,
                f"{ratio(st['median'], ref)} / {ratio(st['max'], ref)}",
            )
        )
    return rows


def gap_rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(where, p50, p99, max) of the unchanged cluster's gaps between consecutive records."""
    unchanged = result["config"]["clusters"][0]
    fetch_wait = result["config"].get("fetch.wait.max.ms", DEFAULT_FETCH_WAIT_MAX_MS)
    sources: list[tuple[str, dict[str, Any]]] = [
        (f"{unchanged}, quiet baseline (fetch.wait.max.ms {fetch_wait})", result["baseline"]),
        (
            f"{unchanged}, +-5 s of every change (fetch.wait.max.ms {fetch_wait})",
            result["gaps_around_changes"],
        ),
    ]
    for label, figures in (result.get("gaps_by_fetch_wait") or {}).items():
        sources.append((f"{unchanged} alone, fresh source, fetch.wait.max.ms {label}", figures))
    return [(where, _fmt(g.get("p50_s")), _fmt(g.get("p99_s")), _fmt(g.get("max_s"))) for where, g in sources]


def format_table(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        f"Reconciliation: {cfg['cycles']} cycles (add cluster, add topic, remove topic, remove cluster), "
        "FileMetadataService, discovery interval "
        f"{cfg['stream-metadata-discovery-interval-ms'] / 1000:.0f} s "
        "(seconds: median, max; ratio = figure / reference, median / max)",
        f"{'figure':<58} {'median':>8} {'max':>8}  {'reference':<32} {'ratio':>17}",
    ]
    for title, med, mx, ref, ratio in table_rows(result):
        lines.append(f"{title:<58} {med:>8} {mx:>8}  {ref:<32} {ratio:>17}")
    lines.append(f"{'gaps between consecutive records':<78} {'p50':>8} {'p99':>8} {'max':>8}")
    for where, p50, p99, mx in gap_rows(result):
        lines.append(f"{where:<78} {p50:>8} {p99:>8} {mx:>8}")
    lines.append(
        f"reconciliations counted: {result['reconciliations_total']}; producer ticks >10 ms late: "
        f"{result['producer_ticks_late']} of {result['produced_per_cluster']}"
    )
    return "\n".join(lines)


def write_result(result: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / "reconciliation.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Reconciliation latency and pauses on a metadata change.")
    add_broker_argument(parser)
    parser.add_argument(
        "--cycles", type=int, default=None, help=f"cycles of four changes (default {DEFAULT_CYCLES})"
    )
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_CYCLES} cycles")
    parser.add_argument(
        "--no-fetch-wait",
        action="store_true",
        help="skip the gap comparison of fetch.wait.max.ms (source default against librdkafka's)",
    )
    args = parser.parse_args(argv)
    cycles = args.cycles or (QUICK_CYCLES if args.quick else DEFAULT_CYCLES)
    with started_clusters(args.brokers, 2) as clusters:
        result = run(clusters, cycles=cycles, brokers=args.brokers, fetch_wait=not args.no_fetch_wait)
    print(format_table(result))
    print(f"written: {write_result(result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
