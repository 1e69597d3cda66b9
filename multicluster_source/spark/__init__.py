"""The stream as a Spark Structured Streaming source (API.md section 10; the ``spark`` extra).

:func:`register` adds the format ``"multicluster-kafka"`` to a Spark session. The source reads the
streams of a metadata file with Spark's Kafka source's option names and columns plus ``cluster``, and
follows changes to the file in the running query. Needs ``pyspark>=4.2`` (the Python Data Source API with
admission control and ``Trigger.AvailableNow``).

What lives here: ``_options`` (the options), ``_offsets`` (the offset JSON, admission control), ``_driver``
(metadata, discovery and offsets on Spark's driver), ``_read`` (one split's range read into Arrow batches on
an executor), ``_source`` (the ``DataSource`` and its stream reader), ``_commits`` (committed micro-batches'
offsets committed to each cluster under a group id, for lag monitoring), ``_handovers`` (``replicaOf``:
which topics are read and where a copied split starts when its origin leaves), ``_metrics`` (the counter
of records skipped with ``failOnDataLoss=false``). pyspark is imported only in this package, and only by
:func:`register` (importing :mod:`multicluster_source` never imports it).

May import: every layer below the public surface (``enumerator``, ``framework``, ``metadata``,
``replicas``, ``ops``, ``exceptions``); nothing imports this package.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from multicluster_source.spark._options import FORMAT

__all__ = ["FORMAT", "register"]

MINIMUM_PYSPARK = (4, 2)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _check_pyspark() -> None:
    try:
        found = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        raise ImportError(
            "multicluster_source.spark needs pyspark>=4.2: pip install 'multicluster-kafka-source[spark]'"
        ) from None
    if _version_tuple(found) < MINIMUM_PYSPARK:
        raise ImportError(
            f"multicluster_source.spark needs pyspark>=4.2 (admission control and Trigger.AvailableNow for "
            f"Python sources), found pyspark {found}: pip install 'pyspark>=4.2'"
        )


def register(spark: Any) -> None:
    """Register the format ``"multicluster-kafka"`` with the Spark session ``spark``.

    Raises :class:`ImportError` when pyspark is missing or older than 4.2.
    """
    _check_pyspark()
    from multicluster_source.spark._source import MultiClusterKafkaDataSource

    spark.dataSource.register(MultiClusterKafkaDataSource)
