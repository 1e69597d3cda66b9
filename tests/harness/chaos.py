"""The chaos soak (issue 33): clusters behind Toxiproxy, a producer per cluster, the job as a subprocess, a
seeded schedule of faults, then heal, drain and the exact audit (:mod:`harness.audit`).

:class:`ChaosSoak` runs it on proxied clusters (``ClusterPool.proxied``) and the pool's Toxiproxy:

- each cluster gets topics ``chaos-a`` (2 partitions) and ``chaos-b`` (1 partition), both in stream ``s`` of a
  metadata file the job reads through the proxies;
- a producer thread per cluster writes numbered records (``acks=all``, idempotent) straight to its broker
  and keeps the delivery reports of the acknowledged ones;
- the job (``tests/integration/jobs/chaos_job.py``) checkpoints every ``checkpoint_interval`` seconds and
  writes what it receives to a file per run;
- topologies (:data:`TOPOLOGIES`): three single-node clusters, or one three-broker cluster (topics with
  replication 3 and ``min.insync.replicas`` 2, where a node fault hits the leader of ``chaos-a`` 0);
- faults (:data:`FAULT_KINDS`), one at a time on one cluster chosen at random: a fault every ``every``
  seconds (from the previous fault's start, never before the previous heal), lasting ``lasting`` seconds;
  ``delete-records`` caps the link at 1 KB/s so that the job falls behind, then deletes the partition up to
  its high watermark as it heals: the job must log an offset reset, and the records it had not read count
  as deleted, not lost; ``partition`` disables a node's proxy (the job's connections to it are dropped
  and new ones refused; on the three-broker cluster it cuts the job off from a partition leader, which
  keeps its followers: the brokers talk to each other directly, not through Toxiproxy); ``disk-full`` fills
  a node's data tmpfs (``KafkaCluster.fill_disk``): Kafka's next write fails, its log directory goes offline
  and the node stops; the heal frees the disk and restarts the node (left out, and said so, where the
  clusters could not mount a tmpfs); ``leader-isolated`` (three-broker topology only) disables the proxy
  of the leader's replication listener: its followers cannot fetch from it and drop out of the ISR, so
  ``acks=all`` writes fail (``min.insync.replicas`` 2) while the controller and the job still reach it;
  ``replica-handover`` (several clusters only) removes the first cluster's ``chaos-a`` from the metadata
  while MirrorMaker 2 copies it to the second cluster, declared there as its replica: the job hands over to
  the copy, and back at the heal; half of them also ``kill -9`` the job halfway, so that it restores while
  it reads the copy (:mod:`harness.chaos_copies`; the audit credits the copy's records to
  their origin records and judges repeats against each logged handover's bound, :mod:`harness.audit_copies`);
- the job reports its own process (``harness.leaks``): RSS per fault window and, after the last run closed
  its stream, no ``mcs-`` thread, librdkafka client or descriptor left (:class:`LeakReport`);
- after ``seconds``: everything healed, the producers stopped, the job drains until every acknowledged record
  came (at most ``drain_timeout`` seconds); then the audit, with lost records looked up in the brokers' logs.

A *recovery time* is the time from a heal until every record acknowledged before it has been delivered.
Every thread is joined and every process ended before :meth:`ChaosSoak.run` returns.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_END,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from harness.audit import AuditReport, LogReader, PartitionKey, Record, Reset, Run, audit
from harness.audit_copies import Handover, entries_of, parse_handovers
from harness.chaos_copies import COPIED_TOPIC, CopyLink, ValueIndex, log_consumer, log_values
from harness.cluster import Cluster
from harness.kafka import KafkaCluster
from harness.leaks import LeakReport, ProcessFacts, RunHealth, leak_report
from harness.pool import proxy_name, replication_proxy_name
from harness.processes import end_process, tail_file
from harness.toxiproxy import Toxiproxy
from multicluster_source import ClusterMetadata, KafkaStream
from multicluster_source.testing import write_metadata_file

JOB = Path(__file__).resolve().parents[1] / "integration" / "jobs" / "chaos_job.py"
ROOT = Path(__file__).resolve().parents[2]

SEED_ENV = "MCS_CHAOS_SEED"
SECONDS_ENV = "MCS_CHAOS_SECONDS"
TOPOLOGY_ENV = "MCS_CHAOS_TOPOLOGY"
KINDS_ENV = "MCS_CHAOS_KINDS"
TOPOLOGIES: dict[str, tuple[tuple[str, ...], int]] = {
    # name -> (the pool's proxied clusters, nodes each)
    "single-node": (("chaos-east", "chaos-west", "chaos-central"), 1),
    "three-broker": (("chaos-trio",), 3),
}

FAULT_KINDS = (
    "restart-sigterm",
    "restart-sigkill",
    "pause",
    "latency",
    "blackhole",
    "partition",
    "reset-peer",
    "bandwidth",
    "topic-removed",
    "job-kill-9",
    "delete-records",
    "disk-full",
    "leader-isolated",
    "replica-handover",
)
MULTI_NODE_KINDS = frozenset({"leader-isolated"})
"""Kinds drawn only where the clusters have several nodes (elsewhere they are left out of the schedule, so
a seed of the single-node topology draws the same faults as before they existed)."""
MULTI_CLUSTER_KINDS = frozenset({"replica-handover"})
"""Kinds drawn only where there are several clusters (a seed of the single-node topology from before
``replica-handover`` existed replays with ``MCS_CHAOS_KINDS`` listing every other kind)."""
TOPICS = {"chaos-a": 2, "chaos-b": 1}
REMOVABLE_TOPIC = "chaos-b"

_RESET_LINE = re.compile(
    r"cluster=(\S+) topic=(\S+) partition=(\d+): offset (\d+) is out of range.*?reset to the \w+ offset (\S+)"
)


def kinds_from_env(environ: dict[str, str] | None = None) -> tuple[str, ...]:
    """``$MCS_CHAOS_KINDS`` (comma-separated fault kinds, to replay or study a few) if set, else every kind."""
    value = (environ if environ is not None else os.environ).get(KINDS_ENV, "").strip()
    if not value:
        return FAULT_KINDS
    kinds = tuple(k.strip() for k in value.split(",") if k.strip())
    unknown = sorted(set(kinds) - set(FAULT_KINDS))
    if unknown:
        raise ValueError(f"{KINDS_ENV}: unknown fault kinds {unknown}; known: {', '.join(FAULT_KINDS)}")
    return kinds


def seed_from_env(environ: dict[str, str] | None = None) -> int:
    """``$MCS_CHAOS_SEED`` if set, else a new random seed."""
    value = (environ if environ is not None else os.environ).get(SEED_ENV, "").strip()
    return int(value) if value else random.SystemRandom().randrange(2**31)


@dataclass
class SoakConfig:
    """What a soak does (see the module docs)."""

    seconds: float = 120.0
    seed: int = 0
    rate: float = 40.0  # records per second per cluster
    every: tuple[float, float] = (10.0, 20.0)
    lasting: tuple[float, float] = (5.0, 30.0)
    kinds: Sequence[str] = FAULT_KINDS
    drain_timeout: float = 200.0
    checkpoint_interval: float = 1.0


@dataclass
class Fault:
    """One injected fault: its kind, its target (a cluster id, or ``job``), and when it started and was
    healed (seconds since the soak's start); ``recovery`` is the time from its heal until every record
    acknowledged before the heal had been delivered (None: never, within the run; the next fault may come
    first and lengthen it); ``healthy_gap`` is the longest time, while a cluster's fault lasted, that another
    cluster went without a record delivered."""

    kind: str
    target: str
    started: float
    healed: float | None = None
    recovery: float | None = None
    healthy_gap: float | None = None
    node: int | None = None  # the node of a multi-node cluster the fault hit (its partition leader)
    job_killed_at: float | None = None  # a replica handover's kill -9 of the job while the copy was read


@dataclass
class SoakResult:
    """The outcome of a soak: the faults, the runs of the job, the audit and what went wrong around it."""

    seed: int
    config: SoakConfig
    faults: list[Fault]
    report: AuditReport
    runs: int
    job_crashes: list[str] = field(default_factory=list)
    producer_errors: int = 0
    producer_error_kinds: dict[str, int] = field(default_factory=dict)
    drain_seconds: float = 0.0
    drained: bool = False
    leaks: LeakReport | None = None
    handovers: list[Handover] = field(default_factory=list)  # as the job's runs logged them
    mm2_restarts: int = 0
    # acknowledged without an offset, then found in the log by value (see _Producer._delivered), and not found
    acked_without_offset: int = 0
    acked_not_in_log: list[str] = field(default_factory=list)
    producer_failures: list[str] = field(default_factory=list)  # what stopped a producer's loop, if anything

    def harness_problems(self) -> list[str]:
        """What makes the soak's own evidence incomplete: a producer's loop that failed, or a record
        acknowledged without an offset that the brokers' logs do not hold."""
        return [f"producer: {f}" for f in self.producer_failures] + [
            f"acknowledged, not in the log: {a}" for a in self.acked_not_in_log
        ]

    def recovery_percentiles(self) -> tuple[float | None, float | None]:
        """p50 and p99 of the recovery times (None without any)."""
        times = sorted(f.recovery for f in self.faults if f.recovery is not None)
        if not times:
            return None, None
        if len(times) == 1:
            return times[0], times[0]
        cuts = statistics.quantiles(times, n=100, method="inclusive")
        return statistics.median(times), cuts[98]

    def healthy_gap_max(self) -> float | None:
        """The longest time a healthy cluster went without a delivery while another was faulted."""
        return max((f.healthy_gap for f in self.faults if f.healthy_gap is not None), default=None)

    def summary(self) -> str:
        """The seed, the faults by kind, the records, and the audit's summary."""
        kinds = Counter(f.kind for f in self.faults)
        p50, p99 = self.recovery_percentiles()
        unrecovered = sum(f.recovery is None for f in self.faults)
        fmt = lambda x: "-" if x is None else f"{x:.1f}s"  # noqa: E731
        by_error = ", ".join(f"{k} {n}" for k, n in sorted(self.producer_error_kinds.items()))
        n = self.acked_without_offset
        no_offset = f"acknowledged without an offset {n} (placed by value); " if n else ""
        lines = [
            f"chaos soak seed={self.seed} seconds={self.config.seconds:.0f}: {len(self.faults)} faults "
            f"({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}); {self.runs} job run(s), "
            f"{len(self.job_crashes)} crash(es); producer errors {self.producer_errors}"
            f"{f' ({by_error})' if by_error else ''}, not acknowledged, so not owed; {no_offset}drained "
            f"{'yes' if self.drained else 'NO'} in {self.drain_seconds:.1f}s; recovery p50 {fmt(p50)} "
            f"p99 {fmt(p99)}, not recovered {unrecovered}; healthy clusters' longest gap during faults "
            f"{fmt(self.healthy_gap_max())}"
            + (
                f"; replica handovers {len(self.handovers)} "
                f"({', '.join(f'{m} {n}' for m, n in sorted(Counter(h.mode for h in self.handovers).items()))}), "
                f"MirrorMaker restarted {self.mm2_restarts} time(s)"
                if self.handovers
                else ""
            ),
            "faults: "
            + "; ".join(
                f"{f.started:.0f}s {f.kind}@{f.target}{'' if f.node is None else f'/node-{f.node}'}"
                f"{'' if f.job_killed_at is None else f' (job killed at {f.job_killed_at:.0f}s)'}"
                f" healed {fmt(f.healed)} recovered {fmt(f.recovery)}"
                for f in self.faults
            ),
            self.report.summary(),
        ]
        if self.leaks is not None:
            lines.append(self.leaks.summary())
        lines += [f"crash: {c}" for c in self.job_crashes]
        lines += [f"harness: {p}" for p in self.harness_problems()]
        return "\n".join(lines)


class _Producer:
    """A thread producing numbered records to one cluster's topics, round-robin over their partitions."""

    def __init__(
        self, cluster: KafkaCluster, topics: dict[str, int], rate: float, stop: threading.Event
    ) -> None:
        self.cluster = cluster
        self._topics = topics
        self._rate = rate
        self._stop = stop
        self._lock = threading.Lock()
        self.acked: list[Record] = []
        self.errors = 0
        self.error_kinds: Counter[str] = Counter()  # error name -> count (delivery reports and produce calls)
        self.index = ValueIndex()  # the acknowledged records by value (a copy's records are found by it)
        self.unplaced: list[tuple[PartitionKey, bytes]] = []  # acknowledged without an offset (_delivered)
        self.failures: list[str] = []  # exceptions the loop caught (a delivery callback's among them)
        self._fatal = False
        self.thread = threading.Thread(target=self._run, name=f"mcs-chaos-producer-{cluster.cluster_id}")

    def _new_producer(self) -> Producer:
        return self.cluster.producer(
            **{
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120000,
                "log_level": 2,  # the brokers go away on purpose: no line per refused connection
            }
        )

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors += 1
            self.error_kinds[err.name()] += 1
            self._fatal = self._fatal or err.fatal()
            return
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        value = msg.value() or b""
        if topic is None or partition is None:
            raise AssertionError(f"a delivery report without a partition for {value!r}")
        if offset is None:
            # librdkafka reports a record delivered without an offset when its idempotent producer learns that
            # a retried batch had been written already (DUPLICATE_SEQUENCE_NUMBER after a possibly persisted
            # error; librdkafka #4438): acknowledged, and placed by its value in the log at the end
            with self._lock:
                self.unplaced.append(((self.cluster.cluster_id, topic, partition), value))
            return
        record = Record(self.cluster.cluster_id, topic, partition, offset, value)
        with self._lock:
            self.acked.append(record)
        self.index.add(record.value, record.key, offset)

    def snapshot(self) -> list[Record]:
        """The records acknowledged so far."""
        with self._lock:
            return list(self.acked)

    def _run(self) -> None:
        targets = [(t, p) for t, n in self._topics.items() for p in range(n)]
        producer = self._new_producer()
        seq = 0
        try:
            while not self._stop.is_set():
                if self._fatal:  # an idempotent producer that lost its state: a new one, as a user would
                    producer.flush(10.0)
                    producer = self._new_producer()
                    self._fatal = False
                topic, partition = targets[seq % len(targets)]
                value = f"{self.cluster.cluster_id}-{topic}-{partition}-{seq}".encode()
                try:
                    producer.produce(topic, value=value, partition=partition, on_delivery=self._delivered)
                    seq += 1
                except BufferError:
                    pass
                except KafkaException as exc:  # a fatal state shows here too: counted, and a new producer
                    self.errors += 1
                    self.error_kinds[exc.args[0].name() if exc.args else "KafkaException"] += 1
                    self._fatal = True
                try:
                    producer.poll(0)  # runs the delivery callbacks, whose exceptions come out here
                except Exception as exc:  # kept for the result: the loop must go on
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                self._stop.wait(1.0 / self._rate)
        finally:
            producer.flush(150.0)  # message.timeout.ms bounds it: every record acknowledged or failed


class _Job:
    """The job subprocess: started, killed and restarted from its checkpoint directory; one output file and
    the restored positions per run."""

    def __init__(self, workdir: Path, metadata: Path, group: str, interval: float) -> None:
        self._workdir = workdir
        self._metadata = metadata
        self._group = group
        self._interval = interval
        self.checkpoints = workdir / "ckpt"
        self.runs: list[tuple[Path, dict[PartitionKey, int] | None]] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self._read: dict[Path, int] = {}
        self.delivered: set[tuple[PartitionKey, int]] = set()
        # copied partition -> origin partition, and how a copy's record is found among the origin's records
        self.copies: dict[PartitionKey, PartitionKey] = {}
        self.resolve: Callable[[bytes], tuple[PartitionKey, int] | None] = lambda _value: None
        self._unresolved: list[bytes] = []  # copies read before their origin record's acknowledgement came

    def log(self, run: int) -> Path:
        """The stderr of run ``run``."""
        return self._workdir / f"job-{run}.log"

    def health_file(self, run: int) -> Path:
        """What run ``run`` reported about its own process (see ``jobs/chaos_job.py``)."""
        return self._workdir / f"health-{run}.jsonl"

    def health(self, run: int) -> RunHealth:
        """Run ``run``'s reports (a line cut by a ``kill -9`` is left out)."""
        result = RunHealth(run)
        path = self.health_file(run)
        for line in path.read_text().splitlines() if path.exists() else []:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if "baseline" in entry:
                result.baseline = ProcessFacts.from_dict(entry["baseline"])
            elif "facts" in entry:
                result.samples.append((float(entry["t"]), ProcessFacts.from_dict(entry["facts"])))
            elif "closed" in entry:
                result.closed = ProcessFacts.from_dict(entry["closed"])
                result.leaks = list(entry["leaks"])
        return result

    def start(self) -> None:
        """Start a new run (restored from the newest checkpoint, if there is one)."""
        run = len(self.runs)
        out = self._workdir / f"run-{run}.txt"
        self.runs.append((out, self._restored_positions()))
        with open(self.log(run), "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(JOB),
                    str(self._metadata),
                    str(self.checkpoints),
                    str(out),
                    self._group,
                    str(self._interval),
                    str(self.health_file(run)),
                ],
                env=dict(os.environ, PYTHONPATH=str(ROOT)),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def _restored_positions(self) -> dict[PartitionKey, int] | None:
        files = sorted(self.checkpoints.glob("chk-*.json"))
        if not files:
            return None
        positions = json.loads(files[-1].read_text())["positions"]
        restored: dict[PartitionKey, int] = {}
        for split_id, offset in positions.items():
            cluster, topic, partition = split_id.split("/")
            restored[(cluster, topic, int(partition))] = int(offset)
        return restored

    def kill(self) -> None:
        """``kill -9`` of the running job."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        """End the running job: SIGTERM (it closes its stream and reports its leak check), then SIGKILL
        after 60 s."""
        if self.proc is not None:
            end_process(self.proc, graceful=True, timeout=60.0)
            self.proc = None

    def died(self) -> str | None:
        """A description of the job's exit if it ended by itself (then it is forgotten), else None."""
        if self.proc is None or self.proc.poll() is None:
            return None
        code, self.proc = self.proc.returncode, None
        run = len(self.runs) - 1
        return f"run {run} exited with {code}:\n{tail_file(self.log(run), 30)}"

    def follow(self) -> None:
        """Read what the runs wrote since the last call into :attr:`delivered` (a copy's record as its
        origin record too)."""
        waiting, self._unresolved = self._unresolved, []
        for copied in waiting:
            self._credit(copied)
        for out, _restored in self.runs:
            if not out.exists():
                continue
            with open(out, "rb") as f:
                f.seek(self._read.get(out, 0))
                data = f.read()
            complete = data[: data.rfind(b"\n") + 1]
            self._read[out] = self._read.get(out, 0) + len(complete)
            for line in complete.decode().splitlines():
                cluster, topic, partition, offset, value, _at = line.split("\t")
                key = (cluster, topic, int(partition))
                self.delivered.add((key, int(offset)))
                if key in self.copies:
                    self._credit(value.encode())

    def _credit(self, value: bytes) -> None:
        found = self.resolve(value)
        if found is None:
            self._unresolved.append(value)
        else:
            self.delivered.add(found)

    def logged_handovers(self) -> list[Handover]:
        """The replica handovers the runs logged, run by run."""
        found = []
        for run in range(len(self.runs)):
            found += parse_handovers(run, self._log_text(run))
        return found

    def _log_text(self, run: int) -> str:
        path = self.log(run)
        return path.read_text(errors="replace") if path.exists() else ""

    def audit_runs(self, handovers: Sequence[Handover]) -> list[Run]:
        """Every run's records in order, for the audit (an incomplete last line is left out), with where it
        started copied partitions (``handovers``: :meth:`logged_handovers`)."""
        runs = []
        for index, (out, restored) in enumerate(self.runs):
            records = []
            if out.exists():
                data = out.read_bytes()
                for line in data[: data.rfind(b"\n") + 1].decode().splitlines():
                    cluster, topic, partition, offset, value, _at = line.split("\t")
                    records.append(Record(cluster, topic, int(partition), int(offset), value.encode()))
            runs.append(Run(records, restored, entries_of(handovers, index)))
        return runs

    def delivery_times(self) -> dict[str, list[float]]:
        """Cluster -> the wall-clock times of the polls that returned its records, in order."""
        times: dict[str, list[float]] = {}
        for out, _restored in self.runs:
            if out.exists():
                data = out.read_bytes()
                for line in data[: data.rfind(b"\n") + 1].decode().splitlines():
                    fields = line.split("\t")
                    times.setdefault(fields[0], []).append(float(fields[5]))
        return {cluster: sorted(at) for cluster, at in times.items()}

    def logged_resets(self) -> list[Reset]:
        """The offset resets the runs logged."""
        resets = []
        for run in range(len(self.runs)):
            for cluster, topic, partition, old, new in _RESET_LINE.findall(self._log_text(run)):
                target = int(new) if new.isdigit() else 2**62  # looked up by the client: unknown
                resets.append(Reset((cluster, topic, int(partition)), int(old), target))
        return resets


def read_log(clusters: Mapping[str, Cluster], timeout: float = 30.0) -> LogReader:
    """A :data:`harness.audit.LogReader` over the brokers: a plain confluent-kafka consumer of its own (no
    group commits, straight to the broker, not through a proxy) reads the partition from the lowest offset
    asked for to its end (or for ``timeout`` seconds) and answers which of the offsets it saw."""

    def read(key: PartitionKey, offsets: Sequence[int]) -> set[int]:
        cluster, topic, partition = key
        wanted, found = set(offsets), set[int]()
        consumer = log_consumer(clusters[cluster])
        try:
            consumer.assign([TopicPartition(topic, partition, min(wanted))])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        break
                    continue
                offset = msg.offset()
                if offset is not None:
                    found.add(offset)
                    if offset >= max(wanted):
                        break
        finally:
            consumer.close()
        return found & wanted

    return read


def place_by_value(
    clusters: Mapping[str, Cluster], unplaced: Sequence[tuple[PartitionKey, bytes]], timeout: float = 60.0
) -> tuple[list[Record], list[tuple[PartitionKey, bytes]]]:
    """The records acknowledged without an offset (see ``_Producer._delivered``) found in their partitions'
    logs by value, read from the start for at most ``timeout`` seconds a partition: (the records with their
    offsets, those the log does not hold)."""
    wanted: dict[PartitionKey, set[bytes]] = {}
    for key, value in unplaced:
        wanted.setdefault(key, set()).add(value)
    placed: list[Record] = []
    missing: list[tuple[PartitionKey, bytes]] = []
    for key, values in sorted(wanted.items()):
        cluster, topic, partition = key
        found: dict[bytes, int] = {}
        with closing(log_values(clusters[cluster], topic, [partition], timeout)) as records:
            for _partition, offset, value in records:
                if value in values:
                    found[value] = offset
                    if len(found) == len(values):
                        break
        placed += [Record(cluster, topic, partition, offset, value) for value, offset in found.items()]
        missing += [(key, value) for value in sorted(values - found.keys())]
    return placed, missing


class ChaosSoak:
    """One soak over ``clusters`` (from ``ClusterPool.proxied``) and the pool's ``toxiproxy``, in ``workdir``;
    ``say`` gets a line per fault as it is injected."""

    def __init__(
        self,
        clusters: Sequence[KafkaCluster],
        toxiproxy: Toxiproxy,
        config: SoakConfig,
        workdir: Path,
        *,
        say: Callable[[str], None] = print,
    ) -> None:
        self._clusters = {c.cluster_id: c for c in clusters}
        self._toxiproxy = toxiproxy
        self._config = config
        self._workdir = workdir
        self._say = say
        self._rng = random.Random(config.seed)
        self._topics: dict[str, dict[str, str]] = {}  # cluster -> logical name -> topic
        self._metadata = workdir / "streams.yaml"
        self._t0 = 0.0
        self._deleted: dict[PartitionKey, int] = {}  # partition -> log start set by a deletion
        self._full_disks: set[tuple[str, int]] = set()  # (cluster, node) whose disk a fault filled
        self._link: CopyLink | None = None  # MirrorMaker 2 for replica-handover faults

    def _now(self) -> float:
        return time.monotonic() - self._t0

    def _write_metadata(self, without: tuple[str, str] | None = None) -> None:
        parts = {}
        link = self._link
        for cid, cluster in self._clusters.items():
            topics = frozenset(
                actual for logical, actual in self._topics[cid].items() if (cid, logical) != without
            )
            if link is not None and cid == link.replica.cluster_id:
                parts[cid] = ClusterMetadata(
                    cid,
                    cluster.proxied_bootstrap_servers,
                    topics | {link.copy_topic},
                    replica_of=link.replica_of(),
                )
            else:
                parts[cid] = ClusterMetadata(cid, cluster.proxied_bootstrap_servers, topics)
        write_metadata_file(self._metadata, [KafkaStream("s", parts)])

    def _leader(self, target: str) -> int:
        """The node to fault on ``target``: its only node, or the leader of ``chaos-a`` partition 0."""
        cluster = self._clusters[target]
        nodes = sorted(cluster.node_racks)
        if len(nodes) == 1:
            return nodes[0]
        topic = self._topics[target]["chaos-a"]
        try:
            leader = int(cluster.admin().list_topics(topic, timeout=10).topics[topic].partitions[0].leader)
        except Exception:  # the metadata not answered: any node will do
            leader = -1
        return leader if leader in nodes else nodes[0]

    def _inject(self, kind: str, target: str, node: int, job: _Job) -> None:
        cluster = self._clusters.get(target)
        proxy = proxy_name(target, node)
        if kind == "job-kill-9":
            job.kill()
        elif cluster is None:
            raise ValueError(f"{kind} needs a cluster, not {target!r}")
        elif kind in ("restart-sigterm", "restart-sigkill"):
            cluster.stop_node(node, graceful=kind == "restart-sigterm")
        elif kind == "pause":
            cluster.pause_node(node)
        elif kind == "latency":
            self._toxiproxy.add_toxic(proxy, "latency", {"latency": 800, "jitter": 400})
        elif kind == "blackhole":
            for stream in ("upstream", "downstream"):
                self._toxiproxy.add_toxic(proxy, "timeout", {"timeout": 0}, stream=stream)
        elif kind == "partition":  # cut off from the job: open connections dropped, new ones refused
            self._toxiproxy.set_enabled(proxy, False)
        elif kind == "leader-isolated":  # the followers cannot fetch from the leader; the job still can
            self._toxiproxy.set_enabled(replication_proxy_name(target, node), False)
        elif kind == "reset-peer":
            self._toxiproxy.add_toxic(proxy, "reset_peer", {"timeout": 2000}, stream="upstream")
        elif kind == "delete-records":  # the reader falls behind; the heal deletes what it has not read
            self._toxiproxy.add_toxic(proxy, "bandwidth", {"rate": 1})
        elif kind == "bandwidth":
            self._toxiproxy.add_toxic(proxy, "bandwidth", {"rate": 4})  # KB/s
        elif kind == "topic-removed":
            self._write_metadata(without=(target, REMOVABLE_TOPIC))
        elif kind == "replica-handover":  # the origin topic leaves; its copy on the replica stays
            self._write_metadata(without=(target, COPIED_TOPIC))
        elif kind == "disk-full":  # the node's data tmpfs filled: its next write fails
            self._full_disks.add((target, node))
            written = cluster.fill_disk(node)
            self._say(
                f"[chaos seed={self._config.seed}] filled {target} node {node}'s disk with {written} bytes"
            )
        else:
            raise ValueError(f"unknown fault kind {kind!r}")

    def _delete_records(self, target: str) -> None:
        """``delete_records`` of everything in partition 0 of ``chaos-a`` on ``target`` (up to its high
        watermark): what the job has not read yet is gone, and its reader must reset (logged)."""
        topic = self._topics[target]["chaos-a"]
        request = TopicPartition(topic, 0, OFFSET_END)
        cluster = self._clusters[target]
        deadline = time.monotonic() + 60.0
        while True:  # on a three-broker cluster the leader may be moving (a fault just healed): try again
            [future] = cluster.admin().delete_records([request], request_timeout=30).values()
            try:
                log_start = int(future.result(30).low_watermark)
                break
            except KafkaException as exc:
                if time.monotonic() < deadline:
                    time.sleep(1.0)
                    continue
                # what is gone is gone, whether this last request deleted it or not
                consumer = cluster.consumer(**{"log_level": 2})
                try:
                    log_start = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[0]
                finally:
                    consumer.close()
                self._say(
                    f"[chaos] delete_records of {target}/{topic}/0 failed ({exc}); log start {log_start}"
                )
                break
        key = (target, topic, 0)
        self._deleted[key] = max(log_start, self._deleted.get(key, 0))
        self._say(f"[chaos seed={self._config.seed}] deleted {target}/{topic}/0 up to {log_start}")

    def _gone(self, owed: set[tuple[PartitionKey, int]]) -> set[tuple[PartitionKey, int]]:
        """The records of ``owed`` that a deletion removed on purpose."""
        return {entry for entry in owed if entry[1] < self._deleted.get(entry[0], -1)}

    def _restore_nodes(self) -> None:
        """Free every filled disk (and stop its node: Kafka takes a failed log directory back only on a
        restart), resume every paused node and start every stopped one."""
        for target, node in sorted(self._full_disks):
            self._clusters[target].free_disk(node)
            self._clusters[target].stop_node(node, graceful=False)
        self._full_disks.clear()
        for cluster in self._clusters.values():
            for node in sorted(cluster.node_racks):
                cluster.resume_node(node)
                if not cluster.node_running(node):
                    cluster.start_node(node)

    def _heal_all(self, job: _Job) -> None:
        self._toxiproxy.reset()
        self._restore_nodes()
        if self._link is not None:
            self._link.keep_running()
        self._write_metadata()
        if job.proc is None:
            job.start()

    def run(self) -> SoakResult:
        """Run the soak; every thread and process it starts has ended when it returns."""
        config = self._config
        unlimited = sorted(cid for cid, c in self._clusters.items() if not c.disk_limited)
        if "disk-full" in config.kinds and unlimited:
            kinds = [k for k in config.kinds if k != "disk-full"]
            if not kinds:
                raise ValueError(f"disk-full is the only kind, and {unlimited} have no disk of their own")
            self._say(
                f"[chaos] no disk-full faults: {unlimited} have no tmpfs of their own (mounting refused)"
            )
            config = self._config = dataclasses.replace(config, kinds=tuple(kinds))
        self._workdir.mkdir(parents=True, exist_ok=True)
        self._toxiproxy.reset()
        for cid, cluster in self._clusters.items():
            replicas = min(3, len(cluster.node_racks))
            topic_config = {"min.insync.replicas": "2"} if replicas == 3 else {}
            self._topics[cid] = {
                logical: cluster.create_topic(logical, n, replicas, topic_config)
                for logical, n in TOPICS.items()
            }
        several_nodes = any(len(c.node_racks) > 1 for c in self._clusters.values())
        several_clusters = len(self._clusters) > 1
        drawn = [
            k
            for k in config.kinds
            if (several_nodes or k not in MULTI_NODE_KINDS)
            and (several_clusters or k not in MULTI_CLUSTER_KINDS)
        ] or ["job-kill-9"]
        stop = threading.Event()
        producers = [
            _Producer(c, {self._topics[cid][t]: n for t, n in TOPICS.items()}, config.rate, stop)
            for cid, c in self._clusters.items()
        ]
        job = _Job(self._workdir, self._metadata, f"chaos-{uuid.uuid4().hex[:8]}", config.checkpoint_interval)
        if "replica-handover" in drawn:
            origin, replica = list(self._clusters.values())[:2]
            self._link = CopyLink(
                origin,
                replica,
                self._topics[origin.cluster_id][COPIED_TOPIC],
                TOPICS[COPIED_TOPIC],
                self._say,
            )
            try:
                self._link.start()
            except BaseException:
                self._link.close()
                raise
            job.copies = self._link.copies
            job.resolve = producers[0].index.lookup
        self._write_metadata()
        faults: list[Fault] = []
        crashes: list[str] = []
        pending: list[tuple[Fault, set[tuple[PartitionKey, int]]]] = []
        self._t0 = time.monotonic()
        wall0 = time.time()

        def acked_now() -> set[tuple[PartitionKey, int]]:
            return {(r.key, r.offset) for p in producers for r in p.snapshot()}

        def tick() -> None:
            died = job.died()
            if died is not None:
                crashes.append(f"at {self._now():.0f}s: {died}")
                self._say(f"[chaos] the job died by itself: {died}")
                job.start()
            job.follow()
            for entry in list(pending):
                fault, owed = entry
                owed -= job.delivered
                owed -= self._gone(owed)
                if not owed:
                    fault.recovery = self._now() - (fault.healed or 0.0)
                    pending.remove(entry)

        drain_seconds, drained = 0.0, False
        try:
            for p in producers:
                p.thread.start()
            job.start()
            next_fault = self._rng.uniform(*config.every)
            while self._now() < config.seconds:
                if self._now() < next_fault:
                    tick()
                    time.sleep(0.25)
                    continue
                kind = self._rng.choice(drawn)
                target = "job" if kind == "job-kill-9" else self._rng.choice(sorted(self._clusters))
                if kind == "replica-handover" and self._link is not None:
                    target = self._link.origin.cluster_id  # the only origin a copy is made of
                lasting = self._rng.uniform(*config.lasting)
                if kind == "job-kill-9":
                    lasting = min(lasting, 10.0)  # the job is away for this long
                on_node = kind not in ("job-kill-9", "topic-removed", "replica-handover")
                node = self._leader(target) if on_node else 0
                many = on_node and len(self._clusters[target].node_racks) > 1
                fault = Fault(kind, target, self._now(), node=node if many else None)
                faults.append(fault)
                self._say(
                    f"[chaos seed={config.seed}] {fault.started:.0f}s: {kind} on {target}"
                    f"{'' if fault.node is None else f' node {fault.node}'} for {lasting:.0f}s"
                )
                self._inject(kind, target, node, job)
                heal_at = fault.started + lasting
                # half the handovers also kill -9 the job halfway: the restore happens while the copy is read
                kill_at = (
                    fault.started + lasting / 2
                    if kind == "replica-handover" and self._rng.random() < 0.5
                    else None
                )
                while self._now() < heal_at:
                    if kill_at is not None and self._now() >= kill_at:
                        kill_at, fault.job_killed_at = None, self._now()
                        self._say(
                            f"[chaos seed={config.seed}] {self._now():.0f}s: kill -9 of the job, restarted"
                        )
                        job.kill()
                        job.start()
                    tick()
                    time.sleep(0.25)
                if kind == "delete-records":
                    self._delete_records(target)
                # the heal starts now (a broker's restart takes seconds, which the recovery includes)
                fault.healed = self._now()
                pending.append((fault, acked_now()))
                self._heal_all(job)
                next_fault = max(fault.started + self._rng.uniform(*config.every), self._now() + 1.0)
            self._heal_all(job)
            stop.set()
            joined_by = time.monotonic() + 200.0  # the producers flush; recoveries are still measured
            while any(p.thread.is_alive() for p in producers) and time.monotonic() < joined_by:
                tick()
                time.sleep(0.25)
            drain_started = time.monotonic()
            owed = acked_now()
            owed -= self._gone(owed)
            while time.monotonic() - drain_started < config.drain_timeout:
                tick()
                if owed <= job.delivered and not pending:
                    drained = True
                    break
                time.sleep(0.5)
            drain_seconds = time.monotonic() - drain_started
            tick()
        finally:
            stop.set()
            for p in producers:
                p.thread.join(200.0)
            job.stop()
            with_errors = [p for p in producers if p.thread.is_alive()]
            try:
                self._toxiproxy.reset()
            finally:
                self._restore_nodes()
                if self._link is not None:
                    self._link.close()
            if with_errors:
                raise RuntimeError(f"producer threads did not end: {[p.thread.name for p in with_errors]}")
        healthy_gaps(faults, job.delivery_times(), wall0, sorted(self._clusters))
        leaks = leak_report(
            [job.health(run) for run in range(len(job.runs))], [f.started for f in faults], wall0
        )
        unplaced = [u for p in producers for u in p.unplaced]
        placed, not_in_log = place_by_value(self._clusters, unplaced) if unplaced else ([], [])
        # a partition whose log start a deletion moved may have lost such a record unread: not the job's doing
        not_in_log = [(key, value) for key, value in not_in_log if key not in self._deleted]
        for record in placed:  # a copy of it read by the job counts from now on
            next(p for p in producers if p.cluster.cluster_id == record.cluster).index.add(
                record.value, record.key, record.offset
            )
        job.follow()
        acknowledged = [r for p in producers for r in p.snapshot()] + placed
        handovers = job.logged_handovers()
        report = audit(
            acknowledged,
            job.audit_runs(handovers),
            resets=job.logged_resets(),
            deleted=self._deleted,
            read_log=read_log(self._clusters),
            copies=job.copies,
            handovers=handovers,
            copied_twice=None if self._link is None else self._link.copied_twice(),
        )
        return SoakResult(
            seed=config.seed,
            config=config,
            faults=faults,
            report=report,
            runs=len(job.runs),
            job_crashes=crashes,
            producer_errors=sum(p.errors for p in producers),
            producer_error_kinds=dict(sum((p.error_kinds for p in producers), Counter[str]())),
            drain_seconds=drain_seconds,
            drained=drained,
            leaks=leaks,
            handovers=handovers,
            mm2_restarts=0 if self._link is None else self._link.restarts,
            acked_without_offset=len(unplaced),
            acked_not_in_log=[f"{'/'.join(map(str, key))}: {value!r}" for key, value in not_in_log],
            producer_failures=[f for p in producers for f in p.failures],
        )

    def cleanup(self) -> None:
        """Remove the soak's files (the caller keeps them after a failure)."""
        shutil.rmtree(self._workdir, ignore_errors=True)


def healthy_gaps(
    faults: Sequence[Fault], times: dict[str, list[float]], wall0: float, clusters: Sequence[str]
) -> None:
    """Set each cluster fault's ``healthy_gap`` from the other clusters' delivery times."""
    for fault in faults:
        if fault.target not in clusters or fault.healed is None:
            continue
        start, end = wall0 + fault.started, wall0 + fault.healed
        gaps = []
        for cluster in clusters:
            if cluster != fault.target:
                inside = [t for t in times.get(cluster, []) if start < t < end]
                edges = [start, *inside, end]
                gaps.append(max(b - a for a, b in itertools.pairwise(edges)))
        fault.healthy_gap = max(gaps, default=None)


def describe(result: SoakResult) -> dict[str, Any]:
    """The result as plain data (for a benchmark's JSON)."""
    p50, p99 = result.recovery_percentiles()
    report = result.report
    return {
        "seed": result.seed,
        "seconds": result.config.seconds,
        "faults": dict(Counter(f.kind for f in result.faults)),
        "runs": result.runs,
        "job_crashes": len(result.job_crashes),
        "acked_without_offset": result.acked_without_offset,
        "harness_problems": result.harness_problems(),
        "acknowledged": report.acknowledged,
        "delivered": report.delivered,
        "lost": report.lost,
        "deleted_unread": report.deleted_unread,
        "in_run_duplicates": report.in_run_duplicates,
        "duplicates_within_bounds": report.allowed_duplicates,
        "duplicates_beyond_bounds": report.duplicates_beyond_bound,
        "gaps": report.gaps,
        "conflicting_values": report.conflicting_values,
        "backwards": report.backwards,
        "stuck_partitions": len(report.stuck_partitions),
        "handovers": len(result.handovers),
        "handover_modes": dict(Counter(h.mode for h in result.handovers)),
        "repeats_across_handovers": report.copy_repeats,
        "repeats_across_handovers_beyond_bounds": report.copy_repeats_beyond,
        "recovery_p50_s": p50,
        "recovery_p99_s": p99,
        "healthy_gap_max_s": result.healthy_gap_max(),
        "drained": result.drained,
        "drain_seconds": result.drain_seconds,
        "leaks": None if result.leaks is None else result.leaks.problems,
        "rss_peak_per_window_mb": None
        if result.leaks is None
        else [round(p, 1) for _s, p in result.leaks.windows],
    }
