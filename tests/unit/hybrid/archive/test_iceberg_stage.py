"""KafkaIcebergSource on tables written as Iceberg's Kafka Connect sink writes them (its
KafkaMetadataTransform's columns), with pyiceberg's SQL catalog on SQLite."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyiceberg")
pa = pytest.importorskip("pyarrow")

from pyiceberg.catalog.sql import SqlCatalog  # noqa: E402

from harness.archive import LogRecord, kafka_log  # noqa: E402
from multicluster_source import SourceRecord  # noqa: E402
from multicluster_source.hybrid import (  # noqa: E402
    ArchiveError,
    KafkaIcebergSource,
    StageHandover,
)


def catalog(tmp_path: Path) -> Any:
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    cat = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{warehouse}")
    cat.create_namespace("kafka")
    return cat


def rows(topic: str, partition: int, log: list[LogRecord], *, with_ts: bool = True) -> Any:
    columns: dict[str, Any] = {
        "id": pa.array([r.value["id"] for r in log], pa.int64()),
        "name": pa.array([r.value["name"] for r in log], pa.string()),
        "_kafka_metadata_topic": pa.array([topic] * len(log), pa.string()),
        "_kafka_metadata_partition": pa.array([partition] * len(log), pa.int32()),
        "_kafka_metadata_offset": pa.array([r.offset for r in log], pa.int64()),
    }
    if with_ts:
        columns["_kafka_metadata_timestamp"] = pa.array([r.timestamp for r in log], pa.int64())
    return pa.table(columns)


def open_reader(source: KafkaIcebergSource, *, restored=None, start=None, parallelism: int = 2):
    return source.open_stage(
        parallelism=parallelism, start=start, restored=restored, registry=None, work_dir=None
    )


def drain(reader, max_records: int = 1000) -> list[SourceRecord]:
    got: list[SourceRecord] = []
    while not reader.finished:
        got.extend(reader.poll(1.0, max_records))
    return got


def split_of(r: SourceRecord) -> str:
    return f"{r.cluster_id}/{r.topic}/{r.partition}"


def test_every_split_in_offset_order_with_exact_offsets_and_handover(tmp_path: Path) -> None:
    cat = catalog(tmp_path)
    logs = {
        ("orders", 0): kafka_log(120, gaps="compacted"),
        ("orders", 1): kafka_log(70, gaps="transactional", seed=2),
        ("payments", 0): kafka_log(30, seed=3),
    }
    first = rows("orders", 0, logs[("orders", 0)])
    table = cat.create_table("kafka.east", schema=first.schema)
    # appended in several commits and out of order, as concurrent sink workers would
    table.append(rows("orders", 1, logs[("orders", 1)][35:]))
    table.append(first)
    table.append(rows("orders", 1, logs[("orders", 1)][:35]))
    table.append(rows("payments", 0, logs[("payments", 0)]))
    west = cat.create_table("kafka.west", schema=first.schema)
    west.append(rows("orders", 0, kafka_log(10, seed=9)))
    reader = open_reader(KafkaIcebergSource({"east": table, "west": [west]}))
    assert any(t.name.startswith("mcs-iceberg-") for t in threading.enumerate())
    got = drain(reader, max_records=50)
    by: dict[str, list[SourceRecord]] = {}
    for r in got:
        by.setdefault(split_of(r), []).append(r)
    for (topic, partition), log in logs.items():
        records = by[f"east/{topic}/{partition}"]
        assert [r.offset for r in records] == [r.offset for r in log]
        assert [r.timestamp for r in records] == [r.timestamp for r in log]
        assert [dict(r.value) for r in records] == [
            {"id": r.value["id"], "name": r.value["name"]} for r in log
        ]
    assert len(by["west/orders/0"]) == 10
    handover = reader.handover()
    assert handover.positions["east/orders/0"] == logs[("orders", 0)][-1].offset + 1
    assert set(handover.modes.values()) == {"exact"}
    assert reader.status()["splits"]["east/orders/1"]["file"] == "kafka.east"
    reader.close()
    assert not any(t.name.startswith("mcs-iceberg-") for t in threading.enumerate())


def test_restore_goes_on_after_the_last_record_at_the_pinned_snapshot(tmp_path: Path) -> None:
    cat = catalog(tmp_path)
    log = kafka_log(200, gaps="compacted")
    table = cat.create_table("kafka.east", schema=rows("orders", 0, log).schema)
    table.append(rows("orders", 0, log[:150]))
    source = KafkaIcebergSource({"east": table})
    reader = open_reader(source, parallelism=1)
    first: list[SourceRecord] = []
    while len(first) < 60:
        first.extend(reader.poll(1.0, 25))
    snapshot = reader.snapshot()
    reader.close()
    table.append(rows("orders", 0, log[150:]))  # written after the stage pinned its snapshot
    again = open_reader(source, restored=snapshot)
    rest = drain(again)
    again.close()
    assert [r.offset for r in first + rest] == [r.offset for r in log[:150]]
    assert again.status()["splits"]["east/orders/0"]["position"] == 150


def test_start_handover_and_hand_written_v1_state_read_from_an_offset(tmp_path: Path) -> None:
    cat = catalog(tmp_path)
    log = kafka_log(50, gaps="transactional")
    table = cat.create_table("kafka.east", schema=rows("orders", 0, log).schema)
    table.append(rows("orders", 0, log, with_ts=True))
    source = KafkaIcebergSource({"east": table})
    for kwargs in (
        {"start": StageHandover({"east/orders/0": log[20].offset})},
        {"restored": {"v": 1, "positions": {"east/orders/0": log[20].offset}}},
    ):
        reader = open_reader(source, **kwargs)
        assert [r.offset for r in drain(reader)] == [r.offset for r in log[20:]]
        reader.close()


def test_duplicate_offsets_and_missing_columns_are_named(tmp_path: Path) -> None:
    cat = catalog(tmp_path)
    log = kafka_log(20)
    table = cat.create_table("kafka.east", schema=rows("orders", 0, log).schema)
    table.append(rows("orders", 0, log))
    table.append(rows("orders", 0, log[5:8]))
    reader = open_reader(KafkaIcebergSource({"east": table}))
    with pytest.raises(
        ArchiveError,
        match=r"kafka.east: east/orders/0 has 3 rows with an offset of another row \(first: offset 5\)",
    ):
        drain(reader)
    reader.close()
    reader = open_reader(KafkaIcebergSource({"east": table}, on_error="skip"))
    assert [r.offset for r in drain(reader)] == list(range(20))
    assert len(reader.status()["duplicates"]) == 1
    reader.close()
    plain = cat.create_table("kafka.plain", schema=pa.schema([("id", pa.int64())]))
    with pytest.raises(
        ArchiveError, match=r"kafka\.plain: has no Kafka metadata column _kafka_metadata_topic"
    ):
        open_reader(KafkaIcebergSource({"east": plain}))


def test_nested_metadata_as_the_transform_writes_it_with_nested_true(tmp_path: Path) -> None:
    cat = catalog(tmp_path)
    log = kafka_log(30, gaps="compacted")
    meta = pa.struct(
        [("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.int64())]
    )
    data = pa.table(
        {
            "id": pa.array([r.value["id"] for r in log], pa.int64()),
            "_kafka_metadata": pa.array(
                [
                    {"topic": "orders", "partition": 1, "offset": r.offset, "timestamp": r.timestamp}
                    for r in log
                ],
                meta,
            ),
        }
    )
    table = cat.create_table("kafka.nested", schema=data.schema)
    table.append(data.slice(15))
    table.append(data.slice(0, 15))
    reader = open_reader(KafkaIcebergSource({"east": table}, nested=True))
    got = drain(reader)
    reader.close()
    assert [r.offset for r in got] == [r.offset for r in log]
    assert [r.timestamp for r in got] == [r.timestamp for r in log]
    assert dict(got[0].value) == {"id": 0} and got[0].split_id == "east/orders/1"
    with pytest.raises(ArchiveError, match=r"has no Kafka metadata column _kafka_metadata_topic"):
        open_reader(KafkaIcebergSource({"east": table}))  # flat columns asked for, nested ones written
