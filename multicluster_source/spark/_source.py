"""The Spark data source, its stream reader and its batch reader: Spark's calls handed to the driver and
executor parts.

The reader object is made on Spark's driver (in a Python process that lives as long as the query) and is
also pickled into every task: only the parsed options travel (:meth:`MultiClusterStreamReader.__getstate__`),
the driver's clients and metadata service are made on first use where they are needed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from multicluster_source.metadata._model import ClusterMetadata
from multicluster_source.spark._driver import Planner
from multicluster_source.spark._offsets import Range, decode_offset
from multicluster_source.spark._options import FORMAT, SparkOptions, for_batch, for_streaming, parse_options
from multicluster_source.spark._read import SplitRange, read_range, spark_schema

__all__ = ["MultiClusterBatchReader", "MultiClusterKafkaDataSource", "MultiClusterStreamReader"]

_log = logging.getLogger("multicluster_source.spark")


class MultiClusterKafkaDataSource(DataSource):
    """The ``multicluster-kafka`` format: options are checked when the source is made (at ``load()``)."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.parsed: SparkOptions = parse_options(dict(options))

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return FORMAT

    def schema(self) -> str:
        """Spark's Kafka source's columns plus ``cluster`` (and ``headers`` with ``includeHeaders``)."""
        return spark_schema(self.parsed.include_headers)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The micro-batch reader of a streaming query (``spark.readStream``)."""
        return MultiClusterStreamReader(for_streaming(self.parsed))

    def reader(self, schema: StructType) -> DataSourceReader:
        """The reader of a batch read (``spark.read``): ``startingOffsets`` (default ``earliest``) to
        ``endingOffsets`` (default ``latest``)."""
        return MultiClusterBatchReader(for_batch(self.parsed, dict(self.options)))


def _input_partitions(
    planned: list[tuple[Range, ClusterMetadata]], options: SparkOptions
) -> list[InputPartition]:
    """One Spark partition per planned range, carrying what its executor needs to read it."""
    out: list[InputPartition] = []
    for piece, cluster in planned:
        _cid, topic, partition = piece.split_id.split("/")
        task = SplitRange(
            cluster_id=cluster.cluster_id,
            bootstrap_servers=cluster.bootstrap_servers,
            cluster_properties=dict(cluster.properties),
            client_properties=dict(options.client_properties),
            topic=topic,
            partition=int(partition),
            start=piece.start,
            end=piece.end,
            include_headers=options.include_headers,
            fail_on_data_loss=options.fail_on_data_loss,
            group_id_prefix=options.group_id_prefix,
            poll_timeout_ms=options.poll_timeout_ms,
        )
        out.append(InputPartition(task))
    return out


def _read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    task = partition.value
    assert isinstance(task, SplitRange)
    return read_range(task)


class MultiClusterBatchReader(DataSourceReader):
    """A batch read: the ranges are fixed on the driver when Spark plans the read, executors read them."""

    def __init__(self, options: SparkOptions) -> None:
        self._options = options

    def partitions(self) -> Sequence[InputPartition]:
        """One Spark partition per split with records between the starting and ending offsets."""
        planner = Planner(self._options)
        try:
            return _input_partitions(planner.bounded(), self._options)
        finally:
            planner.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The records of one split's range (runs on an executor)."""
        return _read_partition(partition)


class MultiClusterStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets, planning and reading of one query (see the module docstring for where each part runs)."""

    def __init__(self, options: SparkOptions) -> None:
        self._options = options
        self._planner: Planner | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._options = state["_options"]
        self._planner = None

    @property
    def planner(self) -> Planner:
        """The driver's planner, made on first use."""
        if self._planner is None:
            self._planner = Planner(self._options)
        return self._planner

    def initialOffset(self) -> dict[str, int]:
        """Where a new query starts (``startingOffsets``)."""
        return self.planner.initial()

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxOffsetsPerTrigger`` as a row limit, else everything available."""
        limit = self._options.max_offsets_per_trigger
        return super().getDefaultReadLimit() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the offsets a ``Trigger.AvailableNow`` run reads up to."""
        self.planner.prepare_available_now({})

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        """The end of the next micro-batch (see :meth:`Planner.latest`)."""
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return self.planner.latest(decode_offset(start), rows)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One Spark partition per split with records between ``start`` and ``end``."""
        planned = self.planner.plan(decode_offset(start), decode_offset(end))
        return _input_partitions(planned, self._options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The records of one split's range (runs on an executor)."""
        return _read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """A micro-batch is committed (Spark's checkpoint holds the positions); with ``commitGroupId`` its
        offsets are committed to the clusters too."""
        self.planner.commit(decode_offset(end))

    def stop(self) -> None:
        """Let go of the driver's clients."""
        if self._planner is not None:
            self._planner.close()
            self._planner = None
