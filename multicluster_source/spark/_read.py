"""The executors' side of the Spark source: one split's offset range read into Arrow record batches.

A task gets a :class:`SplitRange` (pickled by Spark): everything needed to reach the cluster, with client
properties as the user wrote them; placeholders are resolved here, when the consumer is made. Consumers are
kept per Python worker (Spark reuses workers across micro-batches), keyed by cluster and configuration,
and closed when the worker exits. A consumer reads by ``assign`` at the range's start and never commits.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, Message

from multicluster_source.exceptions import MultiClusterSourceError
from multicluster_source.framework._clientconf import cluster_client_config
from multicluster_source.framework._columns import column_builder
from multicluster_source.framework._gcpause import Hold
from multicluster_source.metadata._model import ClusterMetadata
from multicluster_source.ops._clientlog import client_logging
from multicluster_source.spark._driver import DataLossError
from multicluster_source.spark._metrics import count_data_loss

__all__ = ["ROWS_PER_BATCH", "SplitRange", "arrow_schema", "read_range", "spark_schema"]

_log = logging.getLogger("multicluster_source.spark")

ROWS_PER_BATCH = 10_000
"""Records per Arrow batch handed to Spark."""

_HOLD_AT_MOST_S = 1.0
"""The collector is held off while a batch is gathered and built (its messages die with the build: the passes
they would set off only walk and promote them, as in ``poll_columns``) for at most this long."""

_OFFSET_RESET = KafkaError._AUTO_OFFSET_RESET

_COLUMNS = (
    "cluster string, key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)


def spark_schema(include_headers: bool) -> str:
    """The source's schema as a Spark DDL string: Spark's Kafka source's columns plus ``cluster``."""
    return _COLUMNS + (", headers array<struct<key: string, value: binary>>" if include_headers else "")


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of the batches (what Spark expects for :func:`spark_schema`)."""
    fields = [
        pa.field("cluster", pa.string()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(pa.field("element", header))))
    return pa.schema(fields)


@dataclass(frozen=True)
class SplitRange:
    """What one task reads: offsets ``[start, end)`` of one split, and how to reach its cluster (client
    properties unresolved: no secret is pickled or shown in Spark's plans)."""

    cluster_id: str
    bootstrap_servers: str
    cluster_properties: Mapping[str, str]
    client_properties: Mapping[str, str]
    topic: str
    partition: int
    start: int
    end: int
    include_headers: bool
    fail_on_data_loss: bool
    group_id_prefix: str
    poll_timeout_ms: int

    @property
    def split_id(self) -> str:
        """``cluster/topic/partition``."""
        return f"{self.cluster_id}/{self.topic}/{self.partition}"

    def cache_key(self) -> tuple[Any, ...]:
        """Ranges with equal keys can share a consumer."""
        return (
            self.cluster_id,
            self.bootstrap_servers,
            tuple(sorted(self.cluster_properties.items())),
            tuple(sorted(self.client_properties.items())),
            self.group_id_prefix,
        )


_MAX_CACHED = 8
_cache: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_cache_lock = threading.Lock()


def _close_all() -> None:
    with _cache_lock:
        consumers = list(_cache.values())
        _cache.clear()
    for consumer in consumers:
        consumer.close()


atexit.register(_close_all)


def _consumer_for(task: SplitRange) -> Any:
    """A cached consumer for the task's cluster (made here: placeholders are resolved here)."""
    from confluent_kafka import Consumer

    key = task.cache_key()
    with _cache_lock:
        consumer = _cache.pop(key, None)
    if consumer is not None:
        return consumer
    cluster = ClusterMetadata(
        task.cluster_id, task.bootstrap_servers, frozenset({task.topic}), dict(task.cluster_properties)
    )
    conf: dict[str, Any] = cluster_client_config(
        cluster,
        task.client_properties,
        client_id=f"{task.group_id_prefix}-{task.cluster_id}-executor",
        extra={
            "group.id": f"{task.group_id_prefix}-{task.cluster_id}",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "enable.partition.eof": "true",
            "auto.offset.reset": "error",
        },
    )
    # librdkafka stops fetching a partition for fetch.queue.backoff.ms (default 1 s) whenever its local queue
    # is over queued.min.messages: a task that drains faster than that would wait on it (as the reader does)
    conf.setdefault("fetch.queue.backoff.ms", "10")
    conf.update(client_logging(task.cluster_id, "spark executor"))
    return Consumer(conf)


def _give_back(task: SplitRange, consumer: Any) -> None:
    evicted: list[Any] = []
    with _cache_lock:
        _cache[task.cache_key()] = consumer
        while len(_cache) > _MAX_CACHED:
            evicted.append(_cache.popitem(last=False)[1])
    for old in evicted:
        old.close()


def _lost(task: SplitRange, first: int, end: int, why: str) -> None:
    """Offsets ``first..end-1`` of the task's split are gone (``why``): an error with ``failOnDataLoss``,
    else a warning and :data:`~multicluster_source.spark._metrics.DATA_LOSS` counted."""
    message = f"split {task.split_id}: offsets {first}..{end - 1} {why}"
    if task.fail_on_data_loss:
        raise DataLossError(message + "; set failOnDataLoss=false to go on without them")
    _log.warning("%s (failOnDataLoss=false: going on)", message)
    count_data_loss(task.cluster_id, task.topic, end - first)


_error: Any = Message.error
_offset: Any = Message.offset


class _Batches:
    """The record messages of a range gathered for the next Arrow batch, which the library's column builder
    makes (one C-level pass per column, as ``poll_columns()``), in Spark's column order and types."""

    def __init__(self, task: SplitRange) -> None:
        self.task = task
        self.schema = arrow_schema(task.include_headers)
        self.build = column_builder(task.include_headers)
        self.pending: list[Any] = []

    def take(self, messages: list[Any], end: int) -> tuple[int, Any]:
        """Add the records of ``messages`` below offset ``end`` in order, passing over errors other than an
        offset reset or a fatal one, where it stops: the offset after the last record added (``end`` once a
        record at or past it is met, -1 when none) and the error it stopped at (``None``: none)."""
        if messages and not any(map(_error, messages)):  # the usual call: records only, C-level checks
            last = messages[-1].offset()
            if last < end:
                self.pending += messages
                return last + 1, None
        after = -1
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == _OFFSET_RESET or error.fatal():
                    return after, error
                continue
            offset = message.offset()
            if offset >= end:
                return end, None
            self.pending.append(message)
            after = offset + 1
        return after, None

    def batch(self) -> pa.RecordBatch:
        """The pending records as one batch of :func:`arrow_schema` (and none pending after)."""
        task, messages = self.task, self.pending
        self.pending = []
        made, kinds = self.build.with_kinds(task.cluster_id, messages, (task.topic, task.partition))
        if kinds.count(kinds[0]) == len(kinds):  # one timestamp type, the usual batch
            types = pa.repeat(pa.scalar(kinds[0] - 1 if kinds[0] else None, pa.int32()), len(kinds))
        else:
            types = pa.array([k - 1 if k else None for k in kinds], pa.int32())
        columns = [
            made.column("cluster"),
            made.column("key"),
            made.column("value"),
            made.column("topic"),
            made.column("partition"),
            made.column("offset"),
            made.column("timestamp").cast(pa.timestamp("us", tz="UTC")),
            types,
        ]
        if task.include_headers:
            columns.append(made.column("headers"))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


def read_range(task: SplitRange) -> Iterator[pa.RecordBatch]:
    """The records of ``task``'s range in offset order, as Arrow batches of the source's schema."""
    consumer = _consumer_for(task)
    try:
        yield from _read(task, consumer)
    except BaseException:
        consumer.close()
        raise
    consumer.unassign()
    _give_back(task, consumer)


def _read(task: SplitRange, consumer: Any) -> Iterator[pa.RecordBatch]:
    from confluent_kafka import TopicPartition

    timeout = task.poll_timeout_ms / 1000.0
    low, high = consumer.get_watermark_offsets(
        TopicPartition(task.topic, task.partition), timeout=timeout, cached=False
    )
    start, end = task.start, task.end
    if start < low:
        _lost(task, start, min(low, end), "were deleted (retention) before they were read")
        start = low
    if high < end:
        _lost(task, max(high, start), end, "are gone (the topic was deleted or truncated)")
        end = high
    if start >= end:
        return
    consumer.assign([TopicPartition(task.topic, task.partition, start)])
    columns = _Batches(task)
    last_progress = time.monotonic()
    position = start
    hold: Hold | None = None  # the collector: held off from a batch's first consume to its build
    try:
        while position < end:
            hold = hold or Hold(_HOLD_AT_MOST_S)
            messages = consumer.consume(num_messages=min(ROWS_PER_BATCH, end - position), timeout=0.5)
            after, error = columns.take(messages, end)
            if after >= 0:
                position = after
                last_progress = time.monotonic()
            if error is not None:
                if error.code() != _OFFSET_RESET:
                    raise MultiClusterSourceError(
                        f"split {task.split_id}: the consumer failed: {error.str()}"
                    )
                position = _skip_deleted(consumer, task, position, end)
            if position < end and not any(m.error() is None for m in messages):
                # a range may end with transaction markers or aborted records: no record, yet past the end
                position = max(position, _position(consumer, task))
                if time.monotonic() - last_progress > timeout:
                    raise TimeoutError(
                        f"split {task.split_id}: no record in {timeout:.0f} s at offset {position} of "
                        f"{task.start}..{task.end - 1} (kafkaConsumer.pollTimeoutMs)"
                    )
            messages = []  # the batch's messages die with its build, before the hold ends
            if len(columns.pending) >= ROWS_PER_BATCH or (position >= end and columns.pending):
                made = columns.batch()
                hold.end()
                yield made
            elif columns.pending:
                continue
            hold.end()  # a batch was made, or nothing is gathered: the next consume may wait
            hold = None
    finally:
        if hold is not None:
            hold.end()


def _skip_deleted(consumer: Any, task: SplitRange, position: int, end: int) -> int:
    """The partition's records at ``position`` were deleted while the range was read (retention): where
    reading goes on (``end`` when nothing of the range is left); with ``failOnDataLoss`` an error."""
    from confluent_kafka import TopicPartition

    tp = TopicPartition(task.topic, task.partition)
    low, _high = consumer.get_watermark_offsets(tp, timeout=task.poll_timeout_ms / 1000.0, cached=False)
    if int(low) <= position:  # past the end of the partition: the topic was deleted or truncated
        _lost(task, position, end, "are gone (the topic was deleted or truncated)")
        return end
    resume = min(int(low), end)
    _lost(task, position, resume, "were deleted (retention) while they were read")
    if resume < end:
        consumer.assign([TopicPartition(task.topic, task.partition, resume)])
    return resume


def _position(consumer: Any, task: SplitRange) -> int:
    from confluent_kafka import TopicPartition

    (tp,) = consumer.position([TopicPartition(task.topic, task.partition)])
    return int(tp.offset) if tp.offset >= 0 else task.start
