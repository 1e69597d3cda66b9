"""Fixtures giving tests Kafka clusters; the machinery lives in tests/harness.

``MCS_TEST_BROKERS`` picks the brokers: ``kafka`` (default: Apache Kafka fetched from Maven Central),
``tansu``, or ``external`` (``MCS_TEST_BOOTSTRAP=id=host:port,host:port;id2=host:port``). Clusters start on
first use and are shared by the session; tests isolate themselves with unique topic and group names.

``runtime`` parametrises a push-API test over ``run()``'s runtimes (threads, processes, Ray); Ray runs as a
local two-node cluster (``ray_nodes``: two raylets on this machine labelled ``zone=a`` and ``zone=b``), and
its tests are skipped, with the reason, when Ray is not installed (``pip install '.[ray]'``).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from harness import Cluster, ClusterPool, ClusterUnavailable
from harness.runtimes import Runtime, ray_placement

if TYPE_CHECKING:
    from harness.mm2 import MM2Pair
    from harness.secured import SecuredKafkaCluster

_T = TypeVar("_T")
_USED = pytest.StashKey[list[Cluster]]()


def _use(request: pytest.FixtureRequest, get: Callable[[], _T]) -> _T:
    """Run ``get`` (skip when the configured brokers cannot serve it); note its clusters on the test."""
    try:
        result = get()
    except ClusterUnavailable as exc:
        pytest.skip(str(exc))
    clusters = result if isinstance(result, list) else [result]
    request.node.stash.setdefault(_USED, []).extend(c for c in clusters if isinstance(c, Cluster))
    return result


@pytest.fixture(scope="session")
def cluster_pool() -> Iterator[ClusterPool]:
    """All clusters of the session, started lazily by name and stopped at the end."""
    pool = ClusterPool.from_env()
    try:
        yield pool
    finally:
        pool.stop_all()


@pytest.fixture
def kafka_cluster(cluster_pool: ClusterPool, request: pytest.FixtureRequest) -> Cluster:
    """The shared single-node cluster "east"."""
    return _use(request, lambda: cluster_pool.get(cluster_pool.names(1)[0]))


@pytest.fixture
def kafka_clusters(
    cluster_pool: ClusterPool, request: pytest.FixtureRequest
) -> Callable[[int], list[Cluster]]:
    """``kafka_clusters(n)``: the first n shared single-node clusters (east, west, central, ...)."""
    return lambda n: _use(request, lambda: cluster_pool.get_many(cluster_pool.names(n)))


@pytest.fixture
def rack_cluster(cluster_pool: ClusterPool, request: pytest.FixtureRequest) -> Cluster:
    """The shared three-node cluster with racks a, b, c (node ids 0, 1, 2)."""
    return _use(request, cluster_pool.rack_cluster)


@pytest.fixture
def fresh_cluster(
    cluster_pool: ClusterPool, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Cluster]]:
    """``fresh_cluster(name="fresh")``: a new single-node cluster of this test only, stopped after it."""
    started: list[Cluster] = []

    def start(name: str = "fresh") -> Cluster:
        cluster = _use(request, lambda: cluster_pool.fresh(name))
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster_pool.release(cluster)


@pytest.fixture
def secured_cluster(
    cluster_pool: ClusterPool, request: pytest.FixtureRequest
) -> Callable[[str], SecuredKafkaCluster]:
    """``secured_cluster("sasl_ssl")`` or ``secured_cluster("mtls")``: the shared Apache Kafka cluster with a
    SASL_SSL (SCRAM-SHA-512) or a mutual-TLS listener (``harness.secured``), started on first use."""
    return lambda mode: _use(request, lambda: cluster_pool.secured(mode))


def _mm2_pair(pool: ClusterPool, syncs_location: str) -> Iterator[MM2Pair]:
    from harness.mm2 import start_mm2_pair

    if pool.kind != "kafka":
        pytest.skip(f"MirrorMaker 2 tests start their own Apache Kafka clusters, not {pool.kind}")
    pair = start_mm2_pair(pool, syncs_location="target" if syncs_location == "target" else "source")
    try:
        yield pair
    finally:
        pair.close(pool)


@pytest.fixture(scope="module")
def mm2_pair(cluster_pool: ClusterPool) -> Iterator[MM2Pair]:
    """Two fresh single-broker clusters ``east`` and ``west`` of this module and MirrorMaker 2 east->west
    (offset syncs on east, MM2's default): ``pair.east``, ``pair.west``, ``pair.mm2`` (``harness.mm2``)."""
    yield from _mm2_pair(cluster_pool, "source")


@pytest.fixture(scope="module")
def mm2_dr_pair(cluster_pool: ClusterPool) -> Iterator[MM2Pair]:
    """Like ``mm2_pair`` with ``offset-syncs.topic.location=target`` (the syncs on west: what a
    disaster-recovery set-up needs); its own clusters, so a test may kill east's broker."""
    yield from _mm2_pair(cluster_pool, "target")


@pytest.fixture(scope="session")
def ray_nodes() -> Iterator[dict[str, str]]:
    """A local Ray cluster of two nodes (zone a and zone b); zone -> node id."""
    try:
        ray: Any = importlib.import_module("ray")
        RayCluster = importlib.import_module("ray.cluster_utils").Cluster
    except ImportError as exc:
        pytest.skip(f"Ray is not installed (pip install 'multicluster-kafka-source[ray]'): {exc}")
    cluster = RayCluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "labels": {"zone": "a"}, "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=2, labels={"zone": "b"})
        root = Path(__file__).resolve().parents[1]
        pythonpath = os.pathsep.join([str(root / "tests"), str(root)])
        ray.init(
            address=cluster.address,
            runtime_env={"env_vars": {"PYTHONPATH": pythonpath}},
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
        cluster.wait_for_nodes()
        nodes = {n["Labels"]["zone"]: n["NodeID"] for n in ray.nodes() if n["Alive"]}
        yield nodes
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture(params=["threads", "processes", "ray"])
def runtime(request: pytest.FixtureRequest) -> Runtime:
    """Each of ``run()``'s runtimes in turn (Ray: reader i on node a or b, its rack the node's zone)."""
    if request.param != "ray":
        return Runtime(request.param)
    nodes = request.getfixturevalue("ray_nodes")
    return Runtime("ray", {"rack_label": "zone", "actor_options": ray_placement(nodes)}, nodes)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the broker log tails of the clusters a failed test used (and keep those logs on disk)."""
    report = yield
    used: list[Cluster] = item.stash.get(_USED, [])
    if report.failed:
        for cluster in dict.fromkeys(used):
            cluster.keep_logs = True
            report.sections.append(
                (f"broker logs: {cluster.cluster_id} ({report.when})", cluster.log_tail(40))
            )
    return report
