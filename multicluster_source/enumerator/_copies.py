"""Which topics are copies of which (``replicaOf``), and the metadata the enumerator reads (API.md section 9).

Pure functions of merged metadata (cluster id -> :class:`ClusterMetadata`), no state:

* :func:`effective_metadata` is what the enumerator reconciles and the readers follow: the metadata as
  declared, without the copied topics of a failed origin (``replicaOf.failover``, or unreachable for
  ``replica.failover.unreachable.ms``), and without the replica topics whose origin topic is read (a copy is
  not more data). A cluster left without topics is left out. So the rule "the replica is not read while its
  origin is" is one of topics: the replica topic appears, and its splits are handed over, exactly when the
  origin topic leaves.
* :func:`replica_splits_of` names the replica splits that take over an origin split (same partition: MM2 and
  byte-for-byte links keep partitions).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from multicluster_source.framework._split import KafkaPartitionSplit, make_split_id
from multicluster_source.metadata._model import ClusterMetadata
from multicluster_source.metadata._replica import ReplicaOf

__all__ = [
    "blocked_topics",
    "copied_origin_topics",
    "covered",
    "effective_metadata",
    "failed_origins",
    "replica_splits_of",
]


def copied_origin_topics(replica: ClusterMetadata) -> dict[str, str]:
    """Replica topic -> origin topic, for the topics of ``replica`` that copy another cluster's."""
    r = replica.replica_of
    if r is None:
        return {}
    pairs = {t: r.origin_topic(t) for t in replica.topics}
    return {t: o for t, o in pairs.items() if o is not None}


def _without(cluster: ClusterMetadata, topics: Iterable[str]) -> ClusterMetadata:
    return ClusterMetadata(
        cluster.cluster_id,
        cluster.bootstrap_servers,
        cluster.topics - frozenset(topics),
        cluster.properties,
        cluster.replica_of,
    )


def failed_origins(declared: Mapping[str, ClusterMetadata], unreachable: Iterable[str] = ()) -> set[str]:
    """Origin cluster ids treated as failed: marked ``failover: true`` by a replica, or in ``unreachable``
    (unreachable for longer than ``replica.failover.unreachable.ms``) while a replica declares them."""
    gone = set(unreachable)
    out: set[str] = set()
    for cluster in declared.values():
        r = cluster.replica_of
        if r is not None and (r.failover or r.cluster in gone):
            out.add(r.cluster)
    return out


def effective_metadata(
    declared: Mapping[str, ClusterMetadata], failed: Iterable[str] = ()
) -> dict[str, ClusterMetadata]:
    """The metadata to read: failed origins' copied topics and the copies of read origin topics left out."""
    failed_set = set(failed)
    out = dict(declared)
    # 1. A failed origin's copied topics are not read (whatever the metadata still lists).
    for cluster in declared.values():
        r = cluster.replica_of
        if r is None or r.cluster not in failed_set or r.cluster not in out:
            continue
        out[r.cluster] = _without(out[r.cluster], copied_origin_topics(cluster).values())
    # 2. A replica topic is not read while its origin topic is (checked against step 1's result, so a
    #    copy of a failed origin's topic is read).
    read_after_1 = {cid: c.topics for cid, c in out.items()}
    for cid, cluster in declared.items():
        r = cluster.replica_of
        if r is None:
            continue
        origin_topics = read_after_1.get(r.cluster, frozenset())
        blocked = [t for t, o in copied_origin_topics(cluster).items() if o in origin_topics]
        if blocked:
            out[cid] = _without(out[cid], blocked)
    return {cid: c for cid, c in out.items() if c.topics}


def blocked_topics(
    declared: Mapping[str, ClusterMetadata], effective: Mapping[str, ClusterMetadata]
) -> dict[str, list[str]]:
    """Replica cluster id -> its declared replica topics not read now (their origin topic is)."""
    out: dict[str, list[str]] = {}
    for cid, cluster in declared.items():
        read = effective[cid].topics if cid in effective else frozenset()
        held = sorted(t for t in copied_origin_topics(cluster) if t not in read)
        if held:
            out[cid] = held
    return out


def replica_splits_of(
    cluster_id: str, topic: str, partition: int, metadata: Mapping[str, ClusterMetadata]
) -> list[tuple[str, ReplicaOf]]:
    """The replica split ids (with their declarations) that copy split ``cluster_id/topic/partition``."""
    out: list[tuple[str, ReplicaOf]] = []
    for rid, cluster in sorted(metadata.items()):
        r = cluster.replica_of
        if r is None or r.cluster != cluster_id:
            continue
        for replica_topic, origin_topic in sorted(copied_origin_topics(cluster).items()):
            if origin_topic == topic:
                out.append((make_split_id(rid, replica_topic, partition), r))
    return out


def covered(split: KafkaPartitionSplit, metadata: Mapping[str, ClusterMetadata]) -> bool:
    """Whether ``split``'s cluster and topic are in ``metadata``."""
    return split.cluster_id in metadata and split.topic in metadata[split.cluster_id].topics
