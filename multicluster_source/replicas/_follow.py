"""Following MirrorMaker 2's offset syncs (:class:`SyncFollower`) and reading its checkpoints
(:func:`read_checkpoints`).

The follower is one thread, ``mcs-replica-<replica cluster id>-syncs``, with one assign-only consumer of the
syncs topic's partition 0 (where ``replicaOf`` says it lives), from the beginning and then as it grows. Every
sync goes into a :class:`~._store.SyncStore`; a record that does not decode is skipped and counted, never
fatal. It is :meth:`ready` once it has read up to the end the topic had when it was first found (as MM2's
own store does before it translates). While the topic does not exist it is looked for again after 1, 2, 4,
... up to 10 s; a cluster that is down is retried by librdkafka with the source's reconnect backoff, and
every wait is bounded so that :meth:`close` returns within about a second (it joins the thread and closes
the consumer).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from multicluster_source.framework._clientconf import cluster_client_config
from multicluster_source.metadata._model import ClusterMetadata
from multicluster_source.ops._clientlog import client_logging
from multicluster_source.replicas._codec import (
    Checkpoint,
    MM2RecordError,
    decode_checkpoint,
    decode_offset_sync,
)
from multicluster_source.replicas._store import SyncStore

__all__ = ["SyncFollower", "read_checkpoints"]

_log = logging.getLogger("multicluster_source.replicas")

_POLL_S = 0.5
_ABSENT_BACKOFF_MAX_S = 10.0


def _consumer(cluster: ClusterMetadata, properties: Mapping[str, str], role: str, client_id: str) -> Consumer:
    extra: dict[str, Any] = {
        "group.id": f"mcs-replica-{role}",
        "enable.auto.commit": "false",
        "enable.auto.offset.store": "false",
        "enable.partition.eof": "true",
        "auto.offset.reset": "earliest",
        "isolation.level": "read_uncommitted",
        **client_logging(cluster.cluster_id, f"replica {role}"),
    }
    return Consumer(cluster_client_config(cluster, properties, client_id=client_id, extra=extra))


class SyncFollower:
    """Follows one offset-syncs topic into a :class:`SyncStore` (see the module text)."""

    def __init__(
        self,
        cluster: ClusterMetadata,
        topic: str,
        store: SyncStore,
        *,
        replica_id: str,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.store = store
        self.replica_id = replica_id
        self._properties = dict(properties or {})
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Consumer | None = None
        self.bad_records = 0
        """Records of the syncs topic that did not decode (skipped)."""
        self.records = 0
        """Records read from the syncs topic."""
        self.found = False
        """Whether the syncs topic has been found on its cluster."""
        self.last_error: str | None = None

    @property
    def thread_name(self) -> str:
        """``mcs-replica-<replica id>-syncs``."""
        return f"mcs-replica-{self.replica_id}-syncs"

    def start(self) -> None:
        """Starts the thread (once)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def ready(self) -> bool:
        """Whether the syncs up to the end seen when the topic was found have all been read."""
        return self._ready.is_set()

    def wait_ready(self, deadline: float) -> bool:
        """Waits until :meth:`ready` or the monotonic ``deadline``; returns :meth:`ready`."""
        return self._ready.wait(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        """Stops and joins the thread; the thread closes its consumer. Idempotent."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(10.0)
            if thread.is_alive():
                _log.warning("cluster=%s: %s did not stop within 10 s", self.cluster.cluster_id, thread.name)

    # -- the thread --------------------------------------------------------------------------------------

    def _run(self) -> None:
        cid = self.cluster.cluster_id
        try:
            consumer = _consumer(
                self.cluster, self._properties, "syncs", f"mcs-replica-{self.replica_id}-syncs"
            )
        except (KafkaException, ValueError) as exc:  # a bad property or placeholder: nothing to follow
            self.last_error = str(exc)
            _log.error("cluster=%s: cannot follow the offset syncs %s: %s", cid, self.topic, exc)
            return
        try:
            end = self._await_topic(consumer)
            if end is None:
                return
            consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
            if end == 0:
                self._ready.set()
            _log.info("cluster=%s: following the offset syncs in %s (%d to read first)", cid, self.topic, end)
            while not self._stop.is_set():
                for msg in consumer.consume(500, timeout=_POLL_S):
                    self._handle(msg, end)
        except Exception:  # the thread must end, and its consumer close, whatever happens
            _log.exception("cluster=%s: following the offset syncs in %s failed", cid, self.topic)
        finally:
            try:
                consumer.close()
            except (KafkaException, RuntimeError) as exc:
                _log.debug("cluster=%s: closing the syncs consumer: %s", cid, exc)

    def _await_topic(self, consumer: Consumer) -> int | None:
        """The syncs topic's end when it is first found; None when stopped before."""
        backoff = 1.0
        while not self._stop.is_set():
            try:
                md = consumer.list_topics(self.topic, timeout=5.0)
                meta = md.topics.get(self.topic)
                if meta is not None and meta.error is None and 0 in meta.partitions:
                    _low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=5.0)
                    self.found = True
                    return int(high)
                self.last_error = f"the offset-syncs topic {self.topic} does not exist (yet)"
            except KafkaException as exc:
                self.last_error = str(exc)
            _log.debug(
                "cluster=%s: %s; looking again in %.0f s", self.cluster.cluster_id, self.last_error, backoff
            )
            if self._stop.wait(backoff):
                return None
            backoff = min(_ABSENT_BACKOFF_MAX_S, backoff * 2)
        return None

    def _handle(self, msg: Any, end: int) -> None:
        error = msg.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                self._ready.set()
            else:
                self.last_error = error.str()
            return
        offset = msg.offset() or 0
        self.records += 1
        try:
            sync = decode_offset_sync(msg.key(), msg.value(), source=self.topic, partition=0, offset=offset)
        except MM2RecordError as exc:
            self.bad_records += 1
            level = logging.WARNING if self.bad_records == 1 else logging.DEBUG
            _log.log(
                level,
                "cluster=%s: skipped a record (%d so far): %s",
                self.cluster.cluster_id,
                self.bad_records,
                exc,
            )
        else:
            self.store.add(sync)
        if offset + 1 >= end:
            self._ready.set()


def read_checkpoints(
    cluster: ClusterMetadata,
    topic: str,
    *,
    group_id: str,
    properties: Mapping[str, str] | None = None,
    timeout_s: float = 5.0,
) -> dict[tuple[str, int], Checkpoint]:
    """The newest MM2 checkpoint of ``group_id`` per downstream ``(topic, partition)`` in the checkpoints
    topic ``topic`` on ``cluster`` (the replica), read to its current end within ``timeout_s``; records that
    do not decode are skipped (logged). Raises KafkaException when the cluster cannot be asked."""
    consumer = _consumer(
        cluster, dict(properties or {}), "checkpoints", f"mcs-replica-{cluster.cluster_id}-ckpt"
    )
    found: dict[tuple[str, int], Checkpoint] = {}
    try:
        md = consumer.list_topics(topic, timeout=timeout_s)
        meta = md.topics.get(topic)
        if meta is None or meta.error is not None:
            return found
        deadline = time.monotonic() + timeout_s
        ends: dict[int, int] = {}
        for p in meta.partitions:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            if high > 0:
                ends[p] = int(high)
        if not ends:
            return found
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        done: set[int] = set()
        while len(done) < len(ends) and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.2):
                error = msg.error()
                part = msg.partition() or 0
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        done.add(part)
                    continue
                offset = msg.offset() or 0
                if offset + 1 >= ends.get(part, 0):
                    done.add(part)
                try:
                    cp = decode_checkpoint(
                        msg.key(), msg.value(), source=topic, partition=part, offset=offset
                    )
                except MM2RecordError as exc:
                    _log.warning("cluster=%s: skipped a record: %s", cluster.cluster_id, exc)
                    continue
                if cp.group == group_id:
                    found[(cp.topic, cp.partition)] = cp
    finally:
        consumer.close()
    return found
