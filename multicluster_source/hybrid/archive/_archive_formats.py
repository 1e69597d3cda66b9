"""Reading one archived file in chunks, as the sinks' format classes wrote it.

- ``jsonl`` (``JsonFormat``): one JSON value per line, ``.json`` or ``.json.gz``; a value is what
  ``json.loads`` gives, the ``payload`` of ``JsonConverter``'s ``{"schema", "payload"}`` envelope where the
  converter had schemas enabled.
- ``avro`` (``AvroFormat``): an Avro object container file, read with fastavro; a value is fastavro's
  datum (a dict for a record schema).
- ``parquet`` (``ParquetFormat``): read as Arrow record batches (never row by row); a value is an
  :class:`ArchivedRow`, a read-only mapping over the batch's columns.

Key files (``.keys<ext>``) hold one key per record, header files (``.headers<ext>``) one list of
``{"key", "value"}`` per record; the Parquet sink wraps them in a struct (``key`` / ``headers`` field).
Keys become bytes: str as UTF-8, bytes as they are, anything else as compact JSON. Called from reader
threads only.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from multicluster_source.framework._records import Headers
from multicluster_source.hybrid.archive._archive_layout import (
    ArchiveError,
    ArchiveFormat,
    format_of,
    missing_extra,
)
from multicluster_source.hybrid.archive._archive_rows import RowColumns, rows_of

CHUNK = 8192  # records per chunk of the row formats; Parquet chunks are record batches of this size


@dataclass(frozen=True)
class FieldNames:
    """The value fields that hold the Kafka offset and timestamp, when the archive has them."""

    offset: str | None = None
    timestamp: str | None = None


@dataclass
class Chunk:
    """Up to :data:`CHUNK` records of one file, from record ``position`` (0-based) on."""

    position: int
    values: list[Any] | None  # the row formats' values; None for Parquet (rows)
    offsets: list[Any] | None  # from the offset field
    timestamps: list[Any] | None  # from the timestamp field
    rows: RowColumns | None = None  # Parquet: the batch's columns
    increasing: bool | None = None  # Parquet: the offsets strictly increase (checked by Arrow compute)
    int_timestamps: bool = False  # Parquet: the timestamps are ints or None already

    def __len__(self) -> int:
        return len(self.values) if self.values is not None else self.rows.count  # type: ignore[union-attr]


def read_chunks(fs: Any, path: str, fmt: ArchiveFormat, fields: FieldNames, skip: int) -> Iterator[Chunk]:
    """The file's records from record ``skip`` on, in chunks."""
    try:
        if fmt == "parquet":
            yield from _parquet(fs, path, fields, skip)
        elif fmt == "avro":
            yield from _rows(path, _avro(fs, path), fields, skip)
        else:
            yield from _rows(path, _jsonl(fs, path), fields, skip)
    except ArchiveError:
        raise
    except (OSError, ValueError, TypeError, KeyError, EOFError, IndexError) as e:
        raise ArchiveError(f"malformed {fmt} file: {type(e).__name__}: {e}", path=path) from e


def _open(fs: Any, path: str) -> bytes:
    with fs.open_input_stream(path) as stream:
        data: bytes = stream.read()
    return gzip.decompress(data) if path.endswith(".gz") else data


def _jsonl(fs: Any, path: str) -> Iterator[Any]:
    for number, line in enumerate(_open(fs, path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as e:
            raise ArchiveError(f"malformed JSON line: {e}", path=path, line=number) from e
        # JsonConverter with schemas.enable=true wraps each value: {"schema": ..., "payload": ...}
        if type(value) is dict and len(value) == 2 and "payload" in value and "schema" in value:
            value = value["payload"]
        yield value


def _avro(fs: Any, path: str) -> Iterator[Any]:
    try:
        import fastavro
    except ImportError as e:  # pragma: no cover - the extra is installed in CI
        raise missing_extra("fastavro") from e
    import io

    number = 0
    try:
        for number, datum in enumerate(fastavro.reader(io.BytesIO(_open(fs, path))), 1):  # noqa: B007
            yield datum
    except (ValueError, EOFError, TypeError, IndexError, KeyError) as e:
        raise ArchiveError(f"malformed Avro file: {type(e).__name__}: {e}", path=path, line=number + 1) from e


def _rows(path: str, values: Iterator[Any], fields: FieldNames, skip: int) -> Iterator[Chunk]:
    position = skip
    if skip:
        taken = sum(1 for _ in islice(values, skip))
        if taken < skip:
            raise ArchiveError(
                f"holds {taken} records, but the position to go on from is record {skip}", path=path
            )
    while chunk := list(islice(values, CHUNK)):
        yield Chunk(
            position,
            chunk,
            _field(path, chunk, fields.offset, position, int),
            _field(path, chunk, fields.timestamp, position, None),
        )
        position += len(chunk)


def _field(
    path: str, values: list[Any], name: str | None, position: int, kind: type | None
) -> list[Any] | None:
    if name is None:
        return None
    try:
        found = [v[name] for v in values]
    except (KeyError, TypeError, IndexError):
        for i, v in enumerate(values):
            if not isinstance(v, dict) or name not in v:
                raise ArchiveError(
                    f"the record has no field {name!r}", path=path, line=position + i + 1
                ) from None
        raise
    if kind is int:
        for i, v in enumerate(found):
            if type(v) is not int:
                raise ArchiveError(
                    f"field {name!r} is {v!r}, not an offset", path=path, line=position + i + 1
                )
    return found


def _parquet(fs: Any, path: str, fields: FieldNames, skip: int) -> Iterator[Chunk]:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:  # pragma: no cover
        raise missing_extra("pyarrow") from e
    with fs.open_input_file(path) as handle:
        reader = pq.ParquetFile(handle)
        meta = reader.metadata
        groups, position = [], 0
        for g in range(meta.num_row_groups):
            rows = meta.row_group(g).num_rows
            if position + rows <= skip:
                position += rows
                continue
            groups.append(g)
        if skip > meta.num_rows:
            raise ArchiveError(
                f"holds {meta.num_rows} records, but the position to go on from is record {skip}", path=path
            )
        for name in (fields.offset, fields.timestamp):
            if name is not None and name not in reader.schema_arrow.names:
                raise ArchiveError(
                    f"has no column {name!r} (columns: {reader.schema_arrow.names})", path=path
                )
        if not groups:
            return
        for batch in reader.iter_batches(batch_size=CHUNK, row_groups=groups):
            if position < skip:
                batch = batch.slice(skip - position)
                position = skip
            if batch.num_rows == 0:
                continue
            yield Chunk(
                position,
                None,
                _column(path, batch, fields.offset, position),
                _column(path, batch, fields.timestamp, position),
                RowColumns(batch),
                _increasing(batch, fields.offset),
                True,
            )
            position += batch.num_rows


def _increasing(batch: Any, name: str | None) -> bool | None:
    if name is None or batch.num_rows < 2:
        return None
    import pyarrow.compute as pc

    column = batch.column(name)
    steps = pc.subtract(column.slice(1), column.slice(0, batch.num_rows - 1))
    return bool(pc.min(steps).as_py() > 0)


def _column(path: str, batch: Any, name: str | None, position: int) -> list[Any] | None:
    if name is None:
        return None
    column = batch.column(name)
    import pyarrow as pa

    if pa.types.is_timestamp(column.type):  # as int64 milliseconds
        column = column.cast(pa.timestamp("ms")).cast(pa.int64())
    if column.null_count:
        values = column.to_pylist()
        line = position + values.index(None) + 1
        raise ArchiveError(f"column {name!r} is null", path=path, line=line)
    found: list[Any] = column.to_pylist()
    return found


def read_keys(fs: Any, path: str) -> list[bytes | None]:
    """Every key of a key file, as bytes."""
    return [_key_bytes(v) for v in _view_values(fs, path, "key")]


def read_headers(fs: Any, path: str) -> list[Headers]:
    """Every record's headers of a header file."""
    found: list[Headers] = []
    for number, v in enumerate(_view_values(fs, path, "headers"), 1):
        if v is None:
            found.append(None)
            continue
        try:
            found.append([(str(h["key"]), None if h["value"] is None else _key_bytes(h["value"])) for h in v])
        except (KeyError, TypeError) as e:
            raise ArchiveError(f"malformed headers {v!r}", path=path, line=number) from e
    return found


def _view_values(fs: Any, path: str, field: str) -> list[Any]:
    name = path.rsplit("/", 1)[-1]
    view = ".keys" if field == "key" else ".headers"
    fmt = format_of(name.split(view, 1)[1]) if view in name else None
    if fmt is None:
        raise ArchiveError("not a key or header file of a readable format", path=path)
    if fmt == "parquet":
        values: list[Any] = []
        for chunk in _parquet(fs, path, FieldNames(), 0):
            for row in rows_of(chunk.rows):  # type: ignore[arg-type]
                values.append(row[field] if field in row else row.values()[0])
        return values
    data = _avro(fs, path) if fmt == "avro" else _jsonl(fs, path)
    return [_unwrap(v, field) for v in data]


def _unwrap(value: Any, field: str) -> Any:
    # the sinks wrap a key or headers in a struct where a format needs a record at the top
    if isinstance(value, dict) and set(value) == {field}:
        return value[field]
    return value


def _key_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()
