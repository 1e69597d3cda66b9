"""Position translation on real MirrorMaker 2 (``harness.mm2``): the ``mirrormaker2`` translator by offset
syncs, record matching and checkpoints, and the ``identical`` and ``timestamp`` translators on MM2's copy.

The clusters and MM2 are shared by the module (``mm2_pair``; ``mm2_dr_pair`` for the failover, whose origin
broker is killed); tests use their own topics.
"""

from __future__ import annotations

import pytest

from harness.cluster import Cluster
from harness.mm2 import MM2Pair, read_partition
from harness.scenario import cluster_md
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.replicas import OriginPosition, Translation
from multicluster_source.replicas._translate import make_translator

pytestmark = pytest.mark.integration


def _produce_keyed(cluster: Cluster, topic: str, partitions: int, n: int, prefix: str = "r") -> None:
    """``n`` records per partition with keys, headers and distinct values."""
    for p in range(partitions):
        for i in range(n):
            cluster.produce(
                topic, [f"{prefix}-{p}-{i}".encode()], partition=p, key=f"k{i % 7}", headers={"seq": str(i)}
            )


def _translate(pair: MM2Pair, topic: str, mode: str, positions: list[tuple[int, int, int | None]], **kw):
    east, west = pair.east, pair.west
    replica_topic = pair.mm2.replica_topic(topic)
    translator = make_translator(
        ReplicaOf("east", mode),  # type: ignore[arg-type]
        cluster_md(east, topic),
        cluster_md(west, replica_topic),
        group_id=kw.pop("group_id", None),
    )
    try:
        translator.start()
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
