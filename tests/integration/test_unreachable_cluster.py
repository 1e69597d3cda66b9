"""A cluster that is down, next to one that works, on real Apache Kafka (issue 25).

The down cluster is a local TCP listener: one that accepts each connection, reads the first request's header
(to learn which client sent it: the client id names the cluster and the role) and closes it, so every
connection attempt is counted per client; or one that accepts and never answers (an unreachable broker
whose requests wait for their timeouts).

- every client of the down cluster (the admin client, each reader's consumer) backs off: after its first
  second at most 2 attempts in any second (it made 79 a second before);
- its repeated errors are logged once per interval with a count, not once per attempt;
- ``close()`` of a stream, and the end of ``run()`` on the threads and processes runtimes, leave no
  ``mcs-`` thread and no librdkafka client behind, and nothing is logged by the source after they returned.

And a bounded read next to a transaction left open: ``latest()`` ends at the last stable offset under
``read_committed``, at the high watermark under ``read_uncommitted``.

Waits are bounded; the only time figures asserted are hang bounds (10 s against the 30 s of a request that
is never answered) and the attempt cap the issue asks for; the measured figures are printed.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import socket
import struct
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from harness.cluster import Cluster
from harness.runtimes import BackgroundRun, FileSink, sink_rows
from harness.scenario import builder, cluster_md, drain, stream, wait_for
from multicluster_source import OffsetsInitializer, RunControl
from multicluster_source.metadata import ClusterMetadata

pytestmark = pytest.mark.integration

OBSERVE_S = 8.0


class DownBroker:
    """A TCP listener on loopback standing in for a cluster that is down.

    ``mode="close"``: accept, read the first request's header, close (counted per client id);
    ``mode="silent"``: accept and hold every connection without answering.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(256)
        self.bootstrap_servers = f"127.0.0.1:{self._sock.getsockname()[1]}"
        self.attempts: dict[str, list[float]] = defaultdict(list)
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="test-down-broker", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            at = time.monotonic()
            if self.mode == "silent":
                self._held.append(conn)
                continue
            client = _client_id(conn)
            with self._lock:
                self.attempts[client].append(at)
            conn.close()

    def close(self) -> None:
        self._sock.close()
        for conn in self._held:
            conn.close()


def _client_id(conn: socket.socket) -> str:
    """The client id of the first request on ``conn`` (request header v1/v2: size, api key, version,
    correlation id, then the client id as a nullable int16-length string)."""
    conn.settimeout(1.0)
    data = b""
    try:
        while len(data) < 14:
            chunk = conn.recv(512)
            if not chunk:
                break
            data += chunk
        if len(data) >= 14:
            (length,) = struct.unpack(">h", data[12:14])
            while len(data) < 14 + max(0, length):
                chunk = conn.recv(512)
                if not chunk:
                    break
                data += chunk
            if length >= 0:
                return data[14 : 14 + length].decode("utf-8", "replace")
    except OSError:
        pass
    return "?"


@pytest.fixture
def down_broker(request: pytest.FixtureRequest) -> Iterator[DownBroker]:
    broker = DownBroker(getattr(request, "param", "close"))
    yield broker
    broker.close()


class Recorder(logging.Handler):
    """Every record logged under ``multicluster_source`` with the monotonic time it was logged at."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[float, logging.LogRecord]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((time.monotonic(), record))


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    handler = Recorder()
    logger = logging.getLogger("multicluster_source")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def librdkafka_threads() -> list[str]:
    """Names of this process's librdkafka threads (``rdk:main``, ``rdk:broker...``): one set per client."""
    names = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        if name.startswith("rdk:"):
            names.append(name)
    return names


def librdkafka_clients() -> int:
    return sum(1 for name in librdkafka_threads() if name == "rdk:main")


def mcs_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("mcs-")]


def down_cluster(broker: DownBroker, topic: str = "orders") -> ClusterMetadata:
    return ClusterMetadata("down", broker.bootstrap_servers, frozenset({topic}), {})


def assert_capped(name: str, times: list[float]) -> None:
    """After a client's first second, at most 2 attempts in any second."""
    first = times[0]
    later = [t for t in times if t - first >= 1.0]
    for i, start in enumerate(later):
        within = [t for t in later[i:] if t - start < 1.0]
        assert len(within) <= 2, f"{name}: {len(within)} attempts within a second: {later}"


def test_each_client_of_a_cluster_that_is_down_backs_off(
    kafka_cluster: Cluster, down_broker: DownBroker, recorder: Recorder
) -> None:
    topic = kafka_cluster.create_topic("backoff", partitions=2)
    kafka_cluster.produce_n(topic, 50, partitions=2)
    md = [stream("orders", cluster_md(kafka_cluster, topic), down_cluster(down_broker, topic))]
    source = builder(md).build()
    with source.open(parallelism=2) as s:
        got = drain(s, 50, timeout=60)
        started = min((t[0] for t in down_broker.attempts.values()), default=time.monotonic())
        deadline = started + OBSERVE_S
        while time.monotonic() < deadline:
            s.poll(timeout=0.2)
        attempts = {client: list(times) for client, times in down_broker.attempts.items()}
    assert len(got) == 50, "the cluster that works must keep flowing"
    by_role = {client.rpartition("-down-")[2]: times for client, times in attempts.items()}
    print({role: [round(t - times[0], 2) for t in times] for role, times in by_role.items()})
    assert {"enumerator", "reader-0", "reader-1"} <= set(by_role), f"clients seen: {sorted(attempts)}"
    for role, times in by_role.items():
        assert_capped(role, times)
        # librdkafka's backoff: a few quick attempts, then one per several seconds (79 a second before)
        assert len(times) <= 12, f"{role}: {len(times)} attempts in {OBSERVE_S} s"
    # one line per distinct error and interval (with a count), not one per attempt
    down_lines = [
        r for _, r in recorder.records if "cluster=down" in r.getMessage() or r.name.endswith(".client.down")
    ]
    print(f"{len(down_lines)} log lines about the down cluster in {OBSERVE_S:g} s")
    assert down_lines, "the outage must be visible in the log"
    assert len(down_lines) <= 30, [r.getMessage() for r in down_lines]


@pytest.mark.parametrize("down_broker", ["silent", "close"], indirect=True)
def test_close_with_a_cluster_down_joins_every_thread_and_client(
    kafka_cluster: Cluster, down_broker: DownBroker, recorder: Recorder
) -> None:
    topic = kafka_cluster.create_topic("close-down", partitions=2)
    kafka_cluster.produce_n(topic, 20, partitions=2)
    before = librdkafka_clients()
    md = [stream("orders", cluster_md(kafka_cluster, topic), down_cluster(down_broker, topic))]
    source = builder(md).build()
    stream_ = source.open(parallelism=2)
    try:
        assert len(drain(stream_, 20, timeout=60)) == 20
        time.sleep(1.0)  # the down cluster's discovery round is waiting for its answer
        assert any(name.startswith(f"mcs-io-{source.name}") for name in mcs_threads())
    finally:
        closing = time.monotonic()
        stream_.close()
        closed = time.monotonic()
    print(f"close() with one cluster down ({down_broker.mode}): {closed - closing:.3f} s")
    assert closed - closing < 10, "close() waited for the cluster that is down"
    assert not mcs_threads(), "threads left after close()"
    assert librdkafka_clients() <= before, f"librdkafka clients left: {librdkafka_threads()}"
    time.sleep(2.0)
    late = [r.getMessage() for t, r in recorder.records if t > closed]
    assert not late, f"logged after close() returned: {late[:5]}"


ROOT = Path(__file__).resolve().parents[2]


def _runtime_options(runtime: str) -> dict[str, Any]:
    if runtime != "ray":
        return {}
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'multicluster-kafka-source[ray]')")
    pythonpath = os.pathsep.join([str(ROOT / "tests"), str(ROOT)])
    return {  # a local Ray started (and shut down) by run() itself, even when another one is running
        "ray_address": "local",
        "ray_init": {
            "num_cpus": 2,
            "include_dashboard": False,
            "logging_level": logging.WARNING,
            "log_to_driver": False,
            "runtime_env": {"env_vars": {"PYTHONPATH": pythonpath}},
        },
        "actor_options": {"num_cpus": 0.5},
    }


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("runtime", ["threads", "processes", "ray"])
def test_run_with_a_cluster_down_ends_without_leftovers(
    kafka_cluster: Cluster, runtime: str, tmp_path: Path, recorder: Recorder
) -> None:
    options = _runtime_options(runtime)
    broker = DownBroker("silent")
    try:
        topic = kafka_cluster.create_topic("run-down", partitions=2)
        kafka_cluster.produce_n(topic, 20, partitions=2)
        before = librdkafka_clients()
        md = [stream("orders", cluster_md(kafka_cluster, topic), down_cluster(broker, topic))]
        source = builder(md).build()
        out = tmp_path / "out"
        control = RunControl()
        run = BackgroundRun(source, FileSink(out), 2, runtime=runtime, control=control, **options)
        try:
            assert wait_for(lambda: len(sink_rows(out)) >= 20 or not run.alive, 90), "not read"
            time.sleep(1.0)
        finally:
            stopping = time.monotonic()
            control.stop()
            run.join()
            ended = time.monotonic()
        print(f"run() end on {runtime} with one cluster down: {ended - stopping:.3f} s")
        assert ended - stopping < 20, "run() waited for the cluster that is down"
        assert len(sink_rows(out)) == 20
        assert not mcs_threads(), "threads left after run()"
        assert not [p.name for p in multiprocessing.active_children() if p.name.startswith("mcs-")]
        assert librdkafka_clients() <= before, f"librdkafka clients left: {librdkafka_threads()}"
        time.sleep(2.0)
        late = [r.getMessage() for t, r in recorder.records if t > ended]
        assert not late, f"logged after run() returned: {late[:5]}"
    finally:
        broker.close()


def _open_transaction(cluster: Cluster, topic: str, committed: int, pending: int) -> Producer:
    """``committed`` records in a committed transaction, then ``pending`` in one left open (returned)."""
    producer = Producer(
        cluster.client_config(
            **{"transactional.id": f"tx-{uuid.uuid4().hex[:8]}", "transaction.timeout.ms": "900000"}
        )
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(committed):
        producer.produce(topic, value=f"c-{i}".encode(), partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(pending):
        producer.produce(topic, value=f"open-{i}".encode(), partition=0)
    producer.flush(30)  # written to the log, its transaction still open
    return producer


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted", None])
def test_bounded_latest_ends_at_the_end_the_isolation_level_sees(
    kafka_cluster: Cluster, isolation: str | None
) -> None:
    """``latest()`` under read_committed (librdkafka's default, ``None`` here) is the last stable offset: a
    transaction left open neither delays nor hangs the end; under read_uncommitted the high watermark."""
    topic = kafka_cluster.create_topic("open-tx", partitions=1)
    producer = _open_transaction(kafka_cluster, topic, committed=10, pending=5)
    try:
        b = builder([stream("s", cluster_md(kafka_cluster, topic))]).set_bounded(OffsetsInitializer.latest())
        if isolation is not None:
            b.set_property("isolation.level", isolation)
        got: list[bytes | None] = []
        finished: list[bool] = []

        def read() -> None:
            with b.build().open() as s:
                got.extend(record.value for record in s)  # ends at the bound
                finished.append(s.finished)

        reading = threading.Thread(target=read, name="test-bounded-read", daemon=True)
        reading.start()
        reading.join(60)  # a hang bound: the transaction stays open for 15 minutes
        assert not reading.is_alive(), f"the bounded read did not end (read {len(got)} records)"
        assert finished == [True]
        if isolation == "read_uncommitted":
            # the high watermark: the open transaction's records are read (not its end marker, never written)
            assert got == [f"c-{i}".encode() for i in range(10)] + [f"open-{i}".encode() for i in range(5)]
        else:
            assert got == [f"c-{i}".encode() for i in range(10)], "ended anywhere but the last stable offset"
    finally:
        producer.abort_transaction(30)
