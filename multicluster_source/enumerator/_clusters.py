"""Reconciling metadata into per-cluster enumerators: what changed, and the enumerators of each cluster.

:class:`MetadataChange` compares two merged metadata versions (clusters added, removed, reconnected, with
changed topics). :class:`ClusterEnumerators` holds one running :class:`KafkaClusterEnumerator`, behind its
stoppable context proxy, per cluster of the current metadata, and builds each one's client configuration.
The multi-cluster enumerator drives both. Coordinator thread only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from multicluster_source.enumerator._kafka import ClusterEnumeratorConfig, KafkaClusterEnumerator
from multicluster_source.enumerator._proxy import SplitsHandler, StoppableContextProxy
from multicluster_source.enumerator._settings import EnumeratorSettings
from multicluster_source.framework._clientconf import admin_properties, cluster_client_config
from multicluster_source.framework._interfaces import SplitEnumeratorContext
from multicluster_source.metadata._model import ClusterMetadata


@dataclass(frozen=True)
class MetadataChange:
    """The cluster ids that changed between two merged metadata versions (each list sorted)."""

    removed: list[str]
    added: list[str]
    reconnected: list[str]
    """In both versions, with a different connection (servers or client properties)."""
    topics_changed: list[str]
    """In both versions, same connection, different topics."""

    @classmethod
    def between(
        cls, old: Mapping[str, ClusterMetadata], new: Mapping[str, ClusterMetadata]
    ) -> MetadataChange:
        """What changed from ``old`` to ``new``."""
        reconnect = sorted(c for c in old.keys() & new.keys() if not old[c].same_connection(new[c]))
        retopic = sorted(
            c for c in old.keys() & new.keys() if c not in reconnect and old[c].topics != new[c].topics
        )
        return cls(sorted(old.keys() - new.keys()), sorted(new.keys() - old.keys()), reconnect, retopic)

    def __str__(self) -> str:
        return (
            f"added={self.added} removed={self.removed} reconnected={self.reconnected} "
            f"topics_changed={self.topics_changed}"
        )

    def record(self, version: int, at_ms: int, splits_retired: int) -> dict[str, Any]:
        """The JSON-ready record of this change (``last_reconciliation`` in the status)."""
        return {
            "version": version,
            "at_ms": at_ms,
            "added": self.added,
            "removed": self.removed,
            "reconnected": self.reconnected,
            "topics_changed": self.topics_changed,
            "splits_retired": splits_retired,
        }


@dataclass
class _Cluster:
    metadata: ClusterMetadata
    enumerator: KafkaClusterEnumerator
    proxy: StoppableContextProxy


class ClusterEnumerators:
    """The running per-cluster enumerators, by cluster id; each reports through its own proxy."""

    def __init__(
        self,
        context: SplitEnumeratorContext,
        settings: EnumeratorSettings,
        on_splits: SplitsHandler,
        on_discovery_done: Callable[[str], None],
        on_leaders: Callable[[str, dict[tuple[str, int], str | None]], None],
        *,
        leader_racks: bool,
    ) -> None:
        self._ctx = context
        self._s = settings
        self._on_splits = on_splits
        self._on_discovery_done = on_discovery_done
        self._on_leaders = on_leaders
        self._leader_racks = leader_racks
        self._clusters: dict[str, _Cluster] = {}

    def __contains__(self, cluster_id: object) -> bool:
        return cluster_id in self._clusters

    def config(self, cluster: ClusterMetadata) -> ClusterEnumeratorConfig:
        """The per-cluster enumerator configuration of ``cluster`` (a bad placeholder raises)."""
        full = cluster_client_config(
            cluster,
            self._s.client_properties,
            client_id=f"{self._s.client_id_prefix}-{cluster.cluster_id}-enumerator",
        )
        props = admin_properties(full)
        # the readers' isolation level decides which end ``latest`` means (last stable offset or high mark)
        isolation = str(full.get("isolation.level", "read_committed")).strip().lower()
        return ClusterEnumeratorConfig(
            cluster=cluster,
            client_properties=props,
            group_id=self._s.group_id,
            starting=self._s.starting,
            stopping=self._s.stopping,
            discovery_interval_s=None if self._s.bounded else self._s.partition_discovery_interval_s,
            leader_racks=self._leader_racks,
            read_committed=isolation != "read_uncommitted",
            request_timeout_s=min(30.0, float(props.get("socket.timeout.ms", "60000")) / 1000.0),
            commit_properties=full,
            commit_wait_s=self._s.commit_wait_s,
            identities=self._s.identities,
        )

    def start(
        self,
        cluster: ClusterMetadata,
        config: ClusterEnumeratorConfig,
        *,
        known: set[tuple[str, int]],
        seen_topics: set[str],
    ) -> None:
        """Start the enumerator of ``cluster``, which already has the splits ``known``."""
        cid = cluster.cluster_id
        proxy = StoppableContextProxy(
            cid, self._ctx, self._on_splits, self._on_discovery_done, self._on_leaders
        )
        enumerator = KafkaClusterEnumerator(
            config,
            proxy,
            known=known,
            seen_topics=seen_topics,
            admin_factory=self._s.admin_factory,
            consumer_factory=self._s.commit_consumer_factory,
        )
        self._clusters[cid] = _Cluster(cluster, enumerator, proxy)
        enumerator.start()

    def update_topics(self, cluster: ClusterMetadata) -> None:
        """Same connection, new topics: the running enumerator follows them."""
        running = self._clusters[cluster.cluster_id]
        running.metadata = cluster
        running.enumerator.update_topics(cluster.topics)

    def close(self, cluster_ids: Iterable[str]) -> dict[str, dict[tuple[str, int], int]]:
        """Close and forget the enumerators of ``cluster_ids``; the offsets each still owed its cluster."""
        owed = {cid: self._clusters.pop(cid).enumerator.close() for cid in cluster_ids}
        return {cid: offsets for cid, offsets in owed.items() if offsets}

    def close_all(self) -> None:
        """Close every enumerator."""
        self.close(list(self._clusters))

    def enumerators(self) -> dict[str, KafkaClusterEnumerator]:
        """Cluster id -> its running enumerator."""
        return {cid: cluster.enumerator for cid, cluster in self._clusters.items()}
