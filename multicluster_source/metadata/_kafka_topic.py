"""Stream metadata kept in a compacted Kafka topic: the reading service and the single writer.

The record format (keys, values, commits, inconsistency rules) is described in ``_topic_records``.

Reading (:class:`KafkaTopicMetadataService`):

- ``start()`` (called by the first read, subscription or ``with``) checks the topic: it must have exactly one
  partition and ``cleanup.policy`` exactly ``compact``; otherwise a :class:`MetadataError` names the topic
  and what is wrong. When the broker cannot describe the topic's configuration, only a warning is logged.
  An absent topic is created that way (``create_topic=True``) or is a :class:`MetadataTopicMissingError`.
- A background thread ``metadata-topic[<topic>]`` reads partition 0 from the beginning with
  ``isolation.level=read_committed`` (records of aborted transactions are never seen; an open transaction
  holds readers at its start) and applies every record to a :class:`MetadataLog`.
- The end offset (the last stable offset) is read once at start; until the reader's position reaches it,
  nothing is published. The first read waits for that initial catch-up up to ``catch_up_timeout`` seconds
  from ``start()`` and then fails with a :class:`MetadataError` naming the topic and the bootstrap servers;
  later reads fail at once while the catch-up is still not done.
- After the catch-up every consumed batch that changes the metadata publishes a new immutable
  :class:`MetadataSnapshot` and calls the listeners (from the reader thread); the snapshot's offset follows
  the reader's position even when nothing changed. Newly inconsistent streams are logged as warnings with
  the reason, resolved ones at info level.

Writing (:class:`KafkaTopicMetadataWriter`): a transactional producer with a stable ``transactional.id``
(default ``multicluster-metadata-writer-<topic>``). Creating a writer fences any older writer with the same
id and aborts its unfinished transaction; the fenced writer's next publish raises
:class:`MetadataWriterFencedError`. ``publish`` diffs the wanted streams against a snapshot (see
:func:`plan_publish`) and writes only what changed, in one transaction. To diff against everything in the
topic, take the snapshot *after* creating the writer (the command-line tool does).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicCollection,
    TopicPartition,
)

# documented public names of confluent_kafka.admin that the package does not mark as re-exported
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from multicluster_source.exceptions import ConfigurationError, MetadataError
from multicluster_source.metadata._model import KafkaStream, MetadataListener
from multicluster_source.metadata._parser import topic_name_problem
from multicluster_source.metadata._placeholders import redact_properties, resolve_properties
from multicluster_source.metadata._topic_records import (
    MetadataLog,
    MetadataSnapshot,
    WritePlan,
    plan_publish,
)

__all__ = [
    "KafkaTopicMetadataService",
    "KafkaTopicMetadataWriter",
    "MetadataSnapshot",
    "MetadataTopicMissingError",
    "MetadataWriterFencedError",
    "WriteSummary",
    "check_metadata_topic",
    "default_transactional_id",
]

_log = logging.getLogger("multicluster_source.metadata")

_FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})
_ABSENT_CODES = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})
_BATCH = 1000
_POLL_SECONDS = 0.2


class MetadataTopicMissingError(MetadataError):
    """The metadata topic does not exist and may not be created."""


class MetadataWriterFencedError(MetadataError):
    """A newer writer with the same ``transactional.id`` took over; this writer can no longer write."""


def _describe_source(topic: str, bootstrap_servers: str) -> str:
    return f"metadata topic {topic!r} at {bootstrap_servers}"


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        err: KafkaError = exc.args[0]
        return f"{err.str()} ({err.name()})"
    return str(exc) or type(exc).__name__


def _kafka_error(exc: KafkaException) -> KafkaError | None:
    first = exc.args[0] if exc.args else None
    return first if isinstance(first, KafkaError) else None


def _check_arguments(bootstrap_servers: str, topic: str) -> None:
    if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
        raise ConfigurationError("bootstrap_servers must be a non-empty host:port list")
    problem = topic_name_problem(topic) if isinstance(topic, str) else "the topic must be a string"
    if problem:
        raise ConfigurationError(f"metadata topic: {problem}")


def _client_config(
    bootstrap_servers: str, client_properties: Mapping[str, str] | None, *, source: str
) -> dict[str, Any]:
    """Resolved client configuration (contains secrets: never log it)."""
    props = dict(client_properties or {})
    if props:
        _log.debug("%s: client properties %s", source, redact_properties(props))
    conf: dict[str, Any] = dict(resolve_properties(props, source=f"{source} client properties"))
    conf["bootstrap.servers"] = bootstrap_servers
    return conf


def check_metadata_topic(
    bootstrap_servers: str,
    topic: str,
    *,
    client_properties: Mapping[str, str] | None = None,
    create: bool = False,
    replication_factor: int = 1,
    timeout: float = 30.0,
) -> bool:
    """Check (and with ``create`` create) the metadata topic; returns whether it exists afterwards.

    Without ``create`` an absent topic returns False. Raises :class:`MetadataError` for a topic with other
    than one partition or a ``cleanup.policy`` other than ``compact``, and when the cluster cannot be asked.
    """
    _check_arguments(bootstrap_servers, topic)
    source = _describe_source(topic, bootstrap_servers)
    conf = _client_config(bootstrap_servers, client_properties, source=source)
    try:
        _ensure_topic(
            AdminClient(conf),
            topic,
            create=create,
            replication_factor=replication_factor,
            timeout=timeout,
            source=source,
        )
    except MetadataTopicMissingError:
        return False
    return True


def _ensure_topic(
    admin: AdminClient, topic: str, *, create: bool, replication_factor: int, timeout: float, source: str
) -> None:
    description = _describe_topic(admin, topic, timeout=timeout, source=source)
    if description is None:
        if not create:
            raise MetadataTopicMissingError(
                "the topic does not exist (create it with 1 partition and cleanup.policy=compact, "
                "or allow the service to create it)",
                source=source,
            )
        if _create_topic(admin, topic, replication_factor=replication_factor, timeout=timeout, source=source):
            return
        description = _describe_topic(admin, topic, timeout=timeout, source=source)
        if description is None:
            raise MetadataError("the topic was reported to exist but cannot be described", source=source)
    partitions = len(description.partitions)
    if partitions != 1:
        raise MetadataError(
            f"the topic has {partitions} partitions; a metadata topic must have exactly 1 "
            "(its single log orders the writes)",
            source=source,
        )
    policy = _cleanup_policy(admin, topic, timeout=timeout, source=source)
    if policy is not None and policy.replace(" ", "") != "compact":
        raise MetadataError(
            f"the topic has cleanup.policy={policy!r}; a metadata topic must have cleanup.policy=compact "
            "exactly (retention would delete metadata that is still in effect)",
            source=source,
        )


def _describe_topic(admin: AdminClient, topic: str, *, timeout: float, source: str) -> Any:
    futures = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)
    try:
        return futures[topic].result(timeout + 5.0)
    except KafkaException as exc:
        err = _kafka_error(exc)
        if err is not None and err.code() in _ABSENT_CODES:
            return None
        raise MetadataError(f"cannot describe the topic: {_error_text(exc)}", source=source) from exc
    except TimeoutError as exc:
        raise MetadataError(f"cannot describe the topic within {timeout}s", source=source) from exc


def _create_topic(
    admin: AdminClient, topic: str, *, replication_factor: int, timeout: float, source: str
) -> bool:
    """Create the topic; True when created here, False when somebody else created it meanwhile."""
    new = NewTopic(
        topic,
        num_partitions=1,
        replication_factor=replication_factor,
        config={"cleanup.policy": "compact"},
    )
    future = admin.create_topics([new], operation_timeout=timeout, request_timeout=timeout)[topic]
    try:
        future.result(timeout + 5.0)
    except KafkaException as exc:
        err = _kafka_error(exc)
        if err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise MetadataError(f"cannot create the topic: {_error_text(exc)}", source=source) from exc
    except TimeoutError as exc:
        raise MetadataError(f"cannot create the topic within {timeout}s", source=source) from exc
    _log.info(
        "%s: created the topic (1 partition, replication factor %d, cleanup.policy=compact)",
        source,
        replication_factor,
    )
    return True


def _cleanup_policy(admin: AdminClient, topic: str, *, timeout: float, source: str) -> str | None:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        futures = admin.describe_configs([resource], request_timeout=timeout)
        entries = next(iter(futures.values())).result(timeout + 5.0)
        entry = entries.get("cleanup.policy")
        value = None if entry is None else entry.value
    except (KafkaException, TimeoutError, StopIteration, ValueError) as exc:
        _log.warning(
            "%s: cannot describe the topic's configuration (%s); cleanup.policy is not checked",
            source,
            _error_text(exc),
        )
        return None
    if value is None:
        _log.warning("%s: the broker does not report cleanup.policy; it is not checked", source)
        return None
    return str(value)


# ------------------------------------------------------------------------------------------------ reading


class KafkaTopicMetadataService:
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
        _check_arguments(bootstrap_servers, topic)
        if replication_factor < 1:
            raise ConfigurationError(f"replication_factor must be at least 1, got {replication_factor}")
        if not catch_up_timeout > 0:
            raise ConfigurationError(f"catch_up_timeout must be positive, got {catch_up_timeout}")
        self._bootstrap = bootstrap_servers
        self._topic = topic
        self._properties = dict(client_properties or {})
        self._create_topic = bool(create_topic)
        self._replication_factor = int(replication_factor)
        self._catch_up_timeout = float(catch_up_timeout)
        self._source = _describe_source(topic, bootstrap_servers)
        self._start_lock = threading.Lock()
        self._cond = threading.Condition()
        self._listeners: list[MetadataListener] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._deadline = 0.0
        self._closed = False
        self._snapshot: MetadataSnapshot | None = None
        self._published_version = -1
        self._failure: MetadataError | None = None
        self._progress = "not started"
        self._last_error: str | None = None

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
            conf = _client_config(self._bootstrap, self._properties, source=self._source)
            _ensure_topic(
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

    def _note_error(self, message: str) -> None:
        if message != self._last_error:
            _log.warning("%s: %s", self._source, message)
        self._last_error = message

    def _run(self, conf: dict[str, Any]) -> None:
        try:
            consumer = Consumer(conf)
        except (KafkaException, ValueError, TypeError) as exc:
            self._fail(MetadataError(f"cannot create the consumer: {_error_text(exc)}", source=self._source))
            return
        try:
            self._follow(consumer)
        except Exception as exc:
            _log.exception("%s: the reader thread failed", self._source)
            self._fail(MetadataError(f"the reader failed: {_error_text(exc)}", source=self._source))
        finally:
            consumer.close()

    def _follow(self, consumer: Consumer) -> None:
        partition = TopicPartition(self._topic, 0)
        consumer.assign([TopicPartition(self._topic, 0, OFFSET_BEGINNING)])
        state = MetadataLog(self._source)
        target: int | None = None
        while not self._stop.is_set():
            if target is None:
                target = self._end_offset(consumer, partition)
                if target is not None:
                    self._progress = f"read up to offset {state.offset} of {target}"
            try:
                messages = consumer.consume(num_messages=_BATCH, timeout=_POLL_SECONDS)
            except KafkaException as exc:
                err = _kafka_error(exc)
                if err is not None and err.fatal():
                    raise
                self._note_error(f"consume failed: {_error_text(exc)}")
                continue
            for message in messages:
                self._apply(state, message)
            self._advance(consumer, partition, state)
            if self._snapshot is None:
                if target is None:
                    continue
                self._progress = f"read up to offset {state.offset} of {target}"
                if state.offset < target:
                    continue
            self._publish(state)

    def _end_offset(self, consumer: Consumer, partition: TopicPartition) -> int | None:
        try:
            _low, high = consumer.get_watermark_offsets(partition, timeout=2.0, cached=False)
        except KafkaException as exc:
            self._note_error(f"cannot read the end offset: {_error_text(exc)}")
            return None
        return int(high)

    def _apply(self, state: MetadataLog, message: Message) -> None:
        err = message.error()
        if err is None:
            state.apply(message.key(), message.value(), int(message.offset() or 0))
            return
        if err.code() == KafkaError._PARTITION_EOF:
            offset = message.offset()
            if offset is not None and offset >= 0:
                state.advance(offset)
            return
        if err.fatal():
            raise KafkaException(err)
        self._note_error(f"consumer error: {err.str()} ({err.name()})")

    def _advance(self, consumer: Consumer, partition: TopicPartition, state: MetadataLog) -> None:
        try:
            (position,) = consumer.position([partition])
        except KafkaException:
            return
        if position.offset is not None and position.offset >= 0:
            state.advance(position.offset)

    def _publish(self, state: MetadataLog) -> None:
        first = self._snapshot is None
        with self._cond:
            previous = self._snapshot
            changed = state.version != self._published_version
            if previous is not None and not changed and previous.offset == state.offset:
                return
            snapshot = state.snapshot()
            self._snapshot = snapshot
            self._published_version = state.version
            self._last_error = None
            self._cond.notify_all()
            listeners = list(self._listeners) if changed or first else []
        if first:
            _log.info(
                "%s: caught up at offset %d: %d streams, %d clusters",
                self._source,
                snapshot.offset,
                len(snapshot.streams),
                len(snapshot.clusters),
            )
        self._log_inconsistencies(state, previous, snapshot)
        for listener in listeners:
            try:
                listener()
            except Exception:
                _log.exception("%s: metadata listener failed", self._source)

    def _log_inconsistencies(
        self, state: MetadataLog, previous: MetadataSnapshot | None, snapshot: MetadataSnapshot
    ) -> None:
        before = previous.inconsistent if previous is not None else frozenset()
        reasons = state.inconsistent()
        for sid in sorted(snapshot.inconsistent - before):
            kept = (
                "its last consistent version stays in effect" if sid in snapshot.streams else "not in effect"
            )
            _log.warning(
                "%s: stream %r is inconsistent: %s; %s until a complete write of it",
                self._source,
                sid,
                reasons.get(sid, "unknown reason"),
                kept,
            )
        for sid in sorted(before - snapshot.inconsistent):
            _log.info("%s: stream %r is consistent again", self._source, sid)

    def _fail(self, error: MetadataError) -> None:
        _log.error("%s", error)
        with self._cond:
            self._failure = error
            self._cond.notify_all()


# ------------------------------------------------------------------------------------------------ writing


def default_transactional_id(topic: str) -> str:
    """The ``transactional.id`` writers of ``topic`` share unless told otherwise."""
    return f"multicluster-metadata-writer-{topic}"


@dataclass(frozen=True)
class WriteSummary:
    """What one :meth:`KafkaTopicMetadataWriter.publish` wrote (``plan``) and where it ended."""

    plan: WritePlan
    transactional_id: str
    last_offset: int | None = None
    """Offset of the last record written; None when nothing was written."""

    @property
    def changed(self) -> bool:
        """Whether anything was written."""
        return not self.plan.empty

    @property
    def records(self) -> int:
        """How many records were written."""
        return len(self.plan.records)

    @property
    def next_offset(self) -> int | None:
        """The offset a reader must reach to see this write (for ``wait_for_offset``)."""
        return None if self.last_offset is None else self.last_offset + 1

    @property
    def streams_written(self) -> tuple[str, ...]:
        """Streams whose parts and commit were written."""
        return self.plan.streams_written

    @property
    def streams_deleted(self) -> tuple[str, ...]:
        """Streams deleted with tombstones."""
        return self.plan.streams_deleted

    @property
    def clusters_written(self) -> tuple[str, ...]:
        """Clusters whose definition was written."""
        return self.plan.clusters_written

    @property
    def clusters_deleted(self) -> tuple[str, ...]:
        """Clusters deleted with tombstones (no stream uses them any more)."""
        return self.plan.clusters_deleted


class KafkaTopicMetadataWriter:
    """The single writer of a metadata topic: a transactional producer with a stable ``transactional.id``.

    Creating it initializes transactions, which fences any older writer with the same id (and aborts its
    unfinished transaction). Use one writer at a time per topic; close it when done.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        transactional_id: str | None = None,
        client_properties: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        _check_arguments(bootstrap_servers, topic)
        self._topic = topic
        self._timeout = float(timeout)
        self._source = _describe_source(topic, bootstrap_servers)
        self.transactional_id = transactional_id or default_transactional_id(topic)
        """The producer's ``transactional.id``."""
        conf = _client_config(bootstrap_servers, client_properties, source=self._source)
        conf.update(
            {
                "transactional.id": self.transactional_id,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "client.id": conf.get("client.id") or "multicluster-metadata-writer",
            }
        )
        self._fatal: KafkaError | None = None
        self._closed = False
        self._lock = threading.Lock()
        try:
            self._producer = Producer(conf)
        except (KafkaException, ValueError, TypeError) as exc:
            raise MetadataError(
                f"cannot create the producer: {_error_text(exc)}", source=self._source
            ) from exc
        try:
            self._producer.init_transactions(self._timeout)
        except KafkaException as exc:
            self._fatal = _kafka_error(exc)
            self.close()
            raise MetadataError(
                f"cannot initialize transactions for transactional.id {self.transactional_id!r}: "
                f"{_error_text(exc)}",
                source=self._source,
            ) from exc

    def __repr__(self) -> str:
        return f"KafkaTopicMetadataWriter({self._topic!r}, transactional_id={self.transactional_id!r})"

    def plan(self, streams: Iterable[KafkaStream], *, current: MetadataSnapshot) -> WritePlan:
        """What :meth:`publish` would write (nothing is written)."""
        return plan_publish(streams, current=current, source=self._source)

    def publish(self, streams: Iterable[KafkaStream], *, current: MetadataSnapshot) -> WriteSummary:
        """Make the topic hold exactly ``streams``, writing only what differs from ``current``.

        Everything is written in one transaction: readers see all of it or none. Raises
        :class:`MetadataWriterFencedError` when a newer writer took over, :class:`MetadataError` when the
        transaction failed (then nothing was written), and
        :class:`~multicluster_source.exceptions.MetadataValidationError` for invalid streams.
        """
        plan = self.plan(streams, current=current)
        with self._lock:
            if self._closed:
                raise MetadataError("the writer is closed", source=self._source)
            if self._fatal is not None:
                raise self._fatal_error(self._fatal)
            if plan.empty:
                return WriteSummary(plan, self.transactional_id)
            offsets: list[int] = []
            failures: list[KafkaError] = []

            def delivered(err: KafkaError | None, message: Message) -> None:
                if err is not None:
                    failures.append(err)
                else:
                    offsets.append(int(message.offset() or 0))

            try:
                self._producer.begin_transaction()
                for record in plan.records:
                    self._produce(record.key, record.value, delivered)
                self._commit(time.monotonic() + self._timeout)
            except KafkaException as exc:
                raise self._failed(exc) from exc
            if failures:  # not expected: a failed delivery makes the commit fail
                raise MetadataError(f"a record was not delivered: {failures[0].str()}", source=self._source)
        _log.info(
            "%s: published %d records (streams written: %s; deleted: %s; clusters written: %s; deleted: %s)",
            self._source,
            len(plan.records),
            ", ".join(plan.streams_written) or "-",
            ", ".join(plan.streams_deleted) or "-",
            ", ".join(plan.clusters_written) or "-",
            ", ".join(plan.clusters_deleted) or "-",
        )
        return WriteSummary(plan, self.transactional_id, max(offsets) if offsets else None)

    def close(self) -> None:
        """Flush and close the producer; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        remaining = self._producer.flush(0.0 if self._fatal is not None else self._timeout)
        if remaining and self._fatal is None:
            _log.warning("%s: %d records were not delivered before close", self._source, remaining)
        try:
            with warnings.catch_warnings():
                # a fenced producer cannot abort its transaction on close; librdkafka says so as a warning
                warnings.simplefilter("ignore", RuntimeWarning)
                self._producer.close()
        except KafkaException as exc:
            _log.debug("%s: closing the producer: %s", self._source, _error_text(exc))

    def __enter__(self) -> KafkaTopicMetadataWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------------------------- internals

    def _produce(
        self, key: str, value: bytes | None, delivered: Callable[[KafkaError | None, Message], None]
    ) -> None:
        while True:
            try:
                self._producer.produce(
                    self._topic, key=key.encode("utf-8"), value=value, partition=0, on_delivery=delivered
                )
                return
            except BufferError:
                self._producer.poll(0.1)

    def _commit(self, deadline: float) -> None:
        while True:
            try:
                self._producer.commit_transaction(max(0.1, deadline - time.monotonic()))
                return
            except KafkaException as exc:
                err = _kafka_error(exc)
                if err is None or not err.retriable() or time.monotonic() >= deadline:
                    raise

    def _fatal_error(self, err: KafkaError) -> MetadataError:
        if err.code() in _FENCED_CODES:
            return MetadataWriterFencedError(
                f"this writer (transactional.id {self.transactional_id!r}) was fenced: a newer writer "
                "with the same transactional.id took over, so this one can no longer write; nothing of "
                "this publish was committed",
                source=self._source,
            )
        return MetadataError(f"the producer failed fatally: {err.str()} ({err.name()})", source=self._source)

    def _failed(self, exc: KafkaException) -> MetadataError:
        err = _kafka_error(exc)
        if err is None:
            return MetadataError(f"publish failed: {exc}", source=self._source)
        if err.fatal() or err.code() in _FENCED_CODES:
            self._fatal = err
            return self._fatal_error(err)
        if err.txn_requires_abort():
            with contextlib.suppress(KafkaException):
                self._producer.abort_transaction(self._timeout)
            return MetadataError(
                f"the transaction was aborted, nothing was written: {err.str()} ({err.name()})",
                source=self._source,
            )
        with contextlib.suppress(KafkaException):
            self._producer.abort_transaction(self._timeout)
        return MetadataError(f"publish failed: {err.str()} ({err.name()})", source=self._source)
