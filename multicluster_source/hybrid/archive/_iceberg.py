"""``KafkaIcebergSource``: a bounded hybrid stage over Iceberg tables written by Iceberg's Kafka Connect
sink with its Kafka metadata columns, through pyiceberg (the ``iceberg`` extra).

Iceberg's ``KafkaMetadataTransform`` adds, by default (``field_name=_kafka_metadata``, ``nested=false``),
the columns ``_kafka_metadata_topic`` (string), ``_kafka_metadata_partition`` (int),
``_kafka_metadata_offset`` (long) and ``_kafka_metadata_timestamp`` (long, optional). Every record has its
offset, so every position handed over is ``exact``.

Splits are the (topic, partition) pairs found in each table at the table's current snapshot, which the stage
pins (and keeps in its snapshots, so a restore reads the same data). A split is read with a row filter on
its topic, partition and the offset to go on from, sorted by offset (an Iceberg table keeps no order), and
handed over in Arrow batches; the value of a record is an :class:`ArchivedRow` over the table's other
columns. A split is held in memory while it is read (one per reader thread). Two rows with the same offset
(a sink that wrote twice) are an :class:`ArchiveError`; with ``on_error="skip"`` the later ones are dropped
and counted in ``status()``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from multicluster_source.exceptions import ConfigurationError
from multicluster_source.hybrid._stage import StageHandover, StageReader
from multicluster_source.hybrid.archive._archive import ON_ERROR, _ms
from multicluster_source.hybrid.archive._archive_formats import CHUNK
from multicluster_source.hybrid.archive._archive_layout import ArchiveError, missing_extra
from multicluster_source.hybrid.archive._archive_pieces import Piece, SplitPosition, starting_state
from multicluster_source.hybrid.archive._archive_reader import ArchiveStageReader
from multicluster_source.hybrid.archive._archive_rows import RowColumns, rows_of

log = logging.getLogger("multicluster_source.hybrid.iceberg")


class KafkaIcebergSource:
    """A bounded stage over Iceberg tables written by Iceberg's Kafka Connect sink.

    ``tables``: cluster id -> a pyiceberg ``Table`` (or several) holding that cluster's records, e.g.
    ``{"east": catalog.load_table("db.orders")}``. ``metadata_field``: the transform's ``field_name``
    (the columns are ``<metadata_field>_topic``, ``_partition``, ``_offset``, ``_timestamp``; with
    ``nested=True``, as the transform's ``nested=true`` writes them, the fields ``topic``, ``partition``,
    ``offset``, ``timestamp`` of one struct column ``<metadata_field>``). ``topics``:
    the topics to read (default: every topic in the tables). ``deserializer``: applied to each value (an
    :class:`ArchivedRow` of the table's other columns).
    """

    def __init__(
        self,
        tables: Mapping[str, Any],
        *,
        metadata_field: str = "_kafka_metadata",
        nested: bool = False,
        topics: Sequence[str] | None = None,
        deserializer: Any = None,
        on_error: str = "fail",
        name: str = "iceberg",
    ) -> None:
        """Check the arguments; nothing is read before :meth:`open_stage`."""
        if not tables:
            raise ConfigurationError("KafkaIcebergSource needs at least one table (cluster id -> table)")
        if on_error not in ON_ERROR:
            raise ConfigurationError(f"on_error={on_error!r} is not one of {', '.join(ON_ERROR)}")
        self._tables = {c: list(t) if isinstance(t, list | tuple) else [t] for c, t in tables.items()}
        joint = "." if nested else "_"  # a nested field is named "<struct>.<field>" in scans and filters
        self._columns = tuple(
            f"{metadata_field}{joint}{c}" for c in ("topic", "partition", "offset", "timestamp")
        )
        self._field, self._nested = metadata_field, nested
        self._topics = None if topics is None else frozenset(topics)
        self._deserializer = deserializer
        self._on_error = on_error
        self._name = name

    @property
    def bounded(self) -> bool:
        """Always True: the stage reads a pinned snapshot of each table."""
        return True

    @property
    def name(self) -> str:
        """``iceberg`` unless given."""
        return self._name

    def open_stage(
        self,
        *,
        parallelism: int,
        start: StageHandover | None,
        restored: Mapping[str, Any] | None,
        registry: CollectorRegistry | None,
        work_dir: str | None,
    ) -> StageReader:
        """Pin each table's snapshot (the restored one, if any), find the splits, start the readers."""
        try:
            from pyiceberg.expressions import EqualTo  # noqa: F401 - checks the extra is there
        except ImportError as e:
            raise missing_extra("pyiceberg", "iceberg") from e
        positions, skip_before = starting_state(self._name, restored, start)
        pinned: dict[str, int | None] = dict((restored or {}).get("extra", {}).get("snapshots", {}))
        producers: dict[str, _TableSplit] = {}
        duplicates: list[str] = []
        for cluster_id, tables in sorted(self._tables.items()):
            for table in tables:
                table_name = ".".join(table.name())
                key = f"{cluster_id}/{table_name}"
                if key not in pinned:
                    snapshot = table.current_snapshot()
                    pinned[key] = None if snapshot is None else snapshot.snapshot_id
                for topic, partition in self._splits(table, pinned[key]):
                    split = _TableSplit(cluster_id, table, table_name, pinned[key], topic, partition, self)
                    split.duplicates = duplicates
                    if split.split_id in producers:
                        raise ArchiveError(
                            f"split {split.split_id} is in two tables of cluster {cluster_id}",
                            path=table_name,
                        )
                    producers[split.split_id] = split
        details = {"tables": dict(sorted(pinned.items())), "duplicates": duplicates}
        return ArchiveStageReader(
            self._name,
            producers,
            parallelism=parallelism,
            positions=positions,
            skip_before=skip_before,
            details=details,
            extra={"snapshots": pinned},
        )

    def _splits(self, table: Any, snapshot_id: int | None) -> list[tuple[str, int]]:
        topic_col, partition_col = self._columns[:2]
        names = {f.name for f in table.schema().fields}
        if self._nested:
            struct = next((f.field_type for f in table.schema().fields if f.name == self._field), None)
            inner = {f.name for f in getattr(struct, "fields", ())}
            names |= {f"{self._field}.{n}" for n in inner}
        missing = [c for c in self._columns[:3] if c not in names]
        if missing:
            raise ArchiveError(
                f"has no Kafka metadata column {', '.join(missing)} (columns: {sorted(names)})",
                path=".".join(table.name()),
            )
        if snapshot_id is None:
            return []
        found = table.scan(selected_fields=(topic_col, partition_col), snapshot_id=snapshot_id).to_arrow()
        if self._nested:
            found = found.flatten()  # "<struct>.<field>" columns
        pairs = found.group_by([topic_col, partition_col]).aggregate([]).to_pylist()
        return sorted(
            (r[topic_col], int(r[partition_col]))
            for r in pairs
            if self._topics is None or r[topic_col] in self._topics
        )


class _TableSplit:
    """One (topic, partition) of one table (called from one reader thread)."""

    def __init__(
        self,
        cluster_id: str,
        table: Any,
        table_name: str,
        snapshot_id: int | None,
        topic: str,
        partition: int,
        source: KafkaIcebergSource,
    ) -> None:
        self.cluster_id, self.topic, self.partition = cluster_id, topic, partition
        self.split_id = f"{cluster_id}/{topic}/{partition}"
        self._table, self._table_name, self._snapshot_id = table, table_name, snapshot_id
        self._source = source
        self.duplicates: list[str] = []

    def pieces(
        self, start: SplitPosition | None, skip_before: int | None, stop: threading.Event
    ) -> Iterator[Piece]:
        import importlib

        import pyarrow.compute as pc

        ex: Any = importlib.import_module("pyiceberg.expressions")  # untyped here: its pydantic types mislead

        topic_col, partition_col, offset_col = self._source._columns[:3]
        lowest = start.next_offset if start is not None and start.next_offset is not None else skip_before
        row_filter: Any = ex.And(ex.EqualTo(topic_col, self.topic), ex.EqualTo(partition_col, self.partition))
        if lowest is not None:
            row_filter = ex.And(row_filter, ex.GreaterThanOrEqual(offset_col, lowest))
        data = self._table.scan(row_filter=row_filter, snapshot_id=self._snapshot_id).to_arrow()
        offsets_column = self._meta(data, "offset")
        order = pc.sort_indices(offsets_column)
        data, offsets_column = data.take(order), offsets_column.take(order)
        if offsets_column.null_count:
            raise ArchiveError(
                f"{offset_col} is null in {offsets_column.null_count} rows of {self.split_id}",
                path=self._table_name,
            )
        offsets: list[int] = offsets_column.to_pylist()
        if len(pc.unique(offsets_column)) != len(offsets):
            data, offsets = self._without_duplicates(data, offsets)
        stamps = self._meta(data, "timestamp")
        timestamps = None if stamps is None else list(map(_ms, stamps.to_pylist()))
        meta = [self._source._field] if self._source._nested else list(self._source._columns)
        table = data.drop_columns([c for c in meta if c in data.column_names])
        position = 0 if start is None else start.record
        deserializer = self._source._deserializer
        for batch in table.to_batches(max_chunksize=CHUNK):
            if stop.is_set():
                return
            n, lo = batch.num_rows, position - (0 if start is None else start.record)
            columns = RowColumns(batch)
            values = None if deserializer is None else list(map(deserializer, rows_of(columns)))
            yield Piece(
                self.split_id,
                self._table_name,
                position,
                0,
                self.cluster_id,
                self.topic,
                self.partition,
                offsets[lo : lo + n],
                None if timestamps is None else timestamps[lo : lo + n],
                None,
                None,
                values,
                None if values is not None else columns,
            )
            position += n
        yield Piece(self.split_id, self._table_name, position, 0, done=True)

    def _meta(self, data: Any, name: str) -> Any:
        """The Kafka metadata column ``name`` (offset, timestamp) of ``data``, or None."""
        import pyarrow.compute as pc

        if not self._source._nested:
            column = f"{self._source._field}_{name}"
            return data.column(column) if column in data.column_names else None
        struct = data.column(self._source._field)
        if struct.type.get_field_index(name) < 0:
            return None
        return pc.struct_field(struct, name)

    def _without_duplicates(self, data: Any, offsets: list[int]) -> tuple[Any, list[int]]:
        keep = [i for i in range(len(offsets)) if i == 0 or offsets[i] != offsets[i - 1]]
        repeated = sorted({offsets[i] for i in range(1, len(offsets)) if offsets[i] == offsets[i - 1]})
        message = (
            f"{self.split_id} has {len(offsets) - len(keep)} rows with an offset of another row "
            f"(first: offset {repeated[0]})"
        )
        if self._source._on_error == "fail":
            raise ArchiveError(message, path=self._table_name)
        log.warning(
            "cluster=%s: %s: %s (on_error=skip): the later rows are dropped",
            self.cluster_id,
            self._table_name,
            message,
        )
        self.duplicates.append(f"{self._table_name}: {message}")
        return data.take(keep), [offsets[i] for i in keep]
