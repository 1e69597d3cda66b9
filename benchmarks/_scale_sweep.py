"""Checkpoint and close costs side by side at several split counts (issue 24): ``bench_scale.py --sweep``.

Two kinds of figures, never mixed in one column:

- **in-process** (no brokers; 1k to 100k splits): the checkpoint machinery driven directly, on a real
  coordinator thread, a real enumerator state of N splits, a real checkpoint directory (write, fsync,
  rename) and the real commit ledger and metrics; the per-cluster commit itself ends at once (a broker's time
  to store offsets is not in it). Between two checkpoints ``--changes`` positions move (default 1,000).
  *before* is the code path of 0.2 (``take_checkpoint``: snapshot of every position and the whole state,
  serialized, written and committed on the caller's thread, every position committed); *after* is the
  checkpoint thread. Caller pause = time the thread owning the stream is held; durable = until the file is
  fsynced and the commits started by it ended. Also: removing the metric label sets of N partitions
  (part of ``close()``).
- **real Kafka** (``--kafka-brokers`` single-node Apache Kafka clusters, one by default: a broker keeps
  descriptors per partition and this machine caps a process at 20,000, so 36,000 splits and more need
  several): a source with 2 readers over 2 logical clusters on one broker, or one logical cluster per
  broker, one record per partition. Figures: all splits assigned and the first record of every split
  (seconds from ``open()``); ``checkpoint()`` (durable and committed: the caller waits, per the contract);
  while periodic checkpoints (``checkpoint_interval=0.5``) are taken in ``poll()``, the time each one holds
  the caller's thread (``Checkpointer.take``, timed in the child; *after* only) and the time until it is
  written and committed, and the longest ``poll()``; ``close()``. *before* runs the given git ref's
  ``multicluster_source`` in a child process on the same brokers and topics; *after* the working tree's.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CHECKPOINTS = 12


def _stats(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"median": statistics.median(ordered), "p99": p99, "max": ordered[-1], "n": len(ordered)}


# ---------------------------------------------------------------------------------------- in-process


class _Cluster:
    """A per-cluster enumerator whose offset commits end at once."""

    def commit_offsets(self, offsets: Any) -> Any:
        from concurrent.futures import Future

        done: Future[None] = Future()
        done.set_result(None)
        return done


class _Enumerator:
    """The enumerator's checkpoint surface over N splits, with the real state, ledger and metrics."""

    def __init__(self, n: int, metrics: Any) -> None:
        from multicluster_source.enumerator._commit import CommitLedger
        from multicluster_source.framework._split import KafkaPartitionSplit

        splits = [KafkaPartitionSplit(f"lc{i % 2}", f"scale-t{i // 100}", i % 100, 0) for i in range(n)]
        self.splits = {s.split_id: s for s in splits}
        self.ledger = CommitLedger()
        self.metrics = metrics
        self.clusters: dict[str, Any] = {"lc0": _Cluster(), "lc1": _Cluster()}

    def capture_state(self) -> Any:
        from multicluster_source.enumerator._state import EnumeratorState

        return EnumeratorState(splits=tuple(self.splits.values()), seen_topics={})

    def snapshot_state(self, checkpoint_id: int) -> dict[str, Any]:
        return dict(self.capture_state().to_dict())

    def notify_checkpoint_complete(self, checkpoint_id: int, positions: Any) -> Any:
        return self.ledger.commit(checkpoint_id, positions, self.splits, self.clusters, self._committed)

    def _committed(self, cluster_id: str, offsets: Any) -> None:
        self.metrics.set_committed(cluster_id, offsets)


def measure_in_process(n: int, changes: int, checkpoints: int = CHECKPOINTS) -> dict[str, Any]:
    """Caller pause and durable time of ``checkpoint`` before and after, at ``n`` splits."""
    import random

    from prometheus_client import CollectorRegistry

    from multicluster_source.framework._checkpoint import CheckpointStore
    from multicluster_source.ops._metrics import SourceMetrics
    from multicluster_source.runtime.core._checkpointer import Checkpointer, store_writer
    from multicluster_source.runtime.core._enumeration import take_checkpoint
    from multicluster_source.runtime.core._handoff import PositionTracker
    from multicluster_source.runtime.core._local import Coordinator

    out: dict[str, Any] = {"splits": n, "changes_per_checkpoint": min(changes, n)}
    for kind in ("before", "after"):
        rng = random.Random(n)
        metrics = SourceMetrics(CollectorRegistry(), f"sweep-{kind}")
        enumerator = _Enumerator(n, metrics)
        ids = list(enumerator.splits)
        tracker = PositionTracker()
        tracker.advance(dict.fromkeys(ids, 1))
        coordinator = Coordinator(f"sweep-{kind}", 2, tracker, lambda exc: None)
        coordinator.start()
        directory = Path(tempfile.mkdtemp(prefix="mcs-sweep-"))
        store = CheckpointStore(directory)
        checkpointer = Checkpointer(f"sweep-{kind}", coordinator, enumerator, tracker)
        pauses, durable, stalls, first = [], [], [0.0], 0.0
        try:
            for checkpoint_id in range(1, checkpoints + 2):
                tracker.advance({sid: checkpoint_id + 1 for sid in rng.sample(ids, min(changes, n))})
                t0 = time.perf_counter()
                if kind == "before":

                    def write(
                        state: dict[str, Any], kept: dict[str, int], cid: int = checkpoint_id, to: Any = store
                    ) -> None:
                        to.write(cid, "sweep", state, kept)

                    take_checkpoint(coordinator, enumerator, checkpoint_id, tracker.snapshot(), write)
                    t1 = t2 = time.perf_counter()
                else:
                    done = checkpointer.take(checkpoint_id, store_writer(store, "sweep"))
                    t1 = last = time.perf_counter()
                    # every other checkpoint the caller goes on meanwhile (busy, which slows the checkpoint
                    # thread down): the longest it is held by the GIL; otherwise it waits (durable time)
                    while checkpoint_id % 2 and checkpoint_id > 1 and not done.done():
                        sum(range(200))
                        now = time.perf_counter()
                        stalls.append(now - last)
                        last = now
                    done.result()
                    t2 = time.perf_counter()
                if checkpoint_id == 1:  # commits every position once (as the first one after a restore)
                    first = t2 - t0
                else:
                    pauses.append(t1 - t0)
                    if kind == "before" or checkpoint_id % 2 == 0:
                        durable.append(t2 - t0)
        finally:
            checkpointer.close()
            coordinator.stop()
        newest_bytes = max(directory.glob("chk-*.json")).stat().st_size
        shutil.rmtree(directory, ignore_errors=True)
        t0 = time.perf_counter()
        metrics.close()
        out[kind] = {
            "caller_pause_s": _stats(pauses),
            "longest_caller_stall_while_written_s": max(stalls),
            "durable_and_committed_s": _stats(durable),
            "first_checkpoint_s": first,
            "file_bytes": newest_bytes,
            "metrics_close_s": time.perf_counter() - t0,
        }
    return out


# ------------------------------------------------------------------------------------------ real Kafka


def measure_stream(spec: dict[str, Any]) -> dict[str, Any]:
    """One source over the given layout: checkpoint, periodic-checkpoint poll pauses, close (this process's
    ``multicluster_source``, whichever that is)."""
    from multicluster_source import (
        ClusterMetadata,
        KafkaStream,
        MultiClusterKafkaSource,
        OffsetsInitializer,
        StaticMetadataService,
    )

    total = sum(len(topics) * 100 for _bootstrap, topics in spec["logical"].values())
    streams = [
        KafkaStream(
            "sweep",
            {
                cid: ClusterMetadata(cid, bootstrap, frozenset(topics))
                for cid, (bootstrap, topics) in spec["logical"].items()
            },
        )
    ]
    held, written = _time_checkpoints()
    source = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService(streams))
        .set_stream_ids(["sweep"])
        .set_group_id(f"sweep-{uuid.uuid4().hex[:8]}")
        .set_starting_offsets(OffsetsInitializer.earliest())
        .set_name(f"sweep-{uuid.uuid4().hex[:6]}")
        .build()
    )
    ckpt = Path(tempfile.mkdtemp(prefix="mcs-sweep-")) / "ckpt"
    out: dict[str, Any] = {"splits": total}
    warnings = _Warnings()
    logging.getLogger("multicluster_source").addHandler(warnings)
    started = time.perf_counter()
    stream = source.open(2, checkpoint_dir=str(ckpt), checkpoint_interval=0.5)
    try:
        seen: set[str] = set()
        polls: list[float] = []
        deadline = time.monotonic() + 300
        assigned_at = None
        while len(seen) < total and time.monotonic() < deadline:
            t0 = time.perf_counter()
            seen.update(r.split_id for r in stream.poll(timeout=0.05))
            polls.append(time.perf_counter() - t0)
            if assigned_at is None and sum(map(len, stream.assignments().values())) >= total:
                assigned_at = time.perf_counter() - started
        out["all_assigned_s"] = assigned_at
        out["all_first_records_s"] = time.perf_counter() - started if len(seen) >= total else None
        # periodic checkpoints with nothing moving (long enough for a discovery round: --settle)
        settle = time.monotonic() + float(spec.get("settle_s", 3.0))
        while time.monotonic() < settle:
            t0 = time.perf_counter()
            stream.poll(timeout=0.05)
            polls.append(time.perf_counter() - t0)
        out["poll_s"] = _stats(polls)
        if held:
            out["periodic_caller_held_s"] = _stats(held)
            out["periodic_written_committed_s"] = _stats(written) if written else None
            out["periodic_checkpoints"] = len(held)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            stream.checkpoint()
            times.append(time.perf_counter() - t0)
        out["checkpoint_s"] = _stats(times)
        out["threads_running"] = threading.active_count()
    finally:
        t0 = time.perf_counter()
        stream.close()
        out["close_s"] = time.perf_counter() - t0
        shutil.rmtree(ckpt.parent, ignore_errors=True)
        out["warnings"] = warnings.seen[:5]
        out["warnings_total"] = len(warnings.seen)
    return out


def _time_checkpoints() -> tuple[list[float], list[float]]:
    """Time every periodic checkpoint of this process: how long ``Checkpointer.take`` holds the caller's
    thread, and how long until its future ends (written and committed). Empty lists where the code measured
    has no checkpoint thread (the *before* of 0.2)."""
    held: list[float] = []
    written: list[float] = []
    try:
        from multicluster_source.runtime.core._checkpointer import Checkpointer
    except ImportError:
        return held, written

    def timed(self: Any, checkpoint_id: int, write: Any) -> None:  # take_in_background, timed
        error, self._background_error = self._background_error, None
        if error is not None:
            raise error
        t0 = time.perf_counter()
        future = self.take(checkpoint_id, write)
        held.append(time.perf_counter() - t0)
        future.add_done_callback(self._note_failure)
        future.add_done_callback(lambda _f: written.append(time.perf_counter() - t0))

    setattr(Checkpointer, "take_in_background", timed)  # noqa: B010 (the measured child process only)
    return held, written


class _Warnings(logging.Handler):
    """The source's warnings and errors of one measurement (slow or failed commits show here)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage()[:200])


def _baseline_tree(ref: str) -> Path:
    """``multicluster_source`` as of ``ref``, extracted into a temporary directory."""
    target = Path(tempfile.mkdtemp(prefix="mcs-baseline-"))
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "multicluster_source"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def run_child(spec: dict[str, Any], code: Path) -> dict[str, Any]:
    """``measure_stream(spec)`` in a child process importing ``multicluster_source`` from ``code``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(code), str(REPO)]))
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json,sys; from benchmarks._scale_sweep import measure_stream; "
            "print('RESULT ' + json.dumps(measure_stream(json.loads(sys.argv[1]))))",
            json.dumps(spec),
        ],
        env=env,
        cwd=tempfile.gettempdir(),  # not the repository: its multicluster_source must not shadow ``code``
        capture_output=True,
        text=True,
        timeout=900,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[len("RESULT ") :]))
    return {"error": (proc.stderr or proc.stdout)[-2000:]}


def wait_for_leaders(cluster: Any, names: set[str], partitions: int) -> None:
    """Wait (10 minutes at most) until ``partitions`` partitions of the topics ``names`` have a leader."""
    deadline = time.monotonic() + 600
    while True:
        md = cluster.admin().list_topics(timeout=60)
        ready = sum(
            1
            for name in names
            if name in md.topics
            for p in md.topics[name].partitions.values()
            if p.leader >= 0
        )
        if ready >= partitions:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{ready} of {partitions} partitions have a leader")
        time.sleep(0.5)


def _warm_offsets_topic(cluster: Any, topic: str) -> None:
    """One offset commit before anything is measured: the broker creates ``__consumer_offsets`` (50
    partitions) on the first one, which took longer than the 30 s commit wait on this machine."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = [ConsumerGroupTopicPartitions("sweep-warm-up", [TopicPartition(topic, 0, 0)])]
    deadline = time.monotonic() + 120
    while True:
        try:
            for future in cluster.admin().alter_consumer_group_offsets(request, request_timeout=60).values():
                future.result()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def sweep_kafka(
    sizes: Sequence[int], baseline_ref: str | None, heap: str, brokers: int = 1, settle_s: float = 3.0
) -> list[dict[str, Any]]:
    """Topics for the largest size on ``brokers`` single-node clusters; every size reads a prefix of them (2
    logical clusters on one broker, else one logical cluster per broker)."""
    import importlib
    from concurrent.futures import ThreadPoolExecutor

    sys.path.insert(0, str(REPO / "tests"))
    harness = importlib.import_module("harness.kafka")
    clusters = [harness.KafkaCluster(f"sweep{i}", heap=heap) for i in range(brokers)]
    rows: list[dict[str, Any]] = []
    trees: list[Path] = []
    try:
        with ThreadPoolExecutor(brokers) as pool:
            list(pool.map(lambda c: c.start(), clusters))
        logical = 2 if brokers == 1 else brokers
        per_logical = max(sizes) // (100 * logical)
        tag = uuid.uuid4().hex[:6]
        names = {f"lc{i}": [f"sweep-lc{i}-t{j}-{tag}" for j in range(per_logical)] for i in range(logical)}
        home = {f"lc{i}": clusters[i % brokers] for i in range(logical)}
        with ThreadPoolExecutor(brokers) as pool:
            jobs = [(c, [t for lc, ts in names.items() if home[lc] is c for t in ts]) for c in clusters]
            list(pool.map(lambda job: _fill(*job), jobs))
        baseline = _baseline_tree(baseline_ref) if baseline_ref else None
        trees.extend([baseline] if baseline is not None else [])
        for size in sizes:
            k = size // (100 * logical)
            spec: dict[str, Any] = {
                "logical": {c: [home[c].bootstrap_servers, t[:k]] for c, t in names.items()},
                "settle_s": settle_s,
            }
            row: dict[str, Any] = {"splits": k * 100 * logical, "brokers": brokers}
            if baseline is not None:
                row["before"] = run_child(spec, baseline)
            row["after"] = run_child(spec, REPO)
            rows.append(row)
            print(f"  kafka {k * 100 * logical} splits: {json.dumps(row)}", flush=True)
    finally:
        for cluster in clusters:
            cluster.stop()
        for tree in trees:
            shutil.rmtree(tree, ignore_errors=True)
    return rows


FILL_FLUSH_S = 600.0
"""How long the records of one cluster may take to be written (eight clusters filled at once on two cores
took more than 120 s)."""


def _fill(cluster: Any, topics: Sequence[str]) -> None:
    """Create ``topics`` (100 partitions each) on ``cluster`` and write one record to every partition."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    for start in range(0, len(topics), 20):  # KRaft refuses one request of more than 10,000 records
        chunk = [NewTopic(t, 100, 1) for t in topics[start : start + 20]]
        for future in cluster.admin().create_topics(chunk, operation_timeout=300).values():
            future.result()
    wait_for_leaders(cluster, set(topics), len(topics) * 100)
    _warm_offsets_topic(cluster, topics[0])
    producer = cluster.producer(**{"linger.ms": 20})
    for topic in topics:
        for p in range(100):
            producer.produce(topic, b"x", partition=p)
        producer.poll(0)
    if producer.flush(FILL_FLUSH_S):
        raise TimeoutError(f"records not delivered within {FILL_FLUSH_S:.0f} s")


# --------------------------------------------------------------------------------------------- report


def run_sweep(
    in_process: Sequence[int],
    kafka: Sequence[int],
    changes: int,
    baseline_ref: str | None,
    heap: str,
    brokers: int = 1,
    settle_s: float = 3.0,
) -> dict[str, Any]:
    """Every figure of the sweep: in-process sizes first, then real Kafka sizes."""
    result: dict[str, Any] = {
        "generated": time.strftime("%Y-%m-%d %H:%M %Z"),
        "baseline_ref": baseline_ref,
        "changes_per_checkpoint": changes,
        "in_process": [],
        "kafka": [],
    }
    for n in in_process:
        row = measure_in_process(n, changes)
        print(f"  in-process {n} splits: {json.dumps(row)}", flush=True)
        result["in_process"].append(row)
    if kafka:
        result["kafka"] = sweep_kafka(kafka, baseline_ref, heap, brokers, settle_s)
    return result


def _ms(value: Any) -> str:
    return "n/a" if value is None else f"{value * 1000:,.0f}"


def sweep_table(result: dict[str, Any]) -> str:
    """Before -> after per size, in milliseconds."""
    lines = [
        f"In-process (no brokers; {result['changes_per_checkpoint']:,} positions move between checkpoints; "
        "ms, before -> after):",
        f"{'splits':>8}  {'caller pause p50 / p99':<28} {'durable+committed p50':<24} "
        f"{'first (all committed)':<24} {'stall (after)':<13} {'metrics close':<16} file MB",
    ]
    for row in result["in_process"]:
        b, a = row["before"], row["after"]
        lines.append(
            f"{row['splits']:>8,}  "
            f"{_ms(b['caller_pause_s']['median'])}/{_ms(b['caller_pause_s']['p99'])} -> "
            f"{_ms(a['caller_pause_s']['median'])}/{_ms(a['caller_pause_s']['p99'])}".ljust(38)
            + f"{_ms(b['durable_and_committed_s']['median'])} -> ".ljust(0)
            + f"{_ms(a['durable_and_committed_s']['median'])}".ljust(16)
            + f"{_ms(b['first_checkpoint_s'])} -> {_ms(a['first_checkpoint_s'])}".ljust(25)
            + f"{_ms(a.get('longest_caller_stall_while_written_s'))}".ljust(14)
            + f"{_ms(b['metrics_close_s'])} -> {_ms(a['metrics_close_s'])}".ljust(17)
            + f"{a['file_bytes'] / 1e6:.1f}"
        )
    if result["kafka"]:
        brokers = result["kafka"][0].get("brokers", 1)
        lines.append("")
        lines.append(
            f"Real Kafka ({brokers} single-node cluster(s), 2 readers; ms, before ({result['baseline_ref']}) "
            "-> after; caller held and written+committed: periodic checkpoints, after only):"
        )
        lines.append(
            f"{'splits':>8}  {'checkpoint() p50':<20} {'caller held p50/p99':<20} "
            f"{'written+committed p50/max':<26} "
            f"{'longest poll(0.05)':<20} {'close()':<18} {'all assigned':<18} first record of every split"
        )
        for row in result["kafka"]:
            b, a = row.get("before") or {}, row["after"]
            if "error" in a or "error" in b:
                error = str(a.get("error") or b.get("error"))
                lines.append(f"{row['splits']:>8,}  failed: {error[-300:]}")
                continue

            def pair(key: str, sub: str | None = None, b: Any = b, a: Any = a) -> str:
                def one(d: Any) -> Any:
                    v = d.get(key)
                    return v.get(sub) if isinstance(v, dict) and sub else v

                return f"{_ms(one(b)) if b else '-'} -> {_ms(one(a))}"

            held = a.get("periodic_caller_held_s") or {}
            done = a.get("periodic_written_committed_s") or {}
            lines.append(
                f"{row['splits']:>8,}  {pair('checkpoint_s', 'median'):<20} "
                f"{_ms(held.get('median'))}/{_ms(held.get('p99'))}".ljust(52)
                + f"{_ms(done.get('median'))}/{_ms(done.get('max'))}".ljust(27)
                + f"{pair('poll_s', 'max'):<20} {pair('close_s'):<18} {pair('all_assigned_s'):<18} "
                f"{pair('all_first_records_s')}"
            )
    return "\n".join(lines)
