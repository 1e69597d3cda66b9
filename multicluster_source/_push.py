"""The push API, ``MultiClusterKafkaSource.run(handler, parallelism, runtime=...)``, and its runtimes.

``handler(records)`` is called inside each reader's worker with that reader's batches, one batch at a time;
a batch's positions count as delivered once the handler returned from it, and checkpoints cover exactly
what the handlers returned from.

Shape of every runtime (``threads`` here, ``processes`` in :mod:`._process_runtime`, ``ray`` in
:mod:`._ray_runtime`):

* the **driver** (:class:`_Driver`, in the calling process) runs the enumerator on a coordinator mailbox
  thread (:class:`~multicluster_source._runtime.Coordinator`), tracks delivered positions, takes checkpoints
  into a :class:`~multicluster_source._storage.CheckpointStorage`, records topic tracking, and detects lost
  workers (link lost: thread ended, process sentinel, Ray actor died; or no heartbeat);
* each **worker** (:class:`WorkerHost`: a thread, a process or a Ray actor) runs one reader (built with
  ``source.create_reader``) and a handler thread ``mcs-handler-<source>-<i>`` that takes the reader's
  batches from a bounded buffer and calls the handler;
* they talk only through the frozen dataclasses below (splits and events are the framework's own frozen
  values), carried by a *transport*: queues for threads, one pipe per worker process, actor calls for Ray.

A worker that dies is handled as a reader failure: the enumerator moves its splits to live readers, resuming
each at the position the handlers returned from (at-least-once); the run goes on with one reader less, and
fails when every reader is lost. A reader reports a split finished only after the handler returned from the
split's last batch, so a worker dying with batches still buffered never loses them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import pickle
import queue
import socket
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ._events import SourceEvent, SplitsFinishedEvent
from ._framework import RecordBatch, SourceReader
from ._metrics import SourceMetrics
from ._records import SourceRecord
from ._runtime import Coordinator, Handoff, PositionTracker
from ._split import KafkaPartitionSplit
from ._storage import CheckpointStorage, DirectoryCheckpointStorage
from .enumerator._state import state_split_ids
from .exceptions import ConfigurationError, MultiClusterSourceError, SourceFailedError

if TYPE_CHECKING:
    from ._source import MultiClusterKafkaSource
    from ._tracking import TopicTracker
    from .enumerator._multicluster import MultiClusterEnumerator

_log = logging.getLogger("multicluster_source.push")

Handler = Callable[[list[SourceRecord]], object]
"""``handler(records)``; its return value is ignored. Optional hooks: ``open(reader_index)`` and ``close()``,
called on the worker's handler thread before the first batch and after the last."""
OnTopicRead = Callable[[str, str, int], None]
ReaderFactory = Callable[["WorkerHost", "OnTopicRead | None"], SourceReader]
Deliver = Callable[[int, object], None]
"""How a transport hands the driver a message from worker ``i``: ``deliver(i, message)``."""

RUNTIMES = ("threads", "processes", "ray")
HEARTBEAT_S = 0.5

# ------------------------------------------------------------------------------------- driver -> worker


@dataclass(frozen=True)
class StartReader:
    """Create the reader and start it (sent once the enumerator runs)."""


@dataclass(frozen=True)
class AssignSplits:
    """Splits for the reader."""

    splits: tuple[KafkaPartitionSplit, ...]


@dataclass(frozen=True)
class EventToReader:
    """An enumerator event for the reader."""

    event: SourceEvent


@dataclass(frozen=True)
class NoMoreSplits:
    """No further splits will come (bounded)."""


@dataclass(frozen=True)
class StopWorker:
    """Finish the batch the handler is in, report, close the reader, end."""


# ------------------------------------------------------------------------------------- worker -> driver


@dataclass(frozen=True)
class WorkerReady:
    """The worker runs (before its reader starts): where it is."""

    pid: int
    host: str
    rack: str | None


@dataclass(frozen=True)
class EventToEnumerator:
    """A reader event for the enumerator."""

    event: SourceEvent


@dataclass(frozen=True)
class Delivered:
    """The handler returned from a batch: its positions are delivered."""

    positions: dict[str, int]
    records: int


@dataclass(frozen=True)
class Heartbeat:
    """Sent every ``HEARTBEAT_S`` and when ``finished`` changes."""

    finished: bool
    """The reader has no splits left and every batch it emitted was handled."""
    splits: tuple[str, ...] = ()


@dataclass(frozen=True)
class TopicRead:
    """The reader read its first record of (cluster, topic) (topic tracking)."""

    cluster: str
    topic: str


@dataclass(frozen=True)
class WorkerFailure:
    """``kind``: ``reader`` (fail this reader over), ``source`` or ``handler`` (fail the run)."""

    kind: str
    summary: str
    """``<ExceptionType>: <message>``."""
    description: str
    """With the traceback."""
    error: bytes | None = None
    """The exception pickled, when it survives a round trip."""


@dataclass(frozen=True)
class WorkerLog:
    """A log record of a worker process, for the driver's logging."""

    record: logging.LogRecord


@dataclass(frozen=True)
class WorkerStopped:
    """The worker closed its reader; nothing follows."""

    records: int


@dataclass(frozen=True)
class LinkLost:
    """From the transport: the worker is gone (thread ended, process exited, actor died)."""

    reason: str


def error_blob(error: BaseException) -> bytes | None:
    """``error`` pickled, if it also unpickles (exceptions with their own ``__init__`` often do not)."""
    try:
        data = pickle.dumps(error)
        pickle.loads(data)
        return data
    except Exception:
        return None


def _describe(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)).rstrip()


# ------------------------------------------------------------------------------------------------ worker


class WorkerHost:
    """Runs one reader and the handler inside a worker, and is the reader's ``ReaderContext``.

    ``run()`` is the worker's main loop (the reader thread): it reads driver messages from ``deliver``,
    polls the reader and sends heartbeats. Fetch threads ``emit`` batches into a bounded :class:`Handoff`;
    the handler thread calls the handler and reports positions. ``send`` carries messages to the driver in
    order (it is called from several threads and must be thread-safe).
    """

    def __init__(
        self,
        *,
        index: int,
        source_name: str,
        handler: Handler,
        make_reader: ReaderFactory,
        send: Callable[[object], None],
        buffer_max_batches: int,
        rack: str | None = None,
        track_topics: bool = True,
        stop_timeout: float = 60.0,
        host_name: str | None = None,
    ) -> None:
        self._index = index
        self._host_name = host_name or socket.gethostname()
        self._source = source_name
        self._handler = handler
        self._make_reader = make_reader
        self._send_raw = send
        self._rack = rack
        self._track_topics = track_topics
        self._stop_timeout = stop_timeout
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._handoff = Handoff(buffer_max_batches)
        self._lock = threading.Lock()
        self._emitted = 0
        self._handled = 0
        self._deferred: list[tuple[int, SourceEvent]] = []
        self._stopping = threading.Event()
        self._failed = False
        self._records = 0
        self._topics_seen: set[tuple[str, str]] = set()
        self._reader: SourceReader | None = None

    # ------------------------------------------------------------------------------ transport side

    def deliver(self, message: object) -> None:
        """A message from the driver (any thread)."""
        self._inbox.put(message)

    def abort(self) -> None:
        """Stop as soon as possible (the driver gave this worker up)."""
        self._stopping.set()
        self._inbox.put(StopWorker())

    def _send(self, message: object) -> None:
        try:
            self._send_raw(message)
        except Exception as exc:  # the driver is gone: nothing to report to
            if not self._stopping.is_set():
                _log.warning("reader %d: cannot reach the driver (%s); stopping", self._index, exc)
            self._stopping.set()

    # ------------------------------------------------------------------------------------ main loop

    def run(self) -> None:
        """The worker's main loop; returns after ``StopWorker`` (or a failure), with every client closed."""
        handler_thread = threading.Thread(
            target=self._handle_loop, name=f"mcs-handler-{self._source}-{self._index}", daemon=True
        )
        reader: SourceReader | None = None
        early: list[object] = []
        last_beat = 0.0
        last_finished: bool | None = None
        self._send(WorkerReady(os.getpid(), self._host_name, self._rack))
        handler_thread.start()
        try:
            while not self._stopping.is_set():
                try:
                    message: object = self._inbox.get(timeout=0.05)
                except queue.Empty:
                    message = None
                if isinstance(message, StopWorker):
                    break
                if isinstance(message, StartReader):
                    if reader is None:
                        on_topic_read = self._topic_read if self._track_topics else None
                        reader = self._reader = self._make_reader(self, on_topic_read)
                        reader.start()
                        for m in early:
                            self._dispatch(reader, m)
                        early = []
                elif message is not None:
                    if reader is None:
                        early.append(message)
                    else:
                        self._dispatch(reader, message)
                finished = False
                if reader is not None:
                    reader.poll_events()
                    with self._lock:
                        self._release_deferred_locked()
                    finished = reader.is_finished() and self._idle()
                now = time.monotonic()
                if finished != last_finished or now - last_beat >= HEARTBEAT_S:
                    last_beat, last_finished = now, finished
                    self._send(Heartbeat(finished, tuple(self.split_ids())))
        except BaseException as exc:
            if not self._stopping.is_set():
                _log.error("reader %d failed: %s", self._index, exc)
                self.reader_failed(exc)
        finally:
            self._stopping.set()
            self._handoff.closed.set()
            if reader is not None:
                try:
                    reader.close()
                except Exception:
                    _log.exception("reader %d: close failed", self._index)
            handler_thread.join(self._stop_timeout)
            if handler_thread.is_alive():
                _log.error(
                    "reader %d: the handler did not return within %.0f s", self._index, self._stop_timeout
                )
            self._send(WorkerStopped(self._records))

    def _dispatch(self, reader: SourceReader, message: object) -> None:
        if isinstance(message, AssignSplits):
            reader.add_splits(list(message.splits))
        elif isinstance(message, EventToReader):
            reader.handle_source_event(message.event)
        elif isinstance(message, NoMoreSplits):
            reader.notify_no_more_splits()
        else:
            _log.warning("reader %d: unknown message %r", self._index, message)

    def split_ids(self) -> list[str]:
        """The splits the reader reads now (when it tells)."""
        split_ids = getattr(self._reader, "split_ids", None)
        return list(split_ids()) if callable(split_ids) else []

    def _idle(self) -> bool:
        with self._lock:
            return self._handled >= self._emitted and not self._deferred

    def _release_deferred_locked(self) -> None:
        if not self._deferred:
            return
        ready = [event for seq, event in self._deferred if seq <= self._handled]
        if ready:
            self._deferred = [(seq, event) for seq, event in self._deferred if seq > self._handled]
            for event in ready:
                self._send(EventToEnumerator(event))

    # --------------------------------------------------------------------------------- handler thread

    def _handle_loop(self) -> None:
        handler = self._handler
        try:
            open_hook = getattr(handler, "open", None)
            if callable(open_hook):
                open_hook(self._index)
            while not self._stopping.is_set():
                batch = self._handoff.get(0.05)
                if batch is None or self._stopping.is_set():
                    continue  # a batch taken while stopping is not handled: its records come again
                records = list(batch.records)
                if records:
                    handler(records)
                with self._lock:
                    self._records += len(records)
                    self._send(Delivered(dict(batch.positions), len(records)))
                    self._handled += 1
                    self._release_deferred_locked()
        except BaseException as exc:
            self._failure("handler", exc)
        finally:
            close_hook = getattr(handler, "close", None)
            if callable(close_hook):
                try:
                    close_hook()
                except Exception:
                    _log.exception("reader %d: the handler's close() failed", self._index)

    def _failure(self, kind: str, error: BaseException) -> None:
        if self._failed:
            return
        self._failed = True
        summary = f"{type(error).__name__}: {error}"
        self._send(WorkerFailure(kind, summary, _describe(error), error_blob(error)))
        self._stopping.set()
        self._inbox.put(StopWorker())

    def _topic_read(self, cluster: str, topic: str, reader: int) -> None:
        key = (cluster, topic)
        if key in self._topics_seen:
            return
        with self._lock:
            if key in self._topics_seen:
                return
            self._topics_seen.add(key)
        self._send(TopicRead(cluster, topic))

    # ---------------------------------------------------------------------------------- ReaderContext

    @property
    def index(self) -> int:
        """This reader's index."""
        return self._index

    @property
    def rack(self) -> str | None:
        """This reader's rack."""
        return self._rack

    def send_event_to_enumerator(self, event: SourceEvent) -> None:
        """Send an event; a finished split is reported only once the handler returned from its records."""
        if isinstance(event, SplitsFinishedEvent):
            with self._lock:
                self._deferred.append((self._emitted, event))
                self._release_deferred_locked()
        else:
            self._send(EventToEnumerator(event))

    def emit(self, batch: RecordBatch, should_stop: Callable[[], bool]) -> bool:
        """Buffer a batch for the handler (blocking while the buffer is full)."""
        if self._failed or self._stopping.is_set():
            return False
        ok = self._handoff.put(batch, lambda: should_stop() or self._stopping.is_set())
        if ok:
            with self._lock:
                self._emitted += 1
        return ok

    def is_buffer_full(self) -> bool:
        """Whether the handler's buffer is full."""
        return self._handoff.full()

    def fail(self, error: BaseException) -> None:
        """Fail the whole run (bad data: the same for every reader)."""
        self._failure("source", error)

    def reader_failed(self, error: BaseException) -> None:
        """This reader cannot go on: its splits fail over to other readers."""
        self._failure("reader", error)


# ------------------------------------------------------------------------------------------- the handle


@dataclass(frozen=True)
class WorkerInfo:
    """One reader's worker as the driver sees it."""

    index: int
    pid: int | None
    host: str | None
    rack: str | None
    alive: bool
    splits: tuple[str, ...] = ()


class RunControl:
    """Steers a run from other threads: ``source.run(handler, control=control)``.

    ``stop()`` makes ``run`` finish the batches the handlers are in, take a final checkpoint and return;
    ``workers()`` shows where each reader runs (pid, host, rack) and what it reads. One control per run.
    """

    def __init__(self) -> None:
        """A control for one run."""
        self._stop = threading.Event()
        self._running = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._workers: dict[int, WorkerInfo] = {}
        self._records = 0
        self._checkpoints = 0

    def stop(self) -> None:
        """Ask the run to stop (from any thread; idempotent)."""
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        """Whether ``stop()`` was called."""
        return self._stop.is_set()

    def wait_running(self, timeout: float | None = None) -> bool:
        """Wait until every reader has started (True), or the run ended or ``timeout`` passed (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._running.is_set():
            if self._done.is_set():
                return False
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._running.wait(0.05 if left is None else min(0.05, left))
        return True

    def wait_done(self, timeout: float | None = None) -> bool:
        """Wait until ``run`` has returned or raised."""
        return self._done.wait(timeout)

    def workers(self) -> dict[int, WorkerInfo]:
        """Reader index -> its worker."""
        with self._lock:
            return dict(self._workers)

    @property
    def records(self) -> int:
        """Records the handlers returned from so far (as reported to the driver)."""
        return self._records

    @property
    def checkpoints(self) -> int:
        """Checkpoints taken so far."""
        return self._checkpoints

    def _update(self, index: int, **changes: Any) -> None:
        with self._lock:
            old = self._workers.get(index) or WorkerInfo(index, None, None, None, True)
            self._workers[index] = WorkerInfo(**{**old.__dict__, **changes})


@dataclass(frozen=True)
class RunResult:
    """What a run did."""

    runtime: str
    parallelism: int
    finished: bool
    """True: a bounded source was read to its end; False: the run was stopped."""
    records: int
    """Records the handlers returned from."""
    records_per_reader: dict[int, int] = field(default_factory=dict)
    checkpoints: int = 0
    last_checkpoint: str | None = None
    """Where the last checkpoint went (a path or object key)."""
    restored_from: str | None = None
    lost_readers: dict[int, str] = field(default_factory=dict)
    """Reader index -> why its worker was lost (its splits moved to other readers)."""
    seconds: float = 0.0


# ------------------------------------------------------------------------------------------- transports


class WorkerLink(Protocol):
    """The driver's end of one worker."""

    def send(self, message: object) -> None:
        """Send a message, in order; never raises (a lost worker is reported by the transport)."""
        ...

    def kill(self) -> None:
        """End the worker at once (it stopped answering)."""
        ...


class Transport(Protocol):
    """Starts the workers of one run and carries messages both ways."""

    name: str

    def start(self, deliver: Deliver, metrics: SourceMetrics) -> list[WorkerLink]:
        """Start ``parallelism`` workers; each sends ``WorkerReady`` first, and its transport sends
        ``LinkLost`` once it is gone. ``metrics`` is the driver's (in-process workers use it)."""
        ...

    def close(self, timeout: float) -> None:
        """Reap every worker (joined, terminated if need be) and release the transport's resources."""
        ...


class _ThreadLink:
    def __init__(self, host: WorkerHost) -> None:
        self._host = host

    def send(self, message: object) -> None:
        self._host.deliver(message)

    def kill(self) -> None:
        self._host.abort()


class ThreadTransport:
    """``runtime="threads"``: each worker is a thread ``mcs-worker-<source>-<i>`` of this process."""

    name = "threads"

    def __init__(
        self,
        source: MultiClusterKafkaSource,
        handler: Handler,
        parallelism: int,
        racks: Mapping[int, str | None],
        options: dict[str, Any],
    ) -> None:
        if options:
            raise ConfigurationError(f"run(runtime='threads'): unknown options {sorted(options)}")
        self._source = source
        self._handler = handler
        self._parallelism = parallelism
        self._racks = dict(racks)
        self._threads: list[threading.Thread] = []

    def start(self, deliver: Deliver, metrics: SourceMetrics) -> list[WorkerLink]:
        source = self._source
        links: list[WorkerLink] = []
        for i in range(self._parallelism):
            host = WorkerHost(
                index=i,
                source_name=source.name,
                handler=self._handler,
                make_reader=lambda ctx, on_read: source.create_reader(ctx, metrics, on_read),
                send=functools.partial(deliver, i),
                buffer_max_batches=source.options.reader_buffer_max_batches,
                rack=self._racks.get(i),
                track_topics=source.options.topic_tracking_enable,
            )
            thread = threading.Thread(
                target=self._run_host,
                args=(i, host, deliver),
                name=f"mcs-worker-{source.name}-{i}",
                daemon=True,
            )
            self._threads.append(thread)
            links.append(_ThreadLink(host))
            thread.start()
        return links

    @staticmethod
    def _run_host(index: int, host: WorkerHost, deliver: Deliver) -> None:
        try:
            host.run()
        finally:
            deliver(index, LinkLost("the worker thread ended"))

    def close(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
            if thread.is_alive():
                _log.error("worker thread %s did not end within %.0f s", thread.name, timeout)


def reader_only_source(source: MultiClusterKafkaSource) -> MultiClusterKafkaSource:
    """A copy of ``source`` with only what readers need, for workers in other processes: no metadata
    service (watch threads, clients), subscriber, topic status store or standby assignor."""
    import copy

    clone = copy.copy(source)
    clone.__dict__.update(
        metadata_service=None, subscriber=None, topic_status_store=None, standby_assignor=None
    )
    return clone


def check_picklable(runtime: str, source: MultiClusterKafkaSource, handler: Handler) -> None:
    """Raise :class:`ConfigurationError` naming what cannot be sent to a worker process."""
    try:
        pickle.dumps(handler)
    except Exception as exc:
        raise ConfigurationError(
            f"run(runtime={runtime!r}): the handler cannot be sent to a worker process ({exc}); use a "
            f"module-level function or an instance of a module-level class"
        ) from exc
    for name, value in vars(source).items():
        try:
            pickle.dumps(value)
        except Exception as exc:
            hint = (
                " (set_deserializer: use a module-level function, not a lambda)"
                if name == "deserializer"
                else ""
            )
            raise ConfigurationError(
                f"run(runtime={runtime!r}): the source's {name} cannot be sent to a worker process "
                f"({exc}){hint}"
            ) from exc


# ----------------------------------------------------------------------------------------------- driver


class _LinkedCoordinator(Coordinator):
    """The coordinator whose readers are behind links: assignments and events become messages."""

    def __init__(self, *args: Any, send: Callable[[int, object], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._send_to = send

    def assign_splits(self, assignment: Mapping[int, Sequence[KafkaPartitionSplit]]) -> None:
        """Send splits to readers."""
        for reader, splits in assignment.items():
            self._send_to(reader, AssignSplits(tuple(splits)))

    def send_event_to_reader(self, reader: int, event: SourceEvent) -> None:
        """Send an event to one reader."""
        self._send_to(reader, EventToReader(event))

    def signal_no_more_splits(self, reader: int) -> None:
        """Tell a reader no more splits come."""
        self._send_to(reader, NoMoreSplits())


class _Driver:
    """Runs one push run in the calling thread: start, loop, checkpoints, failover, shutdown."""

    def __init__(
        self,
        source: MultiClusterKafkaSource,
        parallelism: int,
        transport: Transport,
        *,
        storage: CheckpointStorage | None,
        checkpoint_dir: str | None,
        interval: float | None,
        registry: Any,
        control: RunControl,
        stop_event: Any,
        startup_timeout: float,
        stop_timeout: float,
    ) -> None:
        self._source = source
        self._name = source.name
        self._n = parallelism
        self._transport = transport
        self._storage = storage
        self._checkpoint_dir = checkpoint_dir
        self._interval = interval
        self._registry = registry
        self._control = control
        self._stop_event = stop_event
        self._startup_timeout = startup_timeout
        self._stop_timeout = stop_timeout
        self._heartbeat_s = source.options.reader_heartbeat_timeout_ms / 1000.0
        self._inbound: queue.SimpleQueue[tuple[int, object]] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()
        self._links: list[WorkerLink] = []
        self._ready: dict[int, WorkerReady] = {}
        self._last_seen: dict[int, float] = {}
        self._lost: dict[int, str] = {}
        self._gone: set[int] = set()
        self._stopped: set[int] = set()
        self._records: dict[int, int] = dict.fromkeys(range(parallelism), 0)
        self._checkpoint_id = 0
        self._checkpoints = 0
        self._last_checkpoint: str | None = None
        self._restored_from: str | None = None
        self._enumerator: MultiClusterEnumerator | None = None
        self._finished = False
        self._closing = False
        self._tracker = PositionTracker()
        self._coordinator: _LinkedCoordinator | None = None
        self._coordinator_started = False
        self._topics: TopicTracker | None = None
        self._metrics: SourceMetrics | None = None

    # --------------------------------------------------------------------------------------- plumbing

    def _deliver(self, index: int, message: object) -> None:
        self._inbound.put((index, message))

    def _send(self, index: int, message: object) -> None:
        if 0 <= index < len(self._links):
            self._links[index].send(message)

    def _fail(self, error: BaseException) -> None:
        with self._error_lock:
            if self._error is not None:
                return
            self._error = error
        _log.error("source=%s: run failed: %s", self._name, error)

    def _stop_requested(self) -> bool:
        event = self._stop_event
        return self._control.stop_requested or (event is not None and bool(event.is_set()))

    # ------------------------------------------------------------------------------------------ run

    def run(self) -> RunResult:
        started = time.monotonic()
        interrupted: BaseException | None = None
        try:
            self._start()
            self._loop()
        except KeyboardInterrupt as exc:  # stop as asked: finish the handlers' batches, checkpoint
            interrupted = exc
        except BaseException as exc:
            self._fail(exc)
        finally:
            self._shutdown()
            self._control._done.set()
        if interrupted is not None:
            raise interrupted
        error = self._error
        if error is not None:
            if isinstance(error, MultiClusterSourceError):
                raise error
            raise SourceFailedError(f"source {self._name} failed: {error}") from error
        return RunResult(
            runtime=self._transport.name,
            parallelism=self._n,
            finished=self._finished,
            records=sum(self._records.values()),
            records_per_reader=dict(self._records),
            checkpoints=self._checkpoints,
            last_checkpoint=self._last_checkpoint,
            restored_from=self._restored_from,
            lost_readers=dict(self._lost),
            seconds=time.monotonic() - started,
        )

    def _start(self) -> None:
        source = self._source
        restored = self._storage.latest() if self._storage is not None else None
        if restored is not None:
            self._checkpoint_id = restored.checkpoint_id
            self._restored_from = str(restored.path)
            self._tracker = PositionTracker(restored.positions)
            _log.info("source=%s: restoring from checkpoint %s", self._name, restored.path)
        self._metrics = SourceMetrics(self._registry, self._name)
        self._topics = source.create_topic_tracker(self._checkpoint_dir)
        self._topics.start()
        self._coordinator = _LinkedCoordinator(
            self._name, self._n, self._tracker, self._fail, send=self._send
        )
        self._links = self._transport.start(self._deliver, self._metrics)
        self._await_ready()
        if self._stop_requested():
            return
        coordinator = self._coordinator
        coordinator.racks = {i: r.rack for i, r in self._ready.items() if r.rack is not None}
        coordinator.start()
        self._coordinator_started = True
        metrics = self._metrics
        enumerator = coordinator.call_sync(
            lambda: source.create_enumerator(
                coordinator,
                restored.enumerator if restored else None,
                restored.positions if restored else None,
                metrics,
            )
        )
        self._enumerator = enumerator
        coordinator.enumerator = enumerator
        coordinator.call_sync(enumerator.start)
        now = time.monotonic()
        for i in range(self._n):
            self._last_seen[i] = now
            self._send(i, StartReader())
        self._control._running.set()
        _log.info("source=%s: running %d readers on runtime %s", self._name, self._n, self._transport.name)

    def _await_ready(self) -> None:
        deadline = time.monotonic() + self._startup_timeout
        while len(self._ready) < self._n:
            if self._stop_requested():
                return  # a stop before the start: run() returns, nothing was read
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(self._n)) - set(self._ready))
                raise SourceFailedError(
                    f"source {self._name}: workers {missing} did not start within "
                    f"{self._startup_timeout:.0f} s"
                )
            try:
                index, message = self._inbound.get(timeout=min(0.1, left))
            except queue.Empty:
                continue
            if isinstance(message, LinkLost):
                self._gone.add(index)
                raise SourceFailedError(
                    f"source {self._name}: worker {index} could not start: {message.reason}"
                )
            if isinstance(message, WorkerFailure):
                detail = message.summary
                raise SourceFailedError(f"source {self._name}: worker {index} could not start: {detail}")
            self._on_message(index, message)

    def _loop(self) -> None:
        last_checkpoint = time.monotonic()
        next_check = 0.0
        bounded = self._source.bounded
        coordinator, enumerator = self._coordinator, self._enumerator
        if coordinator is None or enumerator is None:
            return
        while self._error is None and not self._stop_requested():
            try:
                index, message = self._inbound.get(timeout=0.05)
                self._on_message(index, message)
                for _ in range(1000):
                    index, message = self._inbound.get_nowait()
                    self._on_message(index, message)
            except queue.Empty:
                pass
            now = time.monotonic()
            if now < next_check:
                continue
            next_check = now + 0.1
            self._check_heartbeats(now)
            if bounded and coordinator.call_sync(enumerator.is_finished):
                self._finished = True
                _log.info("source=%s: every split was read to its end and handled", self._name)
                return
            if self._interval is not None and now - last_checkpoint >= self._interval:
                self.checkpoint()
                last_checkpoint = time.monotonic()

    def _on_message(self, index: int, message: object) -> None:
        self._last_seen[index] = time.monotonic()
        if isinstance(message, Delivered):
            self._tracker.advance(message.positions)
            if message.records:
                self._records[index] = self._records.get(index, 0) + message.records
                self._control._records += message.records
        elif isinstance(message, EventToEnumerator):
            if index not in self._lost and self._coordinator is not None:
                self._coordinator.deliver_reader_event(index, message.event)
        elif isinstance(message, Heartbeat):
            self._control._update(index, splits=message.splits)
        elif isinstance(message, TopicRead):
            if self._topics is not None and self._topics.enabled:
                self._topics.record(message.cluster, message.topic, index)
        elif isinstance(message, WorkerFailure):
            self._on_failure(index, message)
        elif isinstance(message, WorkerLog):
            record = message.record
            logger = logging.getLogger(record.name)
            if logger.isEnabledFor(record.levelno):
                logger.handle(record)
        elif isinstance(message, WorkerStopped):
            self._stopped.add(index)
            self._control._update(index, alive=False)
        elif isinstance(message, LinkLost):
            self._gone.add(index)
            self._control._update(index, alive=False)
            if not self._closing and index not in self._stopped:
                self._lose(index, SourceFailedError(f"worker {index} was lost: {message.reason}"))
        elif isinstance(message, WorkerReady):
            self._ready[index] = message
            self._control._update(index, pid=message.pid, host=message.host, rack=message.rack, alive=True)
        else:
            _log.warning("source=%s: unknown message from worker %d: %r", self._name, index, message)

    def _on_failure(self, index: int, failure: WorkerFailure) -> None:
        _log.error(
            "source=%s: reader %d: %s failure: %s", self._name, index, failure.kind, failure.description
        )
        error: BaseException | None = None
        if failure.error is not None:
            with contextlib.suppress(Exception):
                error = pickle.loads(failure.error)
        if failure.kind == "reader":
            self._lose(index, error or SourceFailedError(failure.summary))
            return
        if failure.kind == "handler":
            wrapped = SourceFailedError(
                f"source {self._name}: the handler failed in reader {index}: {failure.summary}"
            )
            wrapped.__cause__ = error
            self._fail(wrapped)
            return
        if isinstance(error, MultiClusterSourceError):
            self._fail(error)
        else:
            self._fail(SourceFailedError(f"source {self._name}: reader {index} failed: {failure.summary}"))

    def _lose(self, index: int, error: BaseException) -> None:
        """A worker is gone or failed: the enumerator moves its splits to live readers."""
        if index in self._lost or self._coordinator is None:
            return
        self._lost[index] = f"{type(error).__name__}: {error}"
        self._control._update(index, alive=False)
        _log.warning("source=%s: reader %d is lost (%s); its splits move", self._name, index, error)
        if len(self._lost) >= self._n:
            failure = SourceFailedError(f"source {self._name}: every reader failed; the last: {error}")
            failure.__cause__ = error
            self._fail(failure)
        self._coordinator.reader_lost(index)
        self._send(index, StopWorker())

    def _check_heartbeats(self, now: float) -> None:
        for i in range(self._n):
            if i in self._lost or i in self._gone or i in self._stopped:
                continue
            silent = now - self._last_seen.get(i, now)
            if silent > self._heartbeat_s:
                self._lose(i, TimeoutError(f"no heartbeat from worker {i} for {silent:.1f} s"))
                self._links[i].kill()

    # ----------------------------------------------------------------------------------- checkpoints

    def checkpoint(self) -> None:
        """Write a checkpoint covering what the handlers returned from, then commit offsets."""
        storage, coordinator, enumerator = self._storage, self._coordinator, self._enumerator
        if storage is None or coordinator is None or enumerator is None:
            return
        positions = self._tracker.snapshot()
        self._checkpoint_id += 1
        checkpoint_id = self._checkpoint_id
        enum_state = coordinator.call_sync(lambda: enumerator.snapshot_state(checkpoint_id))
        ids = state_split_ids(enum_state)
        kept = {sid: pos for sid, pos in positions.items() if sid in ids}
        self._last_checkpoint = storage.write(checkpoint_id, self._name, enum_state, kept)
        self._checkpoints += 1
        self._control._checkpoints = self._checkpoints
        wait = coordinator.call_sync(lambda: enumerator.notify_checkpoint_complete(checkpoint_id, kept))
        wait(30.0)

    # -------------------------------------------------------------------------------------- shutdown

    def _shutdown(self) -> None:
        self._closing = True
        for i in range(len(self._links)):
            if i not in self._gone:
                self._send(i, StopWorker())
        deadline = time.monotonic() + self._stop_timeout
        pending = set(range(len(self._links))) - self._gone - self._stopped
        while pending and time.monotonic() < deadline:
            try:
                index, message = self._inbound.get(timeout=0.1)
            except queue.Empty:
                continue
            self._on_message(index, message)
            pending = set(range(len(self._links))) - self._gone - self._stopped
        for i in sorted(pending):
            _log.error(
                "source=%s: worker %d did not stop within %.0f s; ending it",
                self._name,
                i,
                self._stop_timeout,
            )
            self._links[i].kill()
        if self._error is None and self._enumerator is not None:
            try:
                self.checkpoint()
            except BaseException as exc:
                self._fail(exc)
        coordinator, enumerator = self._coordinator, self._enumerator
        if coordinator is not None and self._coordinator_started:
            if enumerator is not None:
                try:
                    coordinator.call_sync(enumerator.close, timeout=30)
                except Exception:
                    _log.exception("source=%s: enumerator close failed", self._name)
            coordinator.stop()
        try:
            metadata_service = self._source.metadata_service
            if metadata_service is not None:
                metadata_service.close()
        except Exception:
            _log.exception("source=%s: metadata service close failed", self._name)
        try:
            self._transport.close(self._stop_timeout)
        except Exception:
            _log.exception("source=%s: closing the %s runtime failed", self._name, self._transport.name)
        while True:  # what came while reaping: logs, late positions
            try:
                index, message = self._inbound.get_nowait()
            except queue.Empty:
                break
            self._on_message(index, message)
        if self._topics is not None:
            self._topics.close()
        if self._metrics is not None:
            self._metrics.close()


# ------------------------------------------------------------------------------------------------- run


def _make_transport(
    runtime: str,
    source: MultiClusterKafkaSource,
    handler: Handler,
    parallelism: int,
    racks: Mapping[int, str | None],
    options: dict[str, Any],
) -> Transport:
    if runtime == "threads":
        return ThreadTransport(source, handler, parallelism, racks, options)
    if runtime == "processes":
        from ._process_runtime import ProcessTransport

        return ProcessTransport(source, handler, parallelism, racks, options)
    if runtime == "ray":
        from ._ray_runtime import RayTransport

        return RayTransport(source, handler, parallelism, racks, options)
    raise ConfigurationError(f"run(runtime=...): one of {', '.join(RUNTIMES)}, got {runtime!r}")


def run_source(
    source: MultiClusterKafkaSource,
    handler: Handler,
    parallelism: int = 1,
    *,
    runtime: str = "threads",
    checkpoint_dir: str | None = None,
    checkpoint_interval: float | None = None,
    registry: Any = None,
    **options: Any,
) -> RunResult:
    """``MultiClusterKafkaSource.run``: see its docstring and the README section "Scaling out: runtimes"."""
    from ._source import _reader_racks

    if not callable(handler):
        raise ConfigurationError("run(handler, ...): the handler must be callable(records)")
    if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
        raise ConfigurationError(f"run(parallelism=...): must be an int >= 1, got {parallelism!r}")
    storage: CheckpointStorage | None = options.pop("checkpoint_storage", None)
    if storage is not None:
        if checkpoint_dir is not None:
            raise ConfigurationError("run(): give checkpoint_dir or checkpoint_storage, not both")
        if not isinstance(storage, CheckpointStorage):
            raise ConfigurationError("run(checkpoint_storage=...): needs a CheckpointStorage")
    elif checkpoint_dir is not None:
        storage = DirectoryCheckpointStorage(checkpoint_dir)
    if checkpoint_interval is not None:
        if storage is None:
            raise ConfigurationError(
                "run(checkpoint_interval=...) needs checkpoint_dir or checkpoint_storage"
            )
        if checkpoint_interval <= 0:
            raise ConfigurationError(
                f"run(checkpoint_interval=...): must be > 0 seconds, got {checkpoint_interval!r}"
            )
    control = options.pop("control", None)
    if control is None:
        control = RunControl()
    elif not isinstance(control, RunControl):
        raise ConfigurationError("run(control=...): needs a RunControl")
    elif control._running.is_set() or control._done.is_set():
        raise ConfigurationError("run(control=...): a RunControl serves one run; make a new one")
    stop_event = options.pop("stop_event", None)
    if stop_event is not None and not callable(getattr(stop_event, "is_set", None)):
        raise ConfigurationError("run(stop_event=...): needs an object with is_set() (threading.Event)")
    startup_timeout = float(options.pop("startup_timeout", 120.0))
    stop_timeout = float(options.pop("stop_timeout", 60.0))
    racks = _reader_racks(options.pop("reader_racks", None), parallelism)
    transport = _make_transport(runtime, source, handler, parallelism, racks, options)
    driver = _Driver(
        source,
        parallelism,
        transport,
        storage=storage,
        checkpoint_dir=checkpoint_dir,
        interval=checkpoint_interval,
        registry=registry,
        control=control,
        stop_event=stop_event,
        startup_timeout=startup_timeout,
        stop_timeout=stop_timeout,
    )
    return driver.run()
