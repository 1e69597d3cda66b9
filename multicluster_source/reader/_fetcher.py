"""One cluster's fetch loop inside one reader: a consumer on its own thread, assign-based (no rebalance).

Threads: the owning reader's thread calls ``add_splits``, ``remove_topics``, ``stop``, ``outstanding``;
everything else, including every consumer call, runs on the fetch thread this object starts, or as one
*inline step* on the thread that takes batches (the caller's thread of a stream, a push worker's handler
thread), never both at once (``_step``, a lock):

- **Inline fetching.** Handing a batch from one Python thread to another costs a switch of the GIL and of
  the CPU (a fetch thread plus a queue drained 0.85-0.93 of what one thread did with the same batches). So
  the fetcher lends its step to the hand-off (``ReaderContext.offer_inline``): a taker that finds it empty
  runs ``consume(n, 0)`` and the batch handling itself. While records flow and the taker keeps coming back
  (within :data:`_INLINE_HOLD_S`; coming and finding batches waiting counts too), the fetch thread only
  applies commands and reports lag; when nothing is ready, or the taker stays away, it fetches ahead and
  waits for records again. Batches of one fetcher are handed on under ``_step``, in order; an inline step
  waits out the lag report (``_reporting``).

The hot path does no per-record Python work: each ``consume()`` result is scanned once for error events,
the positions it reaches are read from the consumer (``position()``), stopping offsets are looked at only
for the partitions whose position crossed them, and metrics are counted per batch. The client's messages are
handed on as they are (:class:`RecordBatch`); records are made only where they are asked for
(:mod:`multicluster_source.reader._records`).

Positions out of range are handled in :mod:`multicluster_source.reader._resets`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import TopicPartition

from multicluster_source.exceptions import OffsetOutOfRangeError, SourceFailedError
from multicluster_source.framework._columns import COLUMN_FETCH_FACTOR, taking_columns
from multicluster_source.framework._interfaces import ReaderContext, RecordBatch
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.framework._watermarks import kafka_event_times
from multicluster_source.reader._batches import (
    SplitProgress,
    advance_positions,
    bytes_counter,
    counts_per_topic,
    only_split,
    sort_errors,
)
from multicluster_source.reader._lag import LagReports
from multicluster_source.reader._pauses import AlignmentPauses
from multicluster_source.reader._resets import offset_reset_policy, reset_positions
from multicluster_source.reader._settings import FetchSettings
from multicluster_source.reader._stalls import StallWatch
from multicluster_source.reader._warm import LEARN_MAX_PARTITIONS, WarmConsumer, learn_topics

_log = logging.getLogger("multicluster_source.reader")

_INLINE_HOLD_S = 0.05
"""How long after a taker's last inline step the fetch thread leaves fetching to the taker."""

_REPORT_WAIT_S = 0.02
"""How long an inline step waits for the fetch thread's lag report (about once a second, under a ms)."""


class ClusterFetcher:
    """Reads the splits of one cluster that belong to one reader."""

    def __init__(
        self,
        cluster_id: str,
        conf: dict[str, Any],
        settings: FetchSettings,
        context: ReaderContext,
        on_finished: Callable[[list[str]], None],
        consumer: Any = None,
    ) -> None:
        """``consumer``: a client to use instead of a new one, or a :class:`WarmConsumer` to take over."""
        self.cluster_id = cluster_id
        self._warm_consumer = consumer
        self._conf = conf
        self._reset_policy = offset_reset_policy(conf)
        self._s = settings
        self._ctx = context
        self._on_finished = on_finished
        self._commands: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._outstanding: set[str] = set()
        second = lambda: settings.consumer_factory(conf)  # noqa: E731  (asked when the consumer cannot)
        self.stalls = StallWatch(cluster_id, settings.stall_timeout_s, settings.metrics, second_client=second)
        """The stall watchdog (its ``total`` and ``last`` are read by ``status()`` from other threads)."""
        self._progress: dict[tuple[str, int], SplitProgress] = {}
        self._split_hint: tuple[str | None, bool] = (None, False)  # kafka_event_times(topic=, ends_only=)
        self._pauses = AlignmentPauses(cluster_id, settings.watermark_bound_ms, settings.aligned)
        self._lag = LagReports(cluster_id, settings.metrics)  # what moved since the last lag report
        self._tps: list[Any] = []
        self._topics: list[str] = []
        self._bytes_later: Callable[[int], None] | None = None  # see bytes_counter
        self._known_partitions: dict[str, frozenset[int]] = {}
        """Partitions per topic in this consumer's last metadata answer for it (see ``learn_topics``)."""
        self._step = threading.Lock()  # one fetch step at a time: the fetch thread's or an inline one
        self._wake = threading.Event()  # a command came, or the taker left fetching to the fetch thread
        self._consumer: Any = None  # set (under _step) once the fetch thread has its consumer
        self._inline_until = 0.0  # monotonic time until which the taker fetches inline
        self._inline_error: BaseException | None = None  # raised on the fetch thread (reader failure)
        # an inline step left by KeyboardInterrupt or SystemExit: what its consume() took may be lost, so no
        # step fetches again until the fetch thread has made the consumer again at every split's position
        self._inline_cut = False
        self._reporting = False  # the fetch thread takes _step for a lag report (an inline step waits)
        self._thread = threading.Thread(
            target=self._run,
            name=f"mcs-fetch-{settings.source_name}-{settings.reader_index}-{cluster_id}",
            daemon=True,
        )

    # ------------------------------------------------------------------------ reader thread interface

    def start(self) -> None:
        """Start the fetch thread."""
        self._thread.start()

    def add_splits(self, splits: Sequence[KafkaPartitionSplit]) -> None:
        """Read these splits too."""
        with self._lock:
            self._outstanding |= {s.split_id for s in splits}
        self._command("add", list(splits))

    def hold(self, split_ids: frozenset[str], limit: int | None) -> None:
        """Watermark alignment: pause these splits (of any cluster) at the client and those fetched past
        ``limit``; resume the others."""
        self._command("hold", (split_ids, limit))

    def remove_topics(self, topics: Iterable[str]) -> None:
        """Stop reading every split of these topics (their metric label sets go with them)."""
        self._command("remove", frozenset(topics))

    def _command(self, kind: str, arg: Any) -> None:
        self._commands.put((kind, arg))
        self._wake.set()

    def outstanding(self) -> int:
        """Splits handed to this fetcher that are neither finished nor removed."""
        with self._lock:
            return len(self._outstanding)

    @property
    def split_ids(self) -> frozenset[str]:
        """The splits this fetcher reads now: handed to it, neither finished nor removed (shown from the
        moment it was handed them, even while its thread still connects or asks for their metadata)."""
        with self._lock:
            return frozenset(self._outstanding)

    def begin_stop(self) -> None:
        """Tell the fetch thread to stop (and wake it if it waits for commands); :meth:`stop` waits for it.
        Several fetchers stopping at once close their consumers side by side."""
        if not self._stopping.is_set():
            self._stopping.set()
            self._command("wake", None)

    def stop(self) -> list[KafkaPartitionSplit]:
        """Stop, close the consumer, and return the unfinished splits moved to where reading got to."""
        self.begin_stop()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)
            if self._thread.is_alive():
                _log.error("cluster=%s: fetch thread did not stop within 30 s", self.cluster_id)
        pending: list[KafkaPartitionSplit] = []
        while True:
            try:
                kind, arg = self._commands.get_nowait()
            except queue.Empty:
                break
            if kind == "add":
                pending.extend(arg)
        moved = [
            p.split.starting_at(p.next_offset)
            for p in self._progress.values()
            if not p.split.is_finished_at(p.next_offset)
        ]
        return moved + pending

    # ------------------------------------------------------------------------------------ fetch thread

    def _run(self) -> None:
        consumer: Any = None
        withdraw: Callable[[], None] | None = None
        try:
            warm, self._warm_consumer = self._warm_consumer, None
            if isinstance(warm, WarmConsumer):
                consumer = warm.take()
                self._known_partitions.update(warm.known_partitions)
            else:
                consumer = warm or self._s.consumer_factory(self._conf)
            with self._step:
                self._consumer = consumer
            withdraw = self._ctx.offer_inline(self._inline, self._release_inline, self._hold_inline)
            while self._loop(consumer):  # a split stalled: a new client at every split's position
                consumer = self._remake(consumer)
        except BaseException as exc:
            if not self._stopping.is_set():
                if isinstance(exc, OffsetOutOfRangeError):
                    self._ctx.fail(exc)  # the same for every reader: the source fails
                else:
                    error = SourceFailedError(f"cluster={self.cluster_id}: fetching failed: {exc}")
                    error.__cause__ = exc
                    self._ctx.reader_failed(error)  # this reader fails over to others
        finally:
            if withdraw is not None:
                withdraw()
            with self._step:  # an inline step under way ends first; none starts after this
                self._consumer = None
            if consumer is not None:
                try:
                    consumer.close()
                except Exception as exc:  # closing must not hide the real failure
                    _log.warning("cluster=%s: consumer close failed: %s", self.cluster_id, exc)

    def _remake(self, old: Any) -> Any:
        """Close ``old`` and make a new consumer reading every split from its position (fetch thread)."""
        with self._step:
            self._consumer = None
            try:
                old.close()
            except Exception as exc:  # a client that stopped fetching may not close cleanly either
                _log.warning("cluster=%s: closing the stalled consumer failed: %s", self.cluster_id, exc)
            consumer = self._s.consumer_factory(self._conf)
            assign = [TopicPartition(t, p, prog.next_offset) for (t, p), prog in self._progress.items()]
            if assign:
                consumer.incremental_assign(assign)
            self._pauses.applied = set()
            self._pauses.apply(consumer, self._progress)
            self._consumer = consumer
            self._inline_cut = False
        self._s.metrics.reader_restart(self.cluster_id)
        return consumer

    def _loop(self, consumer: Any) -> bool:
        """Fetch until stopped (False), or until a split stalled or an inline step was cut (True: the
        consumer must be made again)."""
        last_lag = time.monotonic()
        emit = self._ctx.emit
        fetched = False  # the last step handed a batch on (records flow: the taker may fetch them itself)
        while not self._stopping.is_set():
            if self._inline_error is not None:
                raise self._inline_error
            left = self._inline_until - time.monotonic()
            if fetched and left > 0 and self._commands.empty():  # the taker fetches: stay out of its way
                self._wake.wait(min(left, self._s.lag_interval_s))
                self._wake.clear()
            else:
                with self._step:
                    if self._inline_cut:
                        _log.info("cluster=%s: an inline fetch was cut: reading again", self.cluster_id)
                        return True
                    self._drain_commands(consumer, block=not self._progress)
                    messages = self._next_batch(consumer) if self._progress else None
                    if messages:
                        self._handle(consumer, messages, emit)
                fetched = bool(messages)
            now = time.monotonic()
            if now - last_lag >= self._s.lag_interval_s:
                last_lag = now
                self._reporting = True  # before the lock: holding it, this thread may wait for the GIL
                with self._step:
                    self._lag.report(consumer, self._progress)
                    stalled = self.stalls.check(consumer, self._progress, self._pauses.applied)
                    self._reporting = False
                    if stalled:
                        return True
        return False

    def _inline(self, emit_now: Callable[[RecordBatch], bool]) -> bool:
        """One fetch step on the taking thread, which found nothing handed on (see the module doc): what is
        ready now, handled and handed on at once with ``emit_now`` (no waiting for room). True when the
        step ran and nothing was ready."""
        self._inline_until = time.monotonic() + _INLINE_HOLD_S
        step = self._step  # a lag report hands nothing on: wait for it (not ~50 ms for a batch, 5 % of a run)
        if not (step.acquire(blocking=False) or (self._reporting and step.acquire(timeout=_REPORT_WAIT_S))):
            return False  # the fetch thread is in a step: it hands its batch on, then leaves fetching to us
        try:
            consumer = self._consumer
            ready = consumer is not None and bool(self._progress) and self._commands.empty()
            ready = ready and not self._inline_cut
            n = self._s.batch_max_records * (COLUMN_FETCH_FACTOR if taking_columns() else 1)
            messages = consumer.consume(n, 0) if ready else None
            if messages:
                self._handle(consumer, messages, lambda batch, _stop: emit_now(batch))
                return False
            if consumer is not None and not ready:  # commands (or no splits): the fetch thread's work
                self._release_inline()
            return ready
        except Exception as exc:  # fails this reader on its fetch thread, as if it had fetched
            self._inline_error = exc
            self._release_inline()
            return False
        except BaseException:  # Ctrl-C (or SIGTERM made one) on the taking thread: the caller's, not ours
            self._inline_cut = True
            self._release_inline()
            raise
        finally:
            step.release()

    def _hold_inline(self) -> None:
        """The taker found batches waiting (its thread): leave fetching to it, as after an inline step."""
        self._inline_until = time.monotonic() + _INLINE_HOLD_S

    def _release_inline(self) -> None:
        """The taker waits (nothing was ready anywhere) or cannot step: the fetch thread fetches again."""
        self._inline_until = 0.0
        self._wake.set()

    def _next_batch(self, consumer: Any) -> list[Any]:
        """What is ready now; else wait (up to the poll timeout) for the first message only, then take what
        came with it. ``consume(n, timeout)`` alone would wait the whole timeout for a partial batch."""
        n = self._s.batch_max_records
        messages: list[Any] = consumer.consume(n, 0)
        first = None if messages else consumer.poll(self._s.poll_timeout_s)
        return messages if first is None else [first, *consumer.consume(n - 1, 0)] if n > 1 else [first]

    def _drain_commands(self, consumer: Any, *, block: bool) -> None:
        changed = False
        while True:
            try:
                if block:
                    kind, arg = self._commands.get(timeout=self._s.poll_timeout_s)
                    block = False
                else:
                    kind, arg = self._commands.get_nowait()
            except queue.Empty:
                break
            if kind == "wake":
                continue
            changed = True
            if kind == "add":
                fresh = [s for s in arg if s.topic_partition not in self._progress]
                done = [s.split_id for s in fresh if s.is_finished_at(s.starting_offset)]
                live = [s for s in fresh if not s.is_finished_at(s.starting_offset)]
                for split in live:
                    self._progress[split.topic_partition] = SplitProgress(split)
                if live:
                    self._lag.moved(s.topic_partition for s in live)  # their gauges at the next report
                    self._progress_changed()
                    known = self._known_partitions  # see learn_topics: metadata before the assignment
                    learn = {s.topic for s in live if s.partition not in known.get(s.topic, ())}
                    if learn and len(live) <= LEARN_MAX_PARTITIONS:
                        learn_topics(self.cluster_id, consumer, learn, known, stop=self._stopping)
                    consumer.incremental_assign(
                        [TopicPartition(s.topic, s.partition, s.starting_offset) for s in live]
                    )
                    _log.info(
                        "cluster=%s reader=%d: reading %d more splits",
                        self.cluster_id,
                        self._s.reader_index,
                        len(live),
                    )
                if done:
                    self._finish(done)
            elif kind == "hold":
                self._pauses.want(*arg)
            elif kind == "remove":
                gone = [tp for tp in self._progress if tp[0] in arg]
                if gone:
                    consumer.incremental_unassign([TopicPartition(t, p) for t, p in gone])
                ids = [self._progress.pop(tp).split_id for tp in gone]
                self._progress_changed()
                with self._lock:
                    self._outstanding -= set(ids)
                for topic in arg:
                    self._known_partitions.pop(topic, None)  # if it comes back, it may be a new topic
                    self._s.metrics.remove_topic(self.cluster_id, topic)
        if changed:
            self._pauses.apply(consumer, self._progress)

    def _progress_changed(self) -> None:
        """Recompute what the hot path looks up once per batch (after splits came or went)."""
        progress = self._progress
        self._tps = [TopicPartition(t, p) for t, p in progress]
        self._topics = sorted({t for t, _p in progress})
        self._lag.assigned(self._tps, progress)
        topic = self._topics[0] if len(self._topics) == 1 else None
        self._split_hint = (topic, self._s.event_times == "ends")
        self._bytes_later = bytes_counter(self._s.metrics, self.cluster_id, topic)

    def _handle(
        self, consumer: Any, messages: list[Any], emit: Callable[[RecordBatch, Callable[[], bool]], bool]
    ) -> None:
        """One ``consume()`` result: hand its messages on with ``emit`` with the positions they reach (under
        ``_step``)."""
        errors = [m for m in messages if m.error() is not None]
        finished: list[tuple[str, int]] = []
        resets: dict[tuple[str, int], int] = {}
        if errors:
            messages = [m for m in messages if m.error() is None]
            sort_errors(self.cluster_id, errors, self._progress, finished, resets)
        positions: dict[str, int] = {}
        moved: list[SplitProgress] = []
        if messages:
            messages = advance_positions(
                consumer, self._tps, self._progress, messages, positions, moved, finished
            )
        if messages or positions:
            times = None
            if self._s.event_times is not None:  # a watermark strategy: event times per split
                one = only_split(moved, messages)
                times = kafka_event_times(self.cluster_id, messages, one, *self._split_hint)
                self._pauses.fetched(consumer, times, self._progress)
            later = self._bytes_later if messages and self._bytes_later and taking_columns() else None
            batch = RecordBatch(self.cluster_id, messages, positions, times, count_bytes=later)
            if not emit(batch, self._stopping.is_set):
                return  # stopping: positions stay where the last handed-on batch left them
            for prog in moved:
                prog.next_offset = positions[prog.split_id]
            self._lag.moved(prog.key for prog in moved)
            if messages:
                self._count(messages, with_bytes=later is None)
        if resets:
            outcome = reset_positions(
                self.cluster_id,
                consumer,
                self._reset_policy,
                self._progress,
                resets,
                self._s.metrics.offset_reset,
            )
            self._lag.moved(resets)
            if outcome.positions:
                emit(RecordBatch(self.cluster_id, [], outcome.positions, reset=True), self._stopping.is_set)
            finished.extend(outcome.finished)
        if finished:
            self._drop_finished(consumer, finished)

    def _count(self, messages: list[Any], *, with_bytes: bool = True) -> None:
        """Per-batch metrics and topic tracking: records and (unless the taker counts them) bytes a topic."""
        cid, on_topic_read = self.cluster_id, self._s.on_topic_read
        for topic, (n, nbytes) in counts_per_topic(self._topics, messages, with_bytes=with_bytes).items():
            self._s.metrics.record_consumed(cid, topic, n, nbytes)
            if on_topic_read is not None:
                on_topic_read(cid, topic, self._s.reader_index)

    def _drop_finished(self, consumer: Any, finished: list[tuple[str, int]]) -> None:
        ids: list[str] = []
        tps = []
        for key in dict.fromkeys(finished):
            p = self._progress.pop(key, None)
            if p is not None:
                ids.append(p.split_id)
                tps.append(TopicPartition(*key))
        if tps:
            consumer.incremental_unassign(tps)
        self._progress_changed()
        if ids:
            self._finish(ids)

    def _finish(self, split_ids: list[str]) -> None:
        with self._lock:
            self._outstanding -= set(split_ids)
        self._on_finished(split_ids)
