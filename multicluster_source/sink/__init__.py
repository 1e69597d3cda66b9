"""Exactly once into a Kafka cluster: the job's results and the stream's positions in one transaction.

- ``_sink``: :class:`ExactlyOnceKafkaSink`, the sink as configured (a value).
- ``_positions``: the positions topic's records, making the topic, reading it back ``read_committed``.
- ``_transactions``: :class:`~._transactions.TransactionalSink`, one stream's transactional producer.
- ``_workers``: a push run's sink: a transactional id a worker slot, fencing them all before the positions are
  read, and one again when its worker is given up.

See docs/guides/exactly-once.md; the stream side is :mod:`multicluster_source.runtime.pull._sinking`, the
push run's :mod:`multicluster_source.runtime.push` (``_worker_sink``, ``_run_sink``).
"""

from __future__ import annotations

from multicluster_source.exceptions import ClusterIdentityError, ProducerFencedError
from multicluster_source.sink._sink import ExactlyOnceKafkaSink

__all__ = ["ClusterIdentityError", "ExactlyOnceKafkaSink", "ProducerFencedError"]
