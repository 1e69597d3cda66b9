"""What the source needs of its Kafka client, on a real broker: the behaviour that decides the lowest
``confluent-kafka`` the package allows (issue 33: ``>=2.13.2``).

The source's checkpoints are built from ``Consumer.position()`` after each batch ``consume()`` returned
(``multicluster_source.reader._batches.advance_positions``). librdkafka before 2.13.2 moved ``position()`` past
end-of-partition and error events in a batch (its issue #4844): a bounded split's position after its
end-of-partition event was one past the last record, and a restore from it skipped a record.
"""

from __future__ import annotations

import json
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from harness.cluster import Cluster, unique_name
from harness.scenario import builder, cluster_md, stream
from multicluster_source import OffsetsInitializer

pytestmark = pytest.mark.integration


def _consume_until_eof(consumer: Any, tp: TopicPartition) -> list[int]:
    offsets: list[int] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        batch = consumer.consume(100, 0.5)
        offsets += [m.offset() for m in batch if m.error() is None]
        if any(m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF for m in batch):
            return offsets
    raise AssertionError(f"no end-of-partition event for {tp}")


def test_position_after_an_end_of_partition_event_is_the_next_record(kafka_cluster: Cluster) -> None:
    topic = kafka_cluster.create_topic("eof-position", partitions=1)
    kafka_cluster.produce(topic, [f"v{i}".encode() for i in range(5)], partition=0)
    consumer = kafka_cluster.consumer(**{"group.id": unique_name("eof"), "enable.partition.eof": True})
    try:
        tp = TopicPartition(topic, 0, 0)
        consumer.assign([tp])
        assert _consume_until_eof(consumer, tp) == [0, 1, 2, 3, 4]
        [pos] = consumer.position([TopicPartition(topic, 0)])
        assert pos.offset == 5, f"confluent-kafka {version('confluent-kafka')}: position after EOF"
        kafka_cluster.produce(topic, [b"v5", b"v6"], partition=0)
        assert _consume_until_eof(consumer, tp) == [5, 6]
        [pos] = consumer.position([TopicPartition(topic, 0)])
        assert pos.offset == 7
    finally:
        consumer.close()


def test_a_bounded_source_checkpoints_the_next_offset_after_its_last_record(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    """The same as the user sees it: a bounded source reads a topic to its end (its batches end with
    end-of-partition events); its checkpoint holds, per split, the offset after the last record, so a
    restore skips nothing."""
    topic = kafka_cluster.create_topic("eof-checkpoint", partitions=2)
    kafka_cluster.produce_n(topic, 40, partitions=2, prefix="a")
    md = [stream("s", cluster_md(kafka_cluster, topic))]
    ckpt = tmp_path / "ckpt"
    source = builder(md).set_bounded(OffsetsInitializer.latest()).build()
    with source.open(checkpoint_dir=str(ckpt)) as s:
        got = list(s)
        s.checkpoint()
    assert len(got) == 40
    newest = sorted(ckpt.glob("chk-*.json"))[-1]
    positions = json.loads(newest.read_text())["positions"]
    cid = kafka_cluster.cluster_id
    assert positions == {f"{cid}/{topic}/0": 20, f"{cid}/{topic}/1": 20}
