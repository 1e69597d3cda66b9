"""The exactly-once sink of a push run (``source.run(handler, ..., sink=...)``): a transactional id a worker.

Each worker slot ``n`` of a run writes its results and the positions of its splits in transactions of its
own, under the transactional id ``<transactional_id>-<n>`` (:func:`worker_sink`), so that the workers commit
independently and a worker's zombie is fenced by its id alone. On the driver, before any worker reads,
:func:`open_run_sink` fences every slot's id (the run's, and those of a previous run with more slots, which
the positions topic names), so that no transaction an earlier instance left open hides committed positions
from the ``read_committed`` read that follows; then the positions are read back. The driver fences a slot's
id again (:func:`fence_ids`) when it gives that worker up, before its splits move.

Runs on the driver's thread at start, and on the thread that gives a worker up.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence

from multicluster_source.exceptions import SourceFailedError
from multicluster_source.sink._positions import encode_workers
from multicluster_source.sink._sink import ExactlyOnceKafkaSink
from multicluster_source.sink._transactions import TransactionalSink

__all__ = ["fence_ids", "open_run_sink", "worker_ids", "worker_sink"]

_log = logging.getLogger("multicluster_source.sink")

_FENCE_TIMEOUT_S = 60.0


def worker_sink(sink: ExactlyOnceKafkaSink, index: int) -> ExactlyOnceKafkaSink:
    """The sink of worker slot ``index``: the same cluster and positions topic, its own transactional id."""
    return dataclasses.replace(sink, transactional_id=f"{sink.transactional_id}-{index}")


def worker_ids(sink: ExactlyOnceKafkaSink, slots: Iterable[int]) -> list[str]:
    """The transactional ids of worker slots ``slots``."""
    return [f"{sink.transactional_id}-{n}" for n in slots]


def fence_ids(sink: ExactlyOnceKafkaSink, ids: Sequence[str], source_name: str) -> None:
    """``init_transactions`` under each of ``ids``: the sink cluster aborts the transaction each left open,
    and the producer that held it can commit nothing more."""
    from confluent_kafka import KafkaException, Producer

    props = sink.resolved_properties()
    for transactional_id in ids:
        producer = Producer(
            {"client.id": f"mcs-fence-{source_name}", **props, "transactional.id": transactional_id}
        )
        try:
            producer.init_transactions(_FENCE_TIMEOUT_S)
        except KafkaException as exc:
            raise SourceFailedError(
                f"exactly-once sink: fencing transactional id {transactional_id!r} failed on "
                f"{props.get('bootstrap.servers')}: {exc.args[0] if exc.args else exc}"
            ) from exc
        finally:
            producer.flush(5.0)
            del producer
        _log.debug("source=%s: transactional id %r fenced", source_name, transactional_id)


def open_run_sink(
    sink: ExactlyOnceKafkaSink, source_name: str, slots: int, interval: float | None
) -> TransactionalSink:
    """The driver's view of a push run's sink: every worker id fenced (``slots`` of this run, and as many as
    the last run had), the positions read back ``read_committed``, this run's slot count written. The returned
    sink's producer (under the bare ``transactional_id``, which fences a pull job of the same id too) is
    closed; its :attr:`~TransactionalSink.committed` and :meth:`~TransactionalSink.read_back` remain."""
    fence_ids(sink, worker_ids(sink, range(slots)), source_name)
    session = TransactionalSink(sink, source_name)
    try:
        session.open(interval)
        last = session.workers or 0
        if last > slots:  # a previous run had more slots: their transactions may still be open
            fence_ids(sink, worker_ids(sink, range(slots, last)), source_name)
            session.read_back()
        if session.workers != slots:
            key, value = encode_workers(slots)
            session.produce(sink.positions_topic, value=value, key=key)
            session.commit({}, lambda _cluster: None)
    finally:
        session.close()
    return session
