"""One cluster's fetch loop inside one reader: a consumer on its own thread, assign-based (no rebalance).

Threads: the owning reader's thread calls ``add_splits``, ``remove_topics``, ``stop``, ``outstanding``;
everything else, including every consumer call, runs on the fetch thread this object starts.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._framework import ReaderContext, RecordBatch
from .._records import RawRecord, SourceRecord
from .._split import KafkaPartitionSplit
from ..exceptions import DeserializationError, SourceFailedError

_log = logging.getLogger("multicluster_source.reader")

ConsumerFactory = Callable[[dict[str, Any]], Any]
Deserializer = Callable[[RawRecord], Any]


def default_consumer_factory(conf: dict[str, Any]) -> Any:
    """A confluent-kafka Consumer for ``conf``."""
    from confluent_kafka import Consumer

    return Consumer(conf)


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
                if isinstance(exc, DeserializationError):
                    self._ctx.fail(exc)  # the data is bad for every reader: the source fails
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
            messages = consumer.consume(self._s.batch_max_records, self._s.poll_timeout_s)
            if messages:
                self._handle(consumer, messages)
            now = time.monotonic()
            if now - last_lag >= self._s.lag_interval_s:
                last_lag = now
                self._report_lag(consumer)

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
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    p = progress.get((msg.topic(), msg.partition()))
                    if p is not None and p.split.is_finished_at(max(p.next_offset, msg.offset())):
                        finished.append(p.split_id)
                    continue
                if err.fatal():
                    raise KafkaException(err)
                _log.warning("cluster=%s: consumer error: %s", cid, err)
                continue
            topic = msg.topic()
            partition = msg.partition()
            p = progress.get((topic, partition))
            if p is None:
                continue  # unassigned since it was fetched
            offset = msg.offset()
            stop = p.split.stopping_offset
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
                    p.next_offset = offset + 1
                    positions[p.split_id] = offset + 1
                    continue
            records.append(SourceRecord(cid, topic, partition, offset, timestamp, key, value, headers))
            p.next_offset = offset + 1
            positions[p.split_id] = offset + 1
            c = counts.get(topic)
            if c is None:
                c = counts[topic] = [0, 0]
            c[0] += 1
            c[1] += len(msg)
            if stop is not None and offset + 1 >= stop and p.split_id not in finished:
                finished.append(p.split_id)
        if records or positions:
            paused = False
            if self._ctx.is_buffer_full():
                consumer.pause(consumer.assignment())
                paused = True
            delivered = self._ctx.emit(RecordBatch(records, positions), self._stopping.is_set)
            if paused:
                consumer.resume(consumer.assignment())
            if not delivered:
                return
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
