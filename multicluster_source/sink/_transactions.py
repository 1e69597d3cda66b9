"""The running exactly-once sink of one stream: :class:`TransactionalSink`.

One transactional producer per stream (or push worker), with a fixed ``transactional.id`` (never one per
checkpoint). The stream drives it on the caller's thread:

1. :meth:`TransactionalSink.open`: ``init_transactions`` (fences an earlier instance of the job, and has the
   sink cluster abort the transaction it left open), then the positions topic is read ``read_committed`` up
   to its end. Those positions are where the stream starts; they win over ``checkpoint_dir``.
2. :meth:`TransactionalSink.produce` begins a transaction when none is open, then produces into it.
3. :meth:`TransactionalSink.commit` writes the positions that changed since the last commit into the
   positions topic, inside the open transaction, and commits it: the job's results and the positions they
   came from become visible together, or neither does.
4. A transaction the sink cluster aborted (or that could not commit) is aborted here too, and
   :class:`TransactionAborted` tells the stream to rewind its readers to :attr:`TransactionalSink.committed`.
   A fenced producer raises :class:`~multicluster_source.exceptions.ProducerFencedError`.

:data:`step_hook` lets tests stop a job at each step of a transaction (a random kill misses a few ms).

Threads: every method runs on the thread that owns the stream (an asyncio stream's executor thread, a push
worker's handler thread), one call at a time; ``error_cb`` runs inside ``poll``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from multicluster_source.exceptions import ProducerFencedError, SourceFailedError
from multicluster_source.sink._positions import (
    StoredPosition,
    consumer_properties,
    encode_position,
    make_positions_topic,
    read_positions,
)
from multicluster_source.sink._sink import ExactlyOnceKafkaSink

__all__ = ["MAX_ABORTS_IN_A_ROW", "TransactionAborted", "TransactionalSink", "step_hook"]

_log = logging.getLogger("multicluster_source.sink")

step_hook: Callable[[str], None] | None = None
"""For tests: called with ``"begun"`` (a transaction begun, nothing produced yet), ``"produced"`` (a commit
starts: records produced, positions not written), ``"positions"`` (positions written, not committed),
``"committing"`` (``commit_transaction`` is called next) and ``"committed"`` (committed; the checkpoint of
``checkpoint_dir`` not taken yet)."""

MAX_ABORTS_IN_A_ROW = 5
"""Transactions aborted one after the other (each rewinding the readers) before the stream fails."""
_OPEN_TIMEOUT_S = 60.0
_SERVE_EVERY = 1000  # produce calls between two polls of the producer (delivery reports, error_cb)


class TransactionAborted(Exception):
    """The open transaction was aborted: the stream rewinds its readers to the last committed positions."""


def _step(name: str) -> None:
    hook = step_hook
    if hook is not None:
        hook(name)


def _fenced_codes() -> frozenset[int]:
    fenced = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    return frozenset((*fenced, KafkaError.TRANSACTION_COORDINATOR_FENCED))


class TransactionalSink:
    """The transactional producer of one stream and the positions it committed (see the module)."""

    def __init__(self, sink: ExactlyOnceKafkaSink, source_name: str, metrics: Any = None) -> None:
        self.sink = sink
        self._source = source_name
        self.metrics: Any = metrics
        """A :class:`~multicluster_source.ops._metrics.SourceMetrics` counting transactions (the stream's)."""
        self._producer: Any = None
        self._send: Any = None  # the producer's bound produce method (the usual call's one lookup)
        self._in_transaction = False
        self._produced = 0  # records produced into the open transaction
        self._since_serve = 0
        self._fatal: Any = None  # a fatal KafkaError reported through error_cb
        self._aborts_in_a_row = 0
        self._closed = False
        self.committed: dict[str, int] = {}
        """Split id -> position committed last (read at open, then as each transaction commits)."""
        self._committed_ids: dict[str, str | None] = {}  # split id -> Kafka cluster id written with it
        self.stored: dict[str, StoredPosition] = {}
        """What the positions topic held at open."""
        self.workers: int | None = None  # the worker slots of the last push run the positions topic names
        self.doomed: str | None = None
        """Why the open transaction can only abort (None: it may commit); the stream rewinds at its next
        commit point, as soon as it sees this set."""
        self.transactions = {"committed": 0, "aborted": 0}
        self.last_commit: dict[str, Any] | None = None

    # ------------------------------------------------------------------------------------------ opening

    def open(self, checkpoint_interval: float | None, *, read: bool = True) -> None:
        """Check the interval against ``transaction.timeout.ms``, make the positions topic when missing,
        fence earlier instances (``init_transactions``) and read the positions back. ``read=False`` (a push
        worker's sink: its driver made the topic and reads it) only fences."""
        from confluent_kafka import Producer

        sink = self.sink
        sink.check_interval(checkpoint_interval)
        props = sink.resolved_properties()
        if read:
            make_positions_topic(consumer_properties(props), sink)
        self._producer = Producer(
            {
                "client.id": f"mcs-sink-{self._source}",
                **props,
                "transactional.id": sink.transactional_id,
                "error_cb": self._on_error,
            }
        )
        self._send = self._producer.produce
        started = time.monotonic()
        try:
            self._producer.init_transactions(_OPEN_TIMEOUT_S)
        except KafkaException as exc:
            self._producer = None
            raise SourceFailedError(
                f"exactly-once sink {sink.transactional_id!r}: init_transactions failed on "
                f"{props.get('bootstrap.servers')}: {exc.args[0] if exc.args else exc}"
            ) from exc
        if read:
            self.read_back()
        _log.info(
            "source=%s: exactly-once sink %r open in %.2f s; %d positions read from %s",
            self._source,
            sink.transactional_id,
            time.monotonic() - started,
            len(self.stored),
            sink.positions_topic,
        )

    def read_back(self) -> None:
        """Read the positions topic ``read_committed`` to its end: :attr:`stored`, :attr:`committed`."""
        workers: list[int] = []
        self.stored = read_positions(
            consumer_properties(self.sink.resolved_properties()), self.sink.positions_topic, workers=workers
        )
        self.workers = workers[-1] if workers else None
        self.committed = {sid: p.offset for sid, p in self.stored.items()}
        self._committed_ids = {sid: p.kafka_cluster_id for sid, p in self.stored.items()}

    def expected_identities(self) -> dict[str, str]:
        """Cluster id -> the Kafka cluster id the stored positions of that cluster were written for."""
        stored = self.stored.values()
        return {p.cluster_id: p.kafka_cluster_id for p in stored if p.kafka_cluster_id is not None}

    def _on_error(self, err: Any) -> None:
        if err.fatal():
            self._fatal = err
        else:
            _log.debug("source=%s: sink producer: %s", self._source, err)

    # -------------------------------------------------------------------------------------- producing

    def raise_if_fenced(self) -> None:
        """Raise what a fatal producer error (reported so far) means for the stream."""
        if self._producer is not None and self._since_serve:
            self._serve()
        if self._fatal is not None:
            raise self._fatal_error(self._fatal)

    def _serve(self) -> None:
        self._since_serve = 0
        self._poll(0)

    def _poll(self, timeout: float) -> None:
        """Serve the producer; a fatal error (fenced) it raises is kept like one ``error_cb`` reports."""
        try:
            self._producer.poll(timeout)
        except KafkaException as exc:
            if exc.args:
                self._fatal = self._fatal or exc.args[0]

    def _fatal_error(self, err: Any) -> Exception:
        name = self.sink.transactional_id
        if err.code() in _fenced_codes():
            return ProducerFencedError(
                f"exactly-once sink {name!r}: fenced by another job with the same transactional_id; this "
                f"job's open transaction is aborted and it can commit nothing more ({err.str()})"
            )
        return SourceFailedError(f"exactly-once sink {name!r}: the producer failed: {err.str()}")

    def _begin(self) -> None:
        if not self._in_transaction:
            self._producer.begin_transaction()
            self._in_transaction = True
            _step("begun")

    def produce(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None = None,
    ) -> None:
        """Produce one record into the open transaction (begun first when none is open)."""
        if self._in_transaction and self._fatal is None and partition is None and headers is None:
            try:  # the usual call: one C call and two counters
                self._send(topic, value, key)
            except (BufferError, KafkaException):
                self._produce_slowly(topic, value, key, partition, headers)
                return
        else:
            self._produce_slowly(topic, value, key, partition, headers)
            return
        self._produced += 1
        self._since_serve += 1
        if self._since_serve >= _SERVE_EVERY:
            self._serve()

    def _produce_slowly(self, topic: str, value: Any, key: Any, partition: int | None, headers: Any) -> None:
        """:meth:`produce` when a transaction must begin, the producer's queue is full, or an error came."""
        if self._fatal is not None:
            raise self._fatal_error(self._fatal)
        try:
            self._begin()
            kwargs: dict[str, Any] = {"value": value, "key": key}
            if partition is not None:
                kwargs["partition"] = partition
            if headers is not None:
                kwargs["headers"] = headers
            self._produce_waiting(topic, **kwargs)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if err is not None and err.code() == KafkaError._FATAL:  # the cause comes through error_cb
                self._poll(0)
                err = self._fatal = self._fatal or err
            if err is not None and (err.fatal() or err.code() in _fenced_codes() or err is self._fatal):
                self._fatal = self._fatal or err
                raise self._fatal_error(self._fatal) from exc
            doomed = err is not None and (err.txn_requires_abort() or err.code() == KafkaError._STATE)
            if doomed and self._in_transaction:
                # the transaction already failed (a result the sink refused): what is produced now would be
                # aborted with it; the next commit point aborts it and rewinds, and this result comes again
                self.doomed = self.doomed or (err.str() if err is not None else "failed")
                return
            raise
        self._produced += 1
        self._since_serve += 1
        if self._since_serve >= _SERVE_EVERY:
            self._serve()

    def _produce_waiting(self, topic: str, **kwargs: Any) -> None:
        """``produce``, waiting while the producer's queue is full (it sends meanwhile)."""
        while True:  # no local reference to the producer: a traceback kept by the caller would keep it alive
            try:
                self._producer.produce(topic, **kwargs)
                return
            except BufferError:
                self._poll(0.05)
                if self._fatal is not None:
                    raise KafkaException(self._fatal) from None

    # -------------------------------------------------------------------------------------- committing

    def pending(self, positions: Mapping[str, int]) -> dict[str, int]:
        """The positions in ``positions`` that differ from those committed last."""
        committed = self.committed
        return {sid: pos for sid, pos in positions.items() if committed.get(sid) != pos}

    def commit(self, positions: Mapping[str, int], identities: Callable[[str], str | None]) -> bool:
        """Commit the open transaction with ``positions`` (split id -> next offset; those unchanged since
        the last commit are not written again). ``identities(cluster_id)`` gives the Kafka cluster id of a
        cluster. Returns False when there was nothing to commit (nothing produced, no position moved).

        Raises :class:`TransactionAborted` after aborting a transaction that cannot commit (the stream
        rewinds), :class:`ProducerFencedError` when fenced, :class:`SourceFailedError` on another fatal
        error or after :data:`MAX_ABORTS_IN_A_ROW` aborts.
        """
        self.raise_if_fenced()
        if self.doomed is not None:
            self._failed(KafkaException(KafkaError(KafkaError._STATE, self.doomed)))  # aborts, raises
        changed = self.pending(positions)
        if not changed and not self._produced:
            return False
        started = time.monotonic()
        produced = self._produced
        ids: dict[str, str | None] = {}
        try:
            self._begin()
            _step("produced")
            topic = self.sink.positions_topic
            for sid, pos in changed.items():
                cluster = sid.split("/", 1)[0]
                kafka_id = identities(cluster) or self._committed_ids.get(sid)
                ids[sid] = kafka_id
                key, value = encode_position(sid, pos, kafka_id, self._source)
                self._produce_waiting(topic, value=value, key=key)
            _step("positions")
            self._commit_transaction()
        except KafkaException as exc:
            self._failed(exc)  # raises
        self._in_transaction = False
        self._produced = 0
        self._aborts_in_a_row = 0
        self.committed.update(changed)
        self._committed_ids.update(ids)
        seconds = time.monotonic() - started
        self.transactions["committed"] += 1
        self.last_commit = {
            "records": produced,
            "positions": len(changed),
            "seconds": round(seconds, 4),
            "at_ms": int(time.time() * 1000),
        }
        if self.metrics is not None:
            self.metrics.transaction("committed", seconds, produced, len(changed))
        _step("committed")
        return True

    def _commit_transaction(self) -> None:
        """``commit_transaction``, retried while the error is retriable (a timeout may be retried) for as
        long as the transaction may live."""
        deadline = time.monotonic() + self.sink.transaction_timeout_ms() / 1000.0
        _step("committing")
        while True:
            try:
                self._producer.commit_transaction(30.0)
                return
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if err is None or not err.retriable() or err.txn_requires_abort() or err.fatal():
                    raise
                if time.monotonic() > deadline:
                    raise
                _log.warning("source=%s: sink commit will be retried: %s", self._source, err.str())

    def _failed(self, exc: Exception) -> None:
        err = exc.args[0] if exc.args else None
        if err is not None and (err.fatal() or err.code() in _fenced_codes()):
            self._fatal = self._fatal or err
            raise self._fatal_error(err) from exc
        self.abort()
        self._aborts_in_a_row += 1
        reason = err.str() if err is not None else str(exc)
        if self._aborts_in_a_row >= MAX_ABORTS_IN_A_ROW:
            raise SourceFailedError(
                f"exactly-once sink {self.sink.transactional_id!r}: {self._aborts_in_a_row} transactions "
                f"aborted in a row; the last: {reason}"
            ) from exc
        _log.warning(
            "source=%s: sink transaction aborted (%s); rewinding to the last committed positions",
            self._source,
            reason,
        )
        raise TransactionAborted(reason) from exc

    def abort(self) -> None:
        """Abort the open transaction, if any (what it held is never visible to ``read_committed``)."""
        self.doomed = None
        if not self._in_transaction or self._producer is None:
            return
        self._in_transaction = False
        self._produced = 0
        self.transactions["aborted"] += 1
        if self.metrics is not None:
            self.metrics.transaction("aborted", 0.0, 0, 0)
        try:
            self._producer.abort_transaction(30.0)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if err is not None and err.fatal():
                self._fatal = self._fatal or err
            _log.warning("source=%s: sink abort failed: %s", self._source, exc)

    # ---------------------------------------------------------------------------------------- closing

    def close(self) -> None:
        """Abort what is still open (the stream commits first when it closes normally), flush and drop the
        producer: no transaction is left open. Idempotent."""
        if self._closed:
            return
        self._closed = True
        producer = self._producer
        if producer is None:
            return
        if self._fatal is None:
            self.abort()
        self._producer = self._send = None
        try:
            producer.flush(5.0)
        except KafkaException as exc:  # a fenced or failed producer: nothing of it can be sent anyway
            _log.debug("source=%s: sink flush at close: %s", self._source, exc)
        del producer  # the last reference: the client is destroyed here

    def status(self) -> dict[str, Any]:
        """The ``sink`` section of the stream's status (no property values: they may hold secrets)."""
        return {
            "transactional_id": self.sink.transactional_id,
            "positions_topic": self.sink.positions_topic,
            "transactions": dict(self.transactions),
            "open_transaction_records": self._produced,
            "positions_committed": len(self.committed),
            "last_commit": self.last_commit,
            "fenced": self._fatal is not None,
        }
