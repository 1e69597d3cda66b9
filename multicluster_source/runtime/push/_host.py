"""The worker side of the push API: one reader and the handler thread, in a thread, process or actor."""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from multicluster_source._clock import clock
from multicluster_source.exceptions import DeserializationError, ProducerFencedError, SourceFailedError
from multicluster_source.framework._events import SourceEvent, SplitsFinishedEvent
from multicluster_source.framework._gcpause import TakerHold
from multicluster_source.framework._interfaces import InlineStep, RecordBatch, SourceReader
from multicluster_source.framework._records import SourceRecord
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.framework._watermarks import EventTimes, widened_event_times
from multicluster_source.reader._records import RecordMaker
from multicluster_source.runtime.core._delivery import Delivery
from multicluster_source.runtime.core._factory import SourceFactory
from multicluster_source.runtime.core._handoff import Handoff, PositionTracker
from multicluster_source.runtime.core._messages import (
    HEARTBEAT_S,
    AssignSplits,
    ClusterIds,
    Delivered,
    EventToEnumerator,
    EventToReader,
    Fenced,
    FenceSplits,
    Handler,
    Heartbeat,
    NoMoreSplits,
    OnTopicRead,
    StartReader,
    StopWorker,
    TopicRead,
    WatchSplits,
    WatermarkAdvanced,
    WorkerFailure,
    WorkerReady,
    WorkerStopped,
    describe_error,
    error_blob,
)
from multicluster_source.runtime.push._push_watermarks import WorkerEventTimes
from multicluster_source.runtime.push._worker_sink import WorkerTransactions
from multicluster_source.sink._transactions import TransactionAborted

_log = logging.getLogger("multicluster_source.push")

ReaderFactory = Callable[["WorkerHost", "OnTopicRead | None"], SourceReader]


_RECORDS = RecordMaker(None)
_ALL = 1 << 30
"""No limit on the records of one take: the handler gets one fetch batch at a time (``gather=1``)."""


class _CountingHandoff(Handoff):
    """A :class:`Handoff` that counts the batches taken (by the handler thread): a finished split is
    reported once every batch emitted before it was taken and its records handled."""

    def __init__(self, max_batches: int) -> None:
        super().__init__(max_batches)
        self.taken = 0

    def get(self, timeout: float, fetch: bool = True) -> RecordBatch | None:
        """See :meth:`Handoff.get`."""
        batch = super().get(timeout, fetch)
        if batch is not None:
            self.taken += 1
        return batch


_DELIVERED_EVERY_S = 0.01
"""How often a worker reports the positions of handled batches (``Delivered``), at most; a report per batch
cost about 5% of a worker process's time (pickling and a pipe write per batch of 2,000)."""


def record_maker(source: SourceFactory, metrics: Any, batches: bool) -> RecordMaker | None:
    """What a worker's handler thread turns batches into: records (``batches=False``, with the source's
    deserializer), or None for the batch handler."""
    if batches:
        return None
    return RecordMaker(source.deserializer, source.options.deserialization_error_policy, metrics)


"""``make_reader(context, on_topic_read)``: builds the worker's reader (``source.create_reader``)."""


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
        make_records: RecordMaker | None = _RECORDS,
        event_times: WorkerEventTimes | None = None,
        transactions: WorkerTransactions | None = None,
    ) -> None:
        """``make_records`` turns a batch's messages into the handler's records; None: the handler gets
        each :class:`MessageBatch` itself (``run(..., batches=True)``). ``event_times`` (with a watermark
        strategy) finds what a handled batch reports of event time and counts its late records.
        ``transactions`` (``run(..., sink=...)``): the handler returns what to produce, and what it returned
        from counts as handled once its transaction committed (:mod:`._worker_sink`)."""
        self._index = index
        self._host_name = host_name or socket.gethostname()
        self._source = source_name
        self._handler = handler
        self._make_records = make_records
        self._make_reader = make_reader
        self._send_raw = send
        self._rack = rack
        self._track_topics = track_topics
        self._stop_timeout = stop_timeout
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._buffer_max_batches = buffer_max_batches
        self._handoff = _CountingHandoff(buffer_max_batches)
        self._tracker = PositionTracker()
        """What its handler was handed, per split (``FenceSplits`` fences, ``WatchSplits`` watches)."""
        self._chunk_times: dict[str, tuple[int, int]] | None = None  # event times of what it is handed now
        self._lock = threading.Lock()
        self._emitted = 0
        self._handled = 0
        self._deferred: list[tuple[int, SourceEvent]] = []
        self._stopping = threading.Event()
        self._failed = False
        self._records = 0
        # handled batches not yet reported (Delivered is sent at most every _DELIVERED_EVERY_S, and before
        # finished splits are released, when nothing is left to handle, and at the end)
        self._unsent_positions: dict[str, int] = {}
        self._unsent_records = 0
        self._unsent_times: dict[str, tuple[int, int]] | None = None
        self._unsent_last: dict[str, int] = {}  # last handed-out timestamps of watched splits
        self._last_delivered = 0.0
        self._clock = clock()  # heartbeats' and the Delivered interval's
        self._topics_seen: set[tuple[str, str]] = set()
        self._reader: SourceReader | None = None
        self._event_times = event_times
        self._watermark: int | None = None  # the run's, from the driver; the handler thread reads it
        self._watermark_now: int | None = None  # the handler thread's copy as it takes a chunk
        self._txn = transactions
        self._splits: dict[str, KafkaPartitionSplit] = {}  # assigned, neither moved away nor finished
        self._no_more = False
        self._rewind_wanted = threading.Event()  # the handler thread's transaction aborted: read again
        self._rewound = threading.Event()  # the main loop made a new reader at the committed positions

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
        if self._txn is not None:
            try:
                self._txn.open()  # fences this slot's earlier instance
            except BaseException as exc:
                self._failure("source", exc)
                self._send(WorkerStopped(0))
                return
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
                if isinstance(message, WatermarkAdvanced):
                    self._watermark = message.ms
                    continue
                if isinstance(message, FenceSplits):  # at once, whether the reader runs yet or not
                    self._fence(message)
                    continue
                if isinstance(message, WatchSplits):
                    self._tracker.watch(message.split_ids)
                    continue
                if isinstance(message, ClusterIds):
                    if self._txn is not None:
                        self._txn.identities(message.ids)
                    continue
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
                if self._rewind_wanted.is_set() and reader is not None:
                    reader = self._reader = self._rewind(reader)
                finished = False
                if reader is not None:
                    reader.poll_events()
                    with self._lock:
                        self._release_deferred_locked()
                    finished = reader.is_finished() and self._idle()
                now = self._clock.monotonic()
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
            with self._lock:
                self._flush_delivered_locked()  # what was handled before the stop counts
            self._send(WorkerStopped(self._records))

    def _fence(self, message: FenceSplits) -> None:
        """Fence at the tracker (the handler thread's lock); when the driver waits, answer what was handed
        (with a sink: once the transaction holding it committed, on the handler thread)."""
        fenced = self._tracker.fence(message.split_ids)
        with self._lock:
            for sid in message.split_ids:
                self._splits.pop(sid, None)
        if self._txn is not None:
            if message.request:
                self._txn.fence_request(message.request, fenced)
            return
        if message.request:
            times = {sid: ts for sid, (_pos, ts) in fenced.items() if ts is not None}
            self._send(Fenced(message.request, {sid: pos for sid, (pos, _ts) in fenced.items()}, times))

    def _dispatch(self, reader: SourceReader, message: object) -> None:
        if isinstance(message, AssignSplits):
            # a split fenced before and assigned here again: handed out anew, without what this worker's
            # handler had of it already (a batch fetched before the fence may still wait in the hand-off)
            self._tracker.unfence([split.split_id for split in message.splits])
            with self._lock:
                self._splits.update((split.split_id, split) for split in message.splits)
            if self._txn is not None:
                self._txn.assigned(message.splits)
            reader.add_splits(list(message.splits))
        elif isinstance(message, EventToReader):
            reader.handle_source_event(message.event)
        elif isinstance(message, NoMoreSplits):
            self._no_more = True
            reader.notify_no_more_splits()
        else:
            _log.warning("reader %d: unknown message %r", self._index, message)

    def split_ids(self) -> list[str]:
        """The splits the reader reads now (when it tells)."""
        split_ids = getattr(self._reader, "split_ids", None)
        return list(split_ids()) if callable(split_ids) else []

    def _idle(self) -> bool:
        with self._lock:
            done = self._handled >= self._emitted and not self._deferred and not self._unsent_positions
            return done and (self._txn is None or self._txn.idle)

    def _unsent_locked(self, positions: Mapping[str, int], records: int, times: EventTimes | None) -> None:
        """Add a handled batch to what the next Delivered reports; send it when it is due."""
        self._unsent_positions.update(positions)
        if self._tracker.watched and not self._tracker.watched.isdisjoint(positions):
            self._unsent_last.update(self._tracker.times_of(positions))
        self._unsent_records += records
        if times:
            self._unsent_times = widened_event_times(self._unsent_times, times)
        if self._clock.monotonic() - self._last_delivered >= _DELIVERED_EVERY_S:
            self._flush_delivered_locked()

    def _flush_delivered_locked(self) -> None:
        if self._unsent_positions or self._unsent_records:
            last = self._unsent_last or None
            self._send(Delivered(self._unsent_positions, self._unsent_records, self._unsent_times, last))
            self._unsent_positions, self._unsent_records, self._unsent_times = {}, 0, None
            self._unsent_last = {}
        self._last_delivered = self._clock.monotonic()

    def _release_deferred_locked(self) -> bool:
        """Send the finished splits whose records were handled; whether any was."""
        if not self._deferred:
            return False
        ready = [event for seq, event in self._deferred if seq <= self._handled]
        if ready:
            self._flush_delivered_locked()  # the driver gets a split's positions before it hears it finished
            self._deferred = [(seq, event) for seq, event in self._deferred if seq > self._handled]
            for event in ready:
                if isinstance(event, SplitsFinishedEvent):
                    for sid in event.split_ids:
                        self._splits.pop(sid, None)
                self._send(EventToEnumerator(event))
        return bool(ready)

    # --------------------------------------------------------------------------------- handler thread

    def _handle_loop(self) -> None:
        """The handler thread: takes what fetchers handed on through the same :class:`Delivery` as a pull
        stream (fenced splits dropped, records made as the caller would get them), one fetch batch at a time,
        and reports the positions the handler returned from (with a sink: once they committed)."""
        handler = self._handler
        batches = self._make_records is None
        txn = self._txn
        delivery = self._delivery()
        on_watermark = getattr(handler, "on_watermark", None)
        told: int | None = None
        stopped = self._stopping.is_set
        held = TakerHold()
        try:
            open_hook = getattr(handler, "open", None)
            if callable(open_hook):
                open_hook(self._index)
            while not self._stopping.is_set():
                if txn is not None and txn.due() and not self._commit():
                    if not self._await_rewind():
                        break
                    delivery = self._delivery()
                    continue
                if callable(on_watermark) and self._watermark != told:
                    told = self._watermark
                    on_watermark(told)
                wait = 0.0 if self._unsent_positions else 0.05
                self._watermark_now = self._watermark  # the run's as this chunk is handed over (late records)
                self._chunk_times = None
                # run(..., batches=True): the client's messages as they are; else records
                source: Any = delivery.batches if batches else delivery.records
                take = partial(source, max_records=_ALL, stopped=stopped)
                got: list[Any] = held.take(take, wait)  # the collector held off until the handler is done
                if got and self._stopping.is_set():
                    continue  # taken while stopping, not handled: its records come again
                n = self._hand(got, batches, txn) if got else 0
                got = []
                held.end()  # what the handler got is gone (unless it kept it): no pass walks it
                changes = self._tracker.take_changes()
                positions = {sid: pos for sid, pos in changes.items() if pos is not None}
                with self._lock:
                    taken = self._handoff.taken
                    if taken == (self._handled if txn is None else txn.taken) and not positions:
                        if self._unsent_positions:  # nothing came: report what was, then wait
                            self._flush_delivered_locked()
                        continue
                    if txn is not None:  # counted as handled once its transaction committed
                        txn.add(positions, n, self._chunk_times, taken)
                        continue
                    self._records += n
                    self._unsent_locked(positions, n, self._chunk_times)
                    self._handled = taken
                    released = self._release_deferred_locked()
                if released:  # splits finished: the main loop looks at once whether all is read
                    self._inbox.put(None)
            if txn is not None and not self._failed:
                self._commit()  # the last transaction, as the worker stops
        except (DeserializationError, ProducerFencedError, SourceFailedError) as exc:
            # bad data with policy "fail" (the same for every reader), a fenced or failed sink: the run fails
            self._failure("source", exc)
        except BaseException as exc:
            self._failure("handler", exc)
        finally:
            held.end()
            if txn is not None:
                txn.close()  # aborts what did not commit
            close_hook = getattr(handler, "close", None)
            if callable(close_hook):
                try:
                    close_hook()
                except Exception:
                    _log.exception("reader %d: the handler's close() failed", self._index)

    def _hand(self, taken: list[Any], batches: bool, txn: WorkerTransactions | None) -> int:
        """Call the handler with what was taken (each batch, or the records at once); how many records."""
        for part in taken if batches else (taken,):
            returned = self._handler(part)
            if txn is not None:
                txn.produce(returned)
        return sum(map(len, taken)) if batches else len(taken)

    def _delivery(self) -> Delivery:
        """What the handler thread takes from (made again after a rewind, over the new hand-off)."""
        return Delivery(
            self._handoff,
            self._make_records or _RECORDS,
            self._tracker,
            on_delivered=self._note_event_times if self._event_times is not None else None,
            gather=1,
        )

    def _commit(self) -> bool:
        """Commit the sink's transaction (handler thread); then report what it made durable and answer the
        fences that waited. False when it aborted: the caller waits for the main loop to rewind."""
        assert self._txn is not None
        try:
            done = self._txn.commit()
        except TransactionAborted:
            for request, positions, times in self._txn.aborted():
                self._send(Fenced(request, positions, times))
            self._rewound.clear()
            self._rewind_wanted.set()
            self._inbox.put(None)
            return False
        with self._lock:
            self._records += done.records
            if done.positions or done.records:
                self._unsent_locked(done.positions, done.records, done.times)
                self._flush_delivered_locked()
            self._handled = max(self._handled, done.taken)
            released = self._release_deferred_locked()
        for request, positions, times in done.answers:
            self._send(Fenced(request, positions, times))
        if released:
            self._inbox.put(None)
        return True

    def _await_rewind(self) -> bool:
        """Wait (handler thread) until the main loop made a new reader at the committed positions; False when
        the worker stops first."""
        while not self._rewound.wait(0.05):
            if self._stopping.is_set():
                return False
        return True

    def _rewind(self, reader: SourceReader) -> SourceReader:
        """The transaction aborted (main loop): drop the reader and everything fetched or handed out since
        the last commit, and read every split of this worker again from its committed position."""
        assert self._txn is not None
        self._rewind_wanted.clear()
        self._handoff.closed.set()
        reader.close()
        committed = self._txn.committed
        with self._lock:
            watched = self._tracker.watched
            self._tracker = PositionTracker()
            self._tracker.watch(sorted(watched))
            self._handoff = _CountingHandoff(self._buffer_max_batches)
            self._emitted = self._handled = 0
            self._deferred = []
            splits = [
                dataclasses.replace(s, starting_offset=committed.get(sid, s.starting_offset))
                for sid, s in self._splits.items()
            ]
            self._splits = {s.split_id: s for s in splits}
        self._txn.assigned(splits)
        on_topic_read = self._topic_read if self._track_topics else None
        fresh = self._make_reader(self, on_topic_read)
        fresh.start()
        if splits:
            fresh.add_splits(splits)
        if self._no_more:
            fresh.notify_no_more_splits()
        _log.info("reader %d: reading %d splits again from where they committed", self._index, len(splits))
        self._rewound.set()
        return fresh

    def _note_event_times(
        self,
        cluster_id: str,
        messages: Sequence[Any],
        times: Mapping[str, tuple[int, int]] | None,
        records: list[SourceRecord] | None,
    ) -> None:
        """``Delivery``'s ``on_delivered`` (handler thread): the event times of what is handed over now."""
        assert self._event_times is not None
        found = self._event_times(RecordBatch(cluster_id, messages, {}, times), records, self._watermark_now)
        if found:
            self._chunk_times = widened_event_times(self._chunk_times, found)

    def _failure(self, kind: str, error: BaseException) -> None:
        if self._failed:
            return
        self._failed = True
        summary = f"{type(error).__name__}: {error}"
        self._send(WorkerFailure(kind, summary, describe_error(error), error_blob(error)))
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
                released = self._release_deferred_locked()
            if released:  # its records were handled already: the main loop looks whether all is read
                self._inbox.put(None)
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

    def offer_inline(
        self, step: InlineStep, release: Callable[[], None], hold: Callable[[], None] | None = None
    ) -> Callable[[], None]:
        """Lend a fetcher's step to the handler thread (see ``ReaderContext.offer_inline``)."""
        return self._handoff.lend(lambda: step(self._emit_now), release, hold)

    def _emit_now(self, batch: RecordBatch) -> bool:
        if self._failed or self._stopping.is_set():
            return False
        self._handoff.put_now(batch)
        with self._lock:
            self._emitted += 1
        return True

    def fail(self, error: BaseException) -> None:
        """Fail the whole run (bad data: the same for every reader)."""
        self._failure("source", error)

    def reader_failed(self, error: BaseException) -> None:
        """This reader cannot go on: its splits fail over to other readers."""
        self._failure("reader", error)
