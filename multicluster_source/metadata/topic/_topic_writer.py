"""The single writer of a metadata topic: a transactional producer with a stable ``transactional.id``.

:class:`KafkaTopicMetadataWriter`'s ``transactional.id`` defaults to ``multicluster-metadata-writer-<topic>``.
Creating a writer fences any older writer with the same id and aborts its unfinished transaction; the fenced
writer's next publish raises :class:`MetadataWriterFencedError`. ``publish`` diffs the wanted streams
against a snapshot (see :func:`plan_publish` in ``_topic_plan``) and writes only what changed, in one
transaction. To diff against everything in the topic, take the snapshot *after* creating the writer (the
command-line tool does). Everything runs in the caller's thread; ``publish`` holds a lock while it writes.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from multicluster_source.exceptions import MetadataError
from multicluster_source.metadata._model import KafkaStream
from multicluster_source.metadata.topic._topic_client import (
    check_arguments,
    client_config,
    describe_source,
    error_text,
    kafka_error,
)
from multicluster_source.metadata.topic._topic_log import MetadataSnapshot
from multicluster_source.metadata.topic._topic_plan import WritePlan, plan_publish

__all__ = [
    "KafkaTopicMetadataWriter",
    "MetadataWriterFencedError",
    "WriteSummary",
    "default_transactional_id",
]

_log = logging.getLogger("multicluster_source.metadata")

_FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


class MetadataWriterFencedError(MetadataError):
    """A newer writer with the same ``transactional.id`` took over; this writer can no longer write."""


def default_transactional_id(topic: str) -> str:
    """The ``transactional.id`` writers of ``topic`` share unless told otherwise."""
    return f"multicluster-metadata-writer-{topic}"


@dataclass(frozen=True)
class WriteSummary:
    """What one :meth:`KafkaTopicMetadataWriter.publish` wrote (``plan``) and where it ended."""

    plan: WritePlan
    transactional_id: str
    last_offset: int | None = None
    """Offset of the last record written; None when nothing was written."""

    @property
    def changed(self) -> bool:
        """Whether anything was written."""
        return not self.plan.empty

    @property
    def records(self) -> int:
        """How many records were written."""
        return len(self.plan.records)

    @property
    def next_offset(self) -> int | None:
        """The offset a reader must reach to see this write (for ``wait_for_offset``)."""
        return None if self.last_offset is None else self.last_offset + 1

    @property
    def streams_written(self) -> tuple[str, ...]:
        """Streams whose parts and commit were written."""
        return self.plan.streams_written

    @property
    def streams_deleted(self) -> tuple[str, ...]:
        """Streams deleted with tombstones."""
        return self.plan.streams_deleted

    @property
    def clusters_written(self) -> tuple[str, ...]:
        """Clusters whose definition was written."""
        return self.plan.clusters_written

    @property
    def clusters_deleted(self) -> tuple[str, ...]:
        """Clusters deleted with tombstones (no stream uses them any more)."""
        return self.plan.clusters_deleted


class KafkaTopicMetadataWriter:
    """The single writer of a metadata topic: a transactional producer with a stable ``transactional.id``.

    Creating it initializes transactions, which fences any older writer with the same id (and aborts its
    unfinished transaction). Use one writer at a time per topic; close it when done.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        transactional_id: str | None = None,
        client_properties: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        check_arguments(bootstrap_servers, topic)
        self._topic = topic
        self._timeout = float(timeout)
        self._source = describe_source(topic, bootstrap_servers)
        self.transactional_id = transactional_id or default_transactional_id(topic)
        """The producer's ``transactional.id``."""
        conf = client_config(bootstrap_servers, client_properties, source=self._source)
        conf.update(
            {
                "transactional.id": self.transactional_id,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "client.id": conf.get("client.id") or "multicluster-metadata-writer",
            }
        )
        self._fatal: KafkaError | None = None
        self._closed = False
        self._lock = threading.Lock()
        try:
            self._producer = Producer(conf)
        except (KafkaException, ValueError, TypeError) as exc:
            raise MetadataError(
                f"cannot create the producer: {error_text(exc)}", source=self._source
            ) from exc
        try:
            self._producer.init_transactions(self._timeout)
        except KafkaException as exc:
            self._fatal = kafka_error(exc)
            self.close()
            raise MetadataError(
                f"cannot initialize transactions for transactional.id {self.transactional_id!r}: "
                f"{error_text(exc)}",
                source=self._source,
            ) from exc

    def __repr__(self) -> str:
        return f"KafkaTopicMetadataWriter({self._topic!r}, transactional_id={self.transactional_id!r})"

    def plan(self, streams: Iterable[KafkaStream], *, current: MetadataSnapshot) -> WritePlan:
        """What :meth:`publish` would write (nothing is written)."""
        return plan_publish(streams, current=current, source=self._source)

    def publish(self, streams: Iterable[KafkaStream], *, current: MetadataSnapshot) -> WriteSummary:
        """Make the topic hold exactly ``streams``, writing only what differs from ``current``.

        Everything is written in one transaction: readers see all of it or none. Raises
        :class:`MetadataWriterFencedError` when a newer writer took over, :class:`MetadataError` when the
        transaction failed (then nothing was written), and
        :class:`~multicluster_source.exceptions.MetadataValidationError` for invalid streams.
        """
        plan = self.plan(streams, current=current)
        with self._lock:
            if self._closed:
                raise MetadataError("the writer is closed", source=self._source)
            if self._fatal is not None:
                raise self._fatal_error(self._fatal)
            if plan.empty:
                return WriteSummary(plan, self.transactional_id)
            offsets: list[int] = []
            failures: list[KafkaError] = []

            def delivered(err: KafkaError | None, message: Message) -> None:
                if err is not None:
                    failures.append(err)
                else:
                    offsets.append(int(message.offset() or 0))

            try:
                self._producer.begin_transaction()
                for record in plan.records:
                    self._produce(record.key, record.value, delivered)
                self._commit(time.monotonic() + self._timeout)
            except KafkaException as exc:
                raise self._failed(exc) from exc
            if failures:  # not expected: a failed delivery makes the commit fail
                raise MetadataError(f"a record was not delivered: {failures[0].str()}", source=self._source)
        _log.info(
            "%s: published %d records (streams written: %s; deleted: %s; clusters written: %s; deleted: %s)",
            self._source,
            len(plan.records),
            ", ".join(plan.streams_written) or "-",
            ", ".join(plan.streams_deleted) or "-",
            ", ".join(plan.clusters_written) or "-",
            ", ".join(plan.clusters_deleted) or "-",
        )
        return WriteSummary(plan, self.transactional_id, max(offsets) if offsets else None)

    def close(self) -> None:
        """Flush and close the producer; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        # every commit already waited for its records: at most 2 s more, so close returns with a cluster down
        remaining = self._producer.flush(0.0 if self._fatal is not None else min(self._timeout, 2.0))
        if remaining and self._fatal is None:
            _log.warning("%s: %d records were not delivered before close", self._source, remaining)
        try:
            with warnings.catch_warnings():
                # a fenced producer cannot abort its transaction on close; librdkafka says so as a warning
                warnings.simplefilter("ignore", RuntimeWarning)
                self._producer.close()
        except KafkaException as exc:
            _log.debug("%s: closing the producer: %s", self._source, error_text(exc))

    def __enter__(self) -> KafkaTopicMetadataWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------------------------- internals

    def _produce(
        self, key: str, value: bytes | None, delivered: Callable[[KafkaError | None, Message], None]
    ) -> None:
        while True:
            try:
                self._producer.produce(
                    self._topic, key=key.encode("utf-8"), value=value, partition=0, on_delivery=delivered
                )
                return
            except BufferError:
                self._producer.poll(0.1)

    def _commit(self, deadline: float) -> None:
        while True:
            try:
                self._producer.commit_transaction(max(0.1, deadline - time.monotonic()))
                return
            except KafkaException as exc:
                err = kafka_error(exc)
                if err is None or not err.retriable() or time.monotonic() >= deadline:
                    raise

    def _fatal_error(self, err: KafkaError) -> MetadataError:
        if err.code() in _FENCED_CODES:
            return MetadataWriterFencedError(
                f"this writer (transactional.id {self.transactional_id!r}) was fenced: a newer writer "
                "with the same transactional.id took over, so this one can no longer write; nothing of "
                "this publish was committed",
                source=self._source,
            )
        return MetadataError(f"the producer failed fatally: {err.str()} ({err.name()})", source=self._source)

    def _failed(self, exc: KafkaException) -> MetadataError:
        err = kafka_error(exc)
        if err is None:
            return MetadataError(f"publish failed: {exc}", source=self._source)
        if err.fatal() or err.code() in _FENCED_CODES:
            self._fatal = err
            return self._fatal_error(err)
        if err.txn_requires_abort():
            with contextlib.suppress(KafkaException):
                self._producer.abort_transaction(self._timeout)
            return MetadataError(
                f"the transaction was aborted, nothing was written: {err.str()} ({err.name()})",
                source=self._source,
            )
        with contextlib.suppress(KafkaException):
            self._producer.abort_transaction(self._timeout)
        return MetadataError(f"publish failed: {err.str()} ({err.name()})", source=self._source)
