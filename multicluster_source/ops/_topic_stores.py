"""Topic status stores: where the records of topic tracking (:mod:`multicluster_source.ops._tracking`) live.

A store keeps an append-only log of ``(key, value)`` records; the live set is the latest value per key, a
``None`` value (a tombstone) removes the key. Keys and values are the tracker's business: a store keeps
any text key and any JSON value.

- :class:`TopicStatusStore`: the protocol (``describe``, ``load``, ``append``, ``close``).
- :class:`InMemoryTopicStatusStore`: lives as long as the object (the default without ``checkpoint_dir``).
- :class:`LocalTopicStatusStore`: a JSON-lines file, fsync'd, compacted on load (the embedded default
  under ``checkpoint_dir``).
- :class:`KafkaTopicStatusStore`: a compacted topic, created if absent.

Threads: one :class:`~multicluster_source.ops._tracking.TopicTracker` uses a store. ``load`` runs on the
thread that starts the tracker, ``append`` on its writer thread ``mcs-tracking-<source>`` (or, when a tracker
that was never started forgets its history, on the caller's thread), ``close`` on the thread that closes the
tracker. Each store takes its own lock, so the calls may also come from any thread.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from multicluster_source.exceptions import MultiClusterSourceError
from multicluster_source.metadata._connection import ThrottledClientLog, with_connection_defaults
from multicluster_source.metadata._placeholders import resolve_properties

__all__ = [
    "InMemoryTopicStatusStore",
    "KafkaTopicStatusStore",
    "LocalTopicStatusStore",
    "TopicStatusStore",
]

_CLOSE_FLUSH_S = 2.0
_log = logging.getLogger("multicluster_source.tracking")


@runtime_checkable
class TopicStatusStore(Protocol):
    """Where topic status records live. Called from one tracker; ``load`` may follow ``close`` (re-open)."""

    def describe(self) -> str:
        """What and where the store is, for status pages (never a secret)."""
        ...

    def load(self) -> dict[str, Any]:
        """Open the store and return the latest value of every live key (tombstoned keys are absent)."""
        ...

    def append(self, key: str, value: Mapping[str, Any] | None) -> None:
        """Append one record durably (``None``: a tombstone); raises when it could not be stored."""
        ...

    def close(self) -> None:
        """Release files and clients."""
        ...


class InMemoryTopicStatusStore:
    """A store that lives as long as the object (the default when the stream has no ``checkpoint_dir``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, Any] = {}
        self.appends: list[tuple[str, Mapping[str, Any] | None]] = []
        """Every append in order (for tests)."""

    def describe(self) -> str:
        """``memory``."""
        return "memory"

    def load(self) -> dict[str, Any]:
        """The live entries."""
        with self._lock:
            return dict(self._live)

    def append(self, key: str, value: Mapping[str, Any] | None) -> None:
        """Remember one record."""
        with self._lock:
            self.appends.append((key, None if value is None else dict(value)))
            if value is None:
                self._live.pop(key, None)
            else:
                self._live[key] = dict(value)

    def close(self) -> None:
        """Nothing to release."""


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalTopicStatusStore:
    """A JSON-lines file: one ``{"key": ..., "value": {...} | null}`` per line, each append fsync'd.

    ``load`` reads every line (a torn or unreadable line, e.g. after a crash mid-write, is skipped), keeps
    the latest value per key, and rewrites the file with the live entries only (write, fsync, rename, fsync
    directory). It is compacted the same way when it holds more than four times as many lines as live keys
    (and over a thousand). One process at a time.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._fh: Any = None
        self._live: dict[str, Any] = {}
        self._lines = 0

    def describe(self) -> str:
        """``file <path>``."""
        return f"file {self.path}"

    def load(self) -> dict[str, Any]:
        """Read, compact and open the file for appending."""
        with self._lock:
            self._close_locked()
            self._live = {}
            skipped = 0
            try:
                text = self.path.read_text(encoding="utf-8")
            except FileNotFoundError:
                text = ""
            for line in text.splitlines():
                if not line.strip():
                    continue
                try:
                    doc = json.loads(line)
                    key, value = doc["key"], doc.get("value")
                except (ValueError, KeyError, TypeError):
                    skipped += 1
                    continue
                if not isinstance(key, str):
                    skipped += 1
                elif value is None:
                    self._live.pop(key, None)
                else:
                    self._live[key] = value
            if skipped:
                _log.warning("topic status file %s: skipped %d unreadable lines", self.path, skipped)
            self._compact_locked()
            return dict(self._live)

    def append(self, key: str, value: Mapping[str, Any] | None) -> None:
        """Append one line and fsync it."""
        with self._lock:
            if self._fh is None:
                raise MultiClusterSourceError(f"topic status file {self.path} is not open")
            line = json.dumps({"key": key, "value": None if value is None else dict(value)})
            self._fh.write(line + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._lines += 1
            if value is None:
                self._live.pop(key, None)
            else:
                self._live[key] = dict(value)
            if self._lines > 1000 and self._lines > 4 * len(self._live):
                self._compact_locked()

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def _compact_locked(self) -> None:
        self._close_locked()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for key, value in sorted(self._live.items()):
                fh.write(json.dumps({"key": key, "value": value}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)
        self._lines = len(self._live)
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open until close()


class KafkaTopicStatusStore:
    """A compacted status topic on a cluster the user names (created with one partition if absent).

    ``load`` reads every partition from the beginning to the end offsets it had when the load started
    (an assign-based consumer, closed afterwards) and opens an idempotent producer; ``append`` produces one
    record (key and JSON value as UTF-8; ``None`` is a tombstone) and waits until it is acknowledged.
    ``client_properties`` (security settings, ...) may hold ``${env:NAME}``/``${file:PATH}`` placeholders,
    resolved when the clients are created; they are never shown (``describe`` names servers and topic only).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        client_properties: Mapping[str, str] | None = None,
        *,
        replication_factor: int = -1,
        timeout_s: float = 30.0,
        client_id: str = "multicluster-source-topic-tracking",
    ) -> None:
        if not bootstrap_servers or not topic:
            raise ValueError("KafkaTopicStatusStore needs bootstrap servers and a topic")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self._props = dict(client_properties or {})
        self._replication_factor = replication_factor
        self._timeout_s = timeout_s
        self._client_id = client_id
        self._client_log = ThrottledClientLog(logging.getLogger(f"multicluster_source.client.{client_id}"))
        self._lock = threading.Lock()
        self._producer: Any = None

    def describe(self) -> str:
        """``kafka topic <topic> on <servers>``."""
        return f"kafka topic {self.topic} on {self.bootstrap_servers}"

    def _conf(self) -> dict[str, Any]:
        conf: dict[str, Any] = dict(resolve_properties(self._props, source="topic tracking store properties"))
        conf["bootstrap.servers"] = self.bootstrap_servers
        conf.setdefault("client.id", self._client_id)
        # a cluster that is down is retried with a growing backoff; librdkafka's lines in Python logging
        conf = with_connection_defaults(conf)
        conf["logger"] = self._client_log
        return conf

    def load(self) -> dict[str, Any]:
        """Create the topic if needed, read it to the end, open the producer."""
        with self._lock:
            self._close_locked()
            conf = self._conf()
            partitions = self._ensure_topic(conf)
            live = self._read_all(conf, partitions)
            producer_conf: dict[str, Any] = {
                **conf,
                "enable.idempotence": "true",
                "acks": "all",
                "linger.ms": "0",
            }
            from confluent_kafka import Producer

            self._producer = Producer(producer_conf)
            return live

    def _ensure_topic(self, conf: dict[str, Any]) -> int:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient(dict(conf))
        deadline = time.monotonic() + self._timeout_s
        created = False
        while True:
            md = admin.list_topics(timeout=max(0.1, deadline - time.monotonic()))
            found = md.topics.get(self.topic)
            if found is not None and found.error is None and found.partitions:
                return len(found.partitions)
            if not created:
                futures = admin.create_topics(
                    [
                        NewTopic(
                            self.topic,
                            num_partitions=1,
                            replication_factor=self._replication_factor,
                            config={"cleanup.policy": "compact"},
                        )
                    ],
                    request_timeout=self._timeout_s,
                )
                try:
                    futures[self.topic].result(timeout=self._timeout_s)
                    _log.info("created compacted topic status topic %s", self.topic)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
                created = True
            if time.monotonic() >= deadline:
                raise MultiClusterSourceError(
                    f"topic status topic {self.topic} on {self.bootstrap_servers}: "
                    f"not available within {self._timeout_s:g} s"
                )
            time.sleep(0.1)

    def _read_all(self, conf: dict[str, Any], partitions: int) -> dict[str, Any]:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer_conf: dict[str, Any] = {
            **conf,
            "group.id": f"{self._client_id}-reader",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
        }
        consumer = Consumer(consumer_conf)
        live: dict[str, Any] = {}
        try:
            ends: dict[int, int] = {}
            for p in range(partitions):
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=self._timeout_s
                )
                if high > low:
                    ends[p] = high
            if not ends:
                return live
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in ends])
            deadline = time.monotonic() + self._timeout_s
            while ends:
                if time.monotonic() >= deadline:
                    raise MultiClusterSourceError(
                        f"topic status topic {self.topic}: not read to its end within {self._timeout_s:g} s"
                    )
                for msg in consumer.consume(1000, 0.2):
                    if msg.error() is not None:
                        _log.warning("topic status topic %s: %s", self.topic, msg.error())
                        continue
                    self._apply(live, msg.key(), msg.value())
                    partition, offset = int(msg.partition() or 0), int(msg.offset() or 0)
                    end = ends.get(partition)
                    if end is not None and offset + 1 >= end:
                        del ends[partition]
                # A compacted log may end with a gap: the position tells when the end was passed.
                for tp in consumer.position([TopicPartition(self.topic, p) for p in list(ends)]):
                    if tp.offset >= 0 and tp.offset >= ends.get(tp.partition, 0):
                        ends.pop(tp.partition, None)
        finally:
            consumer.close()
        return live

    @staticmethod
    def _apply(live: dict[str, Any], key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError:
            return
        if value is None:
            live.pop(text, None)
            return
        try:
            live[text] = json.loads(value)
        except ValueError:
            live[text] = {}  # the key decides membership; details are lost

    def append(self, key: str, value: Mapping[str, Any] | None) -> None:
        """Produce one record and wait for its acknowledgement."""
        with self._lock:
            producer = self._producer
            if producer is None:
                raise MultiClusterSourceError(f"topic status topic {self.topic}: store is not open")
            errors: list[Any] = []

            def delivered(err: Any, _msg: Any) -> None:
                if err is not None:
                    errors.append(err)

            payload = None if value is None else json.dumps(dict(value)).encode("utf-8")
            producer.produce(self.topic, key=key.encode("utf-8"), value=payload, on_delivery=delivered)
            left = producer.flush(self._timeout_s)
            if errors or left:
                reason = errors[0] if errors else f"not acknowledged within {self._timeout_s:g} s"
                raise MultiClusterSourceError(f"topic status topic {self.topic}: append failed: {reason}")

    def close(self) -> None:
        """Flush (at most 2 s: every append already waited for its acknowledgement) and close the producer,
        so closing returns soon even when the cluster is down."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            left = producer.flush(min(self._timeout_s, _CLOSE_FLUSH_S))
            if left:
                _log.warning("topic status topic %s: %d records not acknowledged at close", self.topic, left)
            producer.close()
