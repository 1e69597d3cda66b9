"""Archives written exactly as Kafka Connect's storage sinks write them, for the archive stage's tests.

- S3/GCS/Azure sinks (default partitioner): ``<root>/<topic>/partition=<p>/<topic>+<p>+<start>.<ext>``;
  HDFS sink: ``<root>/<topic>/partition=<p>/<topic>+<p>+<start>+<end>.<ext>`` (end inclusive). Offsets
  zero-padded to 10 digits; a file is named by the offset of its first record (and last, HDFS).
- Formats as the sinks' format classes write them: ``JsonFormat`` one JSON value per line (``.json``),
  ``AvroFormat`` an Avro container file (``.avro``), ``ParquetFormat`` Parquet (``.snappy.parquet``).
- ``store.kafka.keys=true``: ``<file without ext>.keys.avro`` (keys.format.class defaults to Avro), one key
  per record; ``store.kafka.headers=true``: ``.headers.avro``, per record an array of ``{key, value}``
  strings.
- Offsets with gaps: :func:`kafka_log` with ``gaps="compacted"`` (records removed by compaction) or
  ``"transactional"`` (every transaction's commit marker takes an offset no record has).
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

Gaps = Literal["none", "compacted", "transactional"]
EXTENSIONS = {"jsonl": ".json", "avro": ".avro", "parquet": ".snappy.parquet"}


@dataclass(frozen=True)
class LogRecord:
    """One record as it was in the Kafka log."""

    offset: int
    timestamp: int
    key: str
    value: dict[str, Any]
    headers: tuple[tuple[str, str], ...] = ()


def kafka_log(
    count: int, *, start: int = 0, gaps: Gaps = "none", seed: int = 7, headers: bool = False
) -> list[LogRecord]:
    """``count`` records from offset ``start``; with gaps as compaction or transaction markers leave them."""
    rng = random.Random(seed)
    records: list[LogRecord] = []
    offset = start
    while len(records) < count:
        if gaps == "compacted" and rng.random() < 0.3:
            offset += 1  # compacted away
            continue
        i = len(records)
        records.append(
            LogRecord(
                offset,
                1_700_000_000_000 + offset * 10,
                f"k{offset % 17}",
                {"id": i, "name": f"n{i}", "amount": i * 0.5},
                (("trace", f"t{offset}"),) if headers else (),
            )
        )
        offset += 1
        if gaps == "transactional" and len(records) % 5 == 0:
            offset += 1  # the commit marker
    return records


def _value(r: LogRecord, offset_field: str | None, timestamp_field: str | None) -> dict[str, Any]:
    value = dict(r.value)
    if offset_field:
        value[offset_field] = r.offset
    if timestamp_field:
        value[timestamp_field] = r.timestamp
    return value


def _avro_schema(offset_field: str | None, timestamp_field: str | None) -> dict[str, Any]:
    fields: list[dict[str, Any]] = [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "amount", "type": "double"},
    ]
    fields += [{"name": f, "type": "long"} for f in (offset_field, timestamp_field) if f]
    return {"type": "record", "name": "Value", "namespace": "test", "fields": fields}


def _avro_bytes(schema: Any, data: Sequence[Any]) -> bytes:
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), list(data), codec="deflate")
    return out.getvalue()


def value_file_bytes(
    records: Sequence[LogRecord],
    fmt: str,
    *,
    offset_field: str | None = None,
    timestamp_field: str | None = None,
) -> bytes:
    """The bytes of one value file of ``records`` in format ``fmt``."""
    values = [_value(r, offset_field, timestamp_field) for r in records]
    if fmt == "jsonl":
        return b"".join(json.dumps(v).encode() + b"\n" for v in values)
    if fmt == "avro":
        return _avro_bytes(_avro_schema(offset_field, timestamp_field), values)
    columns: dict[str, pa.Array] = {
        "id": pa.array([v["id"] for v in values], pa.int64()),
        "name": pa.array([v["name"] for v in values], pa.string()),
        "amount": pa.array([v["amount"] for v in values], pa.float64()),
    }
    for f in (offset_field, timestamp_field):
        if f:
            columns[f] = pa.array([v[f] for v in values], pa.int64())
    out = io.BytesIO()
    pq.write_table(pa.table(columns), out, compression="snappy", row_group_size=max(1, len(values) // 2 or 1))
    return out.getvalue()


def file_name(topic: str, partition: int, records: Sequence[LogRecord], fmt: str, layout: str) -> str:
    """The sink's name for a file of ``records``, without extension."""
    first = records[0].offset
    if layout == "hdfs":
        return f"{topic}+{partition}+{first:010d}+{records[-1].offset:010d}"
    return f"{topic}+{partition}+{first:010d}"


def write_archive(
    root: Path,
    topic: str,
    partition: int,
    records: Sequence[LogRecord],
    *,
    fmt: str = "jsonl",
    layout: str = "s3",
    flush_size: int = 100,
    offset_field: str | None = None,
    timestamp_field: str | None = None,
    keys: bool = False,
    headers: bool = False,
) -> list[Path]:
    """Write ``records`` as the sink would with ``flush.size=flush_size``; returns the value files."""
    directory = root / topic / f"partition={partition}"
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for i in range(0, len(records), flush_size):
        part = records[i : i + flush_size]
        stem = file_name(topic, partition, part, fmt, layout)
        path = directory / (stem + EXTENSIONS[fmt])
        path.write_bytes(
            value_file_bytes(part, fmt, offset_field=offset_field, timestamp_field=timestamp_field)
        )
        written.append(path)
        if keys:
            (directory / (stem + ".keys.avro")).write_bytes(_avro_bytes("string", [r.key for r in part]))
        if headers:
            schema = {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Header",
                    "fields": [{"name": "key", "type": "string"}, {"name": "value", "type": "string"}],
                },
            }
            data = [[{"key": k, "value": v} for k, v in r.headers] for r in part]
            (directory / (stem + ".headers.avro")).write_bytes(_avro_bytes(schema, data))
    return written
