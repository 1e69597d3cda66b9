"""The source's side of ``bench_handover.py``: handovers to MirrorMaker 2's copy through
``MultiClusterKafkaSource`` itself, by a change of its metadata file (a planned switchover) or by marking the
origin failed after ``kill -9`` of its broker (a failover).

Each cycle: a fresh topic of 2 partitions on ``east`` with ``records`` per partition, MM2 caught up (and the
last records synced); a source reading ``east/<topic>`` (``west/east.<topic>`` declared its replica) reads
all of it (``end``) or about half (``mid``), or reads while a producer keeps writing (``producing``); the
metadata file then drops ``east``; the source reads on until every record came. Figures: duplicates (values
returned more than once), losses (values never returned), the handovers' modes and ``max_repeats``, and
``first_replica_ms``: from the metadata file write to the first record returned from ``west`` (``mid`` and
``producing``: records wait on the replica; ``end``: records written after the switch, so MM2's copy lag is
in it), and ``handover_ms``: from the write until ``status()["handovers"]`` lists every split (the caller
does not poll meanwhile, so what the origin's readers had fetched is fenced, not returned).
"""

from __future__ import annotations

import importlib
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import benchmarks._brokers  # noqa: F401  (puts the test tree, home of the harness, on the path)
from multicluster_source import (
    FileMetadataService,
    MultiClusterKafkaSource,
    OffsetsInitializer,
)
from multicluster_source.testing import write_metadata_file

# the harness is a test-tree package, imported by name (see benchmarks/_brokers.py)
_shared: Any = importlib.import_module("harness.mm2_streams")
Writer, handover_streams, values_on = _shared.Writer, _shared.handover_streams, _shared.values_on

__all__ = ["source_cycle", "source_failover"]

PARTITIONS = 2


def _produce(cluster: Any, topic: str, start: int, n: int) -> None:
    producer = cluster.producer(**{"linger.ms": 5, "enable.idempotence": True})
    for p in range(PARTITIONS):
        for i in range(start, start + n):
            producer.produce(topic, value=f"{p}-{i}".encode(), key=f"k{i % 7}".encode(), partition=p)
            producer.poll(0)
    producer.flush(60)


def _writer(cluster: Any, topic: str, start: int) -> Any:
    return Writer(
        cluster, topic, partitions=PARTITIONS, start=start, flush_s=60.0, pause_s=0.01, name="bench-writer"
    )


def _source(path: Path, wait_ms: int) -> MultiClusterKafkaSource:
    return (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(FileMetadataService(path))
        .set_stream_ids(["orders"])
        .set_group_id(f"bench-handover-{uuid.uuid4().hex[:8]}")
        .set_starting_offsets(OffsetsInitializer.earliest())
        .set_property("partition.discovery.interval.ms", "500")
        .set_property("reader.batch.max.records", "20")
        .set_property("replica.sync.wait.ms", str(wait_ms))
        .build()
    )


def source_cycle(pair: Any, kind: str, records: int, wait_s: float) -> dict[str, Any]:
    """One handover of ``kind`` (``end``, ``mid`` or ``producing``) through the source."""
    topic = pair.east.create_topic("handover-src", PARTITIONS)
    _produce(pair.east, topic, 0, records)
    pair.mm2.wait_caught_up(topic, timeout=120)
    for p in range(PARTITIONS):
        pair.mm2.wait_for_sync(topic, p, records - 1)
    total = records
    got: list[Any] = []
    first_replica: float | None = None
    writer = _writer(pair.east, topic, records) if kind == "producing" else None
    with tempfile.TemporaryDirectory() as tmp:
        path = write_metadata_file(Path(tmp) / "streams.yaml", handover_streams(pair, topic, origin=True))
        with _source(path, int(wait_s * 1000)).open(parallelism=2) as stream:
            wanted_before = {"end": PARTITIONS * records, "mid": PARTITIONS * records // 2}.get(kind, records)
            if writer is not None:
                writer.start()
            deadline = time.monotonic() + 60
            while len(got) < wanted_before and time.monotonic() < deadline:
                got.extend(stream.poll(timeout=0.1, max_records=20))
            switched = time.perf_counter()
            write_metadata_file(path, handover_streams(pair, topic, origin=False))
            # not polling until the handovers are decided: the origin's records fetched meanwhile are fenced
            deadline = time.monotonic() + 60
            while len(stream.status()["handovers"]) < PARTITIONS and time.monotonic() < deadline:
                time.sleep(0.005)
            decided = time.perf_counter()
            if kind == "end":
                _produce(pair.east, topic, records, 50)  # something new for the replica to return
                total = records + 50
            deadline = time.monotonic() + 60
            while first_replica is None and time.monotonic() < deadline:
                batch = stream.poll(timeout=0.05, max_records=500)
                if any(r.cluster_id == "west" for r in batch):
                    first_replica = time.perf_counter()
                got.extend(batch)
            if writer is not None:
                writer.stop()
                total = writer.next
            pair.mm2.wait_caught_up(topic, timeout=120)
            wanted = {f"{p}-{i}".encode() for p in range(PARTITIONS) for i in range(total)}
            deadline = time.monotonic() + 90
            while not wanted <= {r.value for r in got} and time.monotonic() < deadline:
                got.extend(stream.poll(timeout=0.2, max_records=1000))
            got.extend(stream.poll(timeout=0.5))
            handovers = stream.status()["handovers"]
    counts = Counter(r.value for r in got)
    return {
        "kind": kind,
        "positions": {h["from"].rsplit("/", 1)[1]: h["from_offset"] for h in handovers},
        "duplicates": sum(c - 1 for c in counts.values()),
        "losses": len(wanted - set(counts)),
        "max_repeats": [h["max_repeats"] for h in handovers],
        "modes": [h["mode"] for h in handovers],
        "handover_ms": (decided - switched) * 1000,
        "first_replica_ms": (first_replica - switched) * 1000 if first_replica is not None else None,
    }


def source_failover(pool: Any, mm2: Any, records: int, wait_s: float) -> dict[str, Any]:
    """One failover through the source: fresh clusters with the offset syncs on the replica, producers
    writing, the source reading the origin; ``kill -9`` of its broker; the metadata marks it failed. Losses:
    records MM2 had copied that the source never returned."""
    pair = mm2.start_mm2_pair(pool, syncs_location="target")
    try:
        topic = pair.east.create_topic("failover-src", PARTITIONS)
        _produce(pair.east, topic, 0, records)
        pair.mm2.wait_caught_up(topic, timeout=120)
        writer = _writer(pair.east, topic, records)
        writer.flush_s = 2.0
        got: list[Any] = []
        first_replica: float | None = None
        with tempfile.TemporaryDirectory() as tmp:
            path = write_metadata_file(Path(tmp) / "streams.yaml", handover_streams(pair, topic, origin=True))
            with _source(path, int(wait_s * 1000)).open(parallelism=2) as stream:
                writer.start()
                deadline = time.monotonic() + 60
                while len(got) < PARTITIONS * records + 200 and time.monotonic() < deadline:
                    got.extend(stream.poll(timeout=0.1, max_records=20))
                time.sleep(1.5)  # not polling: the position stays behind what MM2 copies meanwhile
                pair.east.stop_node(0, graceful=False)
                writer.stop()
                time.sleep(1.0)  # MM2 has nothing more to copy
                copied = values_on(pair.west, pair.mm2.replica_topic(topic))
                switched = time.perf_counter()
                write_metadata_file(path, handover_streams(pair, topic, origin=True, failover=True))
                deadline = time.monotonic() + 90
                while not copied <= {r.value for r in got} and time.monotonic() < deadline:
                    batch = stream.poll(timeout=0.1, max_records=1000)
                    if first_replica is None and any(r.cluster_id == "west" for r in batch):
                        first_replica = time.perf_counter()
                    got.extend(batch)
                got.extend(stream.poll(timeout=0.5))
                handovers = stream.status()["handovers"]
        counts = Counter(r.value for r in got)
        return {
            "kind": "failover",
            "positions": {h["from"].rsplit("/", 1)[1]: h["from_offset"] for h in handovers},
            "duplicates": sum(c - 1 for c in counts.values()),
            "losses": len(copied - set(counts)),
            "not_copied_by_mm2": len(
                {f"{p}-{i}".encode() for p in range(PARTITIONS) for i in range(writer.next)} - copied
            ),
            "max_repeats": [h["max_repeats"] for h in handovers],
            "modes": [h["mode"] for h in handovers],
            "handover_ms": None,
            "first_replica_ms": (first_replica - switched) * 1000 if first_replica is not None else None,
        }
    finally:
        pair.close(pool)
