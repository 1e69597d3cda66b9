"""The session's clusters: :class:`ClusterPool` hands out shared clusters by name (started lazily, in
parallel) and stops them all at the end; ``MCS_TEST_BROKERS`` and ``MCS_TEST_BOOTSTRAP`` choose the kind."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cluster import Cluster
from harness.external import ExternalCluster
from harness.kafka import KafkaCluster
from harness.tansu import TansuCluster

if TYPE_CHECKING:
    from harness.secured import SecuredKafkaCluster
    from harness.toxiproxy import Toxiproxy

BROKERS_ENV = "MCS_TEST_BROKERS"
BOOTSTRAP_ENV = "MCS_TEST_BOOTSTRAP"
# Shared single-node clusters are named in this order; more than these get c<N>.
CLUSTER_NAMES = ("east", "west", "central", "north", "south")
RACK_CLUSTER_NAME = "racks"
RACKS = ("a", "b", "c")


PROXIED_DISK_MB = 128
"""The size of each proxied node's data tmpfs, where mounting is allowed (the chaos soak's full disk)."""


def proxy_name(cluster_id: str, node_id: int) -> str:
    """The name of the Toxiproxy proxy in front of one node of a proxied cluster."""
    return f"{cluster_id}-{node_id}"


def replication_proxy_name(cluster_id: str, node_id: int) -> str:
    """The name of the Toxiproxy proxy in front of one node's replication listener (several nodes only)."""
    return f"{cluster_id}-{node_id}-replication"


class ClusterUnavailable(Exception):
    """The configured broker kind cannot provide the requested cluster (tests skip on it)."""


def parse_external(spec: str) -> dict[str, str]:
    """Parse ``id=host:port,host:port;id2=host:port`` into ``{id: bootstrap_servers}`` (order kept)."""
    clusters: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in spec.split(";"))):
        name, sep, servers = entry.partition("=")
        if not sep or not name.strip() or not servers.strip():
            raise ValueError(f"{BOOTSTRAP_ENV}: expected id=host:port[,host:port], got {entry!r}")
        clusters[name.strip()] = servers.strip()
    return clusters


class ClusterPool:
    """Clusters shared by a test session, started lazily by name and stopped together by ``stop_all()``.

    ``kind`` is "kafka" (Apache Kafka from Maven Central), "tansu", or "external" (then ``external`` maps
    names to bootstrap servers). A cluster that failed to start is not tried again: later requests re-raise.
    """

    def __init__(self, kind: str = "kafka", external: Mapping[str, str] | None = None) -> None:
        if kind not in ("kafka", "tansu", "external"):
            raise ValueError(f"{BROKERS_ENV} must be kafka, tansu or external, not {kind!r}")
        if kind == "external" and not external:
            raise ValueError(f"{BROKERS_ENV}=external needs {BOOTSTRAP_ENV}=id=host:port[,...][;id2=...]")
        self.kind = kind
        self._external = dict(external or {})
        self._lock = threading.Lock()
        self._clusters: dict[str, Cluster] = {}
        self._failures: dict[str, BaseException] = {}
        self._fresh: list[Cluster] = []
        self._proxied: dict[str, KafkaCluster] = {}
        self._proxied_wired: set[str] = set()
        self._toxiproxy: Toxiproxy | None = None
        self._toxiproxy_dir: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> ClusterPool:
        """A pool configured by ``MCS_TEST_BROKERS`` and ``MCS_TEST_BOOTSTRAP``."""
        kind = environ.get(BROKERS_ENV, "kafka").strip().lower() or "kafka"
        external = parse_external(environ.get(BOOTSTRAP_ENV, "")) if kind == "external" else None
        return cls(kind, external)

    def names(self, n: int) -> list[str]:
        """The names of the first ``n`` shared single-node clusters."""
        if self.kind == "external":
            names = [name for name in self._external if name != RACK_CLUSTER_NAME]
            if len(names) < n:
                raise ClusterUnavailable(f"{n} clusters wanted, {BOOTSTRAP_ENV} names {len(names)}")
            return names[:n]
        return [CLUSTER_NAMES[i] if i < len(CLUSTER_NAMES) else f"c{i}" for i in range(n)]

    def get(self, name: str) -> Cluster:
        """The shared cluster ``name`` (started on first use)."""
        return self.get_many([name])[0]

    def get_many(self, names: Sequence[str], *, racks: Sequence[str] | None = None) -> list[Cluster]:
        """The shared clusters ``names``; those not yet running start in parallel."""
        with self._lock:
            for name in names:
                if name in self._failures:
                    error = self._failures[name]
                    raise RuntimeError(f"cluster {name!r} failed to start earlier: {error}") from error
            missing = [name for name in dict.fromkeys(names) if name not in self._clusters]
            if missing:
                with ThreadPoolExecutor(len(missing), thread_name_prefix="mcs-cluster-start") as pool:
                    futures = {name: pool.submit(self._start, name, racks) for name in missing}
                for name, future in futures.items():
                    failure = future.exception()
                    if failure is None:
                        self._clusters[name] = future.result()
                    else:
                        self._failures[name] = failure
                for name in missing:
                    if name in self._failures:
                        raise self._failures[name]
            return [self._clusters[name] for name in names]

    def rack_cluster(self) -> Cluster:
        """The shared three-node cluster with racks a, b, c."""
        if self.kind == "tansu":
            raise ClusterUnavailable("tansu runs one broker: no rack cluster")
        if self.kind == "external" and RACK_CLUSTER_NAME not in self._external:
            raise ClusterUnavailable(f"{BOOTSTRAP_ENV} names no {RACK_CLUSTER_NAME!r} cluster")
        return self.get_many([RACK_CLUSTER_NAME], racks=RACKS)[0]

    def secured(self, mode: str) -> SecuredKafkaCluster:
        """The shared secured cluster of ``mode`` ("sasl_ssl" or "mtls"; see :mod:`harness.secured`),
        started on first use (Apache Kafka only: it is configured through its server.properties)."""
        from harness.secured import MODES, SecuredKafkaCluster  # needs cryptography: only when asked for

        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if self.kind != "kafka":
            raise ClusterUnavailable(f"{BROKERS_ENV}={self.kind}: secured clusters need Apache Kafka")
        name = f"secure-{mode.replace('_', '-')}"
        with self._lock:
            if name in self._failures:
                raise RuntimeError(f"cluster {name!r} failed to start earlier") from self._failures[name]
            if name not in self._clusters:
                try:
                    self._clusters[name] = SecuredKafkaCluster(name, mode=mode).start()
                except BaseException as exc:
                    self._failures[name] = exc
                    raise
            cluster = self._clusters[name]
        assert isinstance(cluster, SecuredKafkaCluster)
        return cluster

    def proxied(self, names: Sequence[str], *, nodes: int = 1) -> list[KafkaCluster]:
        """Shared Apache Kafka clusters of ``nodes`` nodes whose client listener is reached through the pool's
        Toxiproxy (``proxied_bootstrap_servers``; proxy ``<name>-<node id>``; see :meth:`toxiproxy`),
        started in parallel on first use (a name keeps the node count it was first started with). They are
        not the clusters of :meth:`get`: faults injected on them never reach other tests' clusters. Their
        data directories are tmpfs of :data:`PROXIED_DISK_MB` where mounting is allowed (``disk_limited``)."""
        if self.kind != "kafka":
            raise ClusterUnavailable(f"{BROKERS_ENV}={self.kind}: proxied clusters need Apache Kafka")
        with self._lock:
            missing = [name for name in dict.fromkeys(names) if name not in self._proxied]
            if missing:
                with ThreadPoolExecutor(len(missing), thread_name_prefix="mcs-cluster-start") as pool:
                    futures = {
                        name: pool.submit(
                            lambda n: KafkaCluster(
                                n, nodes=nodes, proxied=True, data_tmpfs_mb=PROXIED_DISK_MB
                            ).start(),
                            name,
                        )
                        for name in missing
                    }
                failures = [f.exception() for f in futures.values() if f.exception() is not None]
                self._proxied.update({n: f.result() for n, f in futures.items() if f.exception() is None})
                if failures:
                    raise failures[0]  # type: ignore[misc]  # the others stay in the pool: stop_all() ends them
        self.toxiproxy()
        return [self._proxied[name] for name in names]

    def toxiproxy(self) -> Toxiproxy:
        """The pool's Toxiproxy server (started on first use), with a proxy ``<cluster>-<node id>`` in front
        of each node of every proxied cluster, and ``<cluster>-<node id>-replication`` in front of each
        node's replication listener in a proxied cluster of several nodes."""
        from harness.toxiproxy import Toxiproxy  # only the chaos tests need the Go-built server

        with self._lock:
            if self._toxiproxy is None:
                self._toxiproxy_dir = tempfile.mkdtemp(prefix="mcs-toxiproxy-")
                self._toxiproxy = Toxiproxy(Path(self._toxiproxy_dir)).start()
            for name, cluster in self._proxied.items():
                if name not in self._proxied_wired:
                    for node_id, (listen, upstream) in cluster.proxy_ports.items():
                        self._toxiproxy.create_proxy(proxy_name(name, node_id), listen, upstream)
                    for node_id, (listen, upstream) in cluster.replication_proxy_ports.items():
                        self._toxiproxy.create_proxy(replication_proxy_name(name, node_id), listen, upstream)
                    self._proxied_wired.add(name)
            return self._toxiproxy

    def fresh(self, name: str = "fresh") -> Cluster:
        """A new single-node cluster nobody else uses; stop it with ``release()`` (or ``stop_all()``)."""
        if self.kind == "external":
            raise ClusterUnavailable("external brokers: the tests cannot start a fresh cluster")
        cluster = self._start(name, None)
        with self._lock:
            self._fresh.append(cluster)
        return cluster

    def release(self, cluster: Cluster) -> None:
        """Stop a cluster from ``fresh()``."""
        with self._lock:
            if cluster in self._fresh:
                self._fresh.remove(cluster)
        cluster.stop()

    def _start(self, name: str, racks: Sequence[str] | None) -> Cluster:
        if self.kind == "external":
            if name not in self._external:
                raise ClusterUnavailable(f"{BOOTSTRAP_ENV} names no cluster {name!r}")
            return ExternalCluster(name, self._external[name])
        if self.kind == "tansu":
            return TansuCluster(name).start()
        return KafkaCluster(name, nodes=len(racks) if racks else 1, racks=racks).start()

    def stop_all(self) -> None:
        """Stop every cluster of the pool (in parallel)."""
        with self._lock:
            clusters = [*self._clusters.values(), *self._fresh, *self._proxied.values()]
            self._clusters.clear()
            self._fresh.clear()
            self._proxied.clear()
            self._proxied_wired.clear()
            toxiproxy, self._toxiproxy = self._toxiproxy, None
        if toxiproxy is not None:
            toxiproxy.stop()
            if self._toxiproxy_dir is not None:
                shutil.rmtree(self._toxiproxy_dir, ignore_errors=True)
        if clusters:
            with ThreadPoolExecutor(len(clusters), thread_name_prefix="mcs-cluster-stop") as pool:
                for future in [pool.submit(cluster.stop) for cluster in clusters]:
                    future.result()
