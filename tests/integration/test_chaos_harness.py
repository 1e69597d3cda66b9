"""The chaos harness itself (issue 33): a proxied cluster's clients reach it through its Toxiproxy proxy while
the harness's own clients talk to the broker directly, so a fault on the proxy holds back the reader, not
the producer; a paused broker answers nobody until it is resumed; in a three-broker cluster a leader cut off
from its followers (its replication proxy disabled) shrinks its ISR and refuses ``acks=all`` writes while
the reader still reaches it."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

# documented public names of confluent_kafka.admin that the package does not mark as re-exported
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from harness import ClusterPool, ClusterUnavailable
from harness.chaos import place_by_value, read_log
from harness.kafka import KafkaCluster
from harness.pool import proxy_name, replication_proxy_name
from harness.scenario import wait_for
from harness.toxiproxy import Toxiproxy

pytestmark = pytest.mark.integration


def _read(consumer: Consumer, count: int, timeout: float) -> list[bytes]:
    """Up to ``count`` values within ``timeout`` seconds."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value() or b"")
    return got


def _proxied_consumer(cluster: KafkaCluster, group: str) -> Consumer:
    """A consumer that reaches ``cluster`` through its proxies (as the job under test does)."""
    return Consumer(
        {
            "bootstrap.servers": cluster.proxied_bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "log_level": 2,
        }
    )


@pytest.fixture
def proxied(cluster_pool: ClusterPool) -> tuple[KafkaCluster, Toxiproxy]:
    try:
        [cluster] = cluster_pool.proxied(["chaos-east"])
    except ClusterUnavailable as exc:
        pytest.skip(str(exc))
    toxiproxy = cluster_pool.toxiproxy()
    toxiproxy.reset()
    return cluster, toxiproxy


def test_a_blackholed_proxy_holds_back_the_reader_and_not_the_producer(
    proxied: tuple[KafkaCluster, Toxiproxy],
) -> None:
    cluster, toxiproxy = proxied
    topic = cluster.create_topic("harness-proxy")
    consumer = _proxied_consumer(cluster, "harness-proxy")
    try:
        # the metadata through the proxy names the proxy's port, not the broker's
        advertised = {(b.host, b.port) for b in consumer.list_topics(timeout=30).brokers.values()}
        assert advertised == {("127.0.0.1", cluster.proxy_ports[0][0])}
        consumer.assign([TopicPartition(topic, 0, 0)])
        cluster.produce(topic, [b"before"])
        assert _read(consumer, 1, 30) == [b"before"]

        for stream in ("upstream", "downstream"):
            toxiproxy.add_toxic(proxy_name("chaos-east", 0), "timeout", {"timeout": 0}, stream=stream)
        cluster.produce(topic, [b"during"])  # straight to the broker: acknowledged while the proxy is cut
        assert _read(consumer, 1, 3) == [], "a record came through a blackholed proxy"

        toxiproxy.reset()
        assert toxiproxy.toxics(proxy_name("chaos-east", 0)) == []
        assert _read(consumer, 1, 60) == [b"during"], "the reader did not come back after the heal"
    finally:
        consumer.close()
        toxiproxy.reset()


def test_a_paused_broker_answers_once_resumed(proxied: tuple[KafkaCluster, Toxiproxy]) -> None:
    cluster, _toxiproxy = proxied
    topic = cluster.create_topic("harness-pause")
    producer = cluster.producer(**{"acks": "all", "log_level": 2})
    acknowledged: list[int | None] = []
    try:
        cluster.pause_node(0)
        assert cluster.node_running(0), "a paused broker's process is still there"
        producer.produce(topic, b"x", on_delivery=lambda err, msg: acknowledged.append(msg.offset()))
        producer.flush(2.0)
        assert acknowledged == [], "a paused broker acknowledged a record"
    finally:
        cluster.resume_node(0)
    try:
        assert producer.flush(60.0) == 0
        assert acknowledged == [0]
    finally:
        producer.close()


def test_the_copy_link_finds_the_records_its_copy_holds_twice(
    proxied: tuple[KafkaCluster, Toxiproxy],
) -> None:
    from harness.chaos_copies import CopyLink

    cluster, _toxiproxy = proxied
    topic = cluster.create_topic("harness-copied", partitions=2)
    # the copy's name on the replica; here origin and replica are one cluster, and the copy is written by hand
    link = CopyLink(cluster, cluster, topic, 2, say=lambda _line: None)
    cluster.admin().create_topics([NewTopic(link.copy_topic, 2, 1)])[link.copy_topic].result(30)
    cluster.produce(link.copy_topic, [b"a", b"b", b"a", b"c", b"b"], partition=0)  # a and b copied twice
    cluster.produce(link.copy_topic, [b"d"], partition=1)
    try:
        assert link.copied_twice(timeout=60.0) == {
            (cluster.cluster_id, link.copy_topic, 0): {b"a", b"b"},
            (cluster.cluster_id, link.copy_topic, 1): set(),
        }
    finally:
        link.close()


def test_the_audits_log_reader_tells_which_offsets_the_broker_still_holds(
    proxied: tuple[KafkaCluster, Toxiproxy],
) -> None:
    cluster, _toxiproxy = proxied
    topic = cluster.create_topic("harness-log")
    cluster.produce(topic, [f"r{i}".encode() for i in range(6)])
    [future] = cluster.admin().delete_records([TopicPartition(topic, 0, 2)]).values()
    future.result(30)
    read = read_log({cluster.cluster_id: cluster}, timeout=120.0)
    started = time.monotonic()
    # 0 and 1 deleted, 3 and 5 in the log, 9 never written: the end of the partition ends the read
    assert read((cluster.cluster_id, topic, 0), [0, 1, 3, 5, 9]) == {3, 5}
    assert time.monotonic() - started < 60.0, "the reader waited for its timeout instead of the log's end"
    assert read((cluster.cluster_id, topic, 0), [4]) == {4}


def test_records_acknowledged_without_an_offset_are_found_in_the_log_by_value(
    proxied: tuple[KafkaCluster, Toxiproxy],
) -> None:
    cluster, _toxiproxy = proxied
    topic = cluster.create_topic("harness-place")
    cluster.produce(topic, [f"p{i}".encode() for i in range(5)])
    key = (cluster.cluster_id, topic, 0)
    unplaced = [(key, b"p3"), (key, b"p1"), (key, b"never written")]
    placed, missing = place_by_value({cluster.cluster_id: cluster}, unplaced, timeout=120.0)
    assert sorted((r.key, r.offset, r.value) for r in placed) == [(key, 1, b"p1"), (key, 3, b"p3")]
    assert missing == [(key, b"never written")]


def test_a_disabled_proxy_cuts_the_reader_off_until_the_heal(proxied: tuple[KafkaCluster, Toxiproxy]) -> None:
    cluster, toxiproxy = proxied
    topic = cluster.create_topic("harness-partition")
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.proxied_bootstrap_servers,
            "group.id": "harness-partition",
            "enable.auto.commit": False,
            "reconnect.backoff.max.ms": 1000,
            "log_level": 0,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        cluster.produce(topic, [b"before"])
        assert _read(consumer, 1, 30) == [b"before"]
        toxiproxy.set_enabled(proxy_name("chaos-east", 0), False)
        cluster.produce(topic, [b"during"])
        assert _read(consumer, 1, 3) == [], "a record came through a disabled proxy"
        toxiproxy.reset()  # the heal enables every proxy again
        assert _read(consumer, 1, 60) == [b"during"], "the reader did not come back after the heal"
    finally:
        consumer.close()
        toxiproxy.reset()


def test_a_full_disk_stops_the_broker_and_a_restart_on_the_freed_disk_keeps_every_record(
    proxied: tuple[KafkaCluster, Toxiproxy],
) -> None:
    cluster, _toxiproxy = proxied
    if not cluster.disk_limited:
        pytest.skip("no tmpfs could be mounted for the brokers' data here (mounting needs CAP_SYS_ADMIN)")
    topic = cluster.create_topic("harness-disk")
    cluster.produce(topic, [b"before"])
    producer = cluster.producer(**{"acks": "all", "enable.idempotence": True, "log_level": 0})
    acked: list[int] = []
    during = [f"during-{i:03d}-".encode().ljust(1024, b".") for i in range(64)]  # more than a page of log
    try:
        assert cluster.fill_disk(0) > 0
        for value in during:
            producer.produce(topic, value, on_delivery=lambda err, msg: acked.append(msg.offset() or 0))
        producer.flush(20.0)  # a write that needs a new page fails: the log directory, the only one, is lost
        halted = not cluster.node_running(0)
    finally:
        cluster.free_disk(0)
        cluster.stop_node(0, graceful=False)
        cluster.start_node(0)
    assert halted, f"the broker went on with its only log directory failed:\n{cluster.log_tail(60)}"
    assert producer.flush(60.0) == 0
    assert sorted(acked) == list(range(1, 65)), (
        "every record acknowledged once, after the restart if not before"
    )
    consumer = cluster.consumer()
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert _read(consumer, 65, 30) == [b"before", *during]
    finally:
        consumer.close()


def _isr(cluster: KafkaCluster, topic: str) -> list[int]:
    return sorted(cluster.admin().list_topics(topic, timeout=10).topics[topic].partitions[0].isrs)


def _acked(cluster: KafkaCluster, topic: str, value: bytes) -> bool:
    """Whether an ``acks=all`` write of ``value`` is acknowledged within a few seconds."""
    errors: list[object] = []
    producer = cluster.producer(
        **{"acks": "all", "request.timeout.ms": 3000, "message.timeout.ms": 4000, "log_level": 2}
    )
    producer.produce(topic, value=value, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(10)
    producer.purge()  # nothing of it left in flight when the client is destroyed
    producer.flush(0)
    # not ``errors == [None]``: comparing a KafkaError with None raises TypeError (confluent-kafka)
    return len(errors) == 1 and errors[0] is None


def test_a_leader_cut_off_from_its_followers_refuses_writes_and_still_serves_the_reader(
    cluster_pool: ClusterPool,
) -> None:
    try:
        [trio] = cluster_pool.proxied(["chaos-trio"], nodes=3)
    except ClusterUnavailable as exc:
        pytest.skip(str(exc))
    toxiproxy = cluster_pool.toxiproxy()
    toxiproxy.reset()
    topic = trio.create_topic("harness-isolated", 1, 3, {"min.insync.replicas": "2"})
    assert wait_for(lambda: _isr(trio, topic) == [0, 1, 2], 30)
    assert _acked(trio, topic, b"before")
    leader = trio.admin().list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    toxiproxy.set_enabled(replication_proxy_name("chaos-trio", leader), False)
    try:
        # a follower that has every record is never out of sync: a write it cannot fetch makes it lag, and
        # after replica.lag.time.max.ms (10 s) the followers drop out; acks=all writes need two in the ISR
        assert not _acked(trio, topic, b"cut-off")
        assert wait_for(lambda: _isr(trio, topic) == [leader], 40, interval=0.5), _isr(trio, topic)
        assert not _acked(trio, topic, b"while-isolated")
        consumer = _proxied_consumer(trio, "harness-isolated")
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            assert b"before" in _read(consumer, 1, 30), "the job still reaches the leader"
        finally:
            consumer.close()
    finally:
        toxiproxy.reset()
    assert wait_for(lambda: _isr(trio, topic) == [0, 1, 2], 60, interval=0.5)
    assert _acked(trio, topic, b"after")
