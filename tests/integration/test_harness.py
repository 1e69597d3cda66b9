"""The test harness itself: real clusters start, serve, stay apart, and survive a broker restart."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaException, Message, TopicPartition

from harness import Cluster, unique_name

pytestmark = pytest.mark.integration


def read_all(
    cluster: Cluster, topic: str, partitions: int, expected: int, timeout: float = 30.0
) -> list[Message]:
    """Read ``expected`` records from the start of every partition with an assign-based consumer."""
    consumer = cluster.consumer()
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        messages: list[Message] = []
        deadline = time.monotonic() + timeout
        while len(messages) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            messages.append(msg)
        return messages
    finally:
        consumer.close()


def pairs(messages: list[Message]) -> list[tuple[int, bytes]]:
    """``(partition, value)`` of consumed records."""
    out = []
    for m in messages:
        partition, value = m.partition(), m.value()
        assert partition is not None and isinstance(value, bytes)
        out.append((partition, value))
    return out


def by_partition(pairs: list[tuple[int, bytes]]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for partition, value in pairs:
        out.setdefault(partition, []).append(value)
    return out


def test_two_clusters_serve_different_topics(kafka_clusters: Callable[[int], list[Cluster]]) -> None:
    east, west = kafka_clusters(2)
    assert east.cluster_id != west.cluster_id
    assert east.bootstrap_servers != west.bootstrap_servers
    on_east, on_west = east.create_topic("only-east"), west.create_topic("only-west")

    east_topics = set(east.admin().list_topics(timeout=10).topics)
    west_topics = set(west.admin().list_topics(timeout=10).topics)
    assert on_east in east_topics and on_east not in west_topics
    assert on_west in west_topics and on_west not in east_topics
    east.delete_topic(on_east)
    assert on_east not in east.admin().list_topics(timeout=10).topics


def test_produce_consume_round_trip_via_assign(kafka_cluster: Cluster) -> None:
    topic = kafka_cluster.create_topic("round-trip", partitions=3)
    sent = kafka_cluster.produce_n(topic, 30, partitions=3)
    kafka_cluster.produce(topic, ["with-key"], partition=1, key="k", headers={"h": b"v"})

    got = read_all(kafka_cluster, topic, 3, 31)
    plain = pairs([m for m in got if m.value() != b"with-key"])
    assert by_partition(plain) == by_partition(sent)  # every record, in order within its partition
    [keyed] = [m for m in got if m.value() == b"with-key"]
    assert (keyed.partition(), keyed.key(), keyed.headers()) == (1, b"k", [("h", b"v")])


def test_committed_offsets_are_read_back(kafka_cluster: Cluster) -> None:
    topic = kafka_cluster.create_topic("commits", partitions=2)
    kafka_cluster.produce_n(topic, 10, partitions=2)
    group = unique_name("group")
    consumer = kafka_cluster.consumer(**{"group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 3)], asynchronous=False
        )
    finally:
        consumer.close()
    assert kafka_cluster.committed_offsets(group, topic, 2) == {0: 5, 1: 3}


def test_rack_cluster_has_three_brokers_in_racks_a_b_c(rack_cluster: Cluster) -> None:
    assert rack_cluster.describe_nodes() == {0: "a", 1: "b", 2: "c"} == rack_cluster.node_racks
    topic = rack_cluster.create_topic("racked", partitions=3, replication_factor=3)
    partitions = rack_cluster.admin().list_topics(topic=topic, timeout=10).topics[topic].partitions
    assert all(sorted(p.replicas) == [0, 1, 2] for p in partitions.values())


def test_stop_and_start_node_keeps_data(fresh_cluster: Callable[..., Cluster]) -> None:
    cluster = fresh_cluster()
    if cluster.kind != "kafka":
        pytest.skip(f"{cluster.kind} brokers cannot be restarted by the tests")
    topic = cluster.create_topic("restart", partitions=2)
    sent = cluster.produce_n(topic, 20, partitions=2)
    cluster.stop_node(0)
    cluster.start_node(0)
    got = read_all(cluster, topic, 2, 20)
    assert by_partition(pairs(got)) == by_partition(sent)
