"""The hybrid stream's ``for`` loop, and what it holds between a stage's ``poll`` and the caller.

A stage without an iterator of its own (``StageReader.iterate``) is polled a batch at a time by the loop,
which hands the records out one by one. A checkpoint taken inside the loop must cover exactly the records
handed out, not the rest of the batch, so :class:`Held` keeps, per batch, the stage's snapshot from before
the batch was polled (``pre``) and, per split, the offset after the last record handed out of it. Such a
checkpoint stores ``pre`` with those offsets as a **skip filter**: after a restore the stage goes on from
``pre`` and the stream drops each split's records below its skip offset (offsets grow within a split, so a
split's entry goes once a record at or past it came). A ``poll`` after leaving the loop returns the records
it still holds first.

Caller's thread only (the hybrid stream's).
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from multicluster_source.framework._records import MessageBatch, SourceRecord
from multicluster_source.hybrid._stage import StageReader

__all__ = ["BATCH", "Held", "as_batches", "iterate"]

BATCH = 1000
"""Records the ``for`` loop takes from a stage at a time."""


def as_batches(records: list[SourceRecord]) -> list[MessageBatch]:
    """Records as batches of ``confluent_kafka.Message`` objects, one per cluster (records held by the loop
    and then asked for with ``poll_batches``)."""
    from confluent_kafka import Message

    by_cluster: dict[str, list[Any]] = {}
    for r in records:
        stamp = (0, -1) if r.timestamp is None else (1, r.timestamp)
        message = Message(topic=r.topic, partition=r.partition, offset=r.offset, key=r.key, timestamp=stamp)
        message.set_value(r.value)
        if r.headers:
            message.set_headers(r.headers)  # type: ignore[arg-type]
        by_cluster.setdefault(r.cluster_id, []).append(message)
    return [MessageBatch(cluster, messages) for cluster, messages in by_cluster.items()]


class _Stream(Protocol):
    """The part of :class:`HybridStream` the loop uses (named here without importing it)."""

    _closed: bool
    _reader: StageReader | None
    _held: Held

    def checkpoint_if_due(self) -> None: ...
    def poll(self, timeout: float = ..., max_records: int = ...) -> list[SourceRecord]: ...
    def switch_due(self) -> bool: ...
    def switch(self) -> None: ...
    def _delivered(self) -> None: ...

    @property
    def finished(self) -> bool: ...


class Held:
    """Records taken from the stage but not handed out yet, the batch's ``pre`` snapshot, and the skip
    filter (see the module docstring)."""

    def __init__(self, skip: Mapping[str, int]) -> None:
        self.skip: dict[str, int] = dict(skip)
        self.buffer: deque[SourceRecord] = deque()
        self._pre: Callable[[], dict[str, Any] | None] = _none
        self._pre_skip: dict[str, int] = {}

    def start_batch(self, reader: StageReader | None) -> None:
        """A batch is about to be polled from ``reader``: keep its state from before the batch (None: the
        batch is a new stage's, whose start covers everything before it). A reader with ``snapshot_later``
        keeps it cheaply (see :mod:`~multicluster_source.hybrid._stage`); any other reader's snapshot is
        taken and deep-copied now, so that the reader's later state cannot show through."""
        later = getattr(reader, "snapshot_later", None)
        if reader is None:
            self._pre = _none
        elif callable(later):
            self._pre = later()
        else:
            pre = copy.deepcopy(reader.snapshot())
            self._pre = lambda: pre  # as before snapshot_later: one copy, handed to each checkpoint
        self._pre_skip = dict(self.skip)

    def take(self, max_records: int) -> list[SourceRecord]:
        """Up to ``max_records`` held records, now handed out."""
        out: list[SourceRecord] = []
        while self.buffer and len(out) < max_records:
            record = self.buffer.popleft()
            self._pre_skip[record.split_id] = record.offset + 1
            out.append(record)
        return out

    def view(self, reader: StageReader) -> tuple[dict[str, Any] | None, dict[str, int], Callable[[], object]]:
        """What a checkpoint stores now: (the stage's snapshot, the skip filter, ``durable``). A stage with
        ``capture()`` (the Kafka stage) captures its own checkpoint now and writes it on a thread of its own;
        ``durable()`` waits for that (and raises what it raised). Other stages' snapshots are values."""
        if self.buffer:
            return self._pre(), dict(self._pre_skip), _nothing
        capture = getattr(reader, "capture", None)
        if capture is None:
            return reader.snapshot(), dict(self.skip), _nothing
        snapshot, durable = capture()
        return snapshot, dict(self.skip), durable

    def reset(self) -> None:
        """A new stage: nothing held, no filter."""
        self.skip.clear()
        self.buffer.clear()
        self._pre, self._pre_skip = _none, {}

    def filter(self, records: list[SourceRecord]) -> list[SourceRecord]:
        """``records`` without those below their split's skip offset."""
        skip = self.skip
        if not skip:
            return records
        out = []
        for r in records:
            bound = skip.get(r.split_id)
            if bound is None or r.offset >= bound:
                skip.pop(r.split_id, None)
                out.append(r)
        return out

    def filter_batches(self, batches: list[MessageBatch]) -> list[MessageBatch]:
        """``batches`` without the messages below their split's skip offset."""
        skip = self.skip
        if not skip:
            return batches
        out = []
        for batch in batches:
            kept = []
            for m in batch.messages:
                split_id = f"{batch.cluster_id}/{m.topic()}/{m.partition()}"
                bound = skip.get(split_id)
                if bound is None or m.offset() >= bound:
                    skip.pop(split_id, None)
                    kept.append(m)
            if kept:
                out.append(MessageBatch(batch.cluster_id, kept))
        return out


def _nothing() -> None:
    """``durable`` of a snapshot that is a value: nothing to wait for."""


def _none() -> None:
    """The state before a new stage's first batch: none (its start covers everything before it)."""


def iterate(stream: _Stream) -> Iterator[SourceRecord]:
    """The ``for`` loop of ``stream``: a stage's own iterator where it has one, else batches of
    :data:`BATCH` handed out one record at a time."""
    held = stream._held
    while not stream._closed:
        reader = stream._reader
        own = getattr(reader, "iterate", None)
        if callable(own) and not held.buffer:
            yield from _own(stream, own())
        elif not held.buffer:
            if reader is None:
                return
            stream.checkpoint_if_due()
            held.start_batch(reader)
            records = stream.poll(0.5, BATCH)
            if stream._reader is not reader:  # switched inside the poll: the batch is the new stage's
                held.start_batch(None)
            held.buffer.extend(records)
        while held.buffer and not stream._closed:
            stream.checkpoint_if_due()  # mid-batch too: it covers exactly the records handed out
            yield held.take(1)[0]
        if stream.switch_due():
            stream.switch()
        elif stream.finished or stream._reader is None:
            return


def _own(stream: _Stream, records: Iterator[SourceRecord]) -> Iterator[SourceRecord]:
    while not stream._closed:
        stream.checkpoint_if_due()  # before taking the next record: covers exactly those handed out
        record = next(records, None)
        if record is None:
            return
        if stream._held.skip and not stream._held.filter([record]):
            continue  # handed out before the restore (a checkpoint right after the switch, mid-batch)
        stream._delivered()
        yield record
