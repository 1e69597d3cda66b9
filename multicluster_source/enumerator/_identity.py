"""Which Kafka cluster each cluster id of the metadata is: :class:`ClusterIdentities`.

A cluster id of the metadata (``"eu"``) is a name the metadata gives a connection; the Kafka cluster behind
it has its own ``cluster.id`` (a random id made when the cluster was formatted). An exactly-once sink writes
the Kafka ``cluster.id`` next to every position it stores, so that a name that now points at another Kafka
cluster (a new cluster under an old name, a typo in the servers) is found before reading starts at offsets
that mean nothing there.

The per-cluster enumerators learn the ids (``describe_cluster``, once per enumerator, before the splits of
their first discovery round are made; see :class:`~._kafka.KafkaClusterEnumerator`); the sink reads them
when it writes positions. Thread-safe: learned on I/O threads, read on the caller's thread.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from multicluster_source.exceptions import ClusterIdentityError

__all__ = ["ClusterIdentities"]


class ClusterIdentities:
    """Cluster id of the metadata -> Kafka ``cluster.id``: expected (from stored positions) and learned."""

    def __init__(self, expected: Mapping[str, str] | None = None, *, what: str = "stored positions") -> None:
        self._expected = dict(expected or {})
        self._what = what
        self._learned: dict[str, str] = {}
        self._lock = threading.Lock()

    def learn(self, cluster_id: str, kafka_cluster_id: str | None, servers: str) -> None:
        """Record what ``cluster_id`` (at ``servers``) answered; raises :class:`ClusterIdentityError` when
        the stored positions were written for another Kafka cluster. An empty answer (a broker that does not
        say) is not recorded."""
        if not kafka_cluster_id:
            return
        expected = self._expected.get(cluster_id)
        if expected is not None and expected != kafka_cluster_id:
            raise ClusterIdentityError(
                f"cluster {cluster_id!r} ({servers}) is Kafka cluster {kafka_cluster_id!r}, but the "
                f"{self._what} of {cluster_id!r} were written for Kafka cluster {expected!r}: the cluster id "
                f"now points at another Kafka cluster, whose offsets mean nothing for those positions. Give "
                f"the new cluster a new cluster id, or move the positions away if this is intended"
            )
        with self._lock:
            self._learned[cluster_id] = kafka_cluster_id

    def get(self, cluster_id: str) -> str | None:
        """The Kafka cluster id learned for ``cluster_id`` (else the one expected, else None)."""
        with self._lock:
            return self._learned.get(cluster_id, self._expected.get(cluster_id))

    def snapshot(self) -> dict[str, str]:
        """Every learned id (a copy)."""
        with self._lock:
            return dict(self._learned)
