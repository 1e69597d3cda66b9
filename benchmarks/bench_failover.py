"""Failover time: from a reader's failure to the first record of its former splits, with and without standbys.

A three-broker Apache Kafka cluster with racks a, b, c (the test harness's), three readers in racks a, b, c,
records produced continuously. The stream has two logical clusters on those brokers: ``main`` (6 partitions,
read by every reader) and ``solo`` (1 partition, so only one reader has a client for it). The reader of the
``solo`` split is killed (``SourceStream.kill_reader``: its thread fails as if it had died); the clock runs
from the kill to the first ``solo`` record read by its new reader. With ``num.standby.replicas=1`` the split
moves to a reader in another rack that already holds a connected client for ``solo``; with ``0`` it moves to
the least-loaded live reader, which must create and connect a client first. Medians over several runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._brokers import RESULTS_DIR, _harness, machine_info
from multicluster_source import (
    ClusterMetadata,
    KafkaStream,
    MultiClusterKafkaSource,
    OffsetsInitializer,
    StaticMetadataService,
)


class _Producer:
    def __init__(self, cluster: Any, topic: str, partitions: int) -> None:
        self._producer = cluster.producer(**{"linger.ms": 1})
        self._topic, self._partitions = topic, partitions
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-failover-produce", daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            for p in range(self._partitions):
                self._producer.produce(self._topic, f"{i}".encode(), partition=p)
            i += 1
            self._producer.poll(0)
            time.sleep(0.005)
        self._producer.flush(10)

    def __enter__(self) -> _Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)


def one_run(cluster: Any, topic: str, solo_topic: str, standbys: int) -> float:
    """Seconds from killing the reader of the ``solo`` cluster's only split to that split's first record
    read by its new reader."""
    servers = cluster.bootstrap_servers
    stream_md = KafkaStream(
        "s",
        {
            "main": ClusterMetadata("main", servers, frozenset({topic})),
            # A second logical cluster on the same brokers: only one reader has a client for it.
            "solo": ClusterMetadata("solo", servers, frozenset({solo_topic})),
        },
    )
    source = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([stream_md]))
        .set_stream_ids(["s"])
        .set_group_id(f"bench-failover-{time.time_ns()}")
        .set_starting_offsets(OffsetsInitializer.latest())
        .set_property("num.standby.replicas", str(standbys))
        .build()
    )
    solo = f"solo/{solo_topic}/0"
    with source.open(parallelism=3, reader_racks=["a", "b", "c"]) as s:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and sum(len(v) for v in s.assignments().values()) < 7:
            s.poll(timeout=0.1)
        for _ in range(20):  # running, and standbys connected
            s.poll(timeout=0.1)
        victim = next(r for r, ids in s.assignments().items() if solo in ids)
        killed = time.monotonic()
        s.kill_reader(victim)
        while time.monotonic() - killed < 60:
            records = s.poll(timeout=0.02)
            if any(r.cluster_id == "solo" for r in records) and solo not in s.assignments()[victim]:
                owner = next((r for r, ids in s.assignments().items() if solo in ids), None)
                if owner is not None and owner != victim:
                    return time.monotonic() - killed
        raise RuntimeError("the solo split did not come back within 60 s")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    pool = _harness.ClusterPool("kafka")
    results: dict[str, list[float]] = {"standby": [], "no_standby": []}
    try:
        cluster = pool.rack_cluster()
        topic = cluster.create_topic("failover", partitions=6, replication_factor=3)
        solo_topic = cluster.create_topic("solo", partitions=1, replication_factor=3)
        with _Producer(cluster, topic, 6), _Producer(cluster, solo_topic, 1):
            for _ in range(args.runs):
                results["standby"].append(one_run(cluster, topic, solo_topic, 1))
                results["no_standby"].append(one_run(cluster, topic, solo_topic, 0))
    finally:
        pool.stop_all()
    summary = {
        "machine": machine_info("kafka"),
        "runs": args.runs,
        "seconds": {
            k: {"median": statistics.median(v), "min": min(v), "max": max(v), "all": v}
            for k, v in results.items()
        },
    }
    med = summary["seconds"]
    print("failover: kill -> first record of the killed reader's only split of a cluster only it reads")
    for key, label in (("standby", "with standbys   "), ("no_standby", "without standbys")):
        m = med[key]
        print(f"  {label} median {m['median']:.3f} s  [{m['min']:.3f}-{m['max']:.3f}]")
    base = med["no_standby"]["median"]
    ratio = med["standby"]["median"] / base if base else float("nan")
    print(f"  ratio standby/no-standby {ratio:.2f}")
    summary["ratio_standby_to_no_standby"] = ratio
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "failover.json").write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
