"""Memory of following MirrorMaker 2's offset syncs from the start: what a job's start pays for a long topic.

Fills one offset-syncs topic (one partition, as MM2 makes it) with N syncs (default 300,000), then, in a
fresh process each, starts one ``SyncFollower`` (the thread every replica handover's job runs) and waits
until it is ready (has read the topic to its end). Each process reports its resident memory before the
follower starts, its peak (``ru_maxrss``) and its level a second after the follower was ready, and how long
the read took. Client properties are tried in turn (default: the client's defaults, then a 1 MB prefetch
bound), each twice, alternating. Nothing is judged: the figures are printed and written to
``results/sync-memory.json``.

    python benchmarks/bench_sync_memory.py
    python benchmarks/bench_sync_memory.py --syncs 100000 \
        --properties '{}' '{"queued.max.messages.kbytes": "4096"}'
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._brokers import REPO, RESULTS_DIR, add_broker_argument, machine_info, started_clusters

_TOPIC = "mm2-offset-syncs.east.internal"
_DEFAULT_PROPERTIES = ("{}", '{"queued.max.messages.kbytes": "1024"}')


def _rss_kb() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() // 1024


def _follow(bootstrap: str, properties: dict[str, str]) -> dict[str, Any]:
    """In the child process: one follower from the start to ready, and what it cost."""
    from multicluster_source.metadata._model import ClusterMetadata
    from multicluster_source.replicas._follow import SyncFollower
    from multicluster_source.replicas._store import SyncStore

    before = _rss_kb()
    cluster = ClusterMetadata(cluster_id="west", bootstrap_servers=bootstrap, topics=frozenset())
    follower = SyncFollower(cluster, _TOPIC, SyncStore(), replica_id="west", properties=properties)
    start = time.monotonic()
    follower.start()
    ready = follower.wait_ready(start + 300.0)
    took = time.monotonic() - start
    time.sleep(1.0)
    after = _rss_kb()
    follower.close()
    return {
        "properties": properties,
        "ready": ready,
        "syncs_read": follower.records,
        "read_s": round(took, 2),
        "rss_before_mb": round(before / 1024, 1),
        "peak_above_mb": round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024, 1),
        "after_above_mb": round((after - before) / 1024, 1),
    }


def _fill(bootstrap: str, syncs: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from multicluster_source.replicas._codec import OffsetSync, encode_offset_sync

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(_TOPIC, 1, 1)])[_TOPIC].result()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i in range(syncs):
        key, value = encode_offset_sync(OffsetSync("chaos-a", i % 3, i, i + 2))
        producer.produce(_TOPIC, value, key)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--syncs", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--properties", nargs="+", default=list(_DEFAULT_PROPERTIES), help="client properties (JSON), in turn"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    add_broker_argument(parser)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_follow(args.child, json.loads(args.properties[0]))))
        return 0
    results: list[dict[str, Any]] = []
    with started_clusters(args.brokers, 1) as (cluster,):
        _fill(cluster.bootstrap_servers, args.syncs)
        for _ in range(args.repeats):
            for properties in args.properties:
                argv_child = [sys.executable, __file__, "--child", cluster.bootstrap_servers]
                done = subprocess.run(
                    [*argv_child, "--properties", properties],
                    capture_output=True,
                    text=True,
                    check=False,
                    cwd=REPO,
                )
                if done.returncode != 0:
                    print(done.stderr[-2000:], file=sys.stderr)
                    return 1
                result = json.loads(done.stdout.strip().splitlines()[-1])
                results.append(result)
                print(
                    f"{properties}: {result['syncs_read']:,} syncs in {result['read_s']} s, peak "
                    f"+{result['peak_above_mb']} MB, +{result['after_above_mb']} MB a second after ready"
                )
    RESULTS_DIR.mkdir(exist_ok=True)
    out = {"machine": machine_info(args.brokers), "syncs": args.syncs, "results": results}
    (RESULTS_DIR / "sync-memory.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0 if all(r["ready"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
