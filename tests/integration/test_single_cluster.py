"""The source on one real cluster: exact reads, bounded reads, offsets, checkpoints, commits, failures."""

from __future__ import annotations

import logging
import time

import pytest
from prometheus_client import CollectorRegistry

from harness.cluster import Cluster
from harness.scenario import builder, cluster_md, drain, keys, settle, stream
from multicluster_source import (
    ClusterMetadata,
    DeserializationError,
    OffsetsInitializer,
    RawRecord,
)

pytestmark = pytest.mark.integration


def test_reads_every_record_exactly_once(kafka_cluster: Cluster) -> None:
    topic = kafka_cluster.create_topic("once", partitions=3)
    produced = kafka_cluster.produce_n(topic, 900, partitions=3)
    source = builder([stream("s", cluster_md(kafka_cluster, topic))]).build()
    with source.open(parallelism=2) as s:
        got = drain(s, 900)
        got += settle(s, 1.0)
        assignments = s.assignments()
    assert len(got) == 900
    assert sorted(r.value for r in got) == sorted(v for _p, v in produced)
    assert all(r.cluster_id == kafka_cluster.cluster_id and r.topic == topic for r in got)
    assert sorted(sid for ids in assignments.values() for sid in ids) == [
        f"{kafka_cluster.cluster_id}/{topic}/{p}" for p in range(3)
    ]


def test_bounded_read_ends_exactly_at_stopping_offsets(kafka_cluster: Cluster) -> None:
    topic = kafka_cluster.create_topic("bounded", partitions=2)
    kafka_cluster.produce_n(topic, 100, partitions=2)
    cid = kafka_cluster.cluster_id
    source = (
        builder([stream("s", cluster_md(kafka_cluster, topic))])
        .set_bounded(OffsetsInitializer.offsets({f"{cid}/{topic}/0": 30, f"{topic}/1": 20}))
        .build()
    )
    with source.open(parallelism=2) as s:
        got = []
        deadline = time.monotonic() + 60
        for record in s:
            got.append(record)
            assert time.monotonic() < deadline
        assert s.finished
    by_partition = {p: sorted(r.offset for r in got if r.partition == p) for p in (0, 1)}
    assert by_partition == {0: list(range(30)), 1: list(range(20))}


def test_bounded_latest_reads_what_existed_then_finishes(kafka_cluster: Cluster) -> None:
    topic = kafka_cluster.create_topic("latest-bound", partitions=3)
    kafka_cluster.produce_n(topic, 60, partitions=3)
    empty = kafka_cluster.create_topic("empty", partitions=1)
    source = (
        builder([stream("s", cluster_md(kafka_cluster, topic, empty))])
        .set_bounded(OffsetsInitializer.latest())
        .build()
    )
    with source.open() as s:
        got = list(s)
    assert len(got) == 60
    assert len(keys(got)) == 60


def test_starting_offsets_latest_skips_existing_records(kafka_cluster: Cluster) -> None:
    topic = kafka_cluster.create_topic("latest", partitions=1)
    kafka_cluster.produce(topic, [b"old-1", b"old-2"])
    source = (
        builder([stream("s", cluster_md(kafka_cluster, topic))])
        .set_starting_offsets(OffsetsInitializer.latest())
        .build()
    )
    with source.open() as s:
        time.sleep(0.5)
        assert drain(s, 1, timeout=2.0) == []
        kafka_cluster.produce(topic, [b"new-1"])
        got = drain(s, 1, timeout=30)
    assert [r.value for r in got] == [b"new-1"]


def test_starting_offsets_by_timestamp(kafka_cluster: Cluster) -> None:
    topic = kafka_cluster.create_topic("ts", partitions=1)
    kafka_cluster.produce(topic, [b"before"])
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    kafka_cluster.produce(topic, [b"after-1", b"after-2"])
    source = (
        builder([stream("s", cluster_md(kafka_cluster, topic))])
        .set_starting_offsets(OffsetsInitializer.timestamp(cut))
        .build()
    )
    with source.open() as s:
        got = drain(s, 2, timeout=30)
    assert [r.value for r in got] == [b"after-1", b"after-2"]
    assert all(r.timestamp is not None and r.timestamp >= cut for r in got)


def test_checkpoint_commits_offsets_and_committed_initializer_resumes(
    kafka_cluster: Cluster, tmp_path
) -> None:
    topic = kafka_cluster.create_topic("commit", partitions=2)
    kafka_cluster.produce_n(topic, 40, partitions=2)
    group = "commit-group-" + topic
    md = [stream("s", cluster_md(kafka_cluster, topic))]
    with builder(md, group=group).build().open() as s:
        got = drain(s, 40)
        s.checkpoint()
    assert len(got) == 40
    assert kafka_cluster.committed_offsets(group, topic, 2) == {0: 20, 1: 20}

    kafka_cluster.produce_n(topic, 10, partitions=2, prefix="second")
    source = builder(md, group=group).set_starting_offsets(OffsetsInitializer.committed()).build()
    with source.open() as s:
        again = drain(s, 10)
        again += settle(s, 1.0)
    assert sorted(r.value for r in again) == sorted(f"second-{i}".encode() for i in range(10))


def test_checkpoint_restore_resumes_after_the_last_returned_record(kafka_cluster: Cluster, tmp_path) -> None:
    topic = kafka_cluster.create_topic("restore", partitions=2)
    kafka_cluster.produce_n(topic, 200, partitions=2)
    md = [stream("s", cluster_md(kafka_cluster, topic))]
    source = builder(md).set_property("reader.batch.max.records", "10").build()
    ckpt = str(tmp_path / "ckpt")
    with source.open(checkpoint_dir=ckpt) as s:
        first = drain(s, 50)  # every record poll returned so far; the checkpoint covers exactly these
        s.checkpoint()
    with builder(md).build().open(checkpoint_dir=ckpt) as s:
        rest = drain(s, 200 - len(first))
        rest += settle(s, 1.0)
    assert len(first) >= 50
    total = keys(first) + keys(rest)
    assert set(total) == {(kafka_cluster.cluster_id, topic, p, o) for p in (0, 1) for o in range(100)}
    assert all(n == 1 for n in total.values()), "a restore re-read records returned before the checkpoint"


def test_deserializer_failure_policies(kafka_cluster: Cluster) -> None:
    topic = kafka_cluster.create_topic("deser", partitions=1)
    kafka_cluster.produce(topic, [b"1", b"two", b"3"])
    md = [stream("s", cluster_md(kafka_cluster, topic))]

    def as_int(raw: RawRecord) -> int:
        assert raw.value is not None
        return int(raw.value)

    with (
        builder(md).set_deserializer(as_int).build().open() as s,
        pytest.raises(DeserializationError) as info,
    ):
        drain(s, 3, timeout=30)
    err = info.value
    assert (err.cluster_id, err.topic, err.partition, err.offset) == (kafka_cluster.cluster_id, topic, 0, 1)
    assert topic in str(err) and "offset=1" in str(err)

    registry = CollectorRegistry()
    source = builder(md).set_deserializer(as_int).set_property("deserialization-error-policy", "skip").build()
    with source.open(registry=registry) as s:
        got = drain(s, 2, timeout=30)
        got += settle(s, 0.5)
        skipped = registry.get_sample_value(
            "multicluster_source_deserialization_errors_total",
            {"cluster": kafka_cluster.cluster_id, "topic": topic},
        )
    assert [r.value for r in got] == [1, 3]
    assert skipped == 1.0


def test_records_carry_keys_headers_and_metrics_count_them(kafka_cluster: Cluster) -> None:
    topic = kafka_cluster.create_topic("fields", partitions=1)
    kafka_cluster.produce(topic, [b"v"], key=b"k", headers=[("h", b"x")])
    registry = CollectorRegistry()
    with builder([stream("s", cluster_md(kafka_cluster, topic))]).build().open(registry=registry) as s:
        (record,) = drain(s, 1)
        labels = {"cluster": kafka_cluster.cluster_id, "topic": topic}
        consumed = registry.get_sample_value("multicluster_source_records_consumed_total", labels)
        assert registry.get_sample_value("multicluster_source_active_clusters") == 1.0
    assert (record.key, record.value, record.headers) == (b"k", b"v", [("h", b"x")])
    assert record.split_id == f"{kafka_cluster.cluster_id}/{topic}/0"
    assert consumed == 1.0


def test_unreachable_cluster_at_start_logs_and_retries_without_hanging(
    kafka_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    topic = kafka_cluster.create_topic("reachable", partitions=1)
    kafka_cluster.produce(topic, [b"ok"])
    dead = ClusterMetadata(
        "dead", "127.0.0.1:1", frozenset({"t"}), {"socket.connection.setup.timeout.ms": "1000"}
    )
    md = [stream("s", cluster_md(kafka_cluster, topic), dead)]
    caplog.set_level(logging.WARNING, logger="multicluster_source")
    started = time.monotonic()
    source = builder(md).set_property("socket.timeout.ms", "2000").build()
    with source.open() as s:
        opened_in = time.monotonic() - started
        got = drain(s, 1, timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "cluster=dead" not in caplog.text:
            s.poll(timeout=0.2)
    assert opened_in < 10, "open() must not wait for an unreachable cluster"
    assert [r.value for r in got] == [b"ok"], "the reachable cluster must keep flowing"
    assert "cluster=dead: partition discovery failed" in caplog.text


def test_iteration_left_mid_batch_checkpoints_and_goes_on_after_the_last_record_returned(
    kafka_cluster: Cluster, tmp_path
) -> None:
    """``for record in stream`` takes records out of a fetched batch one by one: a checkpoint taken in the
    loop, and a ``poll`` after leaving it, start right after the last record the loop got, however many
    more the batch held."""
    topic = kafka_cluster.create_topic("iterate-ckpt", partitions=1)
    kafka_cluster.produce_n(topic, 300, partitions=1)
    md = [stream("s", cluster_md(kafka_cluster, topic))]
    ckpt = str(tmp_path / "ckpt")
    with builder(md).build().open(checkpoint_dir=ckpt) as s:
        looped = []
        for record in s:
            looped.append(record.offset)
            if len(looped) == 20:
                s.checkpoint()  # covers exactly the 20 records the loop got
                break
        after = drain(s, 10)
    assert looped == list(range(20))
    assert [r.offset for r in after][:10] == list(range(20, 30)), "records after the loop were skipped"
    with builder(md).build().open(checkpoint_dir=ckpt) as s:
        restored = drain(s, 280)
        restored += settle(s, 0.5)
    assert sorted(r.offset for r in restored) == list(range(20, 300)), "the checkpoint skipped records"
