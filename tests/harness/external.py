"""Brokers you bring: :class:`ExternalCluster` only talks to them (no start, stop or logs)."""

from __future__ import annotations

from harness.cluster import Cluster


class ExternalCluster(Cluster):
    """Brokers somebody else runs; this object only talks to them (``stop()`` closes its clients)."""

    kind = "external"

    def __init__(self, cluster_id: str, bootstrap_servers: str) -> None:
        super().__init__(cluster_id)
        self._bootstrap = bootstrap_servers

    @property
    def bootstrap_servers(self) -> str:
        """As given."""
        return self._bootstrap

    @property
    def node_racks(self) -> dict[int, str | None]:
        """Node id -> rack, as the cluster describes itself."""
        return self.describe_nodes()

    def stop(self, *, graceful: bool = True) -> None:
        """Close the shared clients; the brokers keep running."""
        self._close_clients()

    def stop_node(self, node_id: int, *, graceful: bool = True) -> None:
        """Not supported: the brokers are not ours."""
        raise NotImplementedError("an external cluster's brokers cannot be stopped by the tests")

    def start_node(self, node_id: int) -> None:
        """Not supported: the brokers are not ours."""
        raise NotImplementedError("an external cluster's brokers cannot be started by the tests")

    def log_tail(self, lines: int = 40) -> str:
        """No logs: the brokers are not ours."""
        return f"--- {self._cluster_id}: external brokers {self._bootstrap}, logs not available ---"
