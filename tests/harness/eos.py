"""Checking the output of an exactly-once job as a user would: a ``read_committed`` consumer to the end."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from harness.cluster import Cluster


def read_output(cluster: Cluster, topic: str, *, committed: bool = True, idle_s: float = 3.0) -> list[bytes]:
    """Every value of ``topic`` a ``read_committed`` (or ``read_uncommitted``) consumer sees, to its end."""
    consumer = Consumer(
        cluster.client_config(
            **{
                "group.id": f"check-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed" if committed else "read_uncommitted",
                "enable.auto.commit": "false",
                "enable.partition.eof": "true",
            }
        )
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        pending = set(meta.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
        out: list[bytes] = []
        deadline = time.monotonic() + 60
        quiet_until = time.monotonic() + idle_s
        while (pending or time.monotonic() < quiet_until) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.2):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                    continue
                out.append(msg.value() or b"")
        assert not pending, f"{topic}: partitions {pending} not read to their end"
        for p in meta.partitions:  # read_committed stops at the last stable offset: an open transaction
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            [at] = consumer.position([TopicPartition(topic, p)])
            reached = at.offset if at.offset >= 0 else low  # nothing fetched: an empty partition
            assert reached == high, f"{topic}[{p}]: a transaction is left open ({reached} < {high})"
        return out
    finally:
        consumer.close()


class EchoResults:
    """A push handler for ``run(..., sink=...)``: one result ``out:<value>`` to ``topic`` per record, after
    ``delay_s`` a call (a module-level class: it goes to worker processes)."""

    def __init__(self, topic: str, delay_s: float = 0.0) -> None:
        self.topic = topic
        self.delay_s = delay_s

    def __call__(self, records: list[Any]) -> list[tuple[str, bytes]]:
        if self.delay_s:
            time.sleep(self.delay_s)
        return [(self.topic, b"out:" + (r.value or b"")) for r in records]
