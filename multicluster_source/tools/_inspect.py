"""What the command line reads from the clusters of a stream: partitions, end offsets, a group's committed
offsets and lag (``describe``), and where a read would start (the size of a bounded ``consume``).

One short-lived consumer per cluster, assigned nothing and closed at once; nothing is committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from multicluster_source.framework._clientconf import cluster_client_config
from multicluster_source.metadata._model import ClusterMetadata, KafkaStream

__all__ = ["PartitionOffsets", "clusters_of", "read_offsets", "start_offsets"]

_PROBE_GROUP = "multicluster-source-cli"


@dataclass(frozen=True)
class PartitionOffsets:
    """Offsets of one partition: first and end offset (high watermark), the group's committed offset (None:
    no group given or nothing committed)."""

    cluster_id: str
    topic: str
    partition: int
    start: int
    end: int
    committed: int | None

    @property
    def lag(self) -> int | None:
        """Records after the committed offset (None without one)."""
        if self.committed is None:
            return None
        return max(0, self.end - max(self.committed, self.start))

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "partition": self.partition,
            "start": self.start,
            "end": self.end,
            "committed": self.committed,
            "lag": self.lag,
        }


def clusters_of(streams: Iterable[KafkaStream]) -> dict[str, ClusterMetadata]:
    """Cluster id -> the cluster with the topics of every given stream on it."""
    out: dict[str, ClusterMetadata] = {}
    for stream in streams:
        for cid, cluster in stream.clusters.items():
            seen = out.get(cid)
            topics = cluster.topics | (seen.topics if seen else frozenset())
            out[cid] = ClusterMetadata(cid, cluster.bootstrap_servers, topics, cluster.properties)
    return out


def _consumer(cluster: ClusterMetadata, properties: Mapping[str, str], group: str | None) -> Any:
    conf: dict[str, Any] = cluster_client_config(
        cluster,
        properties,
        client_id="multicluster-source-cli",
        extra={"group.id": group or _PROBE_GROUP, "enable.auto.commit": "false"},
    )
    conf["error_cb"] = lambda _error: None  # unreachable brokers surface as timeouts of the calls below
    return Consumer(conf)


def read_offsets(
    cluster: ClusterMetadata, properties: Mapping[str, str], group: str | None, timeout: float
) -> list[PartitionOffsets]:
    """Every partition of the cluster's topics with its offsets, sorted by topic and partition.

    Raises :class:`KafkaException` (a topic that does not exist, an unreachable cluster).
    """
    consumer = _consumer(cluster, properties, group)
    try:
        out: list[PartitionOffsets] = []
        for topic in sorted(cluster.topics):
            md = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if md is None or md.error is not None:
                raise KafkaException(md.error if md is not None else f"topic {topic} not found")
            tps = [TopicPartition(topic, p) for p in sorted(md.partitions)]
            committed: dict[int, int | None] = {tp.partition: None for tp in tps}
            if group is not None and tps:
                for tp in consumer.committed(tps, timeout=timeout):
                    committed[tp.partition] = tp.offset if tp.offset >= 0 else None
            for tp in tps:
                low, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
                out.append(
                    PartitionOffsets(
                        cluster.cluster_id, topic, tp.partition, low, high, committed[tp.partition]
                    )
                )
        return out
    finally:
        consumer.close()


def start_offsets(
    cluster: ClusterMetadata,
    offsets: list[PartitionOffsets],
    properties: Mapping[str, str],
    start: str,
    timestamp_ms: int | None,
    timeout: float,
) -> dict[tuple[str, int], int]:
    """(topic, partition) -> where a read ``--from start`` begins (to size a bounded read)."""
    if start == "latest":
        return {(o.topic, o.partition): o.end for o in offsets}
    if start == "committed":
        return {(o.topic, o.partition): o.start if o.committed is None else o.committed for o in offsets}
    if start == "timestamp" and timestamp_ms is not None:
        consumer = _consumer(cluster, properties, None)
        try:
            asked = [TopicPartition(o.topic, o.partition, timestamp_ms) for o in offsets]
            found = consumer.offsets_for_times(asked, timeout=timeout) if asked else []
        finally:
            consumer.close()
        ends = {(o.topic, o.partition): o.end for o in offsets}
        return {
            (tp.topic, tp.partition): tp.offset if tp.offset >= 0 else ends[(tp.topic, tp.partition)]
            for tp in found
        }
    return {(o.topic, o.partition): o.start for o in offsets}
