"""The local runtime: the enumerator on a coordinator thread, each reader on a thread of its own.

* :class:`Coordinator` runs a mailbox on thread ``mcs-coordinator-<source>``; timers fire on it too; blocking
  calls run on a small pool of ``mcs-io-<source>`` threads and come back through the mailbox.
* :class:`ReaderRunner` runs one reader on thread ``mcs-reader-<source>-<i>``; its inbox carries split
  assignments, events and the no-more-splits signal as plain values (the seam a process runtime would cross).
* :class:`Handoff` is the bounded buffer between fetch threads and the caller: when it is full, fetchers wait
  and pause their partitions, so memory stays bounded.
* :class:`PositionTracker` holds, per split, the offset after the last record the caller received.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from multicluster_source._clock import clock
from multicluster_source.framework._events import MetadataUpdateEvent, SourceEvent
from multicluster_source.framework._interfaces import (
    InlineStep,
    RecordBatch,
    SourceReader,
    SplitEnumerator,
)
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.runtime.core._handoff import Handoff, PositionFencing, PositionTracker
from multicluster_source.runtime.eventtime._watermarks import WatermarkTracker

T = TypeVar("T")
_log = logging.getLogger("multicluster_source.runtime")


def _wake() -> None:
    """A mailbox item that only makes the coordinator look at its timers again."""


class _Handle:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Coordinator(PositionFencing):
    """Runs the enumerator on one thread and is its :class:`SplitEnumeratorContext`."""

    def __init__(
        self,
        source_name: str,
        parallelism: int,
        tracker: PositionTracker,
        on_fail: Callable[[BaseException], None],
        io_threads: int = 4,
    ) -> None:
        self.source_name = source_name
        self._parallelism = parallelism
        self._tracker = tracker
        self._on_fail = on_fail
        self._mailbox: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._timers: list[tuple[float, int, _Handle, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._io = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix=f"mcs-io-{source_name}")
        self._thread = threading.Thread(target=self._run, name=f"mcs-coordinator-{source_name}", daemon=True)
        self._stopped = threading.Event()
        self._clock = clock()  # the timers' (a manual clock's advance wakes the loop to look at them)
        self._clock.on_advance(lambda: self._mailbox.put(_wake))
        self.readers: list[ReaderRunner] = []
        self.enumerator: SplitEnumerator | None = None
        self.racks: dict[int, str | None] = {}
        self.watermarks: WatermarkTracker | None = None
        """Told of every assignment and metadata update (event time: which splits exist)."""

    # -------------------------------------------------------------------------------- thread and mailbox

    def start(self) -> None:
        """Start the coordinator thread."""
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            timeout = 0.5
            if self._timers:
                timeout = max(0.0, min(timeout, self._timers[0][0] - self._clock.monotonic()))
            try:
                item = self._mailbox.get(timeout=timeout)
            except queue.Empty:
                item = None
            if item is not None:
                self._execute(item)
            now = self._clock.monotonic()
            while self._timers and self._timers[0][0] <= now and not self._stopped.is_set():
                _due, _seq, handle, fn = heapq.heappop(self._timers)
                if not handle.cancelled:
                    self._execute(fn)

    def _execute(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as exc:
            _log.exception("source=%s: enumerator failed", self.source_name)
            self._on_fail(exc)

    def call_sync(self, fn: Callable[[], T], timeout: float = 60.0) -> T:
        """Run ``fn`` on the coordinator thread and wait for its result (from any other thread)."""
        if threading.current_thread() is self._thread:
            return fn()
        future: Future[T] = Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

        self._mailbox.put(run)
        return future.result(timeout=timeout)

    def stop(self, io_timeout: float = 5.0) -> None:
        """Stop and join the thread and the I/O pool (a closed enumerator's I/O calls end within 0.1 s), then
        drop the mailbox's leftovers: their tracebacks hold admin clients (the last reference ends one)."""
        self._stopped.set()
        self._mailbox.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
        self._io.shutdown(wait=False, cancel_futures=True)
        deadline, me = time.monotonic() + io_timeout, threading.current_thread()
        for thread in [t for t in getattr(self._io, "_threads", ()) if t is not me]:  # shutdown(): no timeout
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                _log.warning("source=%s: I/O thread %s busy after close", self.source_name, thread.name)
        while not self._mailbox.empty():
            self._mailbox.get_nowait()

    # ---------------------------------------------------------------------------- SplitEnumeratorContext

    @property
    def parallelism(self) -> int:
        """Number of readers."""
        return self._parallelism

    @property
    def reader_racks(self) -> Mapping[int, str | None]:
        """Reader index -> rack."""
        return self.racks

    def run_in_coordinator(self, fn: Callable[[], None], *, delay: float = 0.0) -> _Handle:
        """Queue ``fn`` for the coordinator thread, after ``delay`` seconds."""
        handle = _Handle()
        if delay <= 0:
            self._mailbox.put(lambda: None if handle.cancelled else fn())
        else:
            due = self._clock.monotonic() + delay

            def add_timer() -> None:
                heapq.heappush(self._timers, (due, next(self._seq), handle, fn))

            self._mailbox.put(add_timer)
        return handle

    def call_async(
        self,
        call: Callable[[], T],
        handler: Callable[[T | None, BaseException | None], None],
        *,
        initial_delay: float = 0.0,
        period: float | None = None,
    ) -> _Handle:
        """Run ``call`` on an I/O thread, ``handler`` on the coordinator thread; repeat every ``period``."""
        handle = _Handle()

        def submit() -> None:
            if handle.cancelled or self._stopped.is_set():
                return
            try:
                future = self._io.submit(call)
            except RuntimeError:  # pool shut down
                return
            future.add_done_callback(lambda f: self._mailbox.put(lambda: deliver(f)))

        def deliver(f: Future[T]) -> None:
            if handle.cancelled:
                return
            error = f.exception()
            handler(None if error is not None else f.result(), error)
            if period is not None and not handle.cancelled:
                inner = self.run_in_coordinator(submit, delay=period)
                del inner

        self.run_in_coordinator(submit, delay=initial_delay)
        return handle

    def _observe(self, assignment: Mapping[int, Sequence[KafkaPartitionSplit]] | None, event: Any) -> None:
        """Tell the watermark tracker which splits exist (assigned, or gone with their cluster or topic)."""
        if self.watermarks is None:
            return
        if assignment is not None:
            self.watermarks.assigned(s.split_id for splits in assignment.values() for s in splits)
        if isinstance(event, MetadataUpdateEvent):
            self.watermarks.metadata(event.clusters, event.version)

    def assign_splits(self, assignment: Mapping[int, Sequence[KafkaPartitionSplit]]) -> None:
        """Send splits to readers' inboxes."""
        self._observe(assignment, None)
        for reader, splits in assignment.items():
            self.readers[reader].deliver("splits", list(splits))

    def send_event_to_reader(self, reader: int, event: SourceEvent) -> None:
        """Send an event to one reader."""
        self._observe(None, event)
        self.readers[reader].deliver("event", event)

    def signal_no_more_splits(self, reader: int) -> None:
        """Tell a reader no more splits come."""
        self.readers[reader].deliver("no_more_splits", None)

    def delivered_positions(self, split_ids: Sequence[str]) -> dict[str, int]:
        """Positions the caller reached."""
        return self._tracker.get(split_ids)

    def forget_positions(self, split_ids: Sequence[str]) -> None:
        """Drop positions of splits gone for good."""
        self._tracker.forget(split_ids)

    def fail(self, error: BaseException) -> None:
        """Fail the source."""
        self._on_fail(error)

    def reader_lost(self, reader: int) -> None:
        """Queue a reader's failure for the enumerator (from any thread)."""

        def run() -> None:
            if self.enumerator is not None:
                self.enumerator.reader_failed(reader)

        self._mailbox.put(run)

    def deliver_reader_event(self, reader: int, event: SourceEvent) -> None:
        """Queue a reader's event for the enumerator (from the reader's thread)."""

        def run() -> None:
            if self.enumerator is not None:
                self.enumerator.handle_reader_event(reader, event)

        self._mailbox.put(run)


class ReaderRunner:
    """Runs one reader on its own thread and is its :class:`ReaderContext`."""

    def __init__(
        self,
        index: int,
        source_name: str,
        coordinator: Coordinator,
        handoff: Handoff,
        on_fail: Callable[[BaseException], None],
        on_reader_failed: Callable[[int, BaseException], None] | None = None,
        rack: str | None = None,
    ) -> None:
        self._index = index
        self._rack = rack
        self._on_reader_failed = on_reader_failed
        self.failed: BaseException | None = None
        self._clock = clock()
        self.last_beat = self._clock.monotonic()
        self._kill = threading.Event()
        self._coordinator = coordinator
        self._handoff = handoff
        self._on_fail = on_fail
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self.finished = threading.Event()
        self.reader: SourceReader | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"mcs-reader-{source_name}-{index}", daemon=True
        )

    @property
    def index(self) -> int:
        """This reader's index."""
        return self._index

    @property
    def rack(self) -> str | None:
        """This reader's rack."""
        return self._rack

    def silent_s(self) -> float:
        """Seconds since the reader's thread last looped (its heartbeat)."""
        return self._clock.monotonic() - self.last_beat

    @property
    def alive(self) -> bool:
        """Whether the reader's thread runs and the reader has not failed."""
        return self._thread.is_alive() and self.failed is None

    def start(self, reader: SourceReader) -> None:
        """Start the thread running ``reader``."""
        self.reader = reader
        self._thread.start()

    def deliver(self, kind: str, payload: Any) -> None:
        """Put a message in the inbox (from the coordinator thread)."""
        self._inbox.put((kind, payload))

    def _run(self) -> None:
        reader = self.reader
        assert reader is not None
        try:
            reader.start()
            while not self._stopping.is_set():
                self.last_beat = self._clock.monotonic()
                if self._kill.is_set():
                    raise RuntimeError(f"reader {self._index} was killed (kill_reader)")
                try:
                    kind, payload = self._inbox.get(timeout=0.05)
                except queue.Empty:
                    kind, payload = "", None
                if kind == "splits":
                    reader.add_splits(payload)
                elif kind == "event":
                    reader.handle_source_event(payload)
                elif kind == "no_more_splits":
                    reader.notify_no_more_splits()
                elif kind == "stop":
                    break
                reader.poll_events()
                if reader.is_finished():
                    self.finished.set()
                else:
                    self.finished.clear()
        except BaseException as exc:
            _log.error("reader %d failed: %s", self._index, exc)
            self.reader_failed(exc)
        finally:
            try:
                reader.close()
            except Exception:
                _log.exception("reader %d: close failed", self._index)

    def stop(self, *, wait: bool = True) -> None:
        """Stop the reader; with ``wait``, wait for its thread (which closes its clients)."""
        self._stopping.set()
        self._inbox.put(("stop", None))
        if wait and self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=60)

    def kill(self) -> None:
        """Make this reader fail as if its thread had died (chaos testing of failover)."""
        self._kill.set()

    def reader_failed(self, error: BaseException) -> None:
        """This reader cannot go on: fence it (its records are no longer accepted) and report it once."""
        if self.failed is not None:
            return
        self.failed = error
        self._stopping.set()
        if self._on_reader_failed is not None:
            self._on_reader_failed(self._index, error)
        else:
            self._on_fail(error)

    # ------------------------------------------------------------------------------------- ReaderContext

    def send_event_to_enumerator(self, event: SourceEvent) -> None:
        """Send an event to the enumerator."""
        self._coordinator.deliver_reader_event(self._index, event)

    def emit(self, batch: RecordBatch, should_stop: Callable[[], bool]) -> bool:
        """Hand a batch to the caller (blocking while the buffer is full); refused once fenced."""
        if self.failed is not None or self._stopping.is_set():
            return False
        return self._handoff.put(batch, lambda: should_stop() or self._stopping.is_set())

    def offer_inline(
        self, step: InlineStep, release: Callable[[], None], hold: Callable[[], None] | None = None
    ) -> Callable[[], None]:
        """Lend a fetcher's step to the thread that takes batches (see ``ReaderContext.offer_inline``)."""
        return self._handoff.lend(lambda: step(self._emit_now), release, hold)

    def _emit_now(self, batch: RecordBatch) -> bool:
        if self.failed is not None or self._stopping.is_set():
            return False
        self._handoff.put_now(batch)
        return True

    def fail(self, error: BaseException) -> None:
        """Fail the source."""
        self._on_fail(error)
