"""A push worker's exactly-once sink (``run(handler, ..., sink=...)``): its transactions and what they hold.

Each worker slot writes under its own transactional id
(:func:`~multicluster_source.sink._workers.worker_sink`). The handler returns what to produce
(:func:`results_of` names the forms); :class:`WorkerTransactions` produces it into the open transaction and
keeps, apart from what the worker already reported, the positions of what the handler returned from. Every
``interval`` seconds, when a fence asks for the worker's positions, and when the worker stops,
:meth:`WorkerTransactions.commit` writes those positions into the positions topic inside the transaction and
commits it; only then does the worker report them (``Delivered``, a fence's ``Fenced``) and release finished
splits, so the driver's positions are always committed ones, and a split that moves to another worker starts
where the results of its records were committed.

Threads: :meth:`~WorkerTransactions.identities`, :meth:`~WorkerTransactions.assigned` and
:meth:`~WorkerTransactions.fence_request` are called by the worker's main loop (the reader thread), under a
lock of their own; everything else by the handler thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from multicluster_source._clock import clock
from multicluster_source.exceptions import ConfigurationError
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.framework._watermarks import widened_event_times
from multicluster_source.sink._sink import ExactlyOnceKafkaSink
from multicluster_source.sink._transactions import TransactionAborted, TransactionalSink
from multicluster_source.sink._workers import worker_sink

__all__ = ["Committed", "RunSink", "WorkerTransactions", "results_of", "worker_transactions"]


@dataclass(frozen=True)
class RunSink:
    """What every worker of a run with an exactly-once sink needs (a value: it is pickled to worker
    processes and Ray actors)."""

    sink: ExactlyOnceKafkaSink
    interval: float
    """Seconds between two commits of a worker."""


@dataclass(frozen=True)
class Committed:
    """What one commit made durable: to report to the driver."""

    positions: dict[str, int]
    records: int
    times: dict[str, tuple[int, int]] | None
    taken: int
    """The hand-off's count of batches taken when the last of them was handled."""
    answers: tuple[tuple[int, dict[str, int], dict[str, int]], ...]
    """``(request, positions, last_times)`` of each fence to answer."""


def results_of(returned: object) -> Iterable[tuple[str, Any, Any, int | None, Any]]:
    """What a handler returned, as ``(topic, value, key, partition, headers)``: None (nothing), or an iterable
    of ``(topic, value)``, ``(topic, value, key)`` or mappings with ``topic`` and any of ``value``, ``key``,
    ``partition``, ``headers``."""
    if returned is None:
        return
    if isinstance(returned, (str, bytes, Mapping)) or not isinstance(returned, Iterable):
        raise ConfigurationError(
            f"run(sink=...): the handler returned a {type(returned).__name__}; it returns what to produce: "
            "None, or an iterable of (topic, value), (topic, value, key) or {'topic': ..., 'value': ...}"
        )
    for item in returned:
        if isinstance(item, tuple) and len(item) in (2, 3) and isinstance(item[0], str):
            yield item[0], item[1], item[2] if len(item) == 3 else None, None, None
        elif isinstance(item, Mapping) and isinstance(item.get("topic"), str):
            get = item.get
            yield item["topic"], get("value"), get("key"), get("partition"), get("headers")
        else:
            shape = f"tuple of {len(item)}" if isinstance(item, tuple) else type(item).__name__
            raise ConfigurationError(
                f"run(sink=...): the handler returned a {shape} among its results; each is (topic, value), "
                "(topic, value, key) or a mapping with 'topic' and any of 'value', 'key', 'partition', "
                "'headers'"
            )


class WorkerTransactions:
    """One worker's transactional sink and what its next commit holds (see the module)."""

    def __init__(self, run_sink: RunSink, index: int, source_name: str, metrics: Any = None) -> None:
        self.sink = TransactionalSink(worker_sink(run_sink.sink, index), source_name, metrics)
        self._interval = run_sink.interval
        self._clock = clock()
        self._last = self._clock.monotonic()
        self._lock = threading.Lock()  # what the main loop hands over: ids, assignments, fence requests
        self._ids: dict[str, str] = {}
        self._assigned: dict[str, int] = {}
        self._requests: list[tuple[int, dict[str, tuple[int, int | None]]]] = []
        self._pending_answers: list[tuple[int, dict[str, tuple[int, int | None]]]] = []  # of an aborted one
        # what the handler returned from since the last commit (handler thread)
        self._positions: dict[str, int] = {}
        self._records = 0
        self._times: dict[str, tuple[int, int]] | None = None
        self.taken = 0
        """The hand-off's count of batches taken when the handler last returned (handler thread)."""

    def open(self) -> None:
        """Fence this slot's earlier instance (the driver read the positions already)."""
        self.sink.open(self._interval, read=False)

    def close(self) -> None:
        """Abort what is still open and drop the producer."""
        self.sink.close()

    # ------------------------------------------------------------------------------ main loop's side

    def identities(self, ids: Mapping[str, str]) -> None:
        """The Kafka cluster ids to write with positions (``ClusterIds``)."""
        with self._lock:
            self._ids = dict(ids)

    def assigned(self, splits: Sequence[KafkaPartitionSplit]) -> None:
        """Splits assigned: their starting positions go with the next commit, read or not."""
        with self._lock:
            for split in splits:
                if split.starting_offset >= 0:
                    self._assigned[split.split_id] = split.starting_offset

    def fence_request(self, request: int, fenced: Mapping[str, tuple[int, int | None]]) -> None:
        """A fence the driver waits for: answered after the next commit (``fenced``: the worker tracker's)."""
        with self._lock:
            self._requests.append((request, dict(fenced)))

    # ------------------------------------------------------------------------------ handler's side

    def produce(self, returned: object) -> None:
        """Produce what the handler returned into the open transaction."""
        produce = self.sink.produce
        for topic, value, key, partition, headers in results_of(returned):
            produce(topic, value, key, partition, headers)

    def add(
        self,
        positions: Mapping[str, int],
        records: int,
        times: Mapping[str, tuple[int, int]] | None,
        taken: int,
    ) -> None:
        """The handler returned from records up to ``positions``; their results are in the transaction."""
        self._positions.update(positions)
        self._records += records
        self.taken = taken
        if times:
            self._times = widened_event_times(self._times, times)

    @property
    def idle(self) -> bool:
        """Nothing handled waits for a commit."""
        return not self._positions and not self._records

    def due(self) -> bool:
        """Whether the handler thread commits now: the interval passed, a fence waits, or the transaction
        failed (it aborts at once)."""
        return (
            bool(self._requests)
            or self.sink.doomed is not None
            or self._clock.monotonic() - self._last >= self._interval
        )

    def commit(self) -> Committed:
        """Commit the results and positions handled since the last commit. Raises :class:`TransactionAborted`
        (the transaction was aborted: the worker rewinds to :attr:`committed`; answer :meth:`aborted` first),
        ``ProducerFencedError`` or ``SourceFailedError``."""
        with self._lock:
            ids = self._ids
            assigned, self._assigned = self._assigned, {}
            requests, self._requests = self._requests, []
        self._last = self._clock.monotonic()
        try:
            self.sink.commit({**assigned, **self._positions}, ids.get)
        except TransactionAborted:
            self._pending_answers = requests
            raise
        done = Committed(
            self._positions,
            self._records,
            self._times,
            self.taken,
            tuple(self._answer(request, fenced, True) for request, fenced in requests),
        )
        self._positions, self._records, self._times = {}, 0, None
        return done

    def aborted(self) -> tuple[tuple[int, dict[str, int], dict[str, int]], ...]:
        """After an abort: drop what the transaction held; the answers to the fences that waited for it
        (each split at its committed position: what its records' results were committed up to)."""
        requests, self._pending_answers = self._pending_answers, []
        self._positions, self._records, self._times = {}, 0, None
        self.taken = 0  # the rewind makes a new hand-off
        return tuple(self._answer(request, fenced, False) for request, fenced in requests)

    def _answer(
        self, request: int, fenced: Mapping[str, tuple[int, int | None]], committed: bool
    ) -> tuple[int, dict[str, int], dict[str, int]]:
        stored = self.sink.committed
        positions = {sid: stored[sid] for sid in fenced if sid in stored}
        times = {sid: ts for sid, (_p, ts) in fenced.items() if committed and ts is not None}
        return request, positions, times

    @property
    def committed(self) -> Mapping[str, int]:
        """Split id -> position this worker committed last."""
        return self.sink.committed


def worker_transactions(
    run_sink: RunSink | None, index: int, source_name: str, metrics: Any
) -> WorkerTransactions | None:
    """The transactions of worker ``index`` of a run with a sink (None without one)."""
    return None if run_sink is None else WorkerTransactions(run_sink, index, source_name, metrics)
