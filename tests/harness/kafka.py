"""Apache Kafka (KRaft) clusters for the tests: :class:`KafkaCluster`, one node or several combined
broker+controller nodes with racks, started from the jars :mod:`harness.maven` fetches."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from confluent_kafka import KafkaException

from harness.cluster import Cluster, track, untrack
from harness.maven import ensure_kafka_libs
from harness.processes import HOST, accepts, end_process, free_port, java_binary, tail_file

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


class _PortTaken(Exception):
    """A port chosen for a broker was taken before the broker bound it."""


_FILLER = "disk-filler"


def _mount_tmpfs(path: Path, size_mb: int) -> bool:
    """Mount a tmpfs of ``size_mb`` MiB at ``path`` (created); False when mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    mount = shutil.which("mount")
    if mount is None:
        return False
    result = subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs", str(path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    return result.returncode == 0


def _unmount(path: Path) -> None:
    """Unmount ``path`` if it is a mount point (lazily: a process still inside does not keep it)."""
    umount = shutil.which("umount")
    if umount is not None and os.path.ismount(path):
        subprocess.run([umount, "-l", str(path)], stdin=subprocess.DEVNULL, capture_output=True, timeout=30)


@dataclass
class _Node:
    node_id: int
    rack: str | None
    broker_port: int
    controller_port: int
    directory: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    # proxied clusters only: the client listener is advertised at proxy_port (a proxy forwards it to
    # broker_port); brokers, the controller and the harness's clients use the direct listener on direct_port
    proxy_port: int | None = None
    direct_port: int | None = None
    # proxied clusters of several nodes only: the brokers replicate over a listener of its own, advertised
    # at replication_proxy_port (a proxy forwards it to replication_port), so a test can cut one node off
    # from the others' fetches while the controller and the clients still reach it
    replication_port: int | None = None
    replication_proxy_port: int | None = None

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
        full_jit: bool = False,
        proxied: bool = False,
        data_tmpfs_mb: int | None = None,
    ) -> None:
        """``full_jit``: the JVM's default compilers (C1 and C2), as brokers run in production, for benchmarks;
        the tests' default stops at C1 (faster start, less JIT CPU, slower request handling).

        ``proxied``: each node's client listener is advertised at a port of its own (``proxy_ports``) where
        the caller runs a proxy to the node's listener (a Toxiproxy: :mod:`harness.chaos`); clients of
        ``proxied_bootstrap_servers`` then go through the proxies, while the brokers talk to each other and
        the harness's own clients (``bootstrap_servers``) talk to the brokers on a direct listener. With
        several nodes the brokers replicate over a third listener, also advertised at a proxy port of its
        own (``replication_proxy_ports``): disabling that proxy cuts the node off from its followers (they
        cannot fetch from it) while the controller (its own listener) and the clients still reach it.

        ``data_tmpfs_mb``: each node's data directory is a tmpfs of that size, so that a test can fill it
        (:meth:`fill_disk`); mounting needs the right to (root with ``CAP_SYS_ADMIN``): where it is refused,
        the cluster starts on the ordinary disk and :attr:`disk_limited` is False."""
        super().__init__(cluster_id)
        self._data_tmpfs_mb = data_tmpfs_mb
        self.disk_limited = False
        self._full_jit = full_jit
        self._proxied = proxied
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
        return ",".join(f"{HOST}:{node.direct_port or node.broker_port}" for node in self._nodes)

    @property
    def proxied(self) -> bool:
        """Whether the client listener is advertised at proxy ports (see ``__init__``)."""
        return self._proxied

    @property
    def proxy_ports(self) -> dict[int, tuple[int, int]]:
        """Node id -> (port the proxy listens on, the node's client listener port it forwards to); empty
        unless the cluster is proxied."""
        return {n.node_id: (n.proxy_port, n.broker_port) for n in self._nodes if n.proxy_port is not None}

    @property
    def replication_proxy_ports(self) -> dict[int, tuple[int, int]]:
        """Node id -> (port the replication proxy listens on, the node's replication listener port); empty
        unless the cluster is proxied and has several nodes."""
        return {
            n.node_id: (n.replication_proxy_port, n.replication_port)
            for n in self._nodes
            if n.replication_proxy_port is not None and n.replication_port is not None
        }

    @property
    def proxied_bootstrap_servers(self) -> str:
        """``127.0.0.1:<proxy port>`` of every node: what the clients under test bootstrap from."""
        if not self._proxied:
            raise RuntimeError(f"{self!r} is not proxied")
        if not self._nodes:
            raise RuntimeError(f"{self!r} is not started")
        return ",".join(f"{HOST}:{node.proxy_port}" for node in self._nodes)

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
        track(self)
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
        if self._proxied:
            for node in self._nodes:
                node.proxy_port, node.direct_port = free_port(), free_port()
                if len(self._nodes) > 1:
                    node.replication_port, node.replication_proxy_port = free_port(), free_port()
        voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in self._nodes)
        for node in self._nodes:
            node.directory.mkdir()
            if self._data_tmpfs_mb is not None:
                self.disk_limited = _mount_tmpfs(node.directory / "data", self._data_tmpfs_mb)
                if not self.disk_limited:
                    self._data_tmpfs_mb = None  # no right to mount: every node on the ordinary disk
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
            "listeners": f"PLAINTEXT://{HOST}:{node.broker_port},CONTROLLER://{HOST}:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{node.broker_port}",
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
        if node.direct_port is not None and node.proxy_port is not None:
            props["listeners"] = (
                f"PLAINTEXT://{HOST}:{node.broker_port},DIRECT://{HOST}:{node.direct_port},"
                f"CONTROLLER://{HOST}:{node.controller_port}"
            )
            props["advertised.listeners"] = (
                f"PLAINTEXT://{HOST}:{node.proxy_port},DIRECT://{HOST}:{node.direct_port}"
            )
            props["listener.security.protocol.map"] = (
                "PLAINTEXT:PLAINTEXT,DIRECT:PLAINTEXT,CONTROLLER:PLAINTEXT"
            )
            props["inter.broker.listener.name"] = "DIRECT"
        if node.replication_port is not None and node.replication_proxy_port is not None:
            props["listeners"] += f",REPLICATION://{HOST}:{node.replication_port}"
            props["advertised.listeners"] += f",REPLICATION://{HOST}:{node.replication_proxy_port}"
            props["listener.security.protocol.map"] += ",REPLICATION:PLAINTEXT"
            props["inter.broker.listener.name"] = "REPLICATION"
        if node.rack is not None:
            props["broker.rack"] = node.rack
            props["replica.selector.class"] = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
        props.update(self._overrides)
        return props

    def _java(self, main: str, *args: str) -> list[str]:
        java = java_binary()
        if java is None or self._libs is None or self._workdir is None:
            raise RuntimeError("Apache Kafka for the tests needs Java 17+ (`java` on PATH or in $JAVA_HOME)")
        return [
            java,
            f"-Xmx{self._heap}",
            *(f for f in _JVM_FLAGS if not (self._full_jit and f.startswith("-XX:TieredStopAtLevel"))),
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
                end_process(proc, graceful=False)
                code = -1
            log.close()
            if code != 0:
                failed.append(
                    f"node {node.node_id} (exit {code}):\n{tail_file(node.directory / 'format.log', 30)}"
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
                    tail = tail_file(node.log_path, 60)
                    if "Address already in use" in tail:
                        raise _PortTaken
                    raise RuntimeError(f"{self!r}: node {node.node_id} exited during start-up:\n{tail}")
                if all(
                    accepts(port)
                    for port in (node.broker_port, node.direct_port, node.replication_port)
                    if port
                ):
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

    def node_running(self, node_id: int) -> bool:
        """Whether the node's process runs (a paused one counts as running)."""
        node = self._node(node_id)
        return node.proc is not None and node.proc.poll() is None

    def pause_node(self, node_id: int) -> None:
        """Freeze one node's process (SIGSTOP): its sockets stay open and nothing answers."""
        node = self._node(node_id)
        if node.proc is None or node.proc.poll() is not None:
            raise RuntimeError(f"{self!r}: node {node_id} is not running")
        os.kill(node.proc.pid, signal.SIGSTOP)

    def resume_node(self, node_id: int) -> None:
        """Let a paused node run again (SIGCONT; harmless on a node that runs)."""
        node = self._node(node_id)
        if node.proc is not None and node.proc.poll() is None:
            os.kill(node.proc.pid, signal.SIGCONT)

    def stop_node(self, node_id: int, *, graceful: bool = True) -> None:
        """Stop one node (SIGTERM: controlled shutdown; ``graceful=False``: SIGKILL); data and ports stay."""
        node = self._node(node_id)
        if node.proc is not None:
            self.resume_node(node_id)  # a paused JVM would not act on SIGTERM
            end_process(node.proc, graceful=graceful)
            node.proc = None

    def start_node(self, node_id: int) -> None:
        """Start a stopped node on its data and ports; return once it is back in the metadata."""
        node = self._node(node_id)
        if node.proc is not None and node.proc.poll() is None:
            raise RuntimeError(f"{self!r}: node {node_id} is running")
        self._launch(node)
        self._await_ready([node], self._startup_timeout)

    def fill_disk(self, node_id: int) -> int:
        """Fill the node's data tmpfs (``data_tmpfs_mb``) with a file of zeros up to the last byte; return
        the bytes written. Kafka's next write there fails (its log directory goes offline)."""
        if not self.disk_limited:
            raise RuntimeError(f"{self!r}: the data directories are not on a tmpfs of their own")
        written = 0
        with open(self._node(node_id).directory / "data" / _FILLER, "ab", buffering=0) as f:
            for size in (1 << 20, 4096, 1):  # big blocks, then what is left of the last one
                block = bytes(size)
                while True:
                    try:
                        n = f.write(block)
                    except OSError:  # ENOSPC
                        break
                    if not n:
                        break
                    written += n
        return written

    def free_disk(self, node_id: int) -> None:
        """Remove what :meth:`fill_disk` wrote (the node needs a restart for Kafka to use the directory
        again)."""
        (self._node(node_id).directory / "data" / _FILLER).unlink(missing_ok=True)

    def stop(self, *, graceful: bool = True) -> None:
        """Close the shared clients, stop all nodes together, and remove the files (see ``keep_logs``)."""
        self._close_clients()
        running = [n.proc for n in self._nodes if n.proc is not None]
        for node in self._nodes:
            self.resume_node(node.node_id)
        for proc in running:
            if graceful and proc.poll() is None:
                proc.terminate()
        # The last nodes of a quorum going down together wait about 5 s for controllers that are gone;
        # the data is thrown away, so they get 3 s before SIGKILL.
        deadline = time.monotonic() + 3.0
        for proc in running:
            end_process(proc, graceful=graceful, timeout=max(0.1, deadline - time.monotonic()))
        for node in self._nodes:
            node.proc = None
        untrack(self)
        if self._workdir is not None:
            for node in self._nodes:
                shutil.rmtree(node.directory / "data", ignore_errors=True)
                _unmount(node.directory / "data")
            if not self.keep_logs:
                shutil.rmtree(self._workdir, ignore_errors=True)

    def _discard(self) -> None:
        """Throw away a failed attempt's processes and files before trying again with new ports."""
        for node in self._nodes:
            if node.proc is not None:
                end_process(node.proc, graceful=False)
        self._close_clients()
        if self._workdir is not None:
            for node in self._nodes:
                _unmount(node.directory / "data")
            shutil.rmtree(self._workdir, ignore_errors=True)
        self._nodes, self._workdir = [], None

    def log_tail(self, lines: int = 40) -> str:
        """Last ``lines`` of each node's log (with the log's path)."""
        parts = [
            f"--- {self._cluster_id} node {n.node_id} ({n.log_path}) ---\n{tail_file(n.log_path, lines)}"
            for n in self._nodes
        ]
        return "\n".join(parts)
