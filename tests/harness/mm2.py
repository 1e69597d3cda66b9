"""Apache Kafka's MirrorMaker 2 between two test clusters: :class:`MirrorMaker2` runs it in dedicated mode
(``org.apache.kafka.connect.mirror.MirrorMaker``) from the jars :func:`harness.maven.ensure_mm2_libs`
fetches, with the settings ``BROKERS.md`` ("MirrorMaker 2") measured on loopback clusters, and waits for
what the replica tests need: a topic's copy caught up, an offset sync for a given offset.

Cluster aliases are the clusters' ids (``east``, ``west``), so the replica of ``east``'s ``orders`` is
``west``'s ``east.orders`` (MM2's default replication policy) and the offset syncs are in
``mm2-offset-syncs.west.internal`` on ``east`` (``syncs_location="source"``, MM2's default) or
``mm2-offset-syncs.east.internal`` on ``west`` (``"target"``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

# documented public names of confluent_kafka.admin that the package does not mark as re-exported
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from harness.cluster import Cluster, unique_name
from harness.kafka import _JVM_FLAGS
from harness.kafka import _LOG4J2 as _KAFKA_LOG4J2
from harness.maven import ensure_mm2_libs
from harness.pool import ClusterPool
from harness.processes import end_process, java_binary, tail_file
from multicluster_source.replicas._codec import Checkpoint, OffsetSync, decode_checkpoint, decode_offset_sync
from multicluster_source.replicas._lookup import RecordCopy

# the brokers' logging, and quieter Connect and MM2 classes
_LOG4J2 = (
    _KAFKA_LOG4J2
    + """\
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
logger.tasks.name = org.apache.kafka.connect.runtime.WorkerSourceTask
logger.tasks.level = WARN
logger.scheduler.name = org.apache.kafka.connect.mirror.Scheduler
logger.scheduler.level = WARN
"""
)


class MirrorMaker2:
    """MirrorMaker 2 replicating every topic of ``origin`` to ``replica`` (one direction, one task per
    connector), started by :meth:`start` and stopped by :meth:`stop` / :meth:`kill`.

    ``overrides`` are added to (or replace) the generated ``mm2.properties``. Files (the properties, the log)
    live in a temporary directory removed by ``stop()`` unless ``keep_logs`` is set.
    """

    def __init__(
        self,
        origin: Cluster,
        replica: Cluster,
        *,
        syncs_location: Literal["source", "target"] = "source",
        overrides: Mapping[str, str] | None = None,
        heap: str = "256m",
        startup_timeout: float = 60.0,
    ) -> None:
        self.origin, self.replica = origin, replica
        self.syncs_location = syncs_location
        self._overrides = dict(overrides or {})
        self._heap = heap
        self._startup_timeout = startup_timeout
        self._workdir = Path(tempfile.mkdtemp(prefix=f"mcs-mm2-{origin.cluster_id}-{replica.cluster_id}-"))
        self._proc: subprocess.Popen[bytes] | None = None
        self.keep_logs = False

    # -- names -----------------------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        """MirrorMaker's log (stdout and stderr), appended to over restarts."""
        return self._workdir / "mm2.log"

    def replica_topic(self, topic: str) -> str:
        """The name of ``topic``'s copy on the replica (``<origin id>.<topic>``)."""
        return f"{self.origin.cluster_id}.{topic}"

    @property
    def syncs_topic(self) -> str:
        """The offset-syncs topic's name (on :attr:`syncs_cluster`)."""
        other = self.replica if self.syncs_location == "source" else self.origin
        return f"mm2-offset-syncs.{other.cluster_id}.internal"

    @property
    def syncs_cluster(self) -> Cluster:
        """The cluster holding the offset syncs."""
        return self.origin if self.syncs_location == "source" else self.replica

    @property
    def checkpoints_topic(self) -> str:
        """MM2's checkpoints topic on the replica."""
        return f"{self.origin.cluster_id}.checkpoints.internal"

    def properties(self) -> dict[str, str]:
        """The ``mm2.properties`` this instance runs with."""
        src, tgt = self.origin.cluster_id, self.replica.cluster_id
        flow = f"{src}->{tgt}"
        props = {
            "clusters": f"{src}, {tgt}",
            f"{src}.bootstrap.servers": self.origin.bootstrap_servers,
            f"{tgt}.bootstrap.servers": self.replica.bootstrap_servers,
            f"{flow}.enabled": "true",
            f"{tgt}->{src}.enabled": "false",
            f"{flow}.topics": ".*",
            f"{flow}.groups": ".*",
            "tasks.max": "1",
            "replication.factor": "1",
            "checkpoints.topic.replication.factor": "1",
            "heartbeats.topic.replication.factor": "1",
            "offset-syncs.topic.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "config.storage.replication.factor": "1",
            "offset.storage.partitions": "1",
            "status.storage.partitions": "1",
            "refresh.topics.interval.seconds": "1",
            "refresh.groups.interval.seconds": "1",
            "emit.checkpoints.interval.seconds": "1",
            "sync.group.offsets.interval.seconds": "1",
            "emit.heartbeats.interval.seconds": "1",
            f"{flow}.offset.lag.max": "0",
            # a worker setting: only the target-prefixed one takes effect (BROKERS.md)
            f"{tgt}.offset.flush.interval.ms": "1000",
            "plugin.discovery": "service_load",
            f"{tgt}.plugin.discovery": "service_load",
            "sync.topic.acls.enabled": "false",
            f"{flow}.offset-syncs.topic.location": self.syncs_location,
        }
        props.update(self._overrides)
        return props

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> Self:
        """Write the configuration and start MirrorMaker; return once it says it started."""
        if self._proc is not None and self._proc.poll() is None:
            raise RuntimeError(f"{self!r} is running")
        java = java_binary()
        if java is None:
            raise RuntimeError("MirrorMaker 2 for the tests needs Java 17+ (`java` on PATH or in $JAVA_HOME)")
        libs = ensure_mm2_libs()
        (self._workdir / "log4j2.properties").write_text(_LOG4J2)
        config = self._workdir / "mm2.properties"
        config.write_text("".join(f"{k} = {v}\n" for k, v in self.properties().items()))
        start = self.log_path.stat().st_size if self.log_path.exists() else 0
        cmd = [
            java,
            f"-Xmx{self._heap}",
            *_JVM_FLAGS,
            f"-Dlog4j2.configurationFile={self._workdir / 'log4j2.properties'}",
            "-cp",
            str(libs / "*"),
            "org.apache.kafka.connect.mirror.MirrorMaker",
            str(config),
            "--clusters",
            self.replica.cluster_id,
        ]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd, cwd=self._workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + self._startup_timeout
        while True:
            if self._proc.poll() is not None:
                self.keep_logs = True
                raise RuntimeError(f"{self!r} exited during start-up:\n{self.log_tail(60)}")
            with open(self.log_path, "rb") as f:
                f.seek(start)
                if b"Kafka MirrorMaker started" in f.read():
                    return self
            if time.monotonic() > deadline:
                self.keep_logs = True
                raise TimeoutError(
                    f"{self!r} did not start in {self._startup_timeout}s:\n{self.log_tail(60)}"
                )
            time.sleep(0.1)

    def stop(self, *, graceful: bool = True) -> None:
        """Stop MirrorMaker (SIGTERM; ``graceful=False``: SIGKILL). Its progress stays on the replica."""
        if self._proc is not None:
            end_process(self._proc, graceful=graceful, timeout=15.0)
            self._proc = None

    def kill(self) -> None:
        """SIGKILL MirrorMaker."""
        self.stop(graceful=False)

    def restart(self) -> Self:
        """Stop (gracefully) and start again with the same configuration."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop MirrorMaker and remove its files (unless ``keep_logs``)."""
        self.stop()
        if not self.keep_logs:
            shutil.rmtree(self._workdir, ignore_errors=True)

    @property
    def running(self) -> bool:
        """Whether the MirrorMaker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of MirrorMaker's log, headed by its path."""
        return f"--- MirrorMaker 2 ({self.log_path}) ---\n{tail_file(self.log_path, lines)}"

    def __repr__(self) -> str:
        return f"MirrorMaker2({self.origin.cluster_id}->{self.replica.cluster_id})"

    # -- waiting ---------------------------------------------------------------------------------------

    def wait_caught_up(self, topic: str, *, shifted: int = 0, timeout: float = 60.0) -> dict[int, int]:
        """Wait until ``topic``'s copy on the replica ends ``shifted`` offsets after the origin's end in every
        partition (``shifted``: records the copy held before MM2 appended to it); return its end offsets."""
        target = self.replica_topic(topic)
        deadline = time.monotonic() + timeout
        want: dict[int, int] = {}
        have: dict[int, int] = {}
        while True:
            try:
                want = {p: end + shifted for p, end in end_offsets(self.origin, topic).items()}
                have = end_offsets(self.replica, target)
                if have == want:
                    return have
            except (KafkaException, KeyError):
                pass
            if time.monotonic() > deadline:
                self.keep_logs = True
                raise TimeoutError(
                    f"{self!r}: {target} not caught up with {topic} in {timeout}s (origin {want}, "
                    f"replica {have})\n{self.log_tail(40)}"
                )
            time.sleep(0.2)

    def read_syncs(self, *, timeout: float = 10.0) -> list[OffsetSync]:
        """Every offset sync now in the syncs topic (oldest first), read to its end."""
        return [decode_offset_sync(k, v) for k, v in self.read_raw_syncs(timeout=timeout)]

    def read_raw_syncs(self, *, timeout: float = 10.0) -> list[tuple[bytes, bytes]]:
        """The syncs topic's records as ``(key, value)`` bytes, read to the end (empty when it is absent)."""
        return read_topic(self.syncs_cluster, self.syncs_topic, timeout=timeout)

    def wait_for_checkpoint(
        self, group: str, replica_topic: str, partition: int, upstream: int, *, timeout: float = 30.0
    ) -> Checkpoint:
        """Wait until MM2 has checkpointed ``group`` at ``upstream`` for the replica topic's partition."""
        deadline = time.monotonic() + timeout
        while True:
            for key, value in read_topic(self.replica, self.checkpoints_topic):
                cp = decode_checkpoint(key, value)
                if (cp.group, cp.topic, cp.partition, cp.upstream) == (
                    group,
                    replica_topic,
                    partition,
                    upstream,
                ):
                    return cp
            if time.monotonic() > deadline:
                self.keep_logs = True
                raise TimeoutError(f"{self!r}: no checkpoint of {group} at {upstream} in {timeout}s")
            time.sleep(0.3)

    def wait_for_sync(self, topic: str, partition: int, offset: int, *, timeout: float = 30.0) -> OffsetSync:
        """Wait until a sync for ``topic``/``partition`` with upstream offset ``offset`` exists."""
        deadline = time.monotonic() + timeout
        while True:
            for sync in self.read_syncs():
                if (sync.topic, sync.partition, sync.upstream) == (topic, partition, offset):
                    return sync
            if time.monotonic() > deadline:
                self.keep_logs = True
                raise TimeoutError(f"{self!r}: no sync for {topic}/{partition}@{offset} in {timeout}s")
            time.sleep(0.3)


def end_offsets(cluster: Cluster, topic: str) -> dict[int, int]:
    """Partition -> high watermark of ``topic`` (KeyError when the topic does not exist)."""
    md = cluster.admin().list_topics(timeout=5.0)
    meta = md.topics.get(topic)
    if meta is None or meta.error is not None:
        raise KeyError(topic)
    consumer = cluster.consumer(**{"group.id": unique_name("mm2-ends"), "enable.auto.commit": False})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5.0)[1]
            for p in meta.partitions
        }
    finally:
        consumer.close()


def read_topic(cluster: Cluster, topic: str, *, timeout: float = 10.0) -> list[tuple[bytes, bytes]]:
    """All records of ``topic`` partition 0 as ``(key, value)``, from the beginning to the current end."""
    try:
        end = end_offsets(cluster, topic)
    except (KeyError, KafkaException):  # absent, or not served yet: nothing to read now
        return []
    if not end.get(0):
        return []
    consumer = cluster.consumer(**{"group.id": unique_name("mm2-read"), "enable.auto.commit": False})
    out: list[tuple[bytes, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    break
                continue
            out.append((msg.key() or b"", msg.value() or b""))
            if (msg.offset() or 0) + 1 >= end[0]:
                break
    finally:
        consumer.close()
    return out


@dataclass
class MM2Pair:
    """Two independent single-broker clusters (``east``, ``west``) and MirrorMaker 2 from east to west."""

    east: Cluster
    west: Cluster
    mm2: MirrorMaker2

    def close(self, pool: ClusterPool) -> None:
        """Stop MirrorMaker (SIGKILL: its progress is thrown away with the clusters), then both clusters."""
        self.mm2.kill()
        self.mm2.close()
        for cluster in (self.east, self.west):
            pool.release(cluster)


def start_mm2_pair(
    pool: ClusterPool,
    *,
    syncs_location: Literal["source", "target"] = "source",
    overrides: Mapping[str, str] | None = None,
) -> MM2Pair:
    """Start fresh clusters ``east`` and ``west`` (in parallel) and MirrorMaker 2 east->west."""
    with ThreadPoolExecutor(2, thread_name_prefix="mcs-mm2-pair") as starter:
        futures = [starter.submit(pool.fresh, name) for name in ("east", "west")]
    started = [f.result() for f in futures if f.exception() is None]
    failure = next((f.exception() for f in futures if f.exception() is not None), None)
    if failure is not None:
        for cluster in started:
            pool.release(cluster)
        raise failure
    east, west = started
    mm2 = MirrorMaker2(east, west, syncs_location=syncs_location, overrides=overrides)
    try:
        mm2.start()
    except BaseException:
        mm2.close()
        for cluster in (east, west):
            pool.release(cluster)
        raise
    return MM2Pair(east, west, mm2)


def read_partition(cluster: Cluster, topic: str, partition: int, start: int, count: int) -> list[RecordCopy]:
    """Up to ``count`` records of one partition from offset ``start`` (key, value, headers, timestamp)."""
    consumer = cluster.consumer(**{"group.id": unique_name("mm2-records"), "enable.auto.commit": False})
    out: list[RecordCopy] = []
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + 15.0
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            raw: Any = msg.headers() or []
            headers = tuple((str(k), v.encode() if isinstance(v, str) else v) for k, v in raw)
            out.append(RecordCopy(msg.offset() or 0, msg.key(), msg.value(), headers, msg.timestamp()[1]))
    finally:
        consumer.close()
    return out


def precreate_replica_topic(pair: MM2Pair, partitions: int, *, filler: int) -> str:
    """A new origin topic name whose replica topic exists already on west with ``filler`` records in every
    partition (MM2 appends after them, so replica offsets differ from origin offsets); the origin topic is
    created on east afterwards. Returns the origin topic's name."""
    topic = unique_name("orders")
    target = pair.mm2.replica_topic(topic)
    for cluster, name in ((pair.west, target), (pair.east, topic)):
        new = NewTopic(name, num_partitions=partitions, replication_factor=1)
        cluster.admin().create_topics([new])[name].result(30.0)
        deadline = time.monotonic() + 30.0
        while True:
            try:
                if len(end_offsets(cluster, name)) == partitions:
                    break
            except (KafkaException, KeyError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} on {cluster!r} not ready")
            time.sleep(0.1)
        if cluster is pair.west and filler:
            for p in range(partitions):
                cluster.produce(name, [b"filler"] * filler, partition=p)
    return topic
