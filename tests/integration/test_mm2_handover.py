"""The source handing a stream over to MirrorMaker 2's copy, end to end on real MM2 (``harness.mm2``):

- a planned switchover by a metadata file change while producers keep writing to the origin: no record is
  lost, and the repeats stay within what ``status()["handovers"]`` reports (none where it says ``exact``);
- a disaster failover: ``kill -9`` of the origin's broker, then the metadata marks the origin failed
  (``replicaOf.failover``); the offset syncs live on the replica (``offset-syncs.topic.location=target``):
  every record MM2 had copied is delivered, within the reported repeats.

Values name their origin partition and index (``<p>-<i>``), so each delivered record is accounted for.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException

from harness.cluster import Cluster
from harness.mm2 import MirrorMaker2, MM2Pair, end_offsets
from harness.mm2_streams import Writer, handover_streams, values_on
from harness.scenario import wait_for
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


def _from_every_partition(got: list[SourceRecord], at_least: int) -> bool:
    return len(got) >= at_least and {r.partition for r in got} == set(range(PARTITIONS))


def _ends(cluster: Cluster, topic: str) -> dict[int, int]:
    try:
        return end_offsets(cluster, topic)
    except (KeyError, KafkaException):  # not there yet, or its leader not yet known
        return {}


def _copied(cluster: Cluster, topic: str) -> int:
    return sum(_ends(cluster, topic).values())


def _bound(status: dict[str, Any]) -> int | None:
    bounds = [h["max_repeats"] for h in status["handovers"]]
    return None if any(b is None for b in bounds) else sum(bounds)


def test_planned_switchover_while_producers_write_loses_nothing(mm2_pair: MM2Pair, tmp_path: Path) -> None:
    east, mm2 = mm2_pair.east, mm2_pair.mm2
    topic = east.create_topic("orders", partitions=PARTITIONS)
    writer = Writer(east, topic, partitions=PARTITIONS, keyed=True).start()
    path = write_metadata_file(tmp_path / "streams.yaml", handover_streams(mm2_pair, topic, origin=True))
    got: list[SourceRecord] = []
    try:
        with _source(path).open(parallelism=2) as stream:
            # Both origin partitions read before the switchover: a partition whose leader was not ready yet
            # has no origin split to hand over (its copy then starts at the starting offsets, no handover).
            _read_until(stream, got, lambda: _from_every_partition(got, 600), 60)
            assert {r.cluster_id for r in got} == {"east"}, "the copy is not read while the origin is"
            write_metadata_file(path, handover_streams(mm2_pair, topic, origin=False))  # the switchover
            _read_until(stream, got, lambda: any(r.cluster_id == "west" for r in got), 60)
            wanted, status = _read_the_rest(stream, got, writer, mm2, topic, 90)
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


def test_a_reader_far_behind_mirrormaker_2_is_handed_over_exactly(mm2_pair: MM2Pair, tmp_path: Path) -> None:
    """Producers keep writing and MM2 keeps copying, a sync every few records, while the reader stops at
    21,000 records a partition until MM2 is 10,000 past it; then the switchover. The sync history still
    holds one close below the position, and the copy of the last record read is found: exact, no repeat.
    (The history used to keep nothing between the first sync and the last few hundred: the window from the
    first sync was longer than the 20,000 records a scan reads, so the copy was not found and the split
    started at replica offset 1, repeating the 21,000.)"""
    east, west, mm2 = mm2_pair.east, mm2_pair.west, mm2_pair.mm2
    topic = east.create_topic("orders", partitions=PARTITIONS)
    writer = Writer(east, topic, partitions=PARTITIONS, keyed=True).start()
    path = write_metadata_file(tmp_path / "streams.yaml", handover_streams(mm2_pair, topic, origin=True))
    got: list[SourceRecord] = []
    try:
        with _source(path, **{"reader.batch.max.records": "500"}).open(parallelism=2) as stream:
            _read_until(stream, got, lambda: _each_partition(got) >= 21_000, 120)
            assert {r.cluster_id for r in got} == {"east"}
            behind = max(Counter(r.partition for r in got).values()) + 10_000
            assert wait_for(lambda: _copied_each(west, mm2.replica_topic(topic)) >= behind, 120)
            write_metadata_file(path, handover_streams(mm2_pair, topic, origin=False))
            # no poll until the handovers are made: the positions stay where the reader stopped
            assert wait_for(lambda: len(stream.status()["handovers"]) == PARTITIONS, 60)
            wanted, status = _read_the_rest(stream, got, writer, mm2, topic, 120)
    finally:
        writer.stop()
    counts = Counter(r.value for r in got)
    assert not wanted - set(counts), "nothing lost"
    handovers = status["handovers"]
    assert all(h["mode"] == "exact" for h in handovers), handovers
    assert [h["from_offset"] for h in handovers] == [h["to_offset"] for h in handovers]  # offsets match 1:1
    assert not [v for v, n in counts.items() if n > 1], "records read twice across the handover"


def _read_the_rest(
    stream: Any, got: list[SourceRecord], writer: Writer, mm2: MirrorMaker2, topic: str, timeout: float
) -> tuple[set[bytes], dict[str, Any]]:
    """Stop the writer, wait until MM2 has copied all, read every record written: (those, ``status()``)."""
    writer.stop()
    mm2.wait_caught_up(topic)
    wanted = {f"{p}-{i}".encode() for p in range(PARTITIONS) for i in range(writer.next)}
    _read_until(stream, got, lambda: wanted <= {r.value for r in got}, timeout)
    got.extend(stream.poll(timeout=1.0))
    return wanted, stream.status()


def _each_partition(got: list[SourceRecord]) -> int:
    per = Counter(r.partition for r in got)
    return min(per.get(p, 0) for p in range(PARTITIONS))


def _copied_each(cluster: Cluster, topic: str) -> int:
    ends = _ends(cluster, topic)
    return min(ends.get(p, 0) for p in range(PARTITIONS))


def test_failover_after_kill_9_of_the_origin_delivers_every_copied_record(
    mm2_dr_pair: MM2Pair, tmp_path: Path
) -> None:
    east, west, mm2 = mm2_dr_pair.east, mm2_dr_pair.west, mm2_dr_pair.mm2
    topic = east.create_topic("orders", partitions=PARTITIONS)
    writer = Writer(east, topic, partitions=PARTITIONS, keyed=True, flush_s=2.0).start()
    path = write_metadata_file(tmp_path / "streams.yaml", handover_streams(mm2_dr_pair, topic, origin=True))
    got: list[SourceRecord] = []
    try:
        with _source(path).open(parallelism=2) as stream:
            _read_until(stream, got, lambda: _from_every_partition(got, 600), 60)  # see the switchover test
            _read_until(
                stream, got, lambda: _copied(west, mm2.replica_topic(topic)) >= 1000, 60
            )  # MM2 at work
            east.stop_node(0, graceful=False)  # kill -9: the origin and whatever MM2 had not copied are gone
            writer.stop()
            write_metadata_file(path, handover_streams(mm2_dr_pair, topic, origin=True, failover=True))
            time.sleep(2.0)  # MM2 has nothing more to copy
            copied = values_on(west, mm2.replica_topic(topic))
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
        writer = Writer(west, topic, partitions=PARTITIONS, keyed=True).start()
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
                wanted, status = _read_the_rest(stream, got, writer, back, topic, 90)
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
