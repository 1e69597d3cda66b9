"""Replica handovers in the chaos soak (:mod:`harness.chaos`): MirrorMaker 2 copies the first cluster's
``chaos-a`` to the second cluster for the whole soak, the metadata declares the copy there (``replicaOf``,
offsets ``mirrormaker2``, offset syncs on the target), and a ``replica-handover`` fault removes the origin
topic from the metadata: the job hands each partition over to the copy at the translated position; the heal
puts the origin back, which takes over again from its retained position.

MirrorMaker talks to the brokers directly (not through Toxiproxy), so link faults spare it; broker faults on
either cluster hit it as they hit any client. It is started again at a heal if it died. The copy's records
are matched to their origin records by value (:class:`ValueIndex`), for the recovery times and for the audit
(:mod:`harness.audit_copies`).
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Generator, Sequence

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from harness.audit_copies import PartitionKey
from harness.cluster import Cluster
from harness.kafka import KafkaCluster
from harness.mm2 import MirrorMaker2
from multicluster_source.metadata import ReplicaOf

COPIED_TOPIC = "chaos-a"
"""The logical topic whose copy the handovers move to."""


class ValueIndex:
    """The acknowledged records of one cluster by value (the soak's values are unique): value -> (partition,
    offset). Threads: the producer's delivery callbacks add, the soak's thread looks up."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_value: dict[bytes, tuple[PartitionKey, int]] = {}

    def add(self, value: bytes, key: PartitionKey, offset: int) -> None:
        """Note an acknowledged record."""
        with self._lock:
            self._by_value[value] = (key, offset)

    def lookup(self, value: bytes) -> tuple[PartitionKey, int] | None:
        """The acknowledged record with ``value``, if its acknowledgement came."""
        with self._lock:
            return self._by_value.get(value)


class CopyLink:
    """MirrorMaker 2 from ``origin`` to ``replica`` copying ``topic`` (the origin's actual ``chaos-a``, of
    ``partitions`` partitions); ``say`` gets a line when it is (re)started."""

    def __init__(
        self,
        origin: KafkaCluster,
        replica: KafkaCluster,
        topic: str,
        partitions: int,
        say: Callable[[str], None],
    ) -> None:
        self.origin, self.replica = origin, replica
        self.topic, self.partitions = topic, partitions
        self._say = say
        flow = f"{origin.cluster_id}->{replica.cluster_id}"
        self._mm2 = MirrorMaker2(
            origin, replica, syncs_location="target", overrides={f"{flow}.topics": re.escape(topic)}
        )
        self.restarts = 0

    @property
    def copy_topic(self) -> str:
        """The copy's name on the replica (MM2's default replication policy)."""
        return self._mm2.replica_topic(self.topic)

    @property
    def copies(self) -> dict[PartitionKey, PartitionKey]:
        """Copied partition -> its origin partition."""
        return {
            (self.replica.cluster_id, self.copy_topic, p): (self.origin.cluster_id, self.topic, p)
            for p in range(self.partitions)
        }

    def replica_of(self) -> ReplicaOf:
        """The declaration on the replica cluster."""
        return ReplicaOf(self.origin.cluster_id, "mirrormaker2", syncs_location="target")

    def start(self) -> None:
        """Start MirrorMaker and wait until the copy exists and holds what the origin holds."""
        self._mm2.start()
        self._mm2.wait_caught_up(self.topic, timeout=120.0)
        self._say(
            f"[chaos] MirrorMaker 2 copies {self.origin.cluster_id}/{self.topic} to {self.replica.cluster_id}/{self.copy_topic}"
        )

    def copied_twice(self, timeout: float = 60.0) -> dict[PartitionKey, set[bytes]]:
        """Copied partition -> the values it holds at more than one offset (MirrorMaker copies at least
        once: after its target restarted, say, it may copy records again), read from the replica's log
        directly (not through a proxy) from the start to the end."""
        seen: dict[int, Counter[bytes]] = {p: Counter() for p in range(self.partitions)}
        for partition, _offset, value in log_values(
            self.replica, self.copy_topic, range(self.partitions), timeout
        ):
            seen[partition][value] += 1
        return {
            (self.replica.cluster_id, self.copy_topic, p): {v for v, n in values.items() if n > 1}
            for p, values in seen.items()
        }

    def keep_running(self) -> None:
        """Start MirrorMaker again if it died (its log says why)."""
        if not self._mm2.running:
            self.restarts += 1
            self._say(f"[chaos] MirrorMaker 2 had stopped, started again:\n{self._mm2.log_tail(20)}")
            self._mm2.keep_logs = True
            self._mm2.start()

    def close(self) -> None:
        """Stop MirrorMaker and remove its files (kept if it died meanwhile)."""
        self._mm2.close()


def log_consumer(cluster: Cluster) -> Consumer:
    """A plain consumer of ``cluster``'s brokers for reading logs back: no group commits, straight to the
    brokers (not through a proxy), end-of-partition events on, and from what is left of the log when asked
    below its start. The caller closes it."""
    return cluster.consumer(**{"enable.auto.commit": False, "enable.partition.eof": True, "log_level": 2})


def log_values(
    cluster: Cluster, topic: str, partitions: Sequence[int], timeout: float
) -> Generator[tuple[int, int, bytes]]:
    """``(partition, offset, value)`` of each record of ``topic``'s ``partitions`` on ``cluster``, from the
    start of each to its end (or for ``timeout`` seconds); closing the iterator early closes its consumer."""
    consumer = log_consumer(cluster)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        ended: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(ended) < len(partitions) and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                error, partition, offset = msg.error(), msg.partition(), msg.offset()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF and partition is not None:
                        ended.add(partition)
                elif partition is not None and offset is not None:
                    yield partition, offset, msg.value() or b""
    finally:
        consumer.close()
