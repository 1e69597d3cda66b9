"""``describe --group G``: what a replica handover of the group's positions would start at, before anyone
switches (API.md section 9).

For every cluster of a stream that declares ``replicaOf`` an origin cluster of the same stream, the group's
committed offset of each origin partition (the position the source would hand over) is translated as a
handover would translate it, with the origin reachable and no wait: a MirrorMaker 2 translator reads the
offset syncs first (up to the timeout). ``timestamp`` needs the last returned record's time, which a committed
offset does not carry: it is read from the origin (the record before the committed offset).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from multicluster_source.enumerator._copies import copied_origin_topics
from multicluster_source.framework._clientconf import cluster_client_config
from multicluster_source.metadata._model import ClusterMetadata, KafkaStream
from multicluster_source.replicas._model import OriginPosition, Translation
from multicluster_source.replicas._translate import make_translator
from multicluster_source.tools._inspect import PartitionOffsets

__all__ = ["replica_translations"]


def replica_translations(
    stream: KafkaStream,
    offsets: Mapping[str, list[PartitionOffsets]],
    properties: Mapping[str, str],
    group: str,
    timeout: float,
) -> list[dict[str, Any]]:
    """One ``Translation.to_status()`` dict per origin partition with a committed offset whose topic a
    replica cluster of ``stream`` copies (``offsets``: cluster id -> its partitions, as ``describe`` read)."""
    out: list[dict[str, Any]] = []
    for rid, replica in sorted(stream.clusters.items()):
        r = replica.replica_of
        if r is None or r.cluster not in stream.clusters:
            continue
        origin = stream.clusters[r.cluster]
        asks: list[tuple[OriginPosition, str]] = []
        for replica_topic, origin_topic in sorted(copied_origin_topics(replica).items()):
            for o in offsets.get(r.cluster, []):
                if o.topic == origin_topic and o.committed is not None:
                    ts = _time_before(origin, properties, o, timeout) if r.offsets == "timestamp" else None
                    position = OriginPosition(f"{r.cluster}/{o.topic}/{o.partition}", o.committed, ts)
                    asks.append((position, f"{rid}/{replica_topic}/{o.partition}"))
        if not asks:
            continue
        translator = make_translator(r, origin, replica, group_id=group, properties=properties)
        try:
            translator.start()
            follower = getattr(translator, "follower", None)
            if follower is not None:  # the syncs written so far, as a source declared long ago has them
                follower.wait_ready(time.monotonic() + timeout)
            found: list[Translation] = translator.translate(asks, origin_reachable=True, wait_s=0.0)
        finally:
            translator.close()
        out.extend(t.to_status() for t in found)
    return out


def _time_before(
    cluster: ClusterMetadata, properties: Mapping[str, str], o: PartitionOffsets, timeout: float
) -> int | None:
    """The timestamp of the record before ``o.committed`` (the last one the group received), if any."""
    if o.committed is None or o.committed <= o.start:
        return None
    conf: dict[str, Any] = cluster_client_config(
        cluster,
        properties,
        client_id="multicluster-source-cli",
        extra={"group.id": "multicluster-source-cli", "enable.auto.commit": "false"},
    )
    conf["error_cb"] = lambda _error: None
    consumer = Consumer(conf)
    try:
        consumer.assign([TopicPartition(o.topic, o.partition, o.committed - 1)])
        message = consumer.poll(timeout)
        if message is None or message.error() is not None:
            return None
        ts: int = message.timestamp()[1]
        return ts
    finally:
        consumer.close()
