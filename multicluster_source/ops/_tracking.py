"""Topic tracking (KIP-558, adapted to many clusters): which (cluster, topic) pairs a source really read.

The first time a reader of a source reads a record of a (cluster, topic) that is not in the source's active
set, one status record is appended to a :class:`TopicStatusStore`. The active set is the latest value per
key: a value means "read", a tombstone (``None``) removes the key. Metadata says what a source may read;
this says what it did read, so operators can tell whether a cluster is still in use before switching it off.

Keys (plain UTF-8 text)::

    topic:<source>:<cluster>/<topic>

Source names are ``[A-Za-z0-9._-]`` and hold no ``:``, so the first ``:`` after the prefix ends the source
name. Topic names are ``[A-Za-z0-9._-]`` and cluster ids hold no ``/`` (explicit ids are ``[A-Za-z0-9._-]``;
an id defaulted from ``bootstrapServers`` may hold ``:``, ``,``, ``[`` and ``]``, never ``/``), so the only
``/`` separates cluster and topic. A key that does not parse, or that belongs to another source, is skipped:
older readers survive newer writers, and several sources may share one status topic.

Values (JSON objects; unknown fields are ignored, a value that is not an object still counts, since the key
alone decides membership, as in the seed)::

    {"version": 1, "source": "billing", "cluster": "east", "topic": "orders", "reader": 2,
     "discovered_ms": 1718000000000}

Stores: :class:`LocalTopicStatusStore` (a JSON-lines file, fsync'd, compacted on load; the embedded default
under ``checkpoint_dir``), :class:`KafkaTopicStatusStore` (a compacted topic, created if absent) and
:class:`InMemoryTopicStatusStore` (the default without ``checkpoint_dir``; lives as long as the stream).

Threads: :meth:`TopicTracker.record` is called from fetch threads; appends run on one writer thread
``mcs-tracking-<source>`` so a slow or unreachable store never stalls reading. A failed append is logged and
retried when a record of that topic arrives again after a back-off.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

from multicluster_source.exceptions import MultiClusterSourceError
from multicluster_source.metadata._placeholders import resolve_properties

__all__ = [
    "RESET_DISABLED",
    "TRACKING_DISABLED",
    "InMemoryTopicStatusStore",
    "KafkaTopicStatusStore",
    "LocalTopicStatusStore",
    "TopicStatusStore",
    "TopicTracker",
    "TopicTrackingDisabledError",
    "parse_topic_status_key",
    "topic_status_key",
]

_log = logging.getLogger("multicluster_source.tracking")

KEY_PREFIX: Final = "topic:"
VALUE_VERSION: Final = 1
TRACKING_DISABLED: Final = "Topic tracking is disabled."
RESET_DISABLED: Final = "Topic tracking reset is disabled."


def topic_status_key(source: str, cluster: str, topic: str) -> str:
    """The status key of ``topic`` on ``cluster`` read by ``source``: ``topic:<source>:<cluster>/<topic>``."""
    return f"{KEY_PREFIX}{source}:{cluster}/{topic}"


def parse_topic_status_key(key: str) -> tuple[str, str, str] | None:
    """``(source, cluster, topic)`` of a status key, or None for a key this version does not know."""
    if not key.startswith(KEY_PREFIX):
        return None
    source, sep, rest = key[len(KEY_PREFIX) :].partition(":")
    if not sep or not source:
        return None
    cluster, sep, topic = rest.partition("/")
    if not sep or not cluster or not topic or "/" in topic or ":" in topic:
        return None
    return source, cluster, topic


class TopicTrackingDisabledError(MultiClusterSourceError):
    """Topic tracking (or its reset) is disabled for this source; ``message`` is the seed's wording."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# ------------------------------------------------------------------------------------------------- stores


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
        self._lock = threading.Lock()
        self._producer: Any = None

    def describe(self) -> str:
        """``kafka topic <topic> on <servers>``."""
        return f"kafka topic {self.topic} on {self.bootstrap_servers}"

    def _conf(self) -> dict[str, str]:
        conf = resolve_properties(self._props, source="topic tracking store properties")
        conf["bootstrap.servers"] = self.bootstrap_servers
        conf.setdefault("client.id", self._client_id)
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

    def _ensure_topic(self, conf: dict[str, str]) -> int:
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

    def _read_all(self, conf: dict[str, str], partitions: int) -> dict[str, Any]:
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
        """Flush and close the producer."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            left = producer.flush(self._timeout_s)
            if left:
                _log.warning("topic status topic %s: %d records not acknowledged at close", self.topic, left)
            producer.close()


# ------------------------------------------------------------------------------------------------ tracker


@dataclass(frozen=True)
class _Write:
    pair: tuple[str, str]
    key: str
    value: dict[str, Any] | None
    previous: Any = None  # the value a tombstone replaces (restored when the tombstone fails)


class TopicTracker:
    """The active (cluster, topic) set of one source, recorded in a :class:`TopicStatusStore`.

    ``record`` is cheap when the pair is known (one set lookup) and appends exactly once per pair between
    resets, however many readers race. ``reset`` and ``forget`` write tombstones; both, and ``record``,
    return before the store has the records (the writer thread appends in order; ``flush`` waits).
    """

    def __init__(
        self,
        source_name: str,
        store: TopicStatusStore,
        *,
        enabled: bool = True,
        allow_reset: bool = True,
        clock: Callable[[], float] = time.time,
        retry_backoff_s: float = 5.0,
    ) -> None:
        self.source_name = source_name
        self.store = store
        self.enabled = enabled
        self.allow_reset = allow_reset
        self._clock = clock
        self._backoff = retry_backoff_s
        self._lock = threading.Condition()
        self._active: dict[tuple[str, str], Any] = {}
        self._retry_after: dict[tuple[str, str], float] = {}
        self._queue: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._pending = 0
        self._recording = False
        self._started = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"mcs-tracking-{source_name}", daemon=True)

    # ---------------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Load the store and start the writer thread (nothing happens when tracking is disabled).

        A store that cannot be loaded raises :class:`MultiClusterSourceError` naming the source and store."""
        if not self.enabled or self._started:
            return
        try:
            entries = self.store.load()
        except MultiClusterSourceError:
            raise
        except Exception as exc:
            raise MultiClusterSourceError(
                f"source {self.source_name}: topic tracking store {self.store.describe()} could not be "
                f"loaded: {exc}"
            ) from exc
        with self._lock:
            for key, value in entries.items():
                parsed = parse_topic_status_key(key)
                if parsed is not None and parsed[0] == self.source_name:
                    self._active[(parsed[1], parsed[2])] = value
            self._started = True
            self._recording = True
        self._thread.start()
        _log.info(
            "source=%s: topic tracking in %s: %d topics recorded so far",
            self.source_name,
            self.store.describe(),
            len(self._active),
        )

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every queued append is done; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Stop recording, finish queued appends (up to ``timeout``), stop the thread, close the store."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._recording = False
        if self._started:
            if not self.flush(timeout):
                _log.warning("source=%s: topic status appends still queued at close", self.source_name)
            self._queue.put(None)
            self._thread.join(timeout)
            if self._thread.is_alive():
                _log.error("source=%s: topic tracking thread did not stop", self.source_name)
        try:
            self.store.close()
        except Exception:
            _log.exception("source=%s: topic status store close failed", self.source_name)

    # ------------------------------------------------------------------------------------------ record

    def record(self, cluster: str, topic: str, reader: int) -> None:
        """A record of ``topic`` on ``cluster`` was read by ``reader`` (any thread)."""
        pair = (cluster, topic)
        if pair in self._active or not self._recording:
            return
        with self._lock:
            if pair in self._active or not self._recording:
                return
            retry = self._retry_after.get(pair)
            if retry is not None and time.monotonic() < retry:
                return
            value = {
                "version": VALUE_VERSION,
                "source": self.source_name,
                "cluster": cluster,
                "topic": topic,
                "reader": reader,
                "discovered_ms": int(self._clock() * 1000),
            }
            self._active[pair] = value
            self._enqueue_locked(_Write(pair, topic_status_key(self.source_name, *pair), value))

    def active(self) -> dict[str, list[str]]:
        """Cluster id -> sorted topics this source has read (since the last reset)."""
        if not self.enabled:
            raise TopicTrackingDisabledError(TRACKING_DISABLED)
        with self._lock:
            pairs = sorted(self._active)
        out: dict[str, list[str]] = {}
        for cluster, topic in pairs:
            out.setdefault(cluster, []).append(topic)
        return out

    def details(self) -> list[dict[str, Any]]:
        """The recorded value of every active pair (as stored; for status pages)."""
        if not self.enabled:
            return []
        with self._lock:
            return [
                dict(v) if isinstance(v, dict) else {"cluster": c, "topic": t}
                for (c, t), v in sorted(self._active.items())
            ]

    def reset(self) -> int:
        """Tombstone every active topic of this source; they are recorded again as records arrive.

        Raises :class:`TopicTrackingDisabledError` when tracking or reset is disabled. Returns the number
        of tombstones queued.
        """
        if not self.enabled:
            raise TopicTrackingDisabledError(TRACKING_DISABLED)
        if not self.allow_reset:
            raise TopicTrackingDisabledError(RESET_DISABLED)
        with self._lock:
            return self._tombstone_all_locked()

    def forget(self, timeout: float = 30.0) -> int:
        """Close for good: tombstone this source's whole history (even when reset is not allowed, and when
        tracking is disabled: the store is then read for it) and stop recording. Returns tombstones written.
        """
        if self._closed:
            raise MultiClusterSourceError("topic tracker is closed: forget before closing")
        if not self._started:
            return self._forget_unstarted()
        with self._lock:
            self._recording = False
            n = self._tombstone_all_locked()
        if not self.flush(timeout):
            _log.warning("source=%s: forgetting topic history timed out", self.source_name)
        return n

    def _forget_unstarted(self) -> int:
        entries = self.store.load()
        n = 0
        for key in sorted(entries):
            parsed = parse_topic_status_key(key)
            if parsed is not None and parsed[0] == self.source_name:
                self.store.append(key, None)
                n += 1
        return n

    def _tombstone_all_locked(self) -> int:
        items = sorted(self._active.items())
        self._active.clear()
        self._retry_after.clear()
        for pair, previous in items:
            key = topic_status_key(self.source_name, *pair)
            self._enqueue_locked(_Write(pair, key, None, previous))
        if items:
            _log.info("source=%s: topic tracking reset: %d topics", self.source_name, len(items))
        return len(items)

    def _enqueue_locked(self, write: _Write) -> None:
        self._pending += 1
        self._queue.put(write)

    # ----------------------------------------------------------------------------------- writer thread

    def _run(self) -> None:
        while True:
            write = self._queue.get()
            if write is None:
                return
            try:
                self.store.append(write.key, write.value)
            except Exception as exc:
                self._failed(write, exc)
            finally:
                with self._lock:
                    self._pending -= 1
                    self._lock.notify_all()

    def _failed(self, write: _Write, exc: Exception) -> None:
        with self._lock:
            if write.value is not None:
                # Not recorded: forget it so the next record of the topic (after a back-off) tries again.
                if self._active.get(write.pair) is write.value:
                    del self._active[write.pair]
                    self._retry_after[write.pair] = time.monotonic() + self._backoff
                what = "recording"
            else:
                # The store still has it: keep it active so another reset tombstones it again.
                self._active.setdefault(write.pair, write.previous)
                what = "resetting"
        _log.warning(
            "source=%s: topic tracking: %s %s/%s failed: %s",
            self.source_name,
            what,
            write.pair[0],
            write.pair[1],
            exc,
        )
