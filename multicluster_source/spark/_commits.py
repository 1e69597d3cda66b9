"""Offsets of committed micro-batches committed to each cluster under a group id, for lag monitoring.

Optional (``commitGroupId``): Spark's checkpoint holds the positions the query goes on from; the group's
offsets only show how far the query got, in the tools that watch consumer groups' lag. Each cluster gets the
library's :class:`GroupCommitter` (a consumer of the group that is never assigned anything, on a thread of
its own, retrying while the cluster does not answer), made with the cluster's client configuration.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping

from multicluster_source.enumerator._committer import GroupCommitter
from multicluster_source.framework._clientconf import cluster_client_config
from multicluster_source.framework._split import parse_split_id
from multicluster_source.metadata._model import ClusterMetadata

__all__ = ["GroupCommits"]

_log = logging.getLogger("multicluster_source.spark")


class GroupCommits:
    """One committer per cluster of the metadata; a cluster that leaves it has its committer closed."""

    def __init__(self, group_id: str, client_properties: Mapping[str, str], client_id_prefix: str) -> None:
        self._group_id = group_id
        self._props = dict(client_properties)
        self._prefix = client_id_prefix
        self._committers: dict[str, tuple[ClusterMetadata, GroupCommitter]] = {}

    def commit(self, clusters: Mapping[str, ClusterMetadata], end: Mapping[str, int]) -> None:
        """Owe each cluster of ``clusters`` the offsets of ``end`` of its current topics."""
        by_cluster: dict[str, dict[tuple[str, int], int]] = defaultdict(dict)
        for split_id, offset in end.items():
            cid, topic, partition = parse_split_id(split_id)
            cluster = clusters.get(cid)
            if cluster is not None and topic in cluster.topics:
                by_cluster[cid][(topic, partition)] = offset
        for cid in sorted(set(self._committers) - set(clusters)):
            self._committers.pop(cid)[1].close()
        for cid, offsets in sorted(by_cluster.items()):
            self._committer(clusters[cid]).submit(offsets)

    def _committer(self, cluster: ClusterMetadata) -> GroupCommitter:
        held = self._committers.get(cluster.cluster_id)
        if held is not None and held[0].same_connection(cluster):
            return held[1]
        if held is not None:
            held[1].close()
        conf = cluster_client_config(
            cluster, self._props, client_id=f"{self._prefix}-{cluster.cluster_id}-driver"
        )
        committer = GroupCommitter(cluster.cluster_id, conf, self._group_id)
        self._committers[cluster.cluster_id] = (cluster, committer)
        return committer

    def close(self) -> None:
        """Close every committer (what a cluster still owes is given up: the next micro-batch's commit
        would replace it anyway)."""
        for _cluster, committer in self._committers.values():
            committer.close()
        self._committers.clear()
