"""A handover of many partitions at once: the ``mirrormaker2`` translation of a whole topic, its look-ups
gathered into batches (the source's way) side by side with one split at a time, in one run, on real MM2.

Two Apache Kafka clusters and MirrorMaker 2 east->west (``tests/harness/mm2.py``), one topic of
``--partitions`` partitions with ``--records`` keyed records each, MM2 caught up. Every partition is
translated at a position inside its log (so most answers need the origin record before the position and
its copy on the replica: two reads and two log-end look-ups per partition). Rounds, in order: batched (MM2's
offset syncs may still be arriving: its wait is included), then one at a time, then batched again. Each
reports the seconds of ``translate``, the modes, and whether every answer is the copy's offset (the replica
topic is created empty, so a copy's offset equals its origin's).

Run: ``python benchmarks/bench_handover_scale.py [--partitions 1000] [--records 40]``; writes
``benchmarks/results/handover_scale.json``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._brokers import RESULTS_DIR, machine_info
from multicluster_source.metadata import ClusterMetadata
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.replicas import OriginPosition
from multicluster_source.replicas._translate import make_translator

_mm2: Any = importlib.import_module("harness.mm2")
_pool: Any = importlib.import_module("harness.pool")


def _round(pair: Any, topic: str, partitions: int, records: int, *, batched: bool) -> dict[str, Any]:
    east, west, mm2 = pair.east, pair.west, pair.mm2
    replica_topic = mm2.replica_topic(topic)
    translator = make_translator(
        ReplicaOf("east", "mirrormaker2", syncs_location=mm2.syncs_location),
        ClusterMetadata("east", east.bootstrap_servers, frozenset({topic})),
        ClusterMetadata("west", west.bootstrap_servers, frozenset({replica_topic})),
    )
    if not batched:
        translator.batched_lookups = lambda: ()  # type: ignore[attr-defined]
    try:
        translator.start()
        follower = getattr(translator, "follower", None)
        if follower is not None:
            follower.wait_ready(time.monotonic() + 60)
        asks = [
            (OriginPosition(f"east/{topic}/{p}", records // 2 + p % 5, None), f"west/{replica_topic}/{p}")
            for p in range(partitions)
        ]
        started = time.monotonic()
        out = translator.translate(asks, origin_reachable=True, wait_s=10.0)
        seconds = time.monotonic() - started
    finally:
        translator.close()
    modes: dict[str, int] = {}
    for t in out:
        modes[t.mode] = modes.get(t.mode, 0) + 1
    return {
        "batched": batched,
        "seconds": round(seconds, 3),
        "ms_per_partition": round(1000 * seconds / partitions, 2),
        "modes": modes,
        "every_answer_the_copy": all(t.to_offset == t.from_offset for t in out),
    }


def main() -> None:
    """Run the rounds and write the result file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--records", type=int, default=40, help="records per partition")
    args = parser.parse_args()
    pool = _pool.ClusterPool("kafka")
    pair = _mm2.start_mm2_pair(pool)
    try:
        topic = pair.east.create_topic("scale", partitions=args.partitions)
        producer = pair.east.producer(**{"linger.ms": 20})
        for p in range(args.partitions):
            for i in range(args.records):
                producer.produce(topic, f"v-{p}-{i}".encode(), key=f"k{i % 7}".encode(), partition=p)
            producer.poll(0)
        producer.flush(120)
        pair.mm2.wait_caught_up(topic, timeout=600)
        rounds = [
            _round(pair, topic, args.partitions, args.records, batched=batched)
            for batched in (True, False, True)
        ]
    finally:
        pair.close(pool)
        pool.stop_all()
    for r in rounds:
        print(r, flush=True)
    out = {
        "machine": machine_info("kafka"),
        "config": {"partitions": args.partitions, "records": args.records},
        "rounds": rounds,
        "one_at_a_time_over_batched": round(rounds[1]["seconds"] / rounds[2]["seconds"], 1),
    }
    (RESULTS_DIR / "handover_scale.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
