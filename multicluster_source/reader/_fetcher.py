"""One cluster's fetch loop inside one reader: a consumer on its own thread, assign-based (no rebalance).

Threads: the owning reader's thread calls ``add_splits``, ``remove_topics``, ``stop``, ``outstanding``;
everything else, including every consumer call, runs on the fetch thread this object starts.

Positions out of range: the consumers never reset a position by themselves (``auto.offset.reset=error`` is
what librdkafka gets, see :func:`consumer_config`). When a position is no longer in the log (it aged out
through retention or ``delete_records``, or the topic was recreated shorter), librdkafka stops fetching that
partition and reports ``_AUTO_OFFSET_RESET``; the fetcher then moves it per the ``auto.offset.reset`` of the
configuration it was given (earliest, the default, or latest: looked up with ``get_watermark_offsets``),
logs a warning naming cluster, topic, partition, old and new offset, counts it in
``multicluster_source_offset_resets_total{cluster,topic}``, and hands the new position on so the next
checkpoint holds it. With ``auto.offset.reset=error`` set by the user the source fails instead
(:class:`OffsetOutOfRangeError`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from multicluster_source.exceptions import DeserializationError, OffsetOutOfRangeError, SourceFailedError
from multicluster_source.framework._interfaces import ReaderContext, RecordBatch
from multicluster_source.framework._records import RawRecord, SourceRecord
from multicluster_source.framework._split import KafkaPartitionSplit

_log = logging.getLogger("multicluster_source.reader")

ConsumerFactory = Callable[[dict[str, Any]], Any]
Deserializer = Callable[[RawRecord], Any]

OffsetResetPolicy = Literal["earliest", "latest", "error"]
_RESET_KEY = "auto.offset.reset"
_EARLIEST = frozenset({"earliest", "smallest", "beginning"})
_LATEST = frozenset({"latest", "largest", "end"})
_WATERMARK_TIMEOUT_S = 10.0


def offset_reset_policy(conf: dict[str, Any]) -> OffsetResetPolicy:
    """What to do with an out-of-range position, from ``auto.offset.reset`` in ``conf`` (default earliest)."""
    value = str(conf.get(_RESET_KEY, "earliest")).strip().lower()
    if value in _LATEST:
        return "latest"
    if value == "error":
        return "error"
    return "earliest"  # build() lets only librdkafka's values through: earliest and its aliases remain


def consumer_config(conf: dict[str, Any]) -> dict[str, Any]:
    """``conf`` as given to librdkafka: ``auto.offset.reset=error``, so that the fetcher, not the client,
    handles an out-of-range position (logged and counted; see the module docs)."""
    return {**conf, _RESET_KEY: "error"}


def default_consumer_factory(conf: dict[str, Any]) -> Any:
    """A confluent-kafka Consumer for ``conf`` (with :func:`consumer_config` applied)."""
    from confluent_kafka import Consumer

    return Consumer(consumer_config(conf))


@dataclass(frozen=True)
class FetchSettings:
    """How a fetcher reads and hands on records."""

    source_name: str
    reader_index: int
    deserializer: Deserializer | None
    """None: the value bytes, without building a RawRecord (the fast path)."""
    error_policy: Literal["fail", "skip"]
    batch_max_records: int
    metrics: Any
    consumer_factory: ConsumerFactory = default_consumer_factory
    poll_timeout_s: float = 0.1
    lag_interval_s: float = 1.0
    on_topic_read: Callable[[str, str, int], None] | None = None
    """Called with (cluster, topic, reader index) for each topic of a batch handed on (topic tracking)."""


class _Progress:
    """Mutable progress of one split (kept apart from the frozen split value)."""

    __slots__ = ("next_offset", "split", "split_id")

    def __init__(self, split: KafkaPartitionSplit) -> None:
        self.split = split
        self.split_id = split.split_id
        self.next_offset = split.starting_offset


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
        self._progress: dict[tuple[str, int], _Progress] = {}
        self._split_ids: frozenset[str] = frozenset()
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
        self._commands.put(("add", list(splits)))

    def remove_topics(self, topics: Iterable[str]) -> None:
        """Stop reading every split of these topics (their metric label sets go with them)."""
        self._commands.put(("remove", frozenset(topics)))

    def outstanding(self) -> int:
        """Splits handed to this fetcher that are neither finished nor removed."""
        with self._lock:
            return len(self._outstanding)

    @property
    def split_ids(self) -> frozenset[str]:
        """The splits this fetcher reads now."""
        return self._split_ids

    def stop(self) -> list[KafkaPartitionSplit]:
        """Stop, close the consumer, and return the unfinished splits moved to where reading got to."""
        self._stopping.set()
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
        try:
            consumer = self._warm_consumer or self._s.consumer_factory(self._conf)
            self._warm_consumer = None
            self._loop(consumer)
        except BaseException as exc:
            if not self._stopping.is_set():
                if isinstance(exc, DeserializationError | OffsetOutOfRangeError):
                    self._ctx.fail(exc)  # the same for every reader: the source fails
                else:
                    error = SourceFailedError(f"cluster={self.cluster_id}: fetching failed: {exc}")
                    error.__cause__ = exc
                    self._ctx.reader_failed(error)  # this reader fails over to others
        finally:
            if consumer is not None:
                try:
                    consumer.close()
                except Exception as exc:  # closing must not hide the real failure
                    _log.warning("cluster=%s: consumer close failed: %s", self.cluster_id, exc)

    def _loop(self, consumer: Any) -> None:
        last_lag = time.monotonic()
        while not self._stopping.is_set():
            self._drain_commands(consumer, block=not self._progress)
            if not self._progress:
                continue
            messages = self._next_batch(consumer)
            if messages:
                self._handle(consumer, messages)
            now = time.monotonic()
            if now - last_lag >= self._s.lag_interval_s:
                last_lag = now
                self._report_lag(consumer)

    def _next_batch(self, consumer: Any) -> list[Any]:
        """What is ready now; else wait (up to the poll timeout) for the first message only, then take what
        came with it. ``consume(n, timeout)`` alone would wait the whole timeout for a partial batch."""
        n = self._s.batch_max_records
        messages: list[Any] = consumer.consume(n, 0)
        if messages:
            return messages
        first = consumer.poll(self._s.poll_timeout_s)
        if first is None:
            return []
        return [first, *consumer.consume(n - 1, 0)] if n > 1 else [first]

    def _drain_commands(self, consumer: Any, *, block: bool) -> None:
        from confluent_kafka import TopicPartition

        while True:
            try:
                if block:
                    kind, arg = self._commands.get(timeout=self._s.poll_timeout_s)
                    block = False
                else:
                    kind, arg = self._commands.get_nowait()
            except queue.Empty:
                return
            if kind == "add":
                fresh = [s for s in arg if s.topic_partition not in self._progress]
                done = [s.split_id for s in fresh if s.is_finished_at(s.starting_offset)]
                live = [s for s in fresh if not s.is_finished_at(s.starting_offset)]
                for split in live:
                    self._progress[split.topic_partition] = _Progress(split)
                if live:
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
            elif kind == "remove":
                gone = [tp for tp in self._progress if tp[0] in arg]
                if gone:
                    consumer.incremental_unassign([TopicPartition(t, p) for t, p in gone])
                ids = [self._progress.pop(tp).split_id for tp in gone]
                with self._lock:
                    self._outstanding -= set(ids)
                for topic in arg:
                    self._s.metrics.remove_topic(self.cluster_id, topic)
            self._split_ids = frozenset(p.split_id for p in self._progress.values())

    def _handle(self, consumer: Any, messages: list[Any]) -> None:
        from confluent_kafka import KafkaError, KafkaException

        cid = self.cluster_id
        deserializer = self._s.deserializer
        progress = self._progress
        records: list[SourceRecord] = []
        positions: dict[str, int] = {}
        counts: dict[str, list[int]] = {}
        finished: list[str] = []
        resets: dict[tuple[str, int], int] = {}
        touched: dict[str, _Progress] = {}
        new_record = tuple.__new__
        record_type = SourceRecord
        # Per-partition bookkeeping is done once per run of consecutive records of one partition
        # (librdkafka hands them out that way), not once per record.
        run_tp: tuple[str, int] | None = None
        p: _Progress | None = None
        stop: int | None = None
        run_last = -1
        run_n = 0
        run_bytes = 0
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._AUTO_OFFSET_RESET:
                    resets[(msg.topic(), msg.partition())] = msg.offset()
                    continue
                if err.code() == KafkaError._PARTITION_EOF:
                    eof = progress.get((msg.topic(), msg.partition()))
                    if eof is not None and eof.split.is_finished_at(max(eof.next_offset, msg.offset())):
                        finished.append(eof.split_id)
                    continue
                if err.fatal():
                    raise KafkaException(err)
                _log.warning("cluster=%s: consumer error: %s", cid, err)
                continue
            topic = msg.topic()
            partition = msg.partition()
            if run_tp is None or partition != run_tp[1] or topic != run_tp[0]:
                if p is not None and run_last >= 0:
                    _close_run(p, run_last, run_n, run_bytes, positions, counts, touched)
                run_tp = (topic, partition)
                p = progress.get(run_tp)
                stop = p.split.stopping_offset if p is not None else None
                run_last, run_n, run_bytes = -1, 0, 0
            if p is None:
                continue  # unassigned since it was fetched
            offset = msg.offset()
            if stop is not None and offset >= stop:
                if p.split_id not in finished:
                    finished.append(p.split_id)
                continue
            ts_type, ts = msg.timestamp()
            timestamp = ts if ts_type else None
            key = msg.key()
            value = msg.value()
            headers = msg.headers()
            if deserializer is not None:
                try:
                    value = deserializer(
                        RawRecord(cid, topic, partition, offset, timestamp, key, value, headers)
                    )
                except Exception as exc:
                    if self._s.error_policy == "fail":
                        raise DeserializationError(cid, topic, partition, offset) from exc
                    self._s.metrics.deserialization_error(cid, topic)
                    run_last = offset
                    continue
            records.append(
                new_record(record_type, (cid, topic, partition, offset, timestamp, key, value, headers))
            )
            run_last = offset
            run_n += 1
            run_bytes += len(msg)
            if stop is not None and offset + 1 >= stop and p.split_id not in finished:
                finished.append(p.split_id)
        if p is not None and run_last >= 0:
            _close_run(p, run_last, run_n, run_bytes, positions, counts, touched)
        if records or positions:
            paused = False
            if self._ctx.is_buffer_full():
                consumer.pause(consumer.assignment())
                paused = True
            delivered = self._ctx.emit(RecordBatch(records, positions), self._stopping.is_set)
            if paused:
                consumer.resume(consumer.assignment())
            if not delivered:
                return  # stopping: positions stay where the last handed-on batch left them
            for sid, prog in touched.items():
                prog.next_offset = positions[sid]
        if resets:
            self._reset_positions(consumer, resets)
        on_topic_read = self._s.on_topic_read
        for topic, (n, nbytes) in counts.items():
            self._s.metrics.record_consumed(cid, topic, n, nbytes)
            if on_topic_read is not None:
                on_topic_read(cid, topic, self._s.reader_index)
        if finished:
            from confluent_kafka import TopicPartition

            tps = []
            for sid in finished:
                for tp, p in list(progress.items()):
                    if p.split_id == sid:
                        del progress[tp]
                        tps.append(TopicPartition(tp[0], tp[1]))
            if tps:
                consumer.incremental_unassign(tps)
            self._split_ids = frozenset(p.split_id for p in progress.values())
            self._finish(finished)

    def _reset_positions(self, consumer: Any, resets: dict[tuple[str, int], int]) -> None:
        """Move partitions whose position is out of range per the reset policy (librdkafka stopped them)."""
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

        cid = self.cluster_id
        policy = self._reset_policy
        reassign: list[TopicPartition] = []
        positions: dict[str, int] = {}
        finished: list[str] = []
        for (topic, partition), reported in resets.items():
            p = self._progress.get((topic, partition))
            if p is None:
                continue  # unassigned since
            old = reported if reported >= 0 else p.next_offset
            if policy == "error":
                raise OffsetOutOfRangeError(cid, topic, partition, old)
            tp = TopicPartition(topic, partition)
            new: int | None
            try:
                low, high = consumer.get_watermark_offsets(tp, timeout=_WATERMARK_TIMEOUT_S, cached=False)
                new = int(low if policy == "earliest" else high)
            except Exception as exc:  # the broker is away: let the client look the offset up itself
                _log.info("cluster=%s: watermarks of %s/%d not available: %s", cid, topic, partition, exc)
                new = None
            _log.warning(
                "cluster=%s topic=%s partition=%d: offset %d is out of range (aged out of the log?); "
                "reset to the %s offset %s (auto.offset.reset=%s)",
                cid,
                topic,
                partition,
                old,
                policy,
                "(looked up by the client)" if new is None else new,
                policy,
            )
            self._s.metrics.offset_reset(cid, topic)
            if new is not None and p.split.is_finished_at(new):
                finished.append(p.split_id)
                del self._progress[(topic, partition)]
                consumer.incremental_unassign([tp])
                continue
            if new is not None:
                p.next_offset = new
                positions[p.split_id] = new
            logical = OFFSET_BEGINNING if policy == "earliest" else OFFSET_END
            reassign.append(TopicPartition(topic, partition, logical if new is None else new))
        if reassign:
            # A partition stopped by an offset reset error cannot be seek()'d: assign it afresh.
            consumer.incremental_unassign([TopicPartition(tp.topic, tp.partition) for tp in reassign])
            consumer.incremental_assign(reassign)
        if positions:
            self._ctx.emit(RecordBatch([], positions), self._stopping.is_set)
        if finished:
            self._split_ids = frozenset(p.split_id for p in self._progress.values())
            self._finish(finished)

    def _finish(self, split_ids: list[str]) -> None:
        with self._lock:
            self._outstanding -= set(split_ids)
        self._on_finished(split_ids)

    def _report_lag(self, consumer: Any) -> None:
        from confluent_kafka import TopicPartition

        for (topic, partition), p in self._progress.items():
            try:
                _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            except Exception:
                continue
            lag = max(0, high - p.next_offset) if high is not None and high >= 0 else None
            self._s.metrics.set_offsets(self.cluster_id, topic, partition, current=p.next_offset, lag=lag)


def _close_run(
    p: _Progress,
    last_offset: int,
    n: int,
    nbytes: int,
    positions: dict[str, int],
    counts: dict[str, list[int]],
    touched: dict[str, _Progress],
) -> None:
    """Account for a run of records of one partition: the position it reaches and the per-topic counts.
    The split's own ``next_offset`` moves only once the batch was handed on (see ``_handle``)."""
    if last_offset + 1 > positions.get(p.split_id, p.next_offset):
        positions[p.split_id] = last_offset + 1
        touched[p.split_id] = p
    if n:
        topic = p.split.topic
        c = counts.get(topic)
        if c is None:
            c = counts[topic] = [0, 0]
        c[0] += n
        c[1] += nbytes
