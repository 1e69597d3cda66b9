"""Reconciliation: how fast a running source follows a metadata file change, and whether others pause.

Two clusters, east and west, each with a topic that a background thread writes to continuously (one record
every ~2 ms per cluster; the value is the producer's ``time.monotonic_ns()`` in ASCII). The source reads a
``FileMetadataService`` file and polls its metadata only every ``stream-metadata-discovery-interval-ms`` =
600000 (10 minutes), so a reaction within seconds can only come from the service's change notification.

It starts with east only, takes a quiet baseline, then repeats (5 times by default) a cycle:

1. write a file that adds west (atomically: temporary file + ``os.replace``); measure the seconds from the
   write to the first west record returned by ``poll``;
2. write a file that removes west again; poll until no west record came for 3 s; measure the seconds from
   the write to the last west record returned (changes are 10 s apart, so the windows below never overlap);
3. for each of these two changes: the longest gap between consecutive east records (the cluster that did not
   change) arriving within +-5 s of the change, and the highest east end-to-end latency (arrival minus the
   producer's timestamp) there, side by side with the same figures over the quiet baseline window.

It also notes when the west splits appear in / disappear from ``stream.assignments()``. Nothing asserts on
speed. Run: ``python benchmarks/bench_reconciliation.py [--brokers kafka|tansu] [--cycles N | --quick]``.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
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
)
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
    """Arrival times (``time.monotonic()`` when ``poll`` returned) and end-to-end latencies per cluster."""

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
                self.arrivals.setdefault(r.cluster_id, []).append(now)
                produced_ns = int(r.value) if isinstance(r.value, bytes) and r.value.isdigit() else None
                if produced_ns is not None:
                    self.latencies.setdefault(r.cluster_id, []).append(now - produced_ns / 1e9)
            clusters = {sid.split("/", 1)[0] for ids in stream.assignments().values() for sid in ids}
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
        points = sorted(set(inside))
        edges = [start, *points, end]
        return max(b - a for a, b in itertools.pairwise(edges))

    def max_latency(self, cluster: str, start: float, end: float) -> float | None:
        times = self.arrivals.get(cluster, [])
        lat = self.latencies.get(cluster, [])
        lo, hi = bisect.bisect_left(times, start), bisect.bisect_right(times, end)
        window = lat[lo:hi] if len(lat) == len(times) else []
        return max(window) if window else None


# ----------------------------------------------------------------------------------------------- running


def _streams(parts: dict[str, tuple[Cluster, str]]) -> list[KafkaStream]:
    clusters = {
        cid: ClusterMetadata(cid, cluster.bootstrap_servers, frozenset([topic]))
        for cid, (cluster, topic) in parts.items()
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


def run(
    clusters: Sequence[Cluster],
    *,
    cycles: int = DEFAULT_CYCLES,
    brokers: str = "kafka",
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the add/remove cycles on two clusters (the first is east, the second west); the JSON result."""
    started = time.perf_counter()
    if len(clusters) < 2:
        raise ValueError("the reconciliation benchmark needs two clusters")
    east, west = clusters[0], clusters[1]
    e_id, w_id = east.cluster_id, west.cluster_id
    parts = {
        e_id: (east, east.create_topic("bench-recon", PARTITIONS)),
        w_id: (west, west.create_topic("bench-recon", PARTITIONS)),
    }
    east_only = _streams({e_id: parts[e_id]})
    both = _streams(parts)
    workdir = Path(tempfile.mkdtemp(prefix="mcs-bench-recon-"))
    path = workdir / "streams.yaml"
    write_metadata_file(path, east_only)
    registry = CollectorRegistry()
    source = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(FileMetadataService(path))
        .set_stream_ids([STREAM_ID])
        .set_group_id(f"bench-recon-{uuid.uuid4().hex[:8]}")
        .set_starting_offsets(OffsetsInitializer.earliest())
        .set_property("stream-metadata-discovery-interval-ms", str(DISCOVERY_INTERVAL_MS))
        .build()
    )
    seen = Observed()
    changes: list[dict[str, Any]] = []
    with Producing([parts[e_id], parts[w_id]]) as producing:
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
            }
            log(
                f"reconciliation: baseline over {baseline['window_s']:.1f} s: longest {e_id} gap "
                f"{baseline['max_gap_s']:.3f} s, highest latency {baseline['max_latency_s']:.3f} s"
            )
            for cycle in range(cycles):
                # add west
                write_metadata_file(path, both)
                t_add = time.monotonic()

                def west_came(_now: float, t0: float = t_add) -> bool:
                    return seen.first_after(w_id, t0) is not None

                def settled(now: float, t0: float = t_add) -> bool:
                    return now >= t0 + SETTLE_S

                seen.pump(stream, west_came, REACT_TIMEOUT_S)
                first = seen.first_after(w_id, t_add)
                seen.pump(stream, settled, SETTLE_S + 1)
                add: dict[str, Any] = {
                    "cycle": cycle + 1,
                    "change": f"add {w_id}",
                    "at": t_add,
                    "latency_s": None if first is None else first - t_add,
                    "assigned_after_s": seen.assignment_change(w_id, True, t_add),
                }
                # remove west
                write_metadata_file(path, east_only)
                t_rm = time.monotonic()

                def gone(now: float, t0: float = t_rm) -> bool:
                    last = seen.last(w_id)
                    quiet_since = max(t0, last if last is not None else t0)
                    return now >= t0 + SETTLE_S and now - quiet_since >= QUIET_S

                seen.pump(stream, gone, REACT_TIMEOUT_S + SETTLE_S)
                last = seen.last(w_id)
                removed_ok = last is None or time.monotonic() - last >= QUIET_S
                rm: dict[str, Any] = {
                    "cycle": cycle + 1,
                    "change": f"remove {w_id}",
                    "at": t_rm,
                    "latency_s": (max(0.0, last - t_rm) if last is not None else 0.0) if removed_ok else None,
                    "records_after_change": len(seen.arrivals.get(w_id, []))
                    - bisect.bisect_right(seen.arrivals.get(w_id, []), t_rm),
                    "unassigned_after_s": seen.assignment_change(w_id, False, t_rm),
                }
                for change in (add, rm):
                    at = change["at"]
                    change["unchanged_cluster"] = e_id
                    change["max_gap_s"] = seen.max_gap(e_id, at - WINDOW_S, at + WINDOW_S)
                    change["max_latency_s"] = seen.max_latency(e_id, at - WINDOW_S, at + WINDOW_S)
                    changes.append(change)
                log(
                    f"  cycle {cycle + 1}/{cycles}: add {w_id} -> first record after "
                    f"{_fmt(add['latency_s'])} s ({e_id} gap {_fmt(add['max_gap_s'])} s); remove {w_id} -> "
                    f"last record after {_fmt(rm['latency_s'])} s ({e_id} gap {_fmt(rm['max_gap_s'])} s)"
                )
            reconciliations = _reconciliations(registry)
        finally:
            stream.close()
        producer_late = producing.late
        produced = producing.produced
    for change in changes:
        change.pop("at")
    adds = [c for c in changes if c["change"].startswith("add")]
    rms = [c for c in changes if c["change"].startswith("remove")]
    interval_s = DISCOVERY_INTERVAL_MS / 1000
    summary = {
        "add_latency_s": _summary([c["latency_s"] for c in adds]),
        "add_assigned_s": _summary([c["assigned_after_s"] for c in adds]),
        "remove_latency_s": _summary([c["latency_s"] for c in rms]),
        "remove_unassigned_s": _summary([c["unassigned_after_s"] for c in rms]),
        "gap_around_add_s": _summary([c["max_gap_s"] for c in adds]),
        "gap_around_remove_s": _summary([c["max_gap_s"] for c in rms]),
        "latency_around_add_s": _summary([c["max_latency_s"] for c in adds]),
        "latency_around_remove_s": _summary([c["max_latency_s"] for c in rms]),
    }
    ratios = {
        key: {
            stat: (summary[key][stat] / interval_s if summary[key][stat] is not None else None)
            for stat in ("median", "max")
        }
        for key in ("add_latency_s", "remove_latency_s")
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
            "metadata_service": "FileMetadataService (defaults: file watch + 1 s polling fallback)",
            "stream-metadata-discovery-interval-ms": DISCOVERY_INTERVAL_MS,
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
    added = result["config"]["clusters"][1]

    def ratio(value: float | None, ref: float | None) -> str:
        return (
            "n/a" if value is None or not ref else f"{value / ref:.4f}" if ref >= 60 else f"{value / ref:.2f}"
        )

    rows = []
    for title, key, ref, ref_name in (
        (f"add {added}: first {added} record", "add_latency_s", interval, "discovery interval"),
        (f"add {added}: {added} splits assigned", "add_assigned_s", interval, "discovery interval"),
        (f"remove {added}: last {added} record", "remove_latency_s", interval, "discovery interval"),
        (f"remove {added}: {added} splits dropped", "remove_unassigned_s", interval, "discovery interval"),
        (f"longest {unchanged} gap, +-5 s of add", "gap_around_add_s", b["max_gap_s"], "baseline gap"),
        (f"longest {unchanged} gap, +-5 s of remove", "gap_around_remove_s", b["max_gap_s"], "baseline gap"),
        (f"max {unchanged} latency, +-5 s of add", "latency_around_add_s", b["max_latency_s"], "baseline"),
        (
            f"max {unchanged} latency, +-5 s of remove",
            "latency_around_remove_s",
            b["max_latency_s"],
            "baseline",
        ),
    ):
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


def format_table(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        f"Reconciliation: {cfg['cycles']} add/remove cycles, FileMetadataService, discovery interval "
        f"{cfg['stream-metadata-discovery-interval-ms'] / 1000:.0f} s "
        "(seconds: median, max; ratio = figure / reference, median / max)",
        f"{'figure':<38} {'median':>8} {'max':>8}  {'reference':<32} {'ratio':>17}",
    ]
    for title, med, mx, ref, ratio in table_rows(result):
        lines.append(f"{title:<38} {med:>8} {mx:>8}  {ref:<32} {ratio:>17}")
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
        "--cycles", type=int, default=None, help=f"add/remove cycles (default {DEFAULT_CYCLES})"
    )
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_CYCLES} cycles")
    args = parser.parse_args(argv)
    cycles = args.cycles or (QUICK_CYCLES if args.quick else DEFAULT_CYCLES)
    with started_clusters(args.brokers, 2) as clusters:
        result = run(clusters, cycles=cycles, brokers=args.brokers)
    print(format_table(result))
    print(f"written: {write_result(result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
