"""Handing a stream over to MirrorMaker 2's copy: duplicates, losses and latency, on real MM2.

Two Apache Kafka clusters (``east``, ``west``) and MirrorMaker 2 east->west from the test harness
(``tests/harness/mm2.py``: Apache Kafka 4.1.1 and ``connect-mirror`` from Maven Central, the settings of
``BROKERS.md``). Every record's value names its origin partition and offset, so what the replica delivers
after a handover is checked record by record: a **duplicate** is a delivered copy of a record below the
origin position, a **loss** a record at or above the position that MM2 copied and the replica start
skipped.

Cycles (``--cycles``, each on a fresh topic of 2 partitions):

* ``caught_up_end``: MM2 caught up, the position at the origin's end (a source that had read everything);
* ``caught_up_mid``: MM2 caught up, the position in the middle (a source behind the origin's end: positions
  rarely sit on a sync, the copy of the last record received is recognised instead);
* ``producing``: producers keep writing to the origin while the split is handed over at the origin's end
  of that moment (MM2 behind by what it has not copied yet: the translation waits up to ``--wait`` s);
* ``failover`` (``--failovers``, each on fresh clusters with ``offset-syncs.topic.location=target``):
  ``kill -9`` of the origin's broker, then the translation from what the replica side holds.

Figures per kind: duplicates, losses, the reported ``max_repeats``, the modes, the translation's duration
(``translate_ms``: waiting for MM2 included) and the time from its call to the first replica record of every
partition read at its answers (``first_record_ms``; none where an answer is the end of a quiet partition).

Then the same through the source itself (``benchmarks/_handover_source.py``: a live metadata change, kinds
``end``, ``mid``, ``producing``, and ``failover``: ``kill -9`` of the origin's broker while producers write,
then ``replicaOf.failover: true``; ``first_replica_ms`` from the metadata file write to the first record
returned from the replica; a failover's losses are records MM2 had copied and the source never returned,
``not_copied_by_mm2`` what MM2 had not copied when the origin died).

Run: ``python benchmarks/bench_handover.py [--cycles 10] [--failovers 2] [--records 2000]``; writes
``benchmarks/results/handover.json``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, TopicPartition

from benchmarks._brokers import RESULTS_DIR, machine_info
from benchmarks._handover_source import source_cycle, source_failover
from multicluster_source.metadata import ClusterMetadata
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.replicas import OriginPosition, Translation
from multicluster_source.replicas._translate import make_translator

_mm2: Any = importlib.import_module("harness.mm2")
_pool: Any = importlib.import_module("harness.pool")

PARTITIONS = 2


def _values(topic: str, p: int, start: int, n: int) -> list[bytes]:
    return [f"{topic}:{p}:{i}".encode() for i in range(start, start + n)]


def _produce(cluster: Any, topic: str, start: int, n: int) -> None:
    producer = cluster.producer(**{"linger.ms": 5, "enable.idempotence": True})
    for p in range(PARTITIONS):
        for value in _values(topic, p, start, n):
            producer.produce(topic, value=value, key=value[-3:], partition=p, headers=[("h", value[-2:])])
            producer.poll(0)
    producer.flush(60)


class _Writer:
    """Writes to every partition of a topic until stopped (``producing`` cycles)."""

    def __init__(self, cluster: Any, topic: str, start: int, flush_s: float = 60.0) -> None:
        self.cluster, self.topic, self.next, self.flush_s = cluster, topic, start, flush_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-handover-writer", daemon=True)

    def _run(self) -> None:
        producer = self.cluster.producer(**{"linger.ms": 2, "enable.idempotence": True})
        while not self._stop.is_set():
            for p in range(PARTITIONS):
                for value in _values(self.topic, p, self.next, 20):
                    producer.produce(self.topic, value=value, key=value[-3:], partition=p)
            self.next += 20
            producer.poll(0.01)
        producer.flush(self.flush_s)

    def __enter__(self) -> _Writer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def _read_replica(cluster: Any, topic: str, p: int, start: int, end: int) -> tuple[list[int], float | None]:
    """Origin offsets of the replica records ``start``..``end`` (-1 for a record that is not a copy), and
    the time the first one arrived (perf_counter)."""
    consumer = Consumer(cluster.client_config(**{"group.id": "bench-handover", "enable.auto.commit": False}))
    got: list[int] = []
    first: float | None = None
    try:
        consumer.assign([TopicPartition(topic, p, start)])
        deadline = time.monotonic() + 60
        while start + len(got) < end and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.2):
                if msg.error() is not None:
                    continue
                first = first or time.perf_counter()
                parts = (msg.value() or b"").decode().split(":")
                got.append(int(parts[2]) if len(parts) == 3 else -1)
                if (msg.offset() or 0) + 1 >= end:
                    break
    finally:
        consumer.close()
    return got, first


def _first_records(cluster: Any, topic: str, out: list[Translation], timeout_s: float = 5.0) -> float | None:
    """When the first replica record of every answer's partition arrived (perf_counter; None when some
    partition had none within ``timeout_s``: an answer at the end of a quiet partition)."""
    consumer = Consumer(cluster.client_config(**{"group.id": "bench-handover", "enable.auto.commit": False}))
    waiting = {int(t.to_split.rsplit("/", 1)[1]) for t in out}
    last: float | None = None
    try:
        consumer.assign(
            [TopicPartition(topic, int(t.to_split.rsplit("/", 1)[1]), max(0, t.to_offset)) for t in out]
        )
        deadline = time.monotonic() + timeout_s
        while waiting and time.monotonic() < deadline:
            for msg in consumer.consume(100, timeout=0.05):
                if msg.error() is None and msg.partition() in waiting:
                    waiting.discard(msg.partition() or 0)
                    last = time.perf_counter()
    finally:
        consumer.close()
    return None if waiting else last


def _judge(
    pair: Any,
    topic: str,
    positions: dict[int, int],
    out: list[Translation],
    began: float,
    ended: float,
    first: float | None,
) -> dict[str, Any]:
    """Duplicates, losses and latency of one handover (MM2 must be caught up with the origin's end)."""
    ends = (
        pair.mm2.wait_caught_up(topic, timeout=120)
        if pair.east_alive
        else _mm2.end_offsets(pair.west, pair.mm2.replica_topic(topic))
    )
    dups = losses = 0
    for t in out:
        p = int(t.to_split.rsplit("/", 1)[1])
        start = t.to_offset if t.to_offset >= 0 else 0
        got, _first = _read_replica(pair.west, pair.mm2.replica_topic(topic), p, start, ends[p])
        copied, _ = _read_replica(pair.west, pair.mm2.replica_topic(topic), p, 0, ends[p])
        delivered = set(got)
        dups += sum(1 for i in got if 0 <= i < positions[p])
        losses += sum(1 for i in copied if i >= positions[p] and i not in delivered)
    return {
        "duplicates": dups,
        "losses": losses,
        "max_repeats": [t.max_repeats for t in out],
        "modes": [t.mode for t in out],
        "translate_ms": (ended - began) * 1000,
        "first_record_ms": (first - began) * 1000 if first is not None else None,
    }


def _translate(
    pair: Any,
    topic: str,
    positions: dict[int, int],
    *,
    reachable: bool,
    wait_s: float,
    translator: Any = None,
    stamps: dict[int, int] | None = None,
) -> tuple[list[Translation], float, float, float | None]:
    replica_topic = pair.mm2.replica_topic(topic)
    own = translator is None
    if own:
        translator = make_translator(
            ReplicaOf("east", syncs_location=pair.mm2.syncs_location),
            ClusterMetadata("east", pair.east.bootstrap_servers, frozenset({topic})),
            ClusterMetadata("west", pair.west.bootstrap_servers, frozenset({replica_topic})),
        )
        translator.start()
        translator.follower.wait_ready(time.monotonic() + 30)
    try:
        began = time.perf_counter()
        handovers = [
            (OriginPosition(f"east/{topic}/{p}", at, (stamps or {}).get(p)), f"west/{replica_topic}/{p}")
            for p, at in positions.items()
        ]
        out = translator.translate(handovers, origin_reachable=reachable, wait_s=wait_s)
        ended = time.perf_counter()
        first = _first_records(pair.west, replica_topic, out, 5.0 if reachable else 1.0)
    finally:
        if own:
            translator.close()
    return out, began, ended, first


def cycle(pair: Any, kind: str, records: int, wait_s: float, rng: random.Random) -> dict[str, Any]:
    """One handover of ``kind`` on a fresh topic."""
    topic = pair.east.create_topic("handover", PARTITIONS)
    _produce(pair.east, topic, 0, records)
    pair.mm2.wait_caught_up(topic, timeout=120)
    if kind == "producing":
        with _Writer(pair.east, topic, records):
            time.sleep(0.5)
            positions = _mm2.end_offsets(pair.east, topic)
            out, began, ended, first = _translate(pair, topic, positions, reachable=True, wait_s=wait_s)
    else:
        for p in range(PARTITIONS):
            pair.mm2.wait_for_sync(topic, p, records - 1)
        if kind == "caught_up_end":
            positions = dict.fromkeys(range(PARTITIONS), records)
        else:
            positions = {p: rng.randrange(1, records) for p in range(PARTITIONS)}
        out, began, ended, first = _translate(pair, topic, positions, reachable=True, wait_s=wait_s)
    return {"kind": kind, "positions": positions, **_judge(pair, topic, positions, out, began, ended, first)}


def failover(pool: Any, records: int, wait_s: float, rng: random.Random) -> dict[str, Any]:
    """One failover: fresh clusters, syncs on the target, kill -9 of the origin while producers write."""
    pair = _mm2.start_mm2_pair(pool, syncs_location="target")
    pair.east_alive = True
    try:
        topic = pair.east.create_topic("failover", PARTITIONS)
        _produce(pair.east, topic, 0, records)
        pair.mm2.wait_caught_up(topic, timeout=120)
        replica_topic = pair.mm2.replica_topic(topic)
        translator = make_translator(
            ReplicaOf("east", syncs_location="target"),
            ClusterMetadata("east", pair.east.bootstrap_servers, frozenset({topic})),
            ClusterMetadata("west", pair.west.bootstrap_servers, frozenset({replica_topic})),
        )
        translator.start()
        try:
            with _Writer(pair.east, topic, records, flush_s=2.0):
                time.sleep(0.5)
                ends = _mm2.end_offsets(pair.east, topic)
                positions = {p: rng.randrange(records // 2, ends[p] + 1) for p in range(PARTITIONS)}
                stamps = {
                    p: _mm2.read_partition(pair.east, topic, p, at - 1, 1)[0].timestamp_ms
                    for p, at in positions.items()
                }
                pair.east.stop_node(0, graceful=False)
            pair.east_alive = False
            time.sleep(1.0)  # MM2 notices; nothing more reaches the copy
            out, began, ended, first = _translate(
                pair, topic, positions, reachable=False, wait_s=wait_s, translator=translator, stamps=stamps
            )
        finally:
            translator.close()
        return {
            "kind": "failover",
            "positions": positions,
            **_judge(pair, topic, positions, out, began, ended, first),
        }
    finally:
        pair.close(pool)


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    latencies = [r["first_record_ms"] for r in runs if r["first_record_ms"] is not None]
    translate = [r["translate_ms"] for r in runs]
    bounds = [b for r in runs for b in r["max_repeats"] if b is not None]
    return {
        "cycles": len(runs),
        "duplicates": sum(r["duplicates"] for r in runs),
        "losses": sum(r["losses"] for r in runs),
        "duplicates_over_bound": sum(
            1 for r in runs if None not in r["max_repeats"] and r["duplicates"] > sum(r["max_repeats"])
        ),
        "max_repeats_max": max(bounds) if bounds else None,
        "modes": {
            m: sum(r["modes"].count(m) for r in runs) for m in sorted({m for r in runs for m in r["modes"]})
        },
        "translate_ms_median": statistics.median(translate),
        "translate_ms_max": max(translate),
        "first_record_ms_median": statistics.median(latencies) if latencies else None,
        "first_record_ms_max": max(latencies) if latencies else None,
    }


def _source_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    handover = [r["handover_ms"] for r in runs if r["handover_ms"] is not None]
    latencies = [r["first_replica_ms"] for r in runs if r["first_replica_ms"] is not None]
    bounds = [b for r in runs for b in r["max_repeats"] if b is not None]
    return {
        "cycles": len(runs),
        "duplicates": sum(r["duplicates"] for r in runs),
        "losses": sum(r["losses"] for r in runs),
        "duplicates_over_bound": sum(
            1 for r in runs if None not in r["max_repeats"] and r["duplicates"] > sum(r["max_repeats"])
        ),
        "max_repeats_max": max(bounds) if bounds else None,
        "modes": {
            m: sum(r["modes"].count(m) for r in runs) for m in sorted({m for r in runs for m in r["modes"]})
        },
        "handover_ms_median": statistics.median(handover) if handover else None,
        "handover_ms_max": max(handover) if handover else None,
        "not_copied_by_mm2": sum(r.get("not_copied_by_mm2", 0) for r in runs),
        "first_replica_ms_median": statistics.median(latencies) if latencies else None,
        "first_replica_ms_max": max(latencies) if latencies else None,
    }


def main() -> None:
    """Run the benchmark."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cycles", type=int, default=10, help="cycles of each planned kind")
    parser.add_argument("--failovers", type=int, default=2)
    parser.add_argument("--records", type=int, default=2000, help="records per partition before a handover")
    parser.add_argument("--wait", type=float, default=10.0, help="how long a translation may wait for MM2")
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument(
        "--source-cycles", type=int, default=None, help="cycles through the source (default: --cycles)"
    )
    args = parser.parse_args()
    source_cycles = args.cycles if args.source_cycles is None else args.source_cycles
    rng = random.Random(args.seed)
    pool = _pool.ClusterPool("kafka")
    runs: dict[str, list[dict[str, Any]]] = {}
    source_runs: dict[str, list[dict[str, Any]]] = {}
    try:
        pair = _mm2.start_mm2_pair(pool)
        pair.east_alive = True
        try:
            for kind in ("caught_up_end", "caught_up_mid", "producing"):
                runs[kind] = [cycle(pair, kind, args.records, args.wait, rng) for _ in range(args.cycles)]
            for kind in ("end", "mid", "producing"):
                source_runs[kind] = [
                    source_cycle(pair, kind, args.records, args.wait) for _ in range(source_cycles)
                ]
        finally:
            pair.close(pool)
        runs["failover"] = [failover(pool, args.records, args.wait, rng) for _ in range(args.failovers)]
        source_runs["failover"] = [
            source_failover(pool, _mm2, args.records, args.wait) for _ in range(args.failovers)
        ]
    finally:
        pool.stop_all()
    report = {
        "machine": machine_info("kafka"),
        "config": {k: getattr(args, k) for k in ("cycles", "failovers", "records", "wait", "seed")},
        "partitions": PARTITIONS,
        "translation": {kind: _summary(r) for kind, r in runs.items() if r},
        "source": {kind: _source_summary(r) for kind, r in source_runs.items() if r},
        "runs": runs,
        "source_runs": source_runs,
    }
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "handover.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({"translation": report["translation"], "source": report["source"]}, indent=2))


if __name__ == "__main__":
    main()
