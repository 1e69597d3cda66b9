"""What the reader thread of a metadata topic runs, and the state it publishes.

:class:`KafkaTopicMetadataService` starts the thread ``metadata-topic[<topic>]`` on ``_run``; that method and
everything it calls are here, and only that thread runs them. It reads partition 0 from the beginning with
``isolation.level=read_committed`` (records of aborted transactions are never seen; an open transaction
holds readers at its start) and applies every record to a :class:`MetadataLog`. Until its position reaches
the end offset read at start (the last stable offset), nothing is published. After that initial catch-up
every consumed batch that changes the metadata publishes a new immutable :class:`MetadataSnapshot` and
calls the listeners (from this thread); the snapshot's offset follows the reader's position even when
nothing changed. Newly inconsistent streams are logged as warnings with the reason, resolved ones at info
level.

:class:`TopicReader` is the service's base class: it holds the state the reader thread publishes. The
service's own methods, called from other threads, read the snapshot and the failure and change the
listeners under ``_cond``, which the reader thread notifies whenever it sets the snapshot or the failure.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from multicluster_source.exceptions import MetadataError
from multicluster_source.metadata._model import MetadataListener
from multicluster_source.metadata.topic._topic_client import error_text, kafka_error
from multicluster_source.metadata.topic._topic_log import MetadataLog, MetadataSnapshot

__all__ = ["TopicReader"]

_log = logging.getLogger("multicluster_source.metadata")

_BATCH = 1000
_POLL_SECONDS = 0.2


class TopicReader:
    """The reader-thread half of :class:`KafkaTopicMetadataService`, its base class (see the module docs)."""

    def __init__(self, topic: str, source: str) -> None:
        self._topic = topic
        self._source = source
        self._cond = threading.Condition()
        self._listeners: list[MetadataListener] = []
        self._stop = threading.Event()
        self._snapshot: MetadataSnapshot | None = None
        self._published_version = -1
        self._failure: MetadataError | None = None
        self._progress = "not started"
        self._last_error: str | None = None

    def _note_error(self, message: str) -> None:
        if message != self._last_error:
            _log.warning("%s: %s", self._source, message)
        self._last_error = message

    def _run(self, conf: dict[str, Any]) -> None:
        try:
            consumer = Consumer(conf)
        except (KafkaException, ValueError, TypeError) as exc:
            self._fail(MetadataError(f"cannot create the consumer: {error_text(exc)}", source=self._source))
            return
        try:
            self._follow(consumer)
        except Exception as exc:
            _log.exception("%s: the reader thread failed", self._source)
            self._fail(MetadataError(f"the reader failed: {error_text(exc)}", source=self._source))
        finally:
            consumer.close()

    def _follow(self, consumer: Consumer) -> None:
        partition = TopicPartition(self._topic, 0)
        consumer.assign([TopicPartition(self._topic, 0, OFFSET_BEGINNING)])
        state = MetadataLog(self._source)
        target: int | None = None
        while not self._stop.is_set():
            if target is None:
                target = self._end_offset(consumer, partition)
                if target is not None:
                    self._progress = f"read up to offset {state.offset} of {target}"
            try:
                messages = consumer.consume(num_messages=_BATCH, timeout=_POLL_SECONDS)
            except KafkaException as exc:
                err = kafka_error(exc)
                if err is not None and err.fatal():
                    raise
                self._note_error(f"consume failed: {error_text(exc)}")
                continue
            for message in messages:
                self._apply(state, message)
            self._advance(consumer, partition, state)
            if self._snapshot is None:
                if target is None:
                    continue
                self._progress = f"read up to offset {state.offset} of {target}"
                if state.offset < target:
                    continue
            self._publish(state)

    def _end_offset(self, consumer: Consumer, partition: TopicPartition) -> int | None:
        try:
            _low, high = consumer.get_watermark_offsets(partition, timeout=1.0, cached=False)
        except KafkaException as exc:
            self._note_error(f"cannot read the end offset: {error_text(exc)}")
            return None
        return int(high)

    def _apply(self, state: MetadataLog, message: Message) -> None:
        err = message.error()
        if err is None:
            state.apply(message.key(), message.value(), int(message.offset() or 0))
            return
        if err.code() == KafkaError._PARTITION_EOF:
            offset = message.offset()
            if offset is not None and offset >= 0:
                state.advance(offset)
            return
        if err.fatal():
            raise KafkaException(err)
        self._note_error(f"consumer error: {err.str()} ({err.name()})")

    def _advance(self, consumer: Consumer, partition: TopicPartition, state: MetadataLog) -> None:
        try:
            (position,) = consumer.position([partition])
        except KafkaException:
            return
        if position.offset is not None and position.offset >= 0:
            state.advance(position.offset)

    def _publish(self, state: MetadataLog) -> None:
        first = self._snapshot is None
        with self._cond:
            previous = self._snapshot
            changed = state.version != self._published_version
            if previous is not None and not changed and previous.offset == state.offset:
                return
            snapshot = state.snapshot()
            self._snapshot = snapshot
            self._published_version = state.version
            self._last_error = None
            self._cond.notify_all()
            listeners = list(self._listeners) if changed or first else []
        if first:
            _log.info(
                "%s: caught up at offset %d: %d streams, %d clusters",
                self._source,
                snapshot.offset,
                len(snapshot.streams),
                len(snapshot.clusters),
            )
        self._log_inconsistencies(state, previous, snapshot)
        for listener in listeners:
            try:
                listener()
            except Exception:
                _log.exception("%s: metadata listener failed", self._source)

    def _log_inconsistencies(
        self, state: MetadataLog, previous: MetadataSnapshot | None, snapshot: MetadataSnapshot
    ) -> None:
        before = previous.inconsistent if previous is not None else frozenset()
        reasons = state.inconsistent()
        for sid in sorted(snapshot.inconsistent - before):
            kept = (
                "its last consistent version stays in effect" if sid in snapshot.streams else "not in effect"
            )
            _log.warning(
                "%s: stream %r is inconsistent: %s; %s until a complete write of it",
                self._source,
                sid,
                reasons.get(sid, "unknown reason"),
                kept,
            )
        for sid in sorted(before - snapshot.inconsistent):
            _log.info("%s: stream %r is consistent again", self._source, sid)

    def _fail(self, error: MetadataError) -> None:
        _log.error("%s", error)
        with self._cond:
            self._failure = error
            self._cond.notify_all()
