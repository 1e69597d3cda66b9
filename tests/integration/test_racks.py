"""Rack awareness on a real three-broker cluster with broker.rack a, b, c: leader-rack placement,
fetch-from-follower through client.rack, standby readers and failover without loss."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from prometheus_client import CollectorRegistry

from harness.cluster import Cluster
from harness.scenario import builder, cluster_md, drain, settle, stream, wait_for

pytestmark = pytest.mark.integration


def _leader_racks(cluster: Cluster, topic: str) -> dict[int, str | None]:
    racks = cluster.describe_nodes()
    md = cluster.admin().list_topics(topic, timeout=10).topics[topic]
    return {p: racks[pm.leader] for p, pm in md.partitions.items()}


def test_splits_go_to_readers_in_their_leaders_rack(rack_cluster: Cluster) -> None:
    topic = rack_cluster.create_topic("racks", partitions=6, replication_factor=3)
    leader_racks = _leader_racks(rack_cluster, topic)
    md = [stream("s", cluster_md(rack_cluster, topic))]
    with builder(md).build().open(parallelism=3, reader_racks=["a", "b", "c"]) as s:
        assert wait_for(lambda: sum(len(v) for v in s.assignments().values()) == 6, 30)
        status = s.status()
    placement = status["placement"]
    reader_rack = {0: "a", 1: "b", 2: "c"}
    per_rack = {r: list(leader_racks.values()).count(r) for r in "abc"}
    local = sum(
        reader_rack[placement[f"{rack_cluster.cluster_id}/{topic}/{p}"]["reader"]] == rack
        for p, rack in leader_racks.items()
    )
    loads = [len(v) for v in status["readers"].values() if v]
    assert (
        max(len(v["splits"]) for v in status["readers"].values())
        - min(len(v["splits"]) for v in status["readers"].values())
        <= 1
    ), loads
    # Every split whose leader rack has room is local; with leaders spread 2/2/2 that is all of them.
    assert local == sum(min(n, 2) for n in per_rack.values())
    for p, rack in leader_racks.items():
        entry = placement[f"{rack_cluster.cluster_id}/{topic}/{p}"]
        assert entry["leader_rack"] == rack
        assert entry["reason"].startswith(("leader rack", "balance"))


def test_client_rack_fetches_from_a_follower_in_the_readers_rack(rack_cluster: Cluster) -> None:
    topic = rack_cluster.create_topic("follower", partitions=1, replication_factor=3)
    rack_cluster.produce(topic, [f"v{i}".encode() for i in range(200)])
    nodes = rack_cluster.describe_nodes()
    leader_rack = _leader_racks(rack_cluster, topic)[0]
    my_rack = next(r for r in "abc" if r != leader_rack)
    my_node = next(n for n, r in nodes.items() if r == my_rack)
    md = [stream("s", cluster_md(rack_cluster, topic))]
    source = builder(md).set_property("statistics.interval.ms", "200").build()
    with source.open(parallelism=1, reader_racks=[my_rack]) as s:
        got = drain(s, 200)
        rack_cluster.produce(topic, [b"more"])
        got += drain(s, 1)

        def fetching() -> dict[str, object]:
            reader = s.status()["readers"]["0"]
            return dict(
                reader.get("fetching_from", {}).get(rack_cluster.cluster_id, {}).get(f"{topic}/0", {})
            )

        assert wait_for(lambda: fetching().get("fetching_from") == my_node, 30), fetching()
        seen = fetching()
    assert len(got) == 201
    # The broker answered the consumer's client.rack with a preferred read replica in the reader's rack.
    assert seen["leader"] != my_node and seen["fetching_from"] == my_node


def test_standby_takes_over_a_killed_reader_without_loss(rack_cluster: Cluster) -> None:
    topic = rack_cluster.create_topic("failover", partitions=6, replication_factor=3)
    for p in range(6):
        rack_cluster.produce(topic, [f"p{p}-{i}".encode() for i in range(100)], partition=p)
    md = [stream("s", cluster_md(rack_cluster, topic))]
    registry = CollectorRegistry()
    source = (
        builder(md)
        .set_property("num.standby.replicas", "1")
        .set_property("reader.batch.max.records", "20")
        .build()
    )
    with source.open(parallelism=3, reader_racks=["a", "b", "c"], registry=registry) as s:
        got = drain(s, 150)
        status = s.status()
        victim = 1
        victims_splits = set(status["readers"][str(victim)]["splits"])
        assert victims_splits, "the victim must own splits"
        standby_of = {sid: e["standby_readers"] for sid, e in status["placement"].items()}
        assert all(standby_of[sid] and victim not in standby_of[sid] for sid in victims_splits)
        rack_of = {0: "a", 1: "b", 2: "c"}
        for entry in status["placement"].values():
            assert all(rack_of[r] != rack_of[entry["reader"]] for r in entry["standby_readers"])
        killed_at = time.monotonic()
        s.kill_reader(victim)
        assert wait_for(lambda: s.status()["readers"][str(victim)]["alive"] is False, 15)
        for p in range(6):
            rack_cluster.produce(topic, [f"after-p{p}-{i}".encode() for i in range(10)], partition=p)
        got += drain(s, 0, timeout=60, until=lambda g: len({r.value for r in got + g}) >= 660)
        took = time.monotonic() - killed_at
        got += settle(s, 1.0)
        after = s.status()
        failovers = registry.get_sample_value(
            "multicluster_source_failovers_total", {"cluster": rack_cluster.cluster_id}
        )
    values = {r.value for r in got}
    expected = {f"p{p}-{i}".encode() for p in range(6) for i in range(100)} | {
        f"after-p{p}-{i}".encode() for p in range(6) for i in range(10)
    }
    assert values == expected, f"lost {len(expected - values)} records"
    twice = [v for v, n in Counter(r.value for r in got).items() if n > 1]
    assert not twice, (
        f"{len(twice)} records returned twice in one run (the failed reader's and the standby's)"
    )
    assert failovers == 1.0
    assert after["failovers"] and after["failovers"][0]["reader"] == victim
    moved_to = {after["placement"][sid]["reader"] for sid in victims_splits}
    assert victim not in moved_to
    assert all(standby_of[sid][0] == after["placement"][sid]["reader"] for sid in victims_splits)
    print(f"failover: all records back {took:.2f} s after the kill")
