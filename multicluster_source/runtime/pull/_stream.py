"""The running source as the caller sees it: :class:`SourceStream`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from functools import partial
from itertools import chain
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from multicluster_source._clock import clock
from multicluster_source.exceptions import (
    ConfigurationError,
    DeserializationError,
    MultiClusterSourceError,
    SourceFailedError,
    StreamClosedError,
)
from multicluster_source.framework._checkpoint import Checkpoint, CheckpointStore
from multicluster_source.framework._columns import column_builder
from multicluster_source.framework._dirlock import DirectoryLock
from multicluster_source.framework._gcpause import TakerHold
from multicluster_source.framework._records import MessageBatch, SourceRecord
from multicluster_source.ops._admin import AdminServer, check_admin_address
from multicluster_source.ops._admin_target import RecordingSubscriber
from multicluster_source.ops._metrics import SourceMetrics
from multicluster_source.reader._records import RecordMaker
from multicluster_source.runtime.core._checkpointer import Checkpointer, store_writer
from multicluster_source.runtime.core._delivery import Delivery
from multicluster_source.runtime.core._enumeration import stop_enumeration, stop_readers
from multicluster_source.runtime.core._handoff import Handoff, PositionTracker
from multicluster_source.runtime.core._local import Coordinator, ReaderRunner
from multicluster_source.runtime.eventtime._watermarks import stream_watermarks
from multicluster_source.runtime.pull._sinking import (
    close_sink,
    enumerator_state,
    rewound,
    sink_restored,
    sink_status,
    stream_positions,
)
from multicluster_source.runtime.pull._status import (
    enumerator_status,
    fail_silent_readers,
    reader_assignments,
    secret_values,
    stream_health,
    stream_status,
)
from multicluster_source.sink._transactions import TransactionAborted, TransactionalSink

if TYPE_CHECKING:
    import pyarrow as pa
    from prometheus_client import CollectorRegistry

    from multicluster_source.runtime.core._factory import SourceFactory

_log = logging.getLogger("multicluster_source")
_T = TypeVar("_T")


class SourceStream:
    """A running source: iterate it, or ``poll()`` it; take checkpoints; close it.

    Created by :meth:`MultiClusterKafkaSource.open`. ``poll``, iteration and ``checkpoint`` are meant to be
    called from one thread (the caller's); with ``checkpoint_interval`` the periodic checkpoints are taken
    inside ``poll`` on that thread, so each covers exactly the records returned before it.
    """

    def __init__(
        self,
        source: SourceFactory,
        *,
        parallelism: int,
        checkpoint_dir: str | None,
        checkpoint_interval: float | None,
        registry: Any,
        admin_address: str | None = None,
        admin_token: str | None = None,
        reader_racks: Mapping[int, str | None] | None = None,
        sink: TransactionalSink | None = None,
    ) -> None:
        if admin_address is not None:
            check_admin_address(admin_address, admin_token)  # refuse before anything starts
        if source.subscriber is None:
            raise ConfigurationError(f"source {source.name}: a reader-only copy cannot be opened")
        self._held = TakerHold()  # the collector, while taken records are in the caller's hands
        self._dir_lock: DirectoryLock | None = None
        if checkpoint_dir is not None:  # one owner per checkpoint directory, before anything reads it
            self._dir_lock = DirectoryLock(checkpoint_dir, source.name)
            self._dir_lock.acquire()
        self._source = source
        self._name = source.name
        self._parallelism = parallelism
        self._interval = checkpoint_interval
        self._store = CheckpointStore(checkpoint_dir) if checkpoint_dir is not None else None
        self._write = store_writer(self._store, source.name)
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()
        self._closed = False
        self._checkpoint_id = 0
        self._clock = clock()  # the checkpoint interval's
        self._last_checkpoint = self._clock.monotonic()
        self.restored_from: str | None = None
        self._metrics = SourceMetrics(registry, self._name)
        self._admin: AdminServer | None = None
        self._streams = RecordingSubscriber(source.subscriber)
        self._topics = source.create_topic_tracker(checkpoint_dir)
        restored = self._store.latest() if self._store is not None else None
        if restored is not None:
            self._checkpoint_id = restored.checkpoint_id
            self.restored_from = str(restored.path)
            _log.info("source=%s: restoring from checkpoint %s", self._name, restored.path)
        self._racks = dict(reader_racks or {})
        self._heartbeat_s = source.options.reader_heartbeat_timeout_ms / 1000.0
        self._sink = sink
        if sink is not None:  # the positions committed with the results win over the checkpoint's
            restored = sink_restored(restored, sink, self._name, source.bounded)
            sink.metrics = self._metrics
        try:
            self._topics.start()
            self._start_runtime(restored)
            if admin_address is not None:
                self._admin = AdminServer(
                    admin_address, {self._name: self}, token=admin_token, source_name=self._name
                ).start()
        except BaseException:
            self.close()
            raise

    def _start_runtime(self, restored: Checkpoint | None) -> None:
        """Make and start what reads: tracker, hand-off, coordinator and enumerator, readers, checkpointer
        (at open, and again when an exactly-once sink rewinds to its committed positions)."""
        source = self._source
        previous = getattr(self, "_handoff", None)
        self._enumerator = None
        self._tracker = PositionTracker(restored.positions if restored else None)
        self._handoff = Handoff(source.options.reader_buffer_max_batches)
        if previous is not None:  # what an asyncio stream set on the hand-off it was given
            self._handoff.on_put, self._handoff.inline = previous.on_put, previous.inline
        make_records = RecordMaker(
            source.deserializer, source.options.deserialization_error_policy, self._metrics
        )
        self._coordinator = Coordinator(self._name, self._parallelism, self._tracker, self._fail)
        self._watermarks = stream_watermarks(source, self._metrics, make_records, self._coordinator, restored)
        on_delivered = self._watermarks.delivered if self._watermarks.enabled else None
        gather = source.options.reader_batch_max_records  # poll: about one fetch batch a call
        self._delivery = Delivery(self._handoff, make_records, self._tracker, on_delivered, gather)
        self._coordinator.racks = self._racks
        self._readers = [
            ReaderRunner(
                i,
                self._name,
                self._coordinator,
                self._handoff,
                self._fail,
                on_reader_failed=self._reader_failed,
                rack=self._racks.get(i),
            )
            for i in range(self._parallelism)
        ]
        self._coordinator.readers = self._readers
        self._coordinator.start()
        self._enumerator = enumerator = self._coordinator.call_sync(
            lambda: source.create_enumerator(
                self._coordinator,
                restored.enumerator if restored else None,
                restored.positions if restored else None,
                self._metrics,
                self._streams,
            )
        )
        self._coordinator.enumerator = enumerator
        self._checkpointer = Checkpointer(self._name, self._coordinator, enumerator, self._tracker)
        self._coordinator.call_sync(enumerator.start)
        self._coordinator.run_in_coordinator(self._watch_heartbeats, delay=1.0)
        on_topic_read = self._topics.record if self._topics.enabled else None
        for runner in self._readers:
            runner.start(source.create_reader(runner, self._metrics, on_topic_read))

    def _stop_runtime(self, metadata_service: Any = None) -> None:
        """Stop the readers, finish the checkpoints taken, stop the enumerator (and ``metadata_service``)."""
        handoff = getattr(self, "_handoff", None)
        if handoff is not None:
            handoff.closed.set()
        stop_readers(getattr(self, "_readers", []), getattr(self, "_checkpointer", None))
        coordinator = getattr(self, "_coordinator", None)
        stop_enumeration(self._name, coordinator, getattr(self, "_enumerator", None), metadata_service)

    # ---------------------------------------------------------------------------------------- failures

    def _fail(self, error: BaseException) -> None:
        with self._error_lock:
            if self._error is not None:
                return
            self._error = error
        _log.error("source=%s: failed: %s", self._name, error)
        self._handoff.closed.set()

    def _reader_failed(self, index: int, error: BaseException) -> None:
        """A reader failed (any thread): the enumerator moves its splits; its thread is stopped aside."""
        if self._closed:
            return
        if all(r.failed is not None for r in self._readers):
            failure = SourceFailedError(f"source {self._name}: every reader failed; the last: {error}")
            failure.__cause__ = error
            self._fail(failure)
        self._coordinator.reader_lost(index)
        runner = self._readers[index]
        threading.Thread(target=runner.stop, name=f"mcs-reaper-{self._name}-{index}", daemon=True).start()

    def _watch_heartbeats(self) -> None:
        """Coordinator timer: a reader whose thread has not looped for the heartbeat timeout is failed."""
        if not self._closed:
            fail_silent_readers(self._readers, self._heartbeat_s)
            self._coordinator.run_in_coordinator(self._watch_heartbeats, delay=1.0)

    def kill_reader(self, index: int) -> None:
        """Make reader ``index`` fail as if its thread died (for testing failover; chaos tooling)."""
        self._readers[index].kill()

    def _raise_if_failed(self) -> None:
        error = self._error
        if error is None:
            return
        if isinstance(error, MultiClusterSourceError):
            raise error
        raise SourceFailedError(f"source {self._name} failed: {error}") from error

    # ------------------------------------------------------------------------------------------ reading

    def poll(self, timeout: float = 1.0, max_records: int = 10_000) -> list[SourceRecord]:
        """Records that are ready (at most ``max_records``: about a fetch batch), ``[]`` after ``timeout`` s.

        Raises the source's fatal error if it failed, :class:`StreamClosedError` once the stream is closed.
        """
        self._held.end()
        self._before_poll("poll()")
        take = partial(self._delivery.records, max_records=max_records, stopped=self._stop_waiting)
        out = self._taking(lambda: self._held.take(take, timeout))
        if not out:
            self._raise_if_failed()
        return out

    def poll_batches(self, timeout: float = 1.0, max_records: int = 10_000) -> list[MessageBatch]:
        """Batches of the client's own messages that are ready (at most ``max_records`` messages in all),
        ``[]`` after ``timeout`` seconds: no record is built, no deserializer applied (the zero-copy path).

        May be mixed with :meth:`poll`; checkpoints cover every message of every batch returned. Raises the
        source's fatal error if it failed, :class:`StreamClosedError` once the stream is closed.
        """
        self._held.end()
        self._before_poll("poll_batches()")
        take = partial(self._delivery.batches, max_records=max_records, stopped=self._stop_waiting)
        out = self._taking(lambda: self._held.take(take, timeout))
        if not out:
            self._raise_if_failed()
        return out

    def poll_columns(
        self, timeout: float = 1.0, max_records: int = 100_000, *, headers: bool = False
    ) -> list[pa.RecordBatch]:
        """Arrow record batches of what is ready (at most ``max_records`` rows), ``[]`` after ``timeout`` s:
        ``cluster, topic, partition, offset, timestamp, key, value`` (and ``headers``), see
        :func:`~multicluster_source.column_schema`; no record is made, no deserializer applied. Needs
        pyarrow (the ``arrow`` extra). May be mixed with :meth:`poll` and the rest; checkpoints cover every
        row returned. Raises as :meth:`poll` does."""
        build = column_builder(headers)
        self._held.end()  # an Arrow batch is nothing for the collector: held per part while it is made
        self._before_poll("poll_columns()")
        out = self._taking(lambda: self._delivery.columns(timeout, max_records, self._stop_waiting, build))
        if not out:
            self._raise_if_failed()
        return out

    def _before_poll(self, what: str | None) -> bool:
        """Raise the source's failure; take a periodic checkpoint when one is due. When closed: raise
        :class:`StreamClosedError` naming ``what`` was called, or return False when ``what`` is None."""
        self._raise_if_failed()
        if self._closed and what is not None:
            raise StreamClosedError(f"source {self._name}: {what} on a closed stream")
        if self._closed:
            return False
        due = self._interval is not None and self._clock.monotonic() - self._last_checkpoint >= self._interval
        if self._sink is not None:
            self._sink.raise_if_fenced()
            if due or self._sink.doomed is not None:  # a doomed transaction aborts and rewinds at once
                self._commit_sink()
        elif due and not self._checkpointer.busy:  # the stream goes on while it is written and committed
            self._checkpointer.take_in_background(self._next_checkpoint_id(), self._write)
        return True

    def _taking(self, take: Callable[[], _T]) -> _T:
        """``take()``; a deserializer (policy ``fail``) or timestamp assigner that raises fails the stream."""
        try:
            return take()
        except (DeserializationError, SourceFailedError) as exc:
            self._fail(exc)
            raise

    def _stop_waiting(self) -> bool:
        return self._closed or self._error is not None or self.finished

    def __iter__(self) -> Iterator[SourceRecord]:
        """Every record, blocking; ends when a bounded source finished or the stream was closed meanwhile.
        A checkpoint in the loop, or a ``poll`` after leaving it, starts right after the last record it got.

        Raises :class:`StreamClosedError` when the stream is already closed as iteration starts.
        """
        self._before_poll("iterating")
        return chain.from_iterable(self._runs())  # no Python frame runs per record

    def _runs(self) -> Iterator[Iterator[SourceRecord]]:  # one C-level iterator of records per batch
        while self._before_poll(None):
            delivery = self._delivery  # records made as the loop takes them: see Delivery.iterate
            take = partial(delivery.iterate, stopped=self._stop_waiting)
            records = self._taking(partial(self._held.take, take, 0.5))
            if records is None:
                self._raise_if_failed()
                if self._closed or self.finished:
                    return
                continue
            yield records if delivery.views else self._failing(records)
            self._taking(delivery.settle)  # the chain came back for more: the batch was taken
            self._held.end()  # the batch is gone: the collector finds nothing of it

    def _failing(self, records: Iterator[SourceRecord]) -> Iterator[SourceRecord]:
        """``records`` (deserialized ones): a deserializer that raises (policy ``fail``) fails the stream."""
        try:
            yield from records
        except DeserializationError as exc:
            self._fail(exc)
            raise

    def _next_ready(self) -> SourceRecord | None:  # for `async for` on the asyncio stream
        self._before_poll("iterating")
        record = self._taking(lambda: self._delivery.next_ready(self._stop_waiting))
        if record is None:
            self._raise_if_failed()
        return record

    @property
    def finished(self) -> bool:
        """Bounded and every split reached its stopping offset, with every record returned."""
        if not self._source.bounded:
            return False
        enumerator = getattr(self, "_enumerator", None)
        return (
            enumerator is not None
            and enumerator.is_finished()
            and not self._delivery.holding
            and self._handoff.empty()
        )

    @property
    def watermark(self) -> int | None:
        """The event-time watermark in ms of the records returned so far: the minimum over active, non-idle
        splits, never decreasing; None until every active split has one (and without a watermark
        strategy)."""
        self._taking(self._delivery.settle_if_iterating_here)
        return self._watermarks.watermark

    @property
    def name(self) -> str:
        """The source's name."""
        return self._name

    @property
    def admin_url(self) -> str | None:
        """Base URL (``http://host:port``) of the admin HTTP server, when ``open(admin_address=...)``."""
        return self._admin.url if self._admin is not None else None

    @property
    def metrics_registry(self) -> CollectorRegistry:
        """The Prometheus registry this stream's metrics are in."""
        return self._metrics.registry

    def assignments(self) -> dict[int, list[str]]:
        """Reader index -> split ids it reads now."""
        return reader_assignments(self._readers)

    # ------------------------------------------------------------------------------ topics and status

    def tracked_topics(self) -> dict[str, list[str]]:
        """Cluster id -> topics this source has read records from (topic tracking, KIP-558), since the
        last reset. Raises :class:`TopicTrackingDisabledError` with ``topic.tracking.enable=false``."""
        return self._topics.active()

    def reset_tracked_topics(self) -> int:
        """Tombstone every tracked topic; those still read are recorded again as records arrive.

        Raises :class:`TopicTrackingDisabledError` when tracking or ``topic.tracking.allow.reset`` is
        disabled. Returns the number of topics reset (their tombstones are written in the background).
        """
        return self._topics.reset()

    def _enumerator_status(self) -> dict[str, Any] | None:
        enumerator = None if self._closed else getattr(self, "_enumerator", None)
        return enumerator_status(self._coordinator, enumerator)

    def health(self) -> dict[str, Any]:
        """``{"status": "ready"}`` when metadata is loaded and every reader thread runs, else
        ``{"status": "not_ready", "reasons": [...]}``."""
        enum = None if self._closed else self._enumerator_status()
        return stream_health(self._closed, self._error, enum, self._readers)

    def status(self) -> dict[str, Any]:
        """A JSON-ready view for the admin server: health, streams, clusters (servers and topics, never
        properties), splits per reader, lag per partition, last reconciliation, metadata failures, topic
        tracking. ``enumerator`` holds the enumerator's own view."""
        state = "closed" if self._closed else "failed" if self._error is not None else None
        return (
            stream_status(
                name=self._name,
                state=state or ("finished" if self.finished else "running"),
                health=self.health(),
                parallelism=self._parallelism,
                enumerator=self._enumerator_status() or {},
                assignments=self.assignments(),
                readers=self._readers,
                streams=self._streams.last,
                topics=self._topics,
                registry=self._metrics.registry,
                checkpoint={"last_id": self._checkpoint_id or None, "restored_from": self.restored_from},
            )
            | {"event_time": self._watermarks.status()}
            | sink_status(self._sink)
        )

    def secret_values(self) -> set[str]:
        """Values of secret-looking properties (metadata, ``set_properties`` and an exactly-once sink's) as
        configured, so the admin server can make sure none appears in an answer."""
        sink = {} if self._sink is None else self._sink.sink.properties  # the sink's producer's too
        return secret_values(self._source.client_properties, self._streams.last) | secret_values(sink, ())

    # -------------------------------------------------------------------------------------- checkpoints

    def checkpoint(self) -> int:
        """Take a checkpoint covering every record already returned; returns its id once it is durable and
        committed to the clusters that answer (``checkpoint.commit.wait.ms`` at most): see concepts.md."""
        self._raise_if_failed()
        if self._sink is not None:  # the results and positions commit first; then the checkpoint is taken
            self._commit_sink(background=False)
        checkpoint_id = self._next_checkpoint_id()
        self._checkpointer.take(checkpoint_id, self._write).result()
        return checkpoint_id

    # ---------------------------------------------------------------------------- exactly-once sink

    def produce(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: Any = None,
    ) -> None:
        """Produce a result to the exactly-once sink's cluster, inside the transaction that commits with the
        positions of the records returned so far (``open(sink=...)``; else :class:`ConfigurationError`).
        Raises :class:`ProducerFencedError` once another job opened the same ``transactional_id``."""
        sink = self._sink
        if sink is None:
            raise ConfigurationError(f"source {self._name}: produce() needs a stream opened with sink=...")
        if self._error is not None or self._closed:
            self._raise_if_failed()
            raise StreamClosedError(f"source {self._name}: produce() on a closed stream")
        try:
            sink.produce(topic, value, key, partition, headers)
        except MultiClusterSourceError as exc:
            self._fail(exc)
            raise

    def _commit_sink(self, *, background: bool = True) -> None:
        """Commit the sink's transaction with the positions of what was returned; then (``background``) a
        checkpoint of ``checkpoint_dir`` and the source clusters' offsets. An aborted transaction rewinds."""
        sink = self._sink
        assert sink is not None
        self._last_checkpoint = self._clock.monotonic()
        try:
            committed = sink.commit(self._sink_positions(), self._kafka_cluster_id)
        except TransactionAborted:
            self._rewind()
            return
        except MultiClusterSourceError as exc:
            self._fail(exc)
            raise
        if committed and background and not self._checkpointer.busy:
            self._checkpointer.take_in_background(self._next_checkpoint_id(), self._write)

    def _sink_positions(self) -> dict[str, int]:
        self._taking(self._delivery.settle)  # what the iterator handed out so far
        return stream_positions(self._coordinator, self._enumerator, self._tracker)

    def _kafka_cluster_id(self, cluster_id: str) -> str | None:
        identities = getattr(self._source, "identities", None)
        return None if identities is None else identities.get(cluster_id)

    def _rewind(self) -> None:
        """Start reading again from the sink's committed positions: every reader, fetcher and batch of the
        aborted transaction's time is dropped (on the caller's thread)."""
        assert self._sink is not None
        state = enumerator_state(self._coordinator, self._enumerator)
        self._stop_runtime()
        self._start_runtime(rewound(self._name, self._checkpoint_id, state, self._sink.committed))

    def _next_checkpoint_id(self) -> int:
        self._taking(self._delivery.settle)  # what the iterator handed out so far, when called in a loop
        self._checkpoint_id += 1
        self._last_checkpoint = self._clock.monotonic()
        return self._checkpoint_id

    # ------------------------------------------------------------------------------------------- closing

    def close(self, *, forget_topics: bool = False) -> None:
        """Stop the admin server, readers and the enumerator, close every client, release metrics.

        ``forget_topics=True`` closes the source for good: its topic tracking history is erased
        (tombstones), even when ``topic.tracking.allow.reset`` is false. Idempotent.
        """
        self._held.end()
        if self._closed:
            return
        if self._sink is not None:  # commit what was returned and produced; abort what cannot commit
            started = self._error is None and getattr(self, "_enumerator", None) is not None
            positions = self._sink_positions if started else None
            close_sink(self._name, self._sink, positions, self._kafka_cluster_id)
        self._closed = True
        if self._admin is not None:
            self._admin.close()
        self._stop_runtime(self._source.metadata_service)
        if forget_topics:
            self._topics.forget_on_close()
        self._topics.close()
        self._metrics.close()
        if self._dir_lock is not None:
            self._dir_lock.release()  # last: nothing of this source writes into the directory any more

    def __enter__(self) -> SourceStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None and self._sink is not None:  # leaving by an exception: nothing commits
            self._sink.abort()
        self.close()


# ----------------------------------------------------------------------- for the asyncio and hybrid streams
# What the asyncio stream (:mod:`._async`) and the hybrid source's live stage drive of a SourceStream: named
# here, in the module that defines the stream, rather than read from its private fields elsewhere.


def handoff_of(stream: SourceStream) -> Handoff:
    """The stream's hand-off (an asyncio stream sets its ``on_put`` wake-up and turns inline fetching off)."""
    return stream._handoff


def tracker_of(stream: SourceStream) -> PositionTracker:
    """The stream's delivered positions (the hybrid source's live stage hands them over)."""
    return stream._tracker


def checkpoint_busy(stream: SourceStream) -> bool:
    """Whether a periodic checkpoint should wait (see ``Checkpointer.busy``)."""
    return stream._checkpointer.busy


def capture_checkpoint(stream: SourceStream) -> tuple[int, Future[Any]]:
    """Capture a checkpoint of what was returned so far (as ``SourceStream.checkpoint``, without waiting):
    its id, and the checkpoint thread's future of it. On the thread that takes from the stream."""
    stream._raise_if_failed()
    if stream._sink is not None:  # the transaction commits first (as SourceStream.checkpoint)
        stream._commit_sink(background=False)
    checkpoint_id = stream._next_checkpoint_id()
    return checkpoint_id, stream._checkpointer.take(checkpoint_id, stream._write)


def checkpoint_in_background(stream: SourceStream) -> None:
    """Capture a checkpoint; the checkpoint thread writes and commits it. Raises (once) what the last one
    taken this way raised."""
    stream._checkpointer.take_in_background(stream._next_checkpoint_id(), stream._write)


def commit_sink(stream: SourceStream) -> None:
    """Commit the exactly-once sink's transaction now (an asyncio stream's periodic commit)."""
    stream._raise_if_failed()
    stream._commit_sink()


def next_ready(stream: SourceStream) -> SourceRecord | None:
    """The next record ready now, or None (``async for``)."""
    return stream._next_ready()
