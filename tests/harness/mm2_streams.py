"""What the MirrorMaker 2 source tests and ``benchmarks/bench_handover.py`` share: a writer that keeps
producing ``<partition>-<i>`` records to an origin topic, the stream metadata before and after a handover
(the origin and its MM2 copy, or the copy alone), and every value of a topic."""

from __future__ import annotations

import threading
from typing import Any, Self

from harness.mm2 import end_offsets, read_partition
from multicluster_source import ClusterMetadata, KafkaStream
from multicluster_source.metadata._replica import ReplicaOf

__all__ = ["Writer", "handover_streams", "values_on"]


class Writer:
    """Writes ``<p>-<i>`` records (``i`` from ``start``, 10 per partition at a time) to every partition of
    ``topic`` until stopped; ``keyed`` adds keys and an ``i`` header (what record matching compares)."""

    def __init__(
        self,
        cluster: Any,
        topic: str,
        *,
        partitions: int,
        start: int = 0,
        keyed: bool = False,
        flush_s: float = 30.0,
        pause_s: float = 0.02,
        name: str = "mm2-writer",
    ) -> None:
        self.cluster, self.topic, self.partitions, self.next = cluster, topic, partitions, start
        self.keyed, self.flush_s, self.pause_s = keyed, flush_s, pause_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        producer = self.cluster.producer(**{"linger.ms": 5, "enable.idempotence": True})
        while not self._stop.is_set():
            for p in range(self.partitions):
                for i in range(self.next, self.next + 10):
                    extra: dict[str, Any] = (
                        {"key": f"k{i % 5}".encode(), "headers": [("i", str(i).encode())]}
                        if self.keyed
                        else {}
                    )
                    producer.produce(self.topic, value=f"{p}-{i}".encode(), partition=p, **extra)
            self.next += 10
            producer.poll(self.pause_s)
        producer.flush(self.flush_s)

    def start(self) -> Self:
        """Starts writing; returns the writer."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops writing and flushes (at most ``flush_s``)."""
        self._stop.set()
        self._thread.join()


def handover_streams(pair: Any, topic: str, *, origin: bool, failover: bool = False) -> list[KafkaStream]:
    """The stream ``orders``: west's copy of east's ``topic`` (declared with ``replicaOf``), and east's
    ``topic`` itself when ``origin`` (before the handover)."""
    replica_of = ReplicaOf("east", syncs_location=pair.mm2.syncs_location, failover=failover)
    replica_topics = frozenset({pair.mm2.replica_topic(topic)})
    clusters = [ClusterMetadata("west", pair.west.bootstrap_servers, replica_topics, replica_of=replica_of)]
    if origin:
        clusters.append(ClusterMetadata("east", pair.east.bootstrap_servers, frozenset({topic})))
    return [KafkaStream("orders", {c.cluster_id: c for c in clusters})]


def values_on(cluster: Any, topic: str) -> set[bytes]:
    """Every value now in ``topic``."""
    out: set[bytes] = set()
    for p, end in end_offsets(cluster, topic).items():
        out |= {r.value or b"" for r in read_partition(cluster, topic, p, 0, end)}
    return out
