"""Position translation on real MirrorMaker 2 (``harness.mm2``): the ``mirrormaker2`` translator by offset
syncs, record matching and checkpoints, and the ``identical`` and ``timestamp`` translators on MM2's copy.

The clusters and MM2 are shared by the module (``mm2_pair``; ``mm2_dr_pair`` for the failover, whose origin
broker is killed); tests use their own topics.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
from confluent_kafka import TopicPartition

from harness.cluster import Cluster
from harness.mm2 import MM2Pair, precreate_replica_topic, read_partition
from harness.scenario import cluster_md
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.replicas import OriginPosition, Translation
from multicluster_source.replicas._lookup import (
    ClusterLookup,
    LookupDeferred,
    RecordCopy,
    ReplicaLookupError,
)
from multicluster_source.replicas._translate import make_translator

pytestmark = pytest.mark.integration


def _produce_keyed(cluster: Cluster, topic: str, partitions: int, n: int, prefix: str = "r") -> None:
    """``n`` records per partition with keys, headers and distinct values."""
    for p in range(partitions):
        for i in range(n):
            cluster.produce(
                topic, [f"{prefix}-{p}-{i}".encode()], partition=p, key=f"k{i % 7}", headers={"seq": str(i)}
            )


def _translate(pair: MM2Pair, topic: str, mode: str, positions: Sequence[tuple[int, int, int | None]], **kw):
    east, west = pair.east, pair.west
    replica_topic = pair.mm2.replica_topic(topic)
    translator = make_translator(
        kw.pop("replica_of", None) or ReplicaOf("east", mode, syncs_location=pair.mm2.syncs_location),  # type: ignore[arg-type]
        cluster_md(east, topic),
        cluster_md(west, replica_topic),
        group_id=kw.pop("group_id", None),
    )
    try:
        translator.start()
        follower = getattr(translator, "follower", None)
        if follower is not None and kw.pop(
            "warm", True
        ):  # as when the replica was declared long before the handover
            assert follower.wait_ready(time.monotonic() + 30.0), follower.last_error
        pairs = [
            (OriginPosition(f"east/{topic}/{p}", offset, ts), f"west/{replica_topic}/{p}")
            for p, offset, ts in positions
        ]
        return translator.translate(
            pairs, origin_reachable=kw.pop("origin_reachable", True), wait_s=kw.pop("wait_s", 5.0)
        )
    finally:
        translator.close()


def _assert_copy_at(pair: MM2Pair, topic: str, t: Translation) -> None:
    """The replica record at ``to_offset`` is the copy of the origin record at ``from_offset``."""
    p = int(t.from_split.rsplit("/", 1)[1])
    (origin,) = read_partition(pair.east, topic, p, t.from_offset, 1)
    (copy,) = read_partition(pair.west, pair.mm2.replica_topic(topic), p, t.to_offset, 1)
    assert origin.same_record(copy), (t, origin, copy)


def test_identical_and_timestamp_translate_on_mm2s_copy(mm2_pair: MM2Pair) -> None:
    east = mm2_pair.east
    topic = east.create_topic("orders", partitions=2)
    _produce_keyed(east, topic, 2, 20)
    mm2_pair.mm2.wait_caught_up(topic)
    (ident,) = _translate(mm2_pair, topic, "identical", [(1, 7, None)])
    assert (ident.mode, ident.to_offset, ident.max_repeats) == ("identical", 7, 0)
    _assert_copy_at(mm2_pair, topic, ident)
    (beyond,) = _translate(mm2_pair, topic, "identical", [(0, 25, None)], wait_s=0.5)
    assert (beyond.to_offset, beyond.max_repeats) == (20, 5)
    (last,) = read_partition(east, topic, 0, 11, 1)
    stamp, unknown = _translate(mm2_pair, topic, "timestamp", [(0, 12, last.timestamp_ms), (0, 12, None)])
    assert stamp.mode == "timestamp" and stamp.to_offset <= 11
    (first_at_that_time,) = read_partition(
        mm2_pair.west, mm2_pair.mm2.replica_topic(topic), 0, stamp.to_offset, 1
    )
    assert first_at_that_time.timestamp_ms == last.timestamp_ms
    assert unknown.mode == "start"


def _copy_offset(pair: MM2Pair, topic: str, partition: int, offset: int, filler: int) -> int:
    """The replica offset of the copy of origin ``offset`` (MM2 appended after ``filler`` records)."""
    return offset + filler


def test_mirrormaker2_translates_synced_unsynced_and_end_positions_exactly(mm2_pair: MM2Pair) -> None:
    east, mm2 = mm2_pair.east, mm2_pair.mm2
    topic = precreate_replica_topic(mm2_pair, 3, filler=5)
    _produce_keyed(east, topic, 3, 150)
    mm2.wait_caught_up(topic, shifted=5)
    for p in range(3):
        mm2.wait_for_sync(topic, p, 149)
    synced = {(s.partition, s.upstream) for s in mm2.read_syncs() if s.topic == topic}
    positions: list[tuple[int, int, int | None]] = []
    for p in range(3):
        mine = sorted(up for part, up in synced if part == p)
        unsynced = next(o for o in range(1, 150) if o not in mine and o - 1 not in mine)
        positions += [(p, mine[0], None), (p, unsynced, None), (p, 150, None)]
    positions.append((0, 0, None))
    out = _translate(mm2_pair, topic, "mirrormaker2", positions)
    start = out.pop()
    assert start.mode == "exact" and start.to_offset <= 5, start  # nothing received yet
    for t in out:
        assert t.mode == "exact" and t.max_repeats == 0, t
        p = int(t.from_split.rsplit("/", 1)[1])
        assert t.to_offset == _copy_offset(mm2_pair, topic, p, t.from_offset, 5), t
        if t.from_offset < 150:
            _assert_copy_at(mm2_pair, topic, t)
    details = " ".join(t.detail for t in out)
    assert "offset sync" in details and "record matched" in details


def test_a_topic_of_many_partitions_translates_exactly_asking_each_cluster_a_few_times(
    mm2_pair: MM2Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    east, mm2 = mm2_pair.east, mm2_pair.mm2
    topic = precreate_replica_topic(mm2_pair, 40, filler=3)
    _produce_keyed(east, topic, 40, 30)
    mm2.wait_caught_up(topic, shifted=3)
    reads: list[tuple[str, int]] = []  # (cluster, partitions) of every read the look-ups make
    read_many = ClusterLookup._read_many

    def counted(lookup: ClusterLookup, ranges, timeout_s):
        reads.append((lookup.cluster_id, len(ranges)))
        return read_many(lookup, ranges, timeout_s)

    monkeypatch.setattr(ClusterLookup, "_read_many", counted)
    positions: list[tuple[int, int, int | None]] = [(p, 5 + p % 20, None) for p in range(40)]
    out = _translate(mm2_pair, topic, "mirrormaker2", positions, wait_s=30.0)
    for t in out:  # each right after the copy of the last record before its position, as alone
        assert t.mode == "exact" and t.max_repeats == 0, t
        assert t.to_offset == t.from_offset + 3, t
        _assert_copy_at(mm2_pair, topic, t)
    assert len(reads) <= 8, reads  # one read per partition and cluster would be 80
    assert sum(n for _c, n in reads) >= 40


def test_a_look_up_reads_a_partition_again_after_reading_it(mm2_pair: MM2Pair) -> None:
    east = mm2_pair.east
    topic = east.create_topic("reread", partitions=2)
    _produce_keyed(east, topic, 2, 12)
    lookup = ClusterLookup(cluster_md(east, topic), None, role="replica")
    try:
        first = lookup.read(topic, 0, 0, 5, limit=5)
        again = lookup.read(topic, 0, 2, 9, limit=10)  # the partition was paused once its range was read
        assert [r.offset for r in first] == [0, 1, 2, 3, 4]
        assert [r.offset for r in again] == list(range(2, 9))
        with lookup.batch():
            for ask in (lambda: lookup.read(topic, 1, 0, 12, limit=12), lambda: lookup.watermarks(topic, 1)):
                with pytest.raises(LookupDeferred):
                    ask()
            with pytest.raises(LookupDeferred):
                lookup.read(topic, 0, 100, 105, limit=5)  # past the end: an offset out of range
            assert lookup.fetch_deferred() == 3
            assert [r.value for r in lookup.read(topic, 1, 0, 12, limit=12)] == [
                r.value for r in lookup_alone(east, topic, 1)
            ]
            assert lookup.watermarks(topic, 1) == (0, 12)
            with pytest.raises(ReplicaLookupError, match=f"{topic}/0: read"):
                lookup.read(topic, 0, 100, 105, limit=5)  # the failure is that read's, kept
    finally:
        lookup.close()


def lookup_alone(cluster: Cluster, topic: str, partition: int) -> list[RecordCopy]:
    """Partition ``partition``'s 12 records read by a look-up of their own, outside a batch."""
    alone = ClusterLookup(cluster_md(cluster, topic), None, role="origin")
    try:
        return alone.read(topic, partition, 0, 12, limit=12)
    finally:
        alone.close()


def test_without_the_origin_answers_are_conservative_and_skip_nothing(mm2_pair: MM2Pair) -> None:
    east, mm2 = mm2_pair.east, mm2_pair.mm2
    topic = precreate_replica_topic(mm2_pair, 2, filler=3)
    _produce_keyed(east, topic, 2, 300)
    mm2.wait_caught_up(topic, shifted=3)
    for p in range(2):
        mm2.wait_for_sync(topic, p, 299)
    positions = [(p, o, None) for p in range(2) for o in (1, 57, 150, 298, 299, 300)]
    out = _translate(mm2_pair, topic, "mirrormaker2", positions, origin_reachable=False, wait_s=10.0)
    for t in out:
        p = int(t.from_split.rsplit("/", 1)[1])
        right = _copy_offset(mm2_pair, topic, p, t.from_offset, 3)
        assert t.mode in ("exact", "conservative"), t
        assert t.to_offset <= right, f"skips records: {t}"
        assert t.max_repeats is not None and right - t.to_offset <= t.max_repeats, t
        if t.mode == "exact":
            assert t.to_offset == right
    by_offset = {(t.from_split, t.from_offset): t for t in out}
    assert by_offset[(f"east/{topic}/0", 300)].mode == "exact"  # the last record always gets its sync


def test_a_position_mm2_has_not_copied_yet_waits_for_its_sync(mm2_pair: MM2Pair) -> None:
    east, mm2 = mm2_pair.east, mm2_pair.mm2
    topic = east.create_topic("orders", partitions=1)
    _produce_keyed(east, topic, 1, 20)
    mm2.wait_caught_up(topic)
    _produce_keyed(east, topic, 1, 30, prefix="late")
    (t,) = _translate(mm2_pair, topic, "mirrormaker2", [(0, 50, None)], wait_s=20.0)
    assert (t.mode, t.to_offset) == ("exact", 50), t


def test_checkpoints_translate_a_group_when_no_sync_is_at_hand(mm2_pair: MM2Pair) -> None:
    east, mm2 = mm2_pair.east, mm2_pair.mm2
    topic = precreate_replica_topic(mm2_pair, 1, filler=4)
    _produce_keyed(east, topic, 1, 40)
    mm2.wait_caught_up(topic, shifted=4)
    mm2.wait_for_sync(topic, 0, 39)
    group = f"group-{topic}"
    committer = east.consumer(**{"group.id": group})
    committer.commit(offsets=[TopicPartition(topic, 0, 40)], asynchronous=False)
    committer.close()
    mm2.wait_for_checkpoint(group, mm2.replica_topic(topic), 0, 40)
    no_syncs = ReplicaOf("east", "mirrormaker2", syncs_topic="mm2-offset-syncs.nowhere.internal")
    (t,) = _translate(
        mm2_pair,
        topic,
        "mirrormaker2",
        [(0, 40, None)],
        replica_of=no_syncs,
        group_id=group,
        warm=False,
        origin_reachable=False,
        wait_s=1.0,
    )
    assert (t.mode, t.to_offset) == ("conservative", 44), t
    assert "checkpoint" in t.detail
    (below,) = _translate(
        mm2_pair,
        topic,
        "mirrormaker2",
        [(0, 30, None)],
        replica_of=no_syncs,
        group_id=group,
        warm=False,
        origin_reachable=False,
        wait_s=1.0,
    )
    assert (below.mode, below.to_offset, below.max_repeats) == ("conservative", 0, None), below


def _check_no_skip(out: list[Translation], filler: int) -> None:
    for t in out:
        right = t.from_offset + filler  # the replica offset of the copy of the record at the position
        assert t.mode in ("exact", "conservative"), t
        assert t.to_offset <= right, f"skips records: {t}"
        assert t.max_repeats is not None and right - t.to_offset <= t.max_repeats, t


def test_failover_after_kill_9_of_the_origin_uses_the_syncs_on_the_replica(mm2_dr_pair: MM2Pair) -> None:
    east, west, mm2 = mm2_dr_pair.east, mm2_dr_pair.west, mm2_dr_pair.mm2
    topic = precreate_replica_topic(mm2_dr_pair, 2, filler=2)
    _produce_keyed(east, topic, 2, 200)
    mm2.wait_caught_up(topic, shifted=2)
    for p in range(2):
        mm2.wait_for_sync(topic, p, 199)  # on west: offset-syncs.topic.location=target
    replica_topic = mm2.replica_topic(topic)
    replica_of = ReplicaOf("east", "mirrormaker2", syncs_location="target")
    origin_md, replica_md = cluster_md(east, topic), cluster_md(west, replica_topic)
    # the source knows the last returned record's time: it narrows the conservative starts
    stamps = {
        (p, o): read_partition(east, topic, p, o - 1, 1)[0].timestamp_ms for p in range(2) for o in (1, 120)
    }
    pairs = [
        (
            OriginPosition(f"east/{topic}/{p}", o, stamps.get((p, o)) if timed else None),
            f"west/{replica_topic}/{p}",
        )
        for timed in (False, True)
        for p in range(2)
        for o in (1, 120, 200)
    ]
    declared = make_translator(replica_of, origin_md, replica_md)
    try:
        declared.start()
        assert declared.follower.wait_ready(time.monotonic() + 30.0)  # type: ignore[attr-defined]
        east.stop_node(0, graceful=False)  # kill -9: the origin is gone
        before_restart = declared.translate(pairs, origin_reachable=False, wait_s=2.0)
    finally:
        declared.close()
    after_restart = make_translator(
        replica_of, origin_md, replica_md
    )  # a source restarted after the failover
    try:
        after_restart.start()
        again = after_restart.translate(pairs, origin_reachable=False, wait_s=10.0)
    finally:
        after_restart.close()
    for out in (before_restart, again):
        _check_no_skip(out, 2)
        ends = [t for t in out if t.from_offset == 200]
        assert [t.mode for t in ends] == ["exact"] * 4, ends  # the last record always gets its sync
        assert [t.to_offset for t in ends] == [202] * 4
        plain, timed = out[:6], out[6:]
        for a, b in zip(plain, timed, strict=True):
            assert (b.max_repeats or 0) <= (a.max_repeats or 0), (a, b)


def test_the_follower_thread_is_named_and_close_joins_it(mm2_pair: MM2Pair) -> None:
    east, west = mm2_pair.east, mm2_pair.west
    translator = make_translator(
        ReplicaOf("east"), cluster_md(east, "orders"), cluster_md(west, "east.orders")
    )
    translator.start()
    name = "mcs-replica-west-syncs"
    assert any(t.name == name for t in threading.enumerate())
    translator.close()
    translator.close()
    assert not any(t.name == name for t in threading.enumerate())
