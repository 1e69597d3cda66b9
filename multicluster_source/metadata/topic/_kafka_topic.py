"""Stream metadata kept in a compacted Kafka topic: the reading service.

The record format (keys, values, commits, inconsistency rules) is described in ``_topic_records``.

:class:`KafkaTopicMetadataService`, whose methods are called from the caller's threads:

- ``start()`` (called by the first read, subscription or ``with``) checks the topic (see ``_topic_client``):
  it must have exactly one partition and ``cleanup.policy`` exactly ``compact``; otherwise a
  :class:`MetadataError` names the topic and what is wrong. An absent topic is created that way
  (``create_topic=True``) or is a :class:`MetadataTopicMissingError`.
- ``start()`` then starts the background thread ``metadata-topic[<topic>]`` (see ``_topic_reader``): it
  reads the topic from the beginning with ``isolation.level=read_committed`` and publishes nothing until
  its position reaches the end offset (the last stable offset) read at its start.
- The first read waits for that initial catch-up up to ``catch_up_timeout`` seconds from ``start()`` and
  then fails with a :class:`MetadataError` naming the topic and the bootstrap servers; later reads fail at
  once while the catch-up is still not done.
- After the catch-up, reads answer from the latest published :class:`MetadataSnapshot`, and listeners are
  called from the reader thread after every change.

The single writer of the topic (:class:`KafkaTopicMetadataWriter`) is in ``_topic_writer``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from types import TracebackType

from confluent_kafka.admin import AdminClient

from multicluster_source.exceptions import ConfigurationError, MetadataError
from multicluster_source.metadata._model import KafkaStream, MetadataListener
from multicluster_source.metadata.topic._topic_client import (
    check_arguments,
    client_config,
    describe_source,
    ensure_topic,
)
from multicluster_source.metadata.topic._topic_log import MetadataSnapshot
from multicluster_source.metadata.topic._topic_reader import TopicReader

__all__ = ["KafkaTopicMetadataService"]

_log = logging.getLogger("multicluster_source.metadata")


class KafkaTopicMetadataService(TopicReader):
    """Stream metadata read from a single-partition compacted Kafka topic, applied atomically per stream.

    Satisfies :class:`KafkaMetadataService` and :class:`NotifyingMetadataService`. Reads answer from the
    latest :meth:`snapshot`; the first read starts the service and waits for the initial catch-up (see the
    module documentation). ``client_properties`` are extra client settings for the cluster holding the
    topic (security, ...); ``${env:...}`` and ``${file:...}`` placeholders in them are resolved at start.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        client_properties: Mapping[str, str] | None = None,
        create_topic: bool = True,
        replication_factor: int = 1,
        catch_up_timeout: float = 30.0,
    ) -> None:
        check_arguments(bootstrap_servers, topic)
        if replication_factor < 1:
            raise ConfigurationError(f"replication_factor must be at least 1, got {replication_factor}")
        if not catch_up_timeout > 0:
            raise ConfigurationError(f"catch_up_timeout must be positive, got {catch_up_timeout}")
        super().__init__(topic, describe_source(topic, bootstrap_servers))
        self._bootstrap = bootstrap_servers
        self._properties = dict(client_properties or {})
        self._create_topic = bool(create_topic)
        self._replication_factor = int(replication_factor)
        self._catch_up_timeout = float(catch_up_timeout)
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._deadline = 0.0
        self._closed = False

    # ------------------------------------------------------------------------------------- properties

    @property
    def topic(self) -> str:
        """The metadata topic."""
        return self._topic

    @property
    def bootstrap_servers(self) -> str:
        """The bootstrap servers of the cluster holding the topic."""
        return self._bootstrap

    @property
    def caught_up(self) -> bool:
        """Whether the initial catch-up is done (snapshots are available)."""
        return self._snapshot is not None

    def __repr__(self) -> str:
        return f"KafkaTopicMetadataService({self._bootstrap!r}, {self._topic!r})"

    # ------------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Check (or create) the topic and start the reader thread; idempotent.

        Raises :class:`MetadataError` when the topic is invalid, absent (and may not be created) or cannot be
        checked; a later call tries again.
        """
        with self._start_lock:
            if self._closed:
                raise MetadataError("the service is closed", source=self._source)
            if self._thread is not None:
                return
            conf = client_config(self._bootstrap, self._properties, source=self._source)
            ensure_topic(
                AdminClient(conf),
                self._topic,
                create=self._create_topic,
                replication_factor=self._replication_factor,
                timeout=self._catch_up_timeout,
                source=self._source,
            )
            consumer_conf = {
                **conf,
                "group.id": conf.get("group.id") or f"multicluster-metadata-reader-{uuid.uuid4().hex[:12]}",
                "client.id": conf.get("client.id") or "multicluster-metadata-reader",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
            self._deadline = time.monotonic() + self._catch_up_timeout
            thread = threading.Thread(
                target=self._run, args=(consumer_conf,), name=f"metadata-topic[{self._topic}]", daemon=True
            )
            self._thread = thread
            thread.start()

    def close(self) -> None:
        """Stop and join the reader thread (which closes its consumer) and drop the listeners; idempotent.

        The last snapshot can still be read afterwards; it no longer changes.
        """
        with self._start_lock:
            self._closed = True
            thread = self._thread
        with self._cond:
            self._listeners.clear()
            self._cond.notify_all()
        self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(30.0)
            if thread.is_alive():
                _log.warning("%s: the reader thread did not stop within 30s", self._source)

    def __enter__(self) -> KafkaTopicMetadataService:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------------------------- reading

    def snapshot(self) -> MetadataSnapshot:
        """The latest consistent view (streams, clusters, inconsistencies, offset); waits for the catch-up.

        Raises :class:`MetadataError` when the catch-up does not finish in time or the reader failed.
        """
        self._start_if_open()
        with self._cond:
            while True:
                if self._failure is not None:
                    raise MetadataError(self._failure.reason, source=self._source) from self._failure
                if self._snapshot is not None:
                    return self._snapshot
                if self._closed:
                    raise MetadataError("the service was closed before it caught up", source=self._source)
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    raise MetadataError(self._not_caught_up_message(), source=self._source)
                self._cond.wait(remaining)

    def _start_if_open(self) -> None:
        """Start the service unless it was closed (then reads answer from the last snapshot)."""
        if not self._closed:
            self.start()

    def wait_for_offset(self, offset: int, timeout: float = 30.0) -> MetadataSnapshot:
        """Wait until a snapshot reflects the log up to ``offset`` (exclusive) and return it.

        After a publish, pass ``summary.next_offset``. Raises :class:`MetadataError` on timeout.
        """
        self.snapshot()
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                snap = self._snapshot
                if snap is not None and snap.offset >= offset:
                    return snap
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed or self._failure is not None:
                    have = "nothing" if snap is None else f"offset {snap.offset}"
                    raise MetadataError(
                        f"did not read up to offset {offset} within {timeout}s (read {have})",
                        source=self._source,
                    )
                self._cond.wait(remaining)

    def get_all_streams(self) -> set[KafkaStream]:
        """Every stream in effect (each the last consistent version of it)."""
        return self.snapshot().stream_set()

    def describe_streams(self, stream_ids: Collection[str]) -> dict[str, KafkaStream]:
        """The named streams in effect; unknown ids are left out."""
        streams = self.snapshot().streams
        return {sid: streams[sid] for sid in stream_ids if sid in streams}

    def is_cluster_active(self, cluster_id: str) -> bool:
        """Whether any stream in effect uses ``cluster_id``."""
        return any(cluster_id in s.clusters for s in self.snapshot().streams.values())

    def inconsistent_streams(self) -> set[str]:
        """Ids of streams whose latest commit cannot be satisfied (their last consistent version stays)."""
        return set(self.snapshot().inconsistent)

    def subscribe(self, listener: MetadataListener) -> Callable[[], None]:
        """Call ``listener`` (from the reader thread) after the catch-up and after every applied change.

        Starts the service if needed. Returns a function that unregisters the listener (idempotent).
        """
        with self._cond:
            self._listeners.append(listener)
        self._start_if_open()

        def unsubscribe() -> None:
            with self._cond:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    # ------------------------------------------------------------------------------------- the reader

    def _not_caught_up_message(self) -> str:
        last = f"; last error: {self._last_error}" if self._last_error else ""
        return (
            f"did not catch up with the topic within {self._catch_up_timeout}s of start "
            f"({self._progress}){last}"
        )
