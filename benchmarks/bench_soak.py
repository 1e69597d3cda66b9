"""Soak: a long run with the metadata changing every few seconds and continuous production, ending with an
exact audit of what was delivered and a leak check (issue 8, part 3).

Layout: ``--logical`` logical clusters (``lc0``, ``lc1``, ...) spread over the physical clusters
(logical cluster *i* points at physical cluster *i mod n*, so several ids share one set of brokers: every
logical cluster still gets its own clients and threads in the source). Each logical cluster owns ``--topics``
topics of 2 partitions; one producer thread per physical cluster writes to all of its topics at ``--rate``
records/s per topic for the whole run, whether the topic is in the metadata or not.

A changer thread rewrites the ``FileMetadataService`` file every 2-5 s (seeded random): add or remove a
logical cluster, add or remove a topic, or change a cluster's client properties (a reconnect). At half
time the source is restored: checkpoint, keep reading 2 s, close, open a new source on the same checkpoint
directory. Checkpoints are taken every 5 s by the polling thread.

The audit, exact:

- **complete**: for every (cluster, topic) in the metadata at the end, every record the broker acknowledged
  during the run was delivered at least once. (Stronger than "within each window it was active": a removed
  topic keeps its position and a re-add resumes there, and a first add starts at the earliest offset.)
- **no duplicates but after a restore**: a record delivered twice must have been delivered between the last
  checkpoint before a restore and that restore (at-least-once allows exactly those).
- **no leaks** after the last close and the producers' end: no new thread named ``mcs-*``, as many librdkafka
  threads (``rdk:*``, one set per client) and open file descriptors as before the run.
- **memory**: RSS sampled every 2 s; start, peak, end and the slope over the second half are reported (not
  judged: the reader compares them with the previous run in ``results/soak.json``).

Also reported: how many records of topics *removed* by the end were delivered, and the time from a
metadata write that adds a (cluster, topic) to its first record, against the discovery interval (60 s: only
the file watch can explain a fast reaction).

Run: ``python benchmarks/bench_soak.py [--seconds 600]``. The CI variant is
``tests/integration/test_reliability_soak.py`` (``MCS_SOAK_SECONDS``, default 60).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

from benchmarks._brokers import RESULTS_DIR, Cluster, add_broker_argument, machine_info, started_clusters
from multicluster_source import (
    ClusterMetadata,
    FileMetadataService,
    KafkaStream,
    MultiClusterKafkaSource,
    OffsetsInitializer,
    SourceStream,
)
from multicluster_source.testing import write_metadata_file

DEFAULT_SECONDS = 600.0
PARTITIONS = 2
DISCOVERY_INTERVAL_MS = 60_000
CHECKPOINT_EVERY_S = 5.0
AFTER_CHECKPOINT_S = 2.0  # read this long after the restore's checkpoint: those records may come again
RSS_EVERY_S = 2.0
DRAIN_TIMEOUT_S = 180.0
STREAM_ID = "soak"

Key = tuple[str, str, int, int]  # (logical cluster, topic, partition, offset)


class OffsetCounts:
    """How often each offset of each (cluster-or-topic, ..., partition) was seen: one byte per offset.

    The bookkeeping of half a million records costs half a megabyte, so the process RSS reported by the
    soak is the source's and its clients', not the audit's (a Counter of tuples would add ~200 MiB).
    """

    def __init__(self) -> None:
        self.arrays: dict[tuple[str, ...], bytearray] = {}

    def add(self, where: tuple[str, ...], offset: int) -> int:
        """Count ``offset`` once more; returns the new count (saturates at 255)."""
        array = self.arrays.get(where)
        if array is None:
            array = self.arrays[where] = bytearray()
        if offset >= len(array):
            array.extend(bytes(max(offset + 1 - len(array), len(array) // 2)))
        if array[offset] < 255:
            array[offset] += 1
        return array[offset]

    def get(self, where: tuple[str, ...], offset: int) -> int:
        array = self.arrays.get(where)
        return array[offset] if array is not None and offset < len(array) else 0

    def offsets(self, where: tuple[str, ...], minimum: int = 1) -> list[int]:
        """Offsets of ``where`` seen at least ``minimum`` times."""
        array = self.arrays.get(where, bytearray())
        return [o for o, n in enumerate(array) if n >= minimum]

    def total(self) -> int:
        return sum(sum(a) for a in self.arrays.values())

    def distinct(self) -> int:
        return sum(len(a) - a.count(0) for a in self.arrays.values())


@dataclass
class SoakConfig:
    """What a soak run does."""

    seconds: float = DEFAULT_SECONDS
    logical: int = 6
    topics: int = 3
    rate: float = 50.0
    """records per second per topic"""
    parallelism: int = 2
    change_every: tuple[float, float] = (2.0, 5.0)
    seed: int = 8
    restore: bool = True


# ------------------------------------------------------------------------------------------ process facts


def rss_mb() -> float:
    """Resident set size of this process in MiB (``/proc/self/status``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def open_fds() -> int:
    """Open file descriptors of this process."""
    return len(os.listdir("/proc/self/fd"))


def rdk_threads() -> int:
    """OS threads of this process that librdkafka started (named ``rdk:...``): a count of live clients."""
    count = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            if (task / "comm").read_text().startswith("rdk:"):
                count += 1
        except OSError:
            continue
    return count


def mcs_threads() -> list[str]:
    """Names of the source's Python threads still alive."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("mcs-"))


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


# -------------------------------------------------------------------------------------------- the universe


@dataclass(frozen=True)
class Logical:
    """One logical cluster: an id, the physical cluster behind it, and the topics it owns there."""

    cluster_id: str
    physical: Cluster
    topics: tuple[str, ...]


def build_universe(clusters: Sequence[Cluster], config: SoakConfig) -> list[Logical]:
    universe = []
    for i in range(config.logical):
        physical = clusters[i % len(clusters)]
        topics = tuple(physical.create_topic(f"soak-lc{i}-t{j}", PARTITIONS) for j in range(config.topics))
        universe.append(Logical(f"lc{i}", physical, topics))
    return universe


class Producing:
    """One thread per physical cluster writing to every topic of its logical clusters at ``rate``/s each."""

    def __init__(self, universe: Sequence[Logical], rate: float) -> None:
        self.acked = OffsetCounts()  # (topic, str(partition)) -> offsets the broker acknowledged
        self.failed: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        by_physical: dict[int, tuple[Cluster, list[str]]] = {}
        for lc in universe:
            by_physical.setdefault(id(lc.physical), (lc.physical, []))[1].extend(lc.topics)
        self._threads = [
            threading.Thread(
                target=self._run, args=(cluster, topics, rate), name=f"soak-produce-{n}", daemon=True
            )
            for n, (cluster, topics) in enumerate(by_physical.values())
        ]

    def _run(self, cluster: Cluster, topics: list[str], rate: float) -> None:
        producer = cluster.producer(**{"linger.ms": 5, "enable.idempotence": True, "acks": "all"})

        def delivered(err: Any, msg: Any) -> None:
            with self._lock:
                if err is not None:
                    self.failed.append(str(err))
                else:
                    self.acked.add((msg.topic(), str(msg.partition())), msg.offset())

        started = time.monotonic()
        sent = 0
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * rate)
            while sent < due:
                for topic in topics:
                    producer.produce(topic, b"%d" % sent, partition=sent % PARTITIONS, on_delivery=delivered)
                sent += 1
            producer.poll(0.01)
        producer.flush(60)
        producer.close()

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(90)

    def acked_count(self, topic: str, partition: int) -> int:
        with self._lock:
            return len(self.acked.offsets((topic, str(partition))))

    def acked_offsets(self, topic: str) -> dict[int, list[int]]:
        """Partition -> acknowledged offsets of ``topic``."""
        with self._lock:
            return {p: self.acked.offsets((topic, str(p))) for p in range(PARTITIONS)}

    def total(self) -> int:
        with self._lock:
            return self.acked.total()


@dataclass
class Change:
    at: float
    op: str
    cluster: str
    topics: tuple[str, ...] = ()


class Changer:
    """Rewrites the metadata file every few seconds with a random change; keeps the history."""

    def __init__(
        self,
        path: Path,
        universe: Sequence[Logical],
        config: SoakConfig,
        on_change: Callable[[Change], None] = lambda change: None,
    ) -> None:
        self.path = path
        self.on_change = on_change
        self.universe = {lc.cluster_id: lc for lc in universe}
        self.rng = random.Random(config.seed)
        self.every = config.change_every
        self.history: list[Change] = []
        self.lock = threading.Lock()
        first = universe[0]
        self.active: dict[str, set[str]] = {first.cluster_id: set(first.topics)}
        self.props: dict[str, dict[str, str]] = {lc.cluster_id: {} for lc in universe}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-metadata", daemon=True)
        self.write()

    def streams(self) -> list[KafkaStream]:
        clusters = {
            cid: ClusterMetadata(
                cid, self.universe[cid].physical.bootstrap_servers, frozenset(topics), self.props[cid]
            )
            for cid, topics in self.active.items()
            if topics
        }
        return [KafkaStream(STREAM_ID, clusters)]

    def write(self) -> None:
        write_metadata_file(self.path, self.streams())

    def _options(self) -> list[str]:
        options = ["reconnect"]
        if len(self.active) < len(self.universe):
            options += ["add_cluster"] * 2
        if len(self.active) > 1:
            options += ["remove_cluster"]
        if any(len(t) < len(self.universe[c].topics) for c, t in self.active.items()):
            options += ["add_topic"] * 2
        if any(len(t) > 1 for t in self.active.values()):
            options += ["remove_topic"]
        return options

    def change_once(self) -> Change:
        rng = self.rng
        op = rng.choice(self._options())
        if op == "add_cluster":
            cid = rng.choice(sorted(set(self.universe) - set(self.active)))
            topics = self.universe[cid].topics
            chosen = set(rng.sample(topics, rng.randint(1, len(topics))))
            self.active[cid] = chosen
            change = Change(0.0, op, cid, tuple(sorted(chosen)))
        elif op == "remove_cluster":
            cid = rng.choice(sorted(self.active))
            change = Change(0.0, op, cid, tuple(sorted(self.active.pop(cid))))
        elif op == "add_topic":
            cid = rng.choice(
                sorted(c for c, t in self.active.items() if len(t) < len(self.universe[c].topics))
            )
            topic = rng.choice(sorted(set(self.universe[cid].topics) - self.active[cid]))
            self.active[cid].add(topic)
            change = Change(0.0, op, cid, (topic,))
        elif op == "remove_topic":
            cid = rng.choice(sorted(c for c, t in self.active.items() if len(t) > 1))
            topic = rng.choice(sorted(self.active[cid]))
            self.active[cid].discard(topic)
            change = Change(0.0, op, cid, (topic,))
        else:
            cid = rng.choice(sorted(self.active))
            wait = "200" if self.props[cid].get("fetch.wait.max.ms") == "100" else "100"
            self.props[cid] = {"fetch.wait.max.ms": wait}
            change = Change(0.0, op, cid)
        change.at = time.monotonic()
        self.write()
        self.history.append(change)
        self.on_change(change)
        return change

    def _run(self) -> None:
        while not self._stop.wait(self.rng.uniform(*self.every)):
            with self.lock:
                self.change_once()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def end_state(self) -> dict[str, set[str]]:
        with self.lock:
            return {c: set(t) for c, t in self.active.items() if t}


# ---------------------------------------------------------------------------------------------- reading


@dataclass
class Reading:
    """What the polling thread saw."""

    counts: OffsetCounts = field(default_factory=OffsetCounts)  # (cluster, topic, str(partition)) -> offsets
    since_checkpoint: set[Key] = field(default_factory=set)
    may_repeat: set[Key] = field(default_factory=set)
    first_after_add: list[float] = field(default_factory=list)
    rss: list[tuple[float, float]] = field(default_factory=list)
    checkpoints: int = 0
    restores: int = 0
    reconciliations: float = 0.0


def _source(path: Path, group: str, parallelism: int) -> MultiClusterKafkaSource:
    return (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(FileMetadataService(path))
        .set_stream_ids([STREAM_ID])
        .set_group_id(group)
        .set_starting_offsets(OffsetsInitializer.earliest())
        .set_property("stream-metadata-discovery-interval-ms", str(DISCOVERY_INTERVAL_MS))
        .set_property("partition.discovery.interval.ms", "5000")
        .set_name(f"soak-{group[-6:]}")
        .build()
    )


def _poll_for(
    s: SourceStream, seconds: float, seen: Reading, pending: dict[tuple[str, str], float], started: float
) -> None:
    deadline = time.monotonic() + seconds
    last_checkpoint = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= deadline:
            return
        for r in s.poll(timeout=0.2):
            seen.counts.add((r.cluster_id, r.topic, str(r.partition)), r.offset)
            seen.since_checkpoint.add((r.cluster_id, r.topic, r.partition, r.offset))
            added = pending.pop((r.cluster_id, r.topic), None)
            if added is not None:
                seen.first_after_add.append(time.monotonic() - added)
        if now - last_checkpoint >= CHECKPOINT_EVERY_S:
            s.checkpoint()
            seen.checkpoints += 1
            seen.since_checkpoint.clear()
            last_checkpoint = now
        if not seen.rss or now - started - seen.rss[-1][0] >= RSS_EVERY_S:
            seen.rss.append((now - started, rss_mb()))


def _slope_mb_per_min(samples: list[tuple[float, float]]) -> float | None:
    half = [s for s in samples if s[0] >= samples[-1][0] / 2] if samples else []
    if len(half) < 3:
        return None
    xs, ys = [s[0] for s in half], [s[1] for s in half]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return None if den == 0 else 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den


def run(clusters: Sequence[Cluster], config: SoakConfig, *, brokers: str = "kafka") -> dict[str, Any]:
    """Run the soak on ``clusters`` and return figures and the audit (see the module docs)."""
    previous = previous_summary()
    universe = build_universe(clusters, config)
    workdir = Path(tempfile.mkdtemp(prefix="mcs-soak-"))
    path, ckpt = workdir / "streams.yaml", workdir / "ckpt"
    group = f"soak-{uuid.uuid4().hex[:8]}"
    baseline: dict[str, Any] = {
        "fds": open_fds(),
        "rdk_threads": rdk_threads(),
        "rss_mb": rss_mb(),
        "mcs_threads": mcs_threads(),
    }
    producing = Producing(universe, config.rate)
    producing.start()
    seen = Reading()
    # (cluster, topic) -> when a metadata write added it, until its first record arrives
    pending: dict[tuple[str, str], float] = {
        (universe[0].cluster_id, t): time.monotonic() for t in universe[0].topics
    }

    def note(change: Change) -> None:
        if change.op in ("add_cluster", "add_topic"):
            for topic in change.topics:
                pending.setdefault((change.cluster, topic), change.at)
        elif change.op in ("remove_cluster", "remove_topic"):
            for topic in change.topics:
                pending.pop((change.cluster, topic), None)

    changer = Changer(path, universe, config, on_change=note)
    started = time.monotonic()
    registry = CollectorRegistry()
    stream = _source(path, group, config.parallelism).open(
        config.parallelism, checkpoint_dir=str(ckpt), registry=registry
    )
    changer.start()
    try:
        if config.restore:
            _poll_for(stream, config.seconds / 2, seen, pending, started)
            stream.checkpoint()
            seen.checkpoints += 1
            seen.since_checkpoint.clear()
            _poll_for(stream, AFTER_CHECKPOINT_S, seen, pending, started)
            seen.may_repeat |= seen.since_checkpoint
            seen.reconciliations += (
                registry.get_sample_value("multicluster_source_reconciliations_total") or 0
            )
            stream.close()
            seen.restores += 1
            registry = CollectorRegistry()
            stream = _source(path, group, config.parallelism).open(
                config.parallelism, checkpoint_dir=str(ckpt), registry=registry
            )
            _poll_for(stream, config.seconds / 2 - AFTER_CHECKPOINT_S, seen, pending, started)
        else:
            _poll_for(stream, config.seconds, seen, pending, started)
        changer.stop()
        producing.stop()
        end_state = changer.end_state()
        wanted = [
            (cid, t, p)
            for cid, topics in sorted(end_state.items())
            for t in sorted(topics)
            for p in range(PARTITIONS)
        ]
        expected = sum(producing.acked_count(t, p) for _cid, t, p in wanted)

        def missing_now() -> list[Key]:
            out: list[Key] = []
            for cid, topic, partition in wanted:
                delivered = seen.counts.arrays.get((cid, topic, str(partition)), bytearray())
                acked = producing.acked_offsets(topic)[partition]
                out += [(cid, topic, partition, o) for o in acked if o >= len(delivered) or not delivered[o]]
            return out

        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while time.monotonic() < deadline and missing_now():
            _poll_for(stream, 1.0, seen, pending, started)
        _poll_for(stream, 2.0, seen, pending, started)
        seen.reconciliations += registry.get_sample_value("multicluster_source_reconciliations_total") or 0
        rss_end = rss_mb()
    finally:
        changer.stop()
        producing.stop()
        stream.close()
    elapsed = time.monotonic() - started

    def leaked_threads() -> list[str]:
        return sorted(set(mcs_threads()) - set(baseline["mcs_threads"]))

    threads_gone = wait_until(lambda: not leaked_threads(), 15.0)
    wait_until(lambda: rdk_threads() <= baseline["rdk_threads"], 15.0)
    after: dict[str, Any] = {"fds": open_fds(), "rdk_threads": rdk_threads(), "mcs_threads": leaked_threads()}

    missing = missing_now()
    repeated = {
        (where[0], where[1], int(where[2]), o): seen.counts.get(where, o)
        for where in seen.counts.arrays
        for o in seen.counts.offsets(where, minimum=2)
    }
    unexpected = sorted(k for k, n in repeated.items() if k not in seen.may_repeat or n > 1 + seen.restores)
    removed_topics = {
        (lc.cluster_id, t)
        for lc in universe
        for t in lc.topics
        if t not in end_state.get(lc.cluster_id, set())
    }
    delivered_removed = sum(
        sum(1 for n in array if n)
        for where, array in seen.counts.arrays.items()
        if where[:2] in removed_topics
    )
    rss = [v for _t, v in seen.rss]
    ops = Counter(c.op for c in changer.history)
    latencies = seen.first_after_add
    return {
        "generated": time.strftime("%Y-%m-%d %H:%M %Z"),
        "previous": previous,
        "config": {
            "seconds": config.seconds,
            "physical_clusters": len(clusters),
            "logical_clusters": config.logical,
            "topics_per_cluster": config.topics,
            "partitions_per_topic": PARTITIONS,
            "rate_per_topic": config.rate,
            "parallelism": config.parallelism,
            "change_every_s": list(config.change_every),
            "seed": config.seed,
            "stream-metadata-discovery-interval-ms": DISCOVERY_INTERVAL_MS,
            "checkpoint_every_s": CHECKPOINT_EVERY_S,
        },
        "machine": machine_info(brokers),
        "elapsed_s": elapsed,
        "changes": dict(ops),
        "changes_total": len(changer.history),
        "reconciliations_total": seen.reconciliations,
        "checkpoints": seen.checkpoints,
        "restores": seen.restores,
        "produced": producing.total(),
        "producer_failures": len(producing.failed),
        "delivered": seen.counts.total(),
        "distinct_delivered": seen.counts.distinct(),
        "end_state": {c: sorted(t) for c, t in sorted(end_state.items())},
        "audit": {
            "expected": expected,
            "missing": len(missing),
            "missing_examples": [list(k) for k in missing[:5]],
            "duplicates": len(repeated),
            "duplicates_allowed_by_restore": len(repeated) - len(unexpected),
            "unexpected_duplicates": len(unexpected),
            "unexpected_examples": [list(k) for k in unexpected[:5]],
            "removed_topic_records_delivered": delivered_removed,
        },
        "first_record_after_add_s": {
            "n": len(latencies),
            "median": statistics.median(latencies) if latencies else None,
            "max": max(latencies) if latencies else None,
            "never": len(pending),
        },
        "leaks": {
            "baseline": baseline,
            "after_close": after,
            "mcs_threads_gone": threads_gone,
            "fd_delta": after["fds"] - baseline["fds"],
            "rdk_thread_delta": after["rdk_threads"] - baseline["rdk_threads"],
        },
        "rss_mb": {
            "baseline": baseline["rss_mb"],
            "start": rss[0] if rss else None,
            "peak": max(rss) if rss else None,
            "end": rss_end,
            "slope_second_half_mb_per_min": _slope_mb_per_min(seen.rss),
            "samples": [[round(t, 1), round(v, 1)] for t, v in seen.rss],
        },
    }


# ---------------------------------------------------------------------------------------------- reports


def previous_summary() -> dict[str, Any] | None:
    """The figures of the last run written to ``results/soak.json`` (the reference of the next one)."""
    try:
        last = json.loads((RESULTS_DIR / "soak.json").read_text())
        return {
            "generated": last.get("generated"),
            "seconds": last["config"]["seconds"],
            "rss_mb": {k: v for k, v in last["rss_mb"].items() if k != "samples"},
            "first_record_after_add_s": last["first_record_after_add_s"],
            "audit": last["audit"],
        }
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _f(value: Any, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def table_rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(figure, this run, reference) rows."""
    a, leaks, rss, lat = (
        result["audit"],
        result["leaks"],
        result["rss_mb"],
        result["first_record_after_add_s"],
    )
    prev = result.get("previous") or {}
    p_rss = prev.get("rss_mb", {})
    p_lat = prev.get("first_record_after_add_s", {})
    interval = result["config"]["stream-metadata-discovery-interval-ms"] / 1000
    return [
        ("metadata changes applied", f"{result['changes_total']} ({_ops(result['changes'])})", "-"),
        ("records produced / delivered", f"{result['produced']:,} / {result['delivered']:,}", "-"),
        ("audit: missing records of active topics", f"{a['missing']} of {a['expected']:,}", "0"),
        (
            "audit: duplicates",
            f"{a['duplicates']} ({a['duplicates_allowed_by_restore']} after the restore)",
            "only after a restore",
        ),
        ("audit: unexpected duplicates", str(a["unexpected_duplicates"]), "0"),
        (
            "first record after an add, median / max (s)",
            f"{_f(lat['median'], 3)} / {_f(lat['max'], 3)}",
            f"{interval:.0f} s discovery interval; previous {_f(p_lat.get('median'), 3)} / "
            f"{_f(p_lat.get('max'), 3)}",
        ),
        ("mcs-* threads after close", str(len(leaks["after_close"]["mcs_threads"])), "0"),
        (
            "librdkafka threads after close",
            str(leaks["after_close"]["rdk_threads"]),
            f"{leaks['baseline']['rdk_threads']} before the run",
        ),
        (
            "open fds after close",
            str(leaks["after_close"]["fds"]),
            f"{leaks['baseline']['fds']} before the run",
        ),
        (
            "RSS start / peak / end (MiB)",
            f"{_f(rss['start'])} / {_f(rss['peak'])} / {_f(rss['end'])}",
            f"previous {_f(p_rss.get('start'))} / {_f(p_rss.get('peak'))} / {_f(p_rss.get('end'))}",
        ),
        (
            "RSS slope, second half (MiB/min)",
            _f(rss["slope_second_half_mb_per_min"], 2),
            f"previous {_f(p_rss.get('slope_second_half_mb_per_min'), 2)}",
        ),
    ]


def _ops(ops: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(ops.items()))


def describe(result: dict[str, Any]) -> str:
    """One sentence saying what the run did."""
    cfg = result["config"]
    prev = result.get("previous") or {}
    since = f"; previous run: {prev['seconds']:.0f} s on {prev['generated']}" if prev.get("generated") else ""
    return (
        f"{cfg['seconds']:.0f} s, {cfg['logical_clusters']} logical clusters on {cfg['physical_clusters']} "
        f"physical, {cfg['topics_per_cluster']} topics of {cfg['partitions_per_topic']} partitions each, "
        f"{cfg['rate_per_topic']:.0f} records/s per topic, a metadata change every "
        f"{cfg['change_every_s'][0]:.0f}-{cfg['change_every_s'][1]:.0f} s (seed {cfg['seed']}), one "
        f"restore at half time, {cfg['parallelism']} readers{since}"
    )


def figures_markdown(intro: str, rows: Sequence[tuple[str, str, str]]) -> list[str]:
    """A RESULTS.md section body: an introduction, then a figure / this run / reference table."""
    lines = [intro, "", "| figure | this run | reference |", "|---|---|---|"]
    lines += [f"| {figure} | {value} | {ref} |" for figure, value, ref in rows]
    return lines


def write_json(name: str, result: dict[str, Any]) -> Path:
    """Write ``results/<name>.json``."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def markdown(result: dict[str, Any]) -> list[str]:
    """The soak's section body for RESULTS.md."""
    return figures_markdown(
        describe(result) + ". The audit is defined in `bench_soak.py`; reference = what it must be, the "
        "baseline before the run, or the previous run (`results/soak.json`).",
        table_rows(result),
    )


def format_table(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        f"Soak: {cfg['seconds']:.0f} s, {cfg['logical_clusters']} logical clusters on "
        f"{cfg['physical_clusters']} physical, {cfg['topics_per_cluster']} topics each, "
        f"{cfg['rate_per_topic']:.0f} records/s per topic, a change every {cfg['change_every_s'][0]:.0f}-"
        f"{cfg['change_every_s'][1]:.0f} s, one restore",
        f"{'figure':<46} {'this run':<40} reference",
    ]
    for figure, value, ref in table_rows(result):
        lines.append(f"{figure:<46} {value:<40} {ref}")
    return "\n".join(lines)


def write_result(result: dict[str, Any]) -> Path:
    return write_json("soak", result)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Soak with metadata changes, an exact audit, leak checks.")
    add_broker_argument(parser)
    parser.add_argument("--seconds", type=float, default=DEFAULT_SECONDS)
    parser.add_argument("--logical", type=int, default=SoakConfig.logical)
    parser.add_argument("--topics", type=int, default=SoakConfig.topics)
    parser.add_argument("--rate", type=float, default=SoakConfig.rate, help="records/s per topic")
    parser.add_argument("--seed", type=int, default=SoakConfig.seed)
    args = parser.parse_args(argv)
    config = SoakConfig(
        seconds=args.seconds, logical=args.logical, topics=args.topics, rate=args.rate, seed=args.seed
    )
    with started_clusters(args.brokers, 2) as clusters:
        result = run(clusters, config, brokers=args.brokers)
    print(format_table(result))
    print(f"written: {write_result(result)}")
    return 0 if result["audit"]["missing"] == 0 and result["audit"]["unexpected_duplicates"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
