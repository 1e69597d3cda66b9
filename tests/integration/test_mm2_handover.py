"""The source handing a stream over to MirrorMaker 2's copy, end to end on real MM2 (``harness.mm2``):

- a planned switchover by a metadata file change while producers keep writing to the origin: no record is
  lost, and the repeats stay within what ``status()["handovers"]`` reports (none where it says ``exact``);
- a disaster failover: ``kill -9`` of the origin's broker, then the metadata marks the origin failed
  (``replicaOf.failover``); the offset syncs live on the replica (``offset-syncs.topic.location=target``):
  every record MM2 had copied is delivered, within the reported repeats.

Values name their origin partition and index (``<p>-<i>``), so each delivered record is accounted for.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException

from harness.cluster import Cluster
from harness.mm2 import MirrorMaker2, MM2Pair, end_offsets, read_partition
from multicluster_source import (
    ClusterMetadata,
    FileMetadataService,
    KafkaStream,
    MultiClusterKafkaSource,
    OffsetsInitializer,
    SourceRecord,
)
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.testing import write_metadata_file

pytestmark = pytest.mark.integration

PARTITIONS = 2


class _Writer:
    """Writes ``<p>-<i>`` records with keys and headers to every partition until stopped."""

    def __init__(self, cluster: Cluster, topic: str, flush_s: float = 30.0) -> None:
        self.cluster, self.topic, self.flush_s = cluster, topic, flush_s
        self.next = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-mm2-writer", daemon=True)

    def _run(self) -> None:
        producer = self.cluster.producer(**{"linger.ms": 5, "enable.idempotence": True})
        while not self._stop.is_set():
            for p in range(PARTITIONS):
                for i in range(self.next, self.next + 10):
                    producer.produce(
                        self.topic,
                        value=f"{p}-{i}".encode(),
                        key=f"k{i % 5}".encode(),
                        partition=p,
                        headers=[("i", str(i).encode())],
                    )
            self.next += 10
            producer.poll(0.02)
        producer.flush(self.flush_s)

    def start(self) -> _Writer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _streams(pair: MM2Pair, topic: str, *, origin: bool, failover: bool = False) -> list[KafkaStream]:
    replica_of = ReplicaOf("east", syncs_location=pair.mm2.syncs_location, failover=failover)
    clusters = [
        ClusterMetadata(
            "west",
            pair.west.bootstrap_servers,
            frozenset({pair.mm2.replica_topic(topic)}),
            replica_of=replica_of,
        )
    ]
    if origin:
        clusters.append(ClusterMetadata("east", pair.east.bootstrap_servers, frozenset({topic})))
    return [KafkaStream("orders", {c.cluster_id: c for c in clusters})]


def _source(path: Path, **props: str) -> MultiClusterKafkaSource:
    b = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(FileMetadataService(path))
        .set_stream_ids(["orders"])
        .set_group_id(f"g-{uuid.uuid4().hex[:8]}")
        .set_starting_offsets(OffsetsInitializer.earliest())
        .set_property("reader.batch.max.records", "50")
        .set_property("partition.discovery.interval.ms", "500")
        .set_property("replica.sync.wait.ms", "10000")
    )
    for k, v in props.items():
        b.set_property(k, v)
    return b.build()


def _read_until(stream: Any, got: list[SourceRecord], done: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        got.extend(stream.poll(timeout=0.2, max_records=100))


def _values_on(cluster: Cluster, topic: str) -> set[bytes]:
    """Every value now in ``topic``."""
    out: set[bytes] = set()
    for p, end in end_offsets(cluster, topic).items():
        out |= {r.value or b"" for r in read_partition(cluster, topic, p, 0, end)}
    return out


def _copied(cluster: Cluster, topic: str) -> int:
    try:
        return sum(end_offsets(cluster, topic).values())
    except (KeyError, KafkaException):  # not there yet, or its leader not yet known
        return 0


def _bound(status: dict[str, Any]) -> int | None:
    bounds = [h["max_repeats"] for h in status["handovers"]]
    return None if any(b is None for b in bounds) else sum(bounds)


def test_planned_switchover_while_producers_write_loses_nothing(mm2_pair: MM2Pair, tmp_path: Path) -> None:
    east, mm2 = mm2_pair.east, mm2_pair.mm2
    topic = east.create_topic("orders", partitions=PARTITIONS)
    writer = _Writer(east, topic).start()
    path = write_metadata_file(tmp_path / "streams.yaml", _streams(mm2_pair, topic, origin=True))
    got: list[SourceRecord] = []
    try:
        with _source(path).open(parallelism=2) as stream:
            _read_until(stream, got, lambda: len(got) >= 600, 60)
            assert {r.cluster_id for r in got} == {"east"}, "the copy is not read while the origin is"
            write_metadata_file(path, _streams(mm2_pair, topic, origin=False))  # the switchover
            _read_until(stream, got, lambda: any(r.cluster_id == "west" for r in got), 60)
            writer.stop()
            mm2.wait_caught_up(topic)
            wanted = {f"{p}-{i}".encode() for p in range(PARTITIONS) for i in range(writer.next)}
            _read_until(stream, got, lambda: wanted <= {r.value for r in got}, 90)
            got.extend(stream.poll(timeout=1.0))
            status = stream.status()
    finally:
        writer.stop()
    counts = Counter(r.value for r in got)
    missing = wanted - set(counts)
    assert not missing, f"{len(missing)} records lost, e.g. {sorted(missing)[:5]}"
    handovers = status["handovers"]
    assert sorted(h["from"] for h in handovers) == [f"east/{topic}/{p}" for p in range(PARTITIONS)]
    assert {h["mode"] for h in handovers} <= {"exact", "conservative"}, handovers
    repeated = sum(c - 1 for c in counts.values())
    bound = _bound(status)
    assert bound is None or repeated <= bound, (repeated, handovers)
    if all(h["mode"] == "exact" for h in handovers):
        assert repeated == 0, handovers
    for p in range(PARTITIONS):  # in order per partition: the origin's up to the position, the copy's after
        values = [int(r.value.split(b"-")[1]) for r in got if r.partition == p]
        assert sorted(set(values)) == list(range(writer.next))


def test_failover_after_kill_9_of_the_origin_delivers_every_copied_record(
    mm2_dr_pair: MM2Pair, tmp_path: Path
) -> None:
    east, west, mm2 = mm2_dr_pair.east, mm2_dr_pair.west, mm2_dr_pair.mm2
    topic = east.create_topic("orders", partitions=PARTITIONS)
    writer = _Writer(east, topic, flush_s=2.0).start()
    path = write_metadata_file(tmp_path / "streams.yaml", _streams(mm2_dr_pair, topic, origin=True))
    got: list[SourceRecord] = []
    try:
        with _source(path).open(parallelism=2) as stream:
            _read_until(stream, got, lambda: len(got) >= 600, 60)
            _read_until(
                stream, got, lambda: _copied(west, mm2.replica_topic(topic)) >= 1000, 60
            )  # MM2 at work
            east.stop_node(0, graceful=False)  # kill -9: the origin and whatever MM2 had not copied are gone
            writer.stop()
            write_metadata_file(path, _streams(mm2_dr_pair, topic, origin=True, failover=True))
            time.sleep(2.0)  # MM2 has nothing more to copy
            copied = _values_on(west, mm2.replica_topic(topic))
            _read_until(stream, got, lambda: copied <= {r.value for r in got}, 90)
            got.extend(stream.poll(timeout=1.0))
            status = stream.status()
    finally:
        writer.stop()
    counts = Counter(r.value for r in got)
    missing = copied - set(counts)
    assert not missing, f"{len(missing)} copied records not delivered, e.g. {sorted(missing)[:5]}"
    handovers = status["handovers"]
    assert len(handovers) == PARTITIONS and {h["mode"] for h in handovers} <= {"exact", "conservative"}
    repeated = sum(c - 1 for c in counts.values())
    bound = _bound(status)
    assert bound is None or repeated <= bound, (repeated, handovers)


def test_failback_hands_over_to_the_copy_made_in_the_other_direction(
    mm2_pair: MM2Pair, tmp_path: Path
) -> None:
    """After a failover to west, producers write to west's own topic; MM2 west->east copies it back to east
    (``west.<topic>``), and removing west from the metadata hands each partition back to east."""
    east, west = mm2_pair.east, mm2_pair.west
    back = MirrorMaker2(west, east).start()  # the reverse flow, as a failback sets it up
    try:
        topic = west.create_topic("orders", partitions=PARTITIONS)
        writer = _Writer(west, topic).start()
        copy = back.replica_topic(topic)
        replica = ClusterMetadata(
            "east", east.bootstrap_servers, frozenset({copy}), replica_of=ReplicaOf("west")
        )
        origin = ClusterMetadata("west", west.bootstrap_servers, frozenset({topic}))
        both = [KafkaStream("orders", {"west": origin, "east": replica})]
        path = write_metadata_file(tmp_path / "streams.yaml", both)
        got: list[SourceRecord] = []
        try:
            with _source(path).open(parallelism=2) as stream:
                _read_until(stream, got, lambda: len(got) >= 400, 60)
                _read_until(stream, got, lambda: _copied(east, copy) >= 400, 60)  # MM2 at work
                write_metadata_file(path, [KafkaStream("orders", {"east": replica})])
                _read_until(stream, got, lambda: any(r.cluster_id == "east" for r in got), 60)
                writer.stop()
                back.wait_caught_up(topic)
                wanted = {f"{p}-{i}".encode() for p in range(PARTITIONS) for i in range(writer.next)}
                _read_until(stream, got, lambda: wanted <= {r.value for r in got}, 90)
                got.extend(stream.poll(timeout=1.0))
                status = stream.status()
        finally:
            writer.stop()
    finally:
        back.kill()
        back.close()
    counts = Counter(r.value for r in got)
    assert not wanted - set(counts), "nothing lost"
    handovers = status["handovers"]
    assert sorted((h["from"], h["to"]) for h in handovers) == [
        (f"west/{topic}/{p}", f"east/{copy}/{p}") for p in range(PARTITIONS)
    ]
    repeated = sum(c - 1 for c in counts.values())
    bound = _bound(status)
    assert bound is None or repeated <= bound, (repeated, handovers)
    if all(h["mode"] == "exact" for h in handovers):
        assert repeated == 0, handovers
