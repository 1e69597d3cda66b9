"""KafkaTopicMetadataService and its writer on real Apache Kafka: atomic commits, the seed's inconsistency
scenarios, fencing, restarts, topic validation, and the command-line writer."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

from harness.cluster import Cluster, unique_name
from harness.processes import free_port
from harness.scenario import builder, cluster_md, drain, keys, settle, stream, wait_for
from multicluster_source import KafkaStream, MetadataError
from multicluster_source.metadata import KafkaTopicMetadataService, NotifyingMetadataService
from multicluster_source.metadata.topic._topic_client import MetadataTopicMissingError
from multicluster_source.metadata.topic._topic_records import (
    ClusterDefinition,
    StreamCommit,
    StreamPart,
    cluster_key,
    commit_key,
    encode_value,
    part_key,
)
from multicluster_source.metadata.topic._topic_writer import (
    KafkaTopicMetadataWriter,
    MetadataWriterFencedError,
)
from multicluster_source.testing import write_metadata_file

pytestmark = pytest.mark.integration

EAST = ClusterDefinition("east", "east.invalid:9092")
WEST = ClusterDefinition("west", "west.invalid:9092")


def meta_topic(cluster: Cluster) -> str:
    return cluster.create_topic("meta", partitions=1, config={"cleanup.policy": "compact"})


def produce_raw(cluster: Cluster, topic: str, records: list[tuple[str, bytes | None]]) -> int:
    """Write records as they are (no transaction), in order; returns the offset after the last one."""
    offsets: list[int] = []
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset() or 0)

    producer = cluster.producer(**{"enable.idempotence": True})
    for key, value in records:
        producer.produce(topic, key=key.encode(), value=value, partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0
    producer.close()
    assert not errors, errors
    return max(offsets) + 1


def cluster_rec(d: ClusterDefinition) -> tuple[str, bytes]:
    return cluster_key(d.cluster_id), encode_value(d)


def part_rec(sid: str, i: int, d: ClusterDefinition, *topics: str) -> tuple[str, bytes]:
    return part_key(sid, i), encode_value(StreamPart(d.cluster_id, frozenset(topics)))


def commit_rec(sid: str, n: int) -> tuple[str, bytes]:
    return commit_key(sid), encode_value(StreamCommit(n))


def kstream(sid: str, *parts: tuple[ClusterDefinition, tuple[str, ...]]) -> KafkaStream:
    return KafkaStream(sid, {d.cluster_id: d.with_topics(t) for d, t in parts})


class Listener:
    """Counts notifications and records the streams the service shows at each."""

    def __init__(self, service: KafkaTopicMetadataService) -> None:
        self.service = service
        self.calls = 0
        self.seen: list[dict[str, KafkaStream]] = []
        self.lock = threading.Lock()

    def __call__(self) -> None:
        snap = self.service.snapshot()
        with self.lock:
            self.calls += 1
            self.seen.append(dict(snap.streams))


def reader_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("metadata-topic[")]


@pytest.fixture
def services() -> Iterator[list[KafkaTopicMetadataService]]:
    """Services a test creates; all closed after it, then no reader thread may be left."""
    made: list[KafkaTopicMetadataService] = []
    yield made
    for service in made:
        service.close()
    assert wait_for(lambda: not reader_threads(), 10), reader_threads()


def service_for(
    made: list[KafkaTopicMetadataService], cluster: Cluster, topic: str, **kwargs: object
) -> KafkaTopicMetadataService:
    service = KafkaTopicMetadataService(cluster.bootstrap_servers, topic, **kwargs)  # type: ignore[arg-type]
    made.append(service)
    return service


# ----------------------------------------------------------------------------------------------- source


def test_running_source_applies_a_multi_cluster_migration_atomically(kafka_clusters, services) -> None:
    east, west = kafka_clusters(2)
    topic = unique_name("meta")  # created by the service
    service = service_for(services, east, topic)
    assert isinstance(service, NotifyingMetadataService)
    t_east = east.create_topic("mig", partitions=2)
    t_west = west.create_topic("mig", partitions=2)
    v1 = stream("orders", cluster_md(east, t_east))
    with KafkaTopicMetadataWriter(
        east.bootstrap_servers, topic, transactional_id=unique_name("tx")
    ) as writer:
        first = writer.publish({v1}, current=service.snapshot())
        assert first.streams_written == ("orders",) and first.clusters_written == ("east",)
        service.wait_for_offset(first.next_offset or 0)
        east.produce_n(t_east, 20, partitions=2, prefix="e1")
        listener = Listener(service)
        unsubscribe = service.subscribe(listener)
        with builder(service, stream_ids=["orders"]).build().open(parallelism=2) as s:
            got = drain(s, 20)
            # Phase 2, written record by record: the west cluster, then both parts, then (later) the commit.
            end = produce_raw(east, topic, [cluster_rec(ClusterDefinition.of(cluster_md(west, t_west)))])
            service.wait_for_offset(end)
            calls = listener.calls
            west.produce_n(t_west, 10, partitions=2, prefix="w1")
            end = produce_raw(
                east,
                topic,
                [
                    part_rec("orders", 0, ClusterDefinition.of(cluster_md(east)), t_east),
                    part_rec("orders", 1, ClusterDefinition.of(cluster_md(west)), t_west),
                ],
            )
            assert service.wait_for_offset(end).streams["orders"] == v1
            got += settle(s, 2.0)
            assert not any(r.cluster_id == west.cluster_id for r in got), "parts applied before the commit"
            assert listener.calls == calls, "buffered parts notified listeners"
            assert service.inconsistent_streams() == set()
            end = produce_raw(east, topic, [commit_rec("orders", 2)])
            v2 = stream("orders", cluster_md(east, t_east), cluster_md(west, t_west))
            assert service.wait_for_offset(end).streams["orders"] == v2
            got += drain(
                s, 0, timeout=30, until=lambda g: sum(r.cluster_id == west.cluster_id for r in g) >= 10
            )
            # Phase 3 through the transactional writer: west only.
            v3 = stream("orders", cluster_md(west, t_west))
            third = writer.publish({v3}, current=service.snapshot())
            assert third.streams_written == ("orders",) and third.clusters_deleted == ("east",)
            assert service.wait_for_offset(third.next_offset or 0).streams == {"orders": v3}
            assert wait_for(
                lambda: not any(t_east in sid for ids in s.assignments().values() for sid in ids), 15
            )
            got += settle(s, 2.0)  # the readers close east's fetchers a moment after dropping its splits
            east.produce_n(t_east, 5, partitions=2, prefix="late-east")
            west.produce_n(t_west, 6, partitions=2, prefix="w2")
            got += drain(s, 0, timeout=30, until=lambda g: sum(r.value.startswith(b"w2") for r in g) >= 6)
            got += settle(s, 1.0)
        unsubscribe()
    values = Counter(r.value for r in got)
    assert len(keys(got)) == len(got) == 36, "a record was lost or read twice"
    assert not any(v.startswith(b"late-east") for v in values)
    assert sorted(values) == sorted(
        [f"e1-{i}".encode() for i in range(20)]
        + [f"w1-{i}".encode() for i in range(10)]
        + [f"w2-{i}".encode() for i in range(6)]
    )
    # listeners saw every committed version and never a half-applied one
    assert all(snap.get("orders") in (v1, v2, v3) for snap in listener.seen)
    assert {v2, v3} <= {snap["orders"] for snap in listener.seen if "orders" in snap}


# ----------------------------------------------------------------------------------------------- the seed


def test_seed_example_1_compacted_log_is_inconsistent_until_the_next_commit(kafka_cluster, services) -> None:
    topic = meta_topic(kafka_cluster)
    # write 1: parts 0, 1 + commit(2); write 2: part 0 + commit(1). Compaction dropped write 1's part 0.
    produce_raw(
        kafka_cluster,
        topic,
        [cluster_rec(EAST), cluster_rec(WEST), part_rec("foo", 1, WEST, "b"), commit_rec("foo", 2)],
    )
    service = service_for(services, kafka_cluster, topic)
    listener = Listener(service)
    service.subscribe(listener)
    assert service.inconsistent_streams() == {"foo"}
    assert service.get_all_streams() == set()
    assert wait_for(lambda: listener.calls >= 1, 10), "no notification at the catch-up"
    end = produce_raw(kafka_cluster, topic, [part_rec("foo", 0, EAST, "c"), commit_rec("foo", 1)])
    snap = service.wait_for_offset(end)
    assert snap.streams == {"foo": kstream("foo", (EAST, ("c",)))}
    assert snap.inconsistent == frozenset()
    assert service.inconsistent_streams() == set()
    assert wait_for(lambda: bool(listener.seen) and listener.seen[-1] == snap.streams, 10)


def test_seed_example_2_dead_writer_and_compaction_resolved_by_a_complete_write(
    kafka_cluster, services
) -> None:
    topic = meta_topic(kafka_cluster)
    # write 1: parts 0, 1 + commit(2); write 2 died after its part 0; compaction dropped write 1's part 0.
    produce_raw(
        kafka_cluster,
        topic,
        [
            cluster_rec(EAST),
            cluster_rec(WEST),
            part_rec("foo", 1, WEST, "b"),
            commit_rec("foo", 2),
            part_rec("foo", 0, EAST, "c"),
        ],
    )
    service = service_for(services, kafka_cluster, topic)
    snap = service.snapshot()
    assert snap.inconsistent == {"foo"} and snap.streams == {}
    assert service.describe_streams(["foo"]) == {}
    assert not service.is_cluster_active("east")
    wanted = kstream("foo", (EAST, ("d",)), (WEST, ("e",)))
    with KafkaTopicMetadataWriter(kafka_cluster.bootstrap_servers, topic) as writer:
        summary = writer.publish({wanted}, current=snap)
    assert summary.streams_written == ("foo",) and summary.clusters_written == ()
    assert summary.records == 3
    snap = service.wait_for_offset(summary.next_offset or 0)
    assert snap.streams == {"foo": wanted} and snap.inconsistent == frozenset()
    assert service.is_cluster_active("west")


def test_writer_that_died_mid_transaction_is_never_seen(kafka_cluster, services) -> None:
    topic = meta_topic(kafka_cluster)
    tid = unique_name("tx")
    v1 = kstream("foo", (EAST, ("a",)), (WEST, ("b",)))
    running = service_for(services, kafka_cluster, topic)
    with KafkaTopicMetadataWriter(kafka_cluster.bootstrap_servers, topic, transactional_id=tid) as writer:
        summary = writer.publish({v1}, current=running.snapshot())
    running.wait_for_offset(summary.next_offset or 0)
    listener = Listener(running)
    running.subscribe(listener)
    # The writer process starts write 2 and dies after the parts: its transaction stays open.
    dead = Producer(kafka_cluster.client_config(**{"transactional.id": tid}))
    dead.init_transactions(30)
    dead.begin_transaction()
    for key, value in [part_rec("foo", 0, EAST, "x"), part_rec("foo", 1, WEST, "y")]:
        dead.produce(topic, key=key.encode(), value=value, partition=0)
    assert dead.flush(30) == 0
    settle_until = time.monotonic() + 1.5
    while time.monotonic() < settle_until:
        assert running.snapshot().streams == {"foo": v1}
        time.sleep(0.1)
    # A reader started now catches up at once: it reads to the last stable offset, not past the open txn.
    started = time.monotonic()
    late = service_for(services, kafka_cluster, topic, catch_up_timeout=20.0)
    assert late.snapshot().streams == {"foo": v1}
    assert time.monotonic() - started < 15
    # The next writer with the same id fences the dead one and aborts its transaction; write 3 is complete.
    v3 = kstream("foo", (EAST, ("z",)))
    with KafkaTopicMetadataWriter(kafka_cluster.bootstrap_servers, topic, transactional_id=tid) as writer:
        summary = writer.publish({v3}, current=late.snapshot())
    assert summary.streams_written == ("foo",) and summary.clusters_deleted == ("west",)
    for service in (running, late):
        snap = service.wait_for_offset(summary.next_offset or 0)
        assert snap.streams == {"foo": v3} and snap.inconsistent == frozenset()
    assert all(s.get("foo") in (v1, v3) for s in listener.seen), "an aborted write was applied"
    with warnings.catch_warnings(), contextlib.suppress(KafkaException):
        warnings.simplefilter("ignore", RuntimeWarning)  # the fenced producer cannot abort on close
        dead.flush(0)
        dead.close()


# ----------------------------------------------------------------------------------------------- writers


def test_a_second_writer_fences_the_first(kafka_cluster, services) -> None:
    topic = meta_topic(kafka_cluster)
    tid = unique_name("tx")
    service = service_for(services, kafka_cluster, topic)
    first = KafkaTopicMetadataWriter(kafka_cluster.bootstrap_servers, topic, transactional_id=tid)
    try:
        v1 = kstream("s", (EAST, ("a",)))
        service.wait_for_offset(first.publish({v1}, current=service.snapshot()).next_offset or 0)
        second = KafkaTopicMetadataWriter(kafka_cluster.bootstrap_servers, topic, transactional_id=tid)
        try:
            v2 = kstream("s", (EAST, ("b",)))
            with pytest.raises(MetadataWriterFencedError, match=f"{tid}.*fenced"):
                first.publish({v2}, current=service.snapshot())
            with pytest.raises(MetadataWriterFencedError):
                first.publish({v2}, current=service.snapshot())
            summary = second.publish({v2}, current=service.snapshot())
            assert service.wait_for_offset(summary.next_offset or 0).streams == {"s": v2}
        finally:
            second.close()
    finally:
        first.close()
    # an unchanged publish writes nothing
    with KafkaTopicMetadataWriter(kafka_cluster.bootstrap_servers, topic, transactional_id=tid) as third:
        assert not third.publish({kstream("s", (EAST, ("b",)))}, current=service.snapshot()).changed


# ----------------------------------------------------------------------------------------------- restarts


def test_restarted_service_catches_up_to_the_same_snapshot(kafka_cluster, services) -> None:
    topic = meta_topic(kafka_cluster)
    first = service_for(services, kafka_cluster, topic)
    with KafkaTopicMetadataWriter(kafka_cluster.bootstrap_servers, topic) as writer:
        for version in range(4):
            streams = {kstream(f"s{i}", (EAST, (f"t{version}",))) for i in range(version, version + 3)}
            summary = writer.publish(streams, current=first.snapshot())
            first.wait_for_offset(summary.next_offset or 0)
        # leave an inconsistent stream behind too
        end = produce_raw(kafka_cluster, topic, [part_rec("broken", 1, EAST, "t"), commit_rec("broken", 2)])
        before = first.wait_for_offset(end)
        assert before.inconsistent == {"broken"}
        first.close()
        assert wait_for(lambda: not reader_threads(), 10)
        second = service_for(services, kafka_cluster, topic)
        assert second.snapshot() == before
        assert second.inconsistent_streams() == {"broken"}
        second.close()
        # written while no reader runs: a new reader catches up with it
        latest = {kstream("only", (WEST, ("w",)))}
        summary = writer.publish(latest, current=before)
    third = service_for(services, kafka_cluster, topic)
    snap = third.snapshot()
    assert snap.offset >= (summary.next_offset or 0)
    assert snap.stream_set() == latest and snap.inconsistent == frozenset()
    assert set(snap.clusters) == {"west"}


# ----------------------------------------------------------------------------------------------- validation


def test_topic_must_have_one_partition_and_compaction(kafka_cluster, services) -> None:
    two = kafka_cluster.create_topic("meta2p", partitions=2, config={"cleanup.policy": "compact"})
    with pytest.raises(MetadataError, match=f"{two}.*2 partitions"):
        service_for(services, kafka_cluster, two).get_all_streams()
    for policy in ("delete", "compact,delete"):
        topic = kafka_cluster.create_topic("metadel", partitions=1, config={"cleanup.policy": policy})
        with pytest.raises(MetadataError, match=f"{topic}.*cleanup.policy"):
            service_for(services, kafka_cluster, topic).get_all_streams()
    absent = unique_name("absent")
    with pytest.raises(MetadataTopicMissingError, match=absent):
        service_for(services, kafka_cluster, absent, create_topic=False).get_all_streams()
    # created the right way when allowed
    service = service_for(services, kafka_cluster, absent)
    assert service.get_all_streams() == set()
    md = kafka_cluster.admin().list_topics(timeout=10)
    assert len(md.topics[absent].partitions) == 1
    resource = ConfigResource(ResourceType.TOPIC, absent)
    configs = next(iter(kafka_cluster.admin().describe_configs([resource]).values())).result(15)
    assert configs["cleanup.policy"].value == "compact"


def test_catch_up_timeout_names_topic_and_servers(kafka_cluster, services, monkeypatch) -> None:
    topic = meta_topic(kafka_cluster)
    # the end offset cannot be read: the catch-up never completes
    monkeypatch.setattr(KafkaTopicMetadataService, "_end_offset", lambda self, consumer, partition: None)
    service = service_for(services, kafka_cluster, topic, catch_up_timeout=1.5)
    started = time.monotonic()
    with pytest.raises(MetadataError) as info:
        service.get_all_streams()
    assert 1.0 < time.monotonic() - started < 10
    assert topic in str(info.value) and kafka_cluster.bootstrap_servers in str(info.value)
    assert "catch up" in str(info.value)
    # later reads fail at once
    started = time.monotonic()
    with pytest.raises(MetadataError):
        service.snapshot()
    assert time.monotonic() - started < 1.0


def test_unreachable_cluster_is_a_metadata_error_naming_topic_and_servers(services) -> None:
    servers = f"127.0.0.1:{free_port()}"
    service = KafkaTopicMetadataService(servers, "meta", catch_up_timeout=2.0)
    services.append(service)
    with pytest.raises(MetadataError) as info:
        service.get_all_streams()
    assert "'meta'" in str(info.value) and servers in str(info.value)


# ----------------------------------------------------------------------------------------------- the tool


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "multicluster_source.tools.publish_metadata", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_command_line_writer_end_to_end(kafka_clusters, services, tmp_path: Path) -> None:
    east, west = kafka_clusters(2)
    topic = unique_name("meta")
    base = ["--bootstrap-servers", east.bootstrap_servers, "--topic", topic]
    path = tmp_path / "streams.yaml"
    orders = stream("orders", cluster_md(east, "o1"), cluster_md(west, "o2", **{"sasl.password": "hunter2"}))
    payments = stream("payments", cluster_md(east, "p1"))
    write_metadata_file(path, [orders, payments])

    result = run_tool(*base, "--file", str(path))
    assert result.returncode == 0, result.stderr
    assert "stream orders: 2 part(s)" in result.stdout and "stream payments: 1 part(s)" in result.stdout
    assert "published 7 record(s)" in result.stdout and "verified" in result.stdout
    assert "hunter2" not in result.stdout + result.stderr

    service = service_for(services, east, topic)
    assert service.get_all_streams() == {orders, payments}

    result = run_tool(*base, "--file", str(path))
    assert result.returncode == 0, result.stderr
    assert "nothing to write" in result.stdout

    moved = stream("orders", cluster_md(west, "o2", **{"sasl.password": "hunter2"}))
    write_metadata_file(path, [moved])
    offset = service.snapshot().offset
    result = run_tool(*base, "--file", str(path), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "would write" in result.stdout
    assert "stream payments: deleted" in result.stdout and "cluster east: deleted" in result.stdout
    settle_until = time.monotonic() + 1.0
    while time.monotonic() < settle_until:
        assert service.snapshot().offset == offset, "a dry run wrote"
        time.sleep(0.1)

    result = run_tool(*base, "--file", str(path), "--transactional-id", unique_name("tx"))
    assert result.returncode == 0, result.stderr
    assert wait_for(lambda: service.get_all_streams() == {moved}, 15)

    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "- streamId: x\n  clusterMetadataList:\n    - clusterId: 'no/slash'\n      bootstrapServers: h:1\n"
    )
    result = run_tool(*base, "--file", str(bad))
    assert result.returncode == 2
    assert str(bad) in result.stderr and "line 3" in result.stderr

    result = run_tool(*base, "--file", str(tmp_path / "missing.yaml"))
    assert result.returncode == 2 and "missing.yaml" in result.stderr

    two = east.create_topic("meta2p", partitions=2, config={"cleanup.policy": "compact"})
    result = run_tool("--bootstrap-servers", east.bootstrap_servers, "--topic", two, "--file", str(path))
    assert result.returncode == 1
    assert "2 partitions" in result.stderr

    result = run_tool("--topic", topic, "--file", str(path))
    assert result.returncode == 2
