"""The Spark source's metric: records it went on without (``failOnDataLoss=false``).

- ``multicluster_source_spark_data_loss_records_total{cluster,topic}`` (counter): offsets a micro-batch
  should have read and did not, because they were deleted (retention), truncated away, or planned on a
  cluster that has left the metadata. Counted where the loss is found: on an executor for a range deleted
  before or while it is read, on the driver for a planned range of a cluster gone. A topic deleted and made
  again is logged only: how many records of the old topic were never read is not known.

The counter is registered in prometheus-client's global registry of the Python process that finds the loss
(Spark's Python workers, on the driver and on executors); with ``PROMETHEUS_MULTIPROC_DIR`` set in their
environment, prometheus-client's multiprocess mode collects every worker's counts in one exporter.
"""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY, CollectorRegistry, Counter

__all__ = ["DATA_LOSS", "DATA_LOSS_DOC", "count_data_loss"]

DATA_LOSS = "multicluster_source_spark_data_loss_records"
DATA_LOSS_DOC = (
    "Records a Spark micro-batch went on without (failOnDataLoss=false): deleted by retention, truncated, or "
    "planned on a cluster that left the metadata."
)

_lock = threading.Lock()
_counters: dict[int, Counter] = {}


def _counter(registry: CollectorRegistry) -> Counter:
    with _lock:
        counter = _counters.get(id(registry))
        if counter is None:
            counter = Counter(DATA_LOSS, DATA_LOSS_DOC, ["cluster", "topic"], registry=registry)
            _counters[id(registry)] = counter
        return counter


def count_data_loss(cluster: str, topic: str, records: int, registry: CollectorRegistry = REGISTRY) -> None:
    """Count ``records`` lost of ``topic`` of ``cluster`` (nothing for ``records <= 0``)."""
    if records > 0:
        _counter(registry).labels(cluster=cluster, topic=topic).inc(records)
