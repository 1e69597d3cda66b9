"""The driver of a push run: the enumerator on a coordinator thread, checkpoints, failover and shutdown.

With an exactly-once sink, :mod:`._run_sink`'s guard says where the run starts and fences a worker given up.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Any

from multicluster_source._clock import clock
from multicluster_source.exceptions import MultiClusterSourceError, SourceFailedError
from multicluster_source.framework._storage import CheckpointStorage
from multicluster_source.ops._metrics import SourceMetrics
from multicluster_source.ops._metrics_relay import apply_metrics
from multicluster_source.runtime.core._enumeration import stop_enumeration
from multicluster_source.runtime.core._factory import SourceFactory
from multicluster_source.runtime.core._handoff import PositionTracker
from multicluster_source.runtime.core._messages import (
    Delivered,
    EventToEnumerator,
    Fenced,
    Heartbeat,
    LinkLost,
    StartReader,
    StopWorker,
    TopicRead,
    Transport,
    WatermarkAdvanced,
    WorkerFailure,
    WorkerLink,
    WorkerLog,
    WorkerMetrics,
    WorkerReady,
    WorkerStopped,
)
from multicluster_source.runtime.push._control import RunControl, RunProgress, RunResult
from multicluster_source.runtime.push._coordinator import LinkedCoordinator
from multicluster_source.runtime.push._push_watermarks import RunWatermarks, run_watermarks
from multicluster_source.runtime.push._run_checkpoints import RunCheckpoints
from multicluster_source.runtime.push._run_sink import GiveUp, RunSinkGuard
from multicluster_source.sink._transactions import TransactionalSink

if TYPE_CHECKING:
    from multicluster_source.enumerator._multicluster import MultiClusterEnumerator
    from multicluster_source.ops._tracking import TopicTracker

_log = logging.getLogger("multicluster_source.push")


# ----------------------------------------------------------------------------------------------- driver


class Driver:
    """Runs one push run in the calling thread: start, loop, checkpoints, failover, shutdown."""

    def __init__(
        self,
        source: SourceFactory,
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
        sink: TransactionalSink | None = None,
    ) -> None:
        self._source = source
        self._inbound: queue.SimpleQueue[tuple[int, object]] = queue.SimpleQueue()
        post = self._inbound.put
        self._guard = None if sink is None else RunSinkGuard(sink, source.name, lambda n, m: post((n, m)))
        self._name = source.name
        self._n = parallelism
        self._transport = transport
        self._storage = storage
        self._checkpoint_dir = checkpoint_dir
        self._interval = interval
        self._told_enumerator = False  # a reader event went to the enumerator since the loop last looked
        self._registry = registry
        self._control = control
        self._progress = RunProgress(control)
        self._stop_event = stop_event
        self._startup_timeout = startup_timeout
        self._stop_timeout = stop_timeout
        self._heartbeat_s = source.options.reader_heartbeat_timeout_ms / 1000.0
        self._clock = clock()  # heartbeats' and the checkpoint interval's
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()
        self._links: list[WorkerLink] = []
        self._ready: dict[int, WorkerReady] = {}
        self._last_seen: dict[int, float] = {}
        self._lost: dict[int, str] = {}
        self._gone: set[int] = set()
        self._stopped: set[int] = set()
        self._records: dict[int, int] = dict.fromkeys(range(parallelism), 0)
        self._checkpoints = RunCheckpoints(source.name, storage, control, offsets_only=sink is not None)
        self._restored_from: str | None = None
        self._enumerator: MultiClusterEnumerator | None = None
        self._finished = False
        self._closing = False
        self._tracker = PositionTracker()
        self._coordinator: LinkedCoordinator | None = None
        self._watermarks: RunWatermarks | None = None
        self._coordinator_started = False
        self._topics: TopicTracker | None = None
        self._metrics: SourceMetrics | None = None

    # --------------------------------------------------------------------------------------- plumbing

    def _deliver(self, index: int, message: object) -> None:
        """A worker's message, on the transport's thread: a fence's answer goes to the coordinator thread,
        which waits for it (and may be waited for by this loop), the rest to the loop, in order."""
        coordinator = self._coordinator
        if coordinator is not None and isinstance(message, (Fenced, LinkLost, WorkerStopped)):
            if isinstance(message, Fenced):
                coordinator.fenced_reply(index, message)
                return
            coordinator.worker_gone(index)  # no fence waits for it
        self._inbound.put((index, message))

    def _send(self, index: int, message: object) -> None:
        if 0 <= index < len(self._links):
            self._links[index].send(message)

    def _watermark_moved(self, ms: int) -> None:
        """The run's watermark moved: the control and every live worker (``on_watermark``) hear of it."""
        if self._progress.watermark(ms):
            for i in range(self._n):
                if i not in self._lost:
                    self._send(i, WatermarkAdvanced(ms))

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
            self._progress.done()
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
            checkpoints=self._checkpoints.written,
            last_checkpoint=self._checkpoints.last_written,
            restored_from=self._restored_from,
            lost_readers=dict(self._lost),
            seconds=time.monotonic() - started,
        )

    def _start(self) -> None:
        source = self._source
        restored = self._storage.latest() if self._storage is not None else None
        if self._guard is not None:  # the positions committed with the results win over the checkpoint's
            restored = self._guard.restored(restored, source.bounded)
        if restored is not None:
            self._checkpoints.last_id = restored.checkpoint_id
            self._restored_from = str(restored.path)
            self._tracker = PositionTracker(restored.positions)
            _log.info("source=%s: restoring from checkpoint %s", self._name, restored.path)
        self._metrics = SourceMetrics(self._registry, self._name)
        self._topics = source.create_topic_tracker(self._checkpoint_dir)
        self._topics.start()
        extra = self._guard.coordinator_options(source) if self._guard is not None else {}
        self._coordinator = LinkedCoordinator(
            self._name, self._n, self._tracker, self._fail, send=self._send, **extra
        )
        self._watermarks = run_watermarks(
            source, self._metrics, self._coordinator, restored, self._watermark_moved
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
        self._checkpoints.start(coordinator, enumerator, self._tracker)
        coordinator.call_sync(enumerator.start)
        now = self._clock.monotonic()
        for i in range(self._n):
            self._last_seen[i] = now
            self._send(i, StartReader())
        self._progress.running()
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
        last_checkpoint = self._clock.monotonic()
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
            now = self._clock.monotonic()
            told, self._told_enumerator = self._told_enumerator, False
            if now < next_check and not (bounded and told):  # a split finished: maybe all did
                continue
            next_check = now + 0.1
            self._check_heartbeats(now)
            if self._watermarks is not None:
                self._watermarks.publish()
            if bounded and coordinator.call_sync(enumerator.is_finished):
                self._finished = True
                _log.info("source=%s: every split was read to its end and handled", self._name)
                return
            if self._interval is not None and now - last_checkpoint >= self._interval:
                self._checkpoints.take(wait=False, on_failure=self._fail)  # written on the checkpoint thread
                last_checkpoint = self._clock.monotonic()

    def _on_message(self, index: int, message: object) -> None:
        self._last_seen[index] = self._clock.monotonic()
        if isinstance(message, Delivered):
            if self._guard is not None and index in self._lost:
                return  # committed before it was fenced: the positions read back then hold it already
            self._tracker.advance(message.positions, message.last_times)
            if message.event_times and self._watermarks is not None:
                self._watermarks.delivered(message.event_times)
            if message.records:
                self._records[index] = self._records.get(index, 0) + message.records
                self._progress.handled(message.records)
        elif isinstance(message, EventToEnumerator):
            if index not in self._lost and self._coordinator is not None:
                self._coordinator.deliver_reader_event(index, message.event)
                self._told_enumerator = True
        elif isinstance(message, Heartbeat):
            self._progress.worker(index, splits=message.splits)
        elif isinstance(message, TopicRead):
            if self._topics is not None and self._topics.enabled:
                self._topics.record(message.cluster, message.topic, index)
        elif isinstance(message, WorkerFailure):
            self._on_failure(index, message)
        elif isinstance(message, WorkerMetrics):
            if self._metrics is not None:
                apply_metrics(self._metrics, message.delta)
        elif isinstance(message, WorkerLog):
            record = message.record
            logger = logging.getLogger(record.name)
            if logger.isEnabledFor(record.levelno):
                logger.handle(record)
        elif isinstance(message, WorkerStopped):
            self._stopped.add(index)
            self._progress.worker(index, alive=False)
        elif isinstance(message, LinkLost):
            self._gone.add(index)
            self._progress.worker(index, alive=False)
            if not self._closing and index not in self._stopped:
                self._lose(index, SourceFailedError(f"worker {index} was lost: {message.reason}"))
        elif isinstance(message, GiveUp):
            self._lose(index, SourceFailedError(message.reason))
        elif isinstance(message, WorkerReady):
            self._ready[index] = message
            self._progress.worker(index, pid=message.pid, host=message.host, rack=message.rack, alive=True)
        else:
            _log.warning("source=%s: unknown message from worker %d: %r", self._name, index, message)

    def _on_failure(self, index: int, failure: WorkerFailure) -> None:
        if index in self._lost:  # given up already (fenced at the sink: its last commit was refused)
            return
        _log.error(
            "source=%s: reader %d: %s failure: %s", self._name, index, failure.kind, failure.description
        )
        error = failure.exception()
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
        self._progress.worker(index, alive=False)
        _log.warning("source=%s: reader %d is lost (%s); its splits move", self._name, index, error)
        guard, coordinator = self._guard, self._coordinator
        if guard and not guard.lost(index, coordinator.owned_by(index), self._tracker, self._fail):
            return
        if len(self._lost) >= self._n:
            failure = SourceFailedError(f"source {self._name}: every reader failed; the last: {error}")
            failure.__cause__ = error
            self._fail(failure)
        self._coordinator.worker_gone(index)
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
                self._checkpoints.take()  # the last one: durable and committed before run() returns
            except BaseException as exc:
                self._fail(exc)
        self._checkpoints.close()  # what was taken is written before the enumerator stops
        started = self._coordinator if self._coordinator_started else None
        stop_enumeration(self._name, started, self._enumerator, self._source.metadata_service)
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
