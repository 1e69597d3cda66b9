"""The zero-copy batch path on real Kafka: every message once, the client's own objects, checkpoints that
cover exactly what was returned, bounded ends, mixing with records, and the batch handler of the push API."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message

from harness.cluster import Cluster
from harness.scenario import builder, cluster_md, drain, settle, stream
from multicluster_source import MessageBatch, OffsetsInitializer, RawRecord, RunControl
from multicluster_source.framework._checkpoint import CheckpointStore

pytestmark = pytest.mark.integration


def _drain_batches(
    s: Any, count: int, timeout: float = 60.0, max_records: int = 10_000
) -> list[MessageBatch]:
    got: list[MessageBatch] = []
    deadline = time.monotonic() + timeout
    while sum(len(b) for b in got) < count and time.monotonic() < deadline:
        got.extend(s.poll_batches(timeout=0.2, max_records=max_records))
    return got


def test_batches_carry_every_message_of_two_clusters_once(kafka_clusters: Any) -> None:
    east, west = kafka_clusters(2)
    te = east.create_topic("batches", partitions=3)
    tw = west.create_topic("batches", partitions=2)
    sent_e = east.produce_n(te, 600, partitions=3, prefix="e")
    sent_w = west.produce_n(tw, 400, partitions=2, prefix="w")
    source = builder([stream("s", cluster_md(east, te), cluster_md(west, tw))]).build()
    with source.open(parallelism=2) as s:
        batches = _drain_batches(s, 1000)
        extra = settle(s, 1.0)
    assert extra == []
    assert all(isinstance(b, MessageBatch) and len(b) == len(b.messages) > 0 for b in batches)
    assert all(type(m) is Message and m.error() is None for b in batches for m in b.messages)
    by_cluster: dict[str, Counter[bytes]] = {east.cluster_id: Counter(), west.cluster_id: Counter()}
    for b in batches:
        for m in b.messages:
            assert m.topic() == (te if b.cluster_id == east.cluster_id else tw)
            by_cluster[b.cluster_id][m.value()] += 1
    assert by_cluster[east.cluster_id] == Counter(v for _p, v in sent_e)
    assert by_cluster[west.cluster_id] == Counter(v for _p, v in sent_w)


def test_a_checkpoint_covers_exactly_the_batches_returned(kafka_cluster: Cluster, tmp_path: Path) -> None:
    topic = kafka_cluster.create_topic("batch-ckpt", partitions=2)
    kafka_cluster.produce_n(topic, 400, partitions=2)
    ckpt = tmp_path / "ckpt"
    source = builder([stream("s", cluster_md(kafka_cluster, topic))]).build()
    with source.open(checkpoint_dir=str(ckpt)) as s:
        first = _drain_batches(s, 150, max_records=150)
        s.checkpoint()
    returned = [m for b in first for m in b.messages]
    assert len(returned) == 150  # max_records cuts a batch: the rest stays for the next call
    latest = CheckpointStore(str(ckpt)).latest()
    assert latest is not None
    cid = kafka_cluster.cluster_id
    ends = {
        p: max(m.offset() for m in returned if m.partition() == p) + 1
        for p in {m.partition() for m in returned}
    }
    assert {sid: pos for sid, pos in latest.positions.items()} == {
        f"{cid}/{topic}/{p}": e for p, e in ends.items()
    }
    with source.open(checkpoint_dir=str(ckpt)) as s:
        rest = drain(s, 250)
        rest += settle(s, 1.0)
    again = {(r.partition, r.offset) for r in rest}
    assert len(rest) == 250 and not again & {(m.partition(), m.offset()) for m in returned}


def test_batches_stop_at_bounded_ends_and_mix_with_records(kafka_cluster: Cluster) -> None:
    topic = kafka_cluster.create_topic("batch-bounded", partitions=2)
    kafka_cluster.produce_n(topic, 200, partitions=2)
    cid = kafka_cluster.cluster_id
    source = (
        builder([stream("s", cluster_md(kafka_cluster, topic))])
        .set_bounded(OffsetsInitializer.offsets({f"{cid}/{topic}/0": 37, f"{cid}/{topic}/1": 64}))
        .set_property("reader.batch.max.records", "25")
        .build()
    )
    offsets: dict[int, list[int]] = {0: [], 1: []}
    with source.open() as s:
        deadline = time.monotonic() + 60
        turn = 0
        while not s.finished and time.monotonic() < deadline:
            turn += 1
            if turn % 2:
                for b in s.poll_batches(timeout=0.2, max_records=10):
                    for m in b.messages:
                        offsets[m.partition()].append(m.offset())
            else:
                for r in s.poll(timeout=0.2, max_records=10):
                    offsets[r.partition].append(r.offset)
        assert s.finished
    assert offsets == {0: list(range(37)), 1: list(range(64))}


def _upper(raw: RawRecord) -> str:
    assert raw.value is not None
    return raw.value.decode().upper()


def test_a_deserializer_applies_to_records_and_never_to_batches(kafka_cluster: Cluster) -> None:
    topic = kafka_cluster.create_topic("batch-deser", partitions=1)
    kafka_cluster.produce(topic, [b"a", b"b", b"c", b"d"])
    source = builder([stream("s", cluster_md(kafka_cluster, topic))]).set_deserializer(_upper).build()
    with source.open() as s:
        batches = _drain_batches(s, 2, max_records=2)
        records = drain(s, 2)
    assert [m.value() for b in batches for m in b.messages] == [b"a", b"b"]
    assert [r.value for r in records] == ["C", "D"]


class _Collect:
    """A batch handler: counts the messages it got (threads runtime: shared with the test)."""

    def __init__(self) -> None:
        self.values: Counter[bytes] = Counter()
        self.types: set[type] = set()

    def __call__(self, batch: MessageBatch) -> None:
        self.types.add(type(batch))
        for m in batch.messages:
            self.values[m.value()] += 1


def test_the_push_api_hands_batches_to_a_batch_handler(kafka_cluster: Cluster, tmp_path: Path) -> None:
    topic = kafka_cluster.create_topic("push-batches", partitions=3)
    sent = kafka_cluster.produce_n(topic, 300, partitions=3)
    source = (
        builder([stream("s", cluster_md(kafka_cluster, topic))])
        .set_bounded(OffsetsInitializer.latest())
        .build()
    )
    handler = _Collect()
    result = source.run(handler, 2, checkpoint_dir=str(tmp_path / "ckpt"), control=RunControl(), batches=True)
    assert result.finished and result.records == 300
    assert handler.types == {MessageBatch}
    assert handler.values == Counter(v for _p, v in sent)
    latest = CheckpointStore(str(tmp_path / "ckpt")).latest()
    assert latest is not None and sum(latest.positions.values()) == 300
