"""KafkaArchiveSource on archives written in exactly the Kafka Connect storage sinks' layouts and formats:
records, keys, headers, offsets (exact and estimated), handover, restore, threads."""

from __future__ import annotations

import pickle
import threading
from pathlib import Path
from typing import Any

import pytest

from harness.archive import LogRecord, kafka_log, write_archive
from multicluster_source import KafkaArchiveSource, SourceRecord
from multicluster_source.exceptions import CheckpointError, ConfigurationError
from multicluster_source.hybrid import StageHandover

FORMATS = ["jsonl", "avro", "parquet"]


def open_reader(source: KafkaArchiveSource, *, parallelism: int = 2, restored=None, start=None):
    return source.open_stage(
        parallelism=parallelism, start=start, restored=restored, registry=None, work_dir=None
    )


def drain(reader, max_records: int = 1000) -> list[SourceRecord]:
    got: list[SourceRecord] = []
    while not reader.finished:
        got.extend(reader.poll(1.0, max_records))
    assert reader.poll(0.01, 10) == []
    return got


def plain(value: Any) -> Any:
    return dict(value) if hasattr(value, "keys") else value


def by_split(records: list[SourceRecord]) -> dict[str, list[SourceRecord]]:
    out: dict[str, list[SourceRecord]] = {}
    for r in records:
        out.setdefault(f"{r.cluster_id}/{r.topic}/{r.partition}", []).append(r)
    return out


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("layout", ["s3", "hdfs"])
@pytest.mark.parametrize("gaps", ["none", "compacted", "transactional"])
def test_every_record_in_order_with_keys_headers_and_a_handover_that_never_skips(
    tmp_path: Path, fmt: str, layout: str, gaps: Any
) -> None:
    log = kafka_log(230, gaps=gaps, headers=True)
    write_archive(tmp_path, "orders", 0, log, fmt=fmt, layout=layout, flush_size=50, keys=True, headers=True)
    reader = open_reader(KafkaArchiveSource({"east": str(tmp_path)}, format=fmt))
    try:
        got = drain(reader, max_records=37)
        assert [plain(r.value) for r in got] == [r.value for r in log]
        assert [r.key for r in got] == [r.key.encode() for r in log]
        assert [r.headers for r in got] == [[(k, v.encode()) for k, v in r.headers] for r in log]
        assert all(r.cluster_id == "east" and r.topic == "orders" and r.partition == 0 for r in got)
        # estimated offsets are never above the real ones, and they increase
        assert all(g.offset <= r.offset for g, r in zip(got, log, strict=True))
        assert [g.offset for g in got] == sorted({g.offset for g in got})
        handover = reader.handover()
        true_next = log[-1].offset + 1
        if layout == "hdfs":  # the file name gives the last record's offset
            assert handover.positions == {"east/orders/0": true_next}
            assert handover.modes == {"east/orders/0": "exact"}
        else:
            assert handover.positions["east/orders/0"] <= true_next
            assert handover.modes == {"east/orders/0": "estimated"}
            if gaps == "none":
                assert handover.positions["east/orders/0"] == true_next
    finally:
        reader.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_offset_and_timestamp_fields_give_exact_offsets_across_gaps(tmp_path: Path, fmt: str) -> None:
    log = kafka_log(120, gaps="compacted")
    write_archive(
        tmp_path, "orders", 0, log, fmt=fmt, flush_size=40, offset_field="__offset", timestamp_field="__ts"
    )
    source = KafkaArchiveSource(
        {"east": str(tmp_path)}, format=fmt, offset_field="__offset", timestamp_field="__ts"
    )
    reader = open_reader(source)
    try:
        got = drain(reader)
        assert [r.offset for r in got] == [r.offset for r in log]
        assert [r.timestamp for r in got] == [r.timestamp for r in log]
        assert reader.handover() == StageHandover(
            {"east/orders/0": log[-1].offset + 1}, {"east/orders/0": "exact"}, log[-1].timestamp
        )
        assert reader.watermark == log[-1].timestamp
        assert plain(got[0].value)["__offset"] == log[0].offset  # the archived value, as archived
    finally:
        reader.close()


def test_two_clusters_many_partitions_read_by_named_reader_threads_joined_on_close(tmp_path: Path) -> None:
    logs: dict[str, list[LogRecord]] = {}
    for cluster in ("east", "west"):
        for topic in ("orders", "payments"):
            for p in range(3):
                log = kafka_log(60 + p, start=1000 * p, seed=p)
                write_archive(tmp_path / cluster, topic, p, log, fmt="parquet", flush_size=25)
                logs[f"{cluster}/{topic}/{p}"] = log
    source = KafkaArchiveSource(
        {"east": str(tmp_path / "east"), "west": str(tmp_path / "west")},
        format="parquet",
        topics=["orders", "payments"],
    )
    reader = open_reader(source, parallelism=3)
    names = {t.name for t in threading.enumerate()}
    assert {"mcs-archive-0", "mcs-archive-1", "mcs-archive-2"} <= names
    got = by_split(drain(reader))
    assert {s: [r.offset for r in rs] for s, rs in got.items()} == {
        s: [r.offset for r in log] for s, log in logs.items()
    }
    status = reader.status()
    assert status["files"] == sum(len(range(0, len(log), 25)) for log in logs.values())
    split = status["splits"]["west/payments/2"]
    assert split["archived"] and split["done"] and split["position"] == 62 - 50
    assert split["file"] == "payments+2+0000002050.snappy.parquet"
    reader.close()
    reader.close()  # idempotent
    assert not any(t.name.startswith("mcs-archive-") for t in threading.enumerate())


def test_close_while_readers_are_blocked_on_a_full_queue_stops_and_joins_them(tmp_path: Path) -> None:
    for p in range(4):
        write_archive(tmp_path, "orders", p, kafka_log(400, seed=p), fmt="jsonl", flush_size=10)
    reader = open_reader(KafkaArchiveSource({"east": str(tmp_path)}), parallelism=2)
    assert reader.poll(1.0, 5)
    reader.close()
    assert not any(t.name.startswith("mcs-archive-") for t in threading.enumerate())


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("offset_field", [None, "__offset"])
def test_restore_mid_archive_goes_on_right_after_the_last_returned_record(
    tmp_path: Path, fmt: str, offset_field: str | None
) -> None:
    log = kafka_log(300, gaps="transactional")
    write_archive(tmp_path, "orders", 0, log, fmt=fmt, flush_size=70, offset_field=offset_field, keys=True)
    write_archive(
        tmp_path,
        "orders",
        1,
        kafka_log(90, seed=3),
        fmt=fmt,
        flush_size=70,
        offset_field=offset_field,
        keys=True,
    )
    source = KafkaArchiveSource({"east": str(tmp_path)}, format=fmt, offset_field=offset_field)
    reader = open_reader(source)
    first: list[SourceRecord] = []
    while len(first) < 150:
        first.extend(reader.poll(1.0, 33))
    snapshot = reader.snapshot()
    positions = reader.positions()
    reader.close()
    assert snapshot["v"] == 2
    again = open_reader(source, restored=snapshot)
    rest = drain(again)
    again.close()
    everything = by_split(first + rest)
    assert [r.offset for r in everything["east/orders/0"]] == [
        r.offset if offset_field else g.offset for r, g in zip(log, everything["east/orders/0"], strict=True)
    ]
    assert len(first) + len(rest) == 390  # nothing twice, nothing skipped
    for split, next_offset in positions.items():
        done_before = [r for r in first if f"{r.cluster_id}/{r.topic}/{r.partition}" == split]
        assert done_before[-1].offset + 1 == next_offset


def test_a_hand_written_version_1_snapshot_goes_on_from_its_offsets(tmp_path: Path) -> None:
    log = kafka_log(100, gaps="compacted")
    write_archive(tmp_path, "orders", 0, log, fmt="jsonl", flush_size=20, offset_field="__offset")
    write_archive(tmp_path, "orders", 1, kafka_log(40), fmt="jsonl", flush_size=20, offset_field="__offset")
    source = KafkaArchiveSource({"east": str(tmp_path)}, offset_field="__offset")
    resume = log[57].offset
    old = {"v": 1, "positions": {"east/orders/0": resume}}  # written by hand: the offset-only form
    reader = open_reader(source, restored=old)
    got = by_split(drain(reader))
    reader.close()
    assert [r.offset for r in got["east/orders/0"]] == [r.offset for r in log[57:]]
    assert len(got["east/orders/1"]) == 40


def test_a_start_handover_without_exact_offsets_repeats_records_but_never_skips(tmp_path: Path) -> None:
    log = kafka_log(100, gaps="compacted")
    write_archive(tmp_path, "orders", 0, log, fmt="avro", flush_size=20)
    start = StageHandover({"east/orders/0": log[57].offset}, {"east/orders/0": "exact"})
    reader = open_reader(KafkaArchiveSource({"east": str(tmp_path)}, format="avro"), start=start)
    got = drain(reader)
    reader.close()
    values = [r.value for r in got]
    assert values[-43:] == [r.value for r in log[57:]]  # every record from the position on
    assert len(values) < 100  # files wholly before the position were not read


def test_unknown_snapshot_version_and_a_vanished_file_are_checkpoint_errors(tmp_path: Path) -> None:
    paths = write_archive(tmp_path, "orders", 0, kafka_log(40), flush_size=20)
    source = KafkaArchiveSource({"east": str(tmp_path)})
    with pytest.raises(CheckpointError, match="version 9"):
        open_reader(source, restored={"v": 9})
    snapshot = {
        "v": 2,
        "splits": {
            "east/orders/0": {
                "file": "orders+0+0000000099.json",
                "record": 3,
                "next_offset": 103,
                "mode": "estimated",
            }
        },
    }
    reader = open_reader(source, restored=snapshot)
    with pytest.raises(CheckpointError, match=r"orders\+0\+0000000099\.json"):
        drain(reader)
    reader.close()
    assert paths


def test_fsspec_memory_filesystem(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    log = kafka_log(50)
    write_archive(tmp_path, "orders", 0, log, fmt="parquet", flush_size=20, keys=True)
    memory = fsspec.filesystem("memory")
    for path in tmp_path.rglob("*"):
        if path.is_file():
            memory.pipe(f"/archive-test/{path.relative_to(tmp_path)}", path.read_bytes())
    reader = open_reader(KafkaArchiveSource({"east": "memory://archive-test"}, format="parquet"))
    try:
        got = drain(reader)
        assert [plain(r.value) for r in got] == [r.value for r in log]
        assert got[-1].key == log[-1].key.encode()
    finally:
        reader.close()
        memory.rm("/archive-test", recursive=True)


def test_records_and_rows_behave_as_source_records_and_dicts(tmp_path: Path) -> None:
    log = kafka_log(5)
    write_archive(tmp_path, "orders", 0, log, fmt="parquet", keys=True)
    reader = open_reader(KafkaArchiveSource({"east": str(tmp_path)}, format="parquet"))
    got = drain(reader)
    batches = []
    reader.close()
    record = got[0]
    assert isinstance(record, SourceRecord)
    assert record.split_id == "east/orders/0"
    assert record.value == log[0].value and log[0].value == record.value
    assert dict(record.value) == log[0].value and record.value["name"] == "n0" and "id" in record.value
    assert record.value.get("nope", 1) == 1 and len(record.value) == 3
    with pytest.raises(KeyError):
        record.value["nope"]
    copy = pickle.loads(pickle.dumps(record))
    assert type(copy) is SourceRecord and copy == record and tuple(copy) == tuple(record)
    assert type(copy.value) is dict
    same = SourceRecord("east", "orders", 0, 0, None, b"k0", log[0].value, None)
    assert same == record and record == same
    # poll_batches hands the same records over as confluent_kafka messages
    reader = open_reader(KafkaArchiveSource({"east": str(tmp_path)}, format="parquet"))
    while not reader.finished:
        batches.extend(reader.poll_batches(1.0, 100))
    reader.close()
    messages = [m for b in batches for m in b.messages]
    assert [m.offset() for m in messages] == [0, 1, 2, 3, 4]
    assert batches[0].cluster_id == "east" and messages[0].key() == b"k0"


def test_deserializer_topics_and_configuration_errors(tmp_path: Path) -> None:
    write_archive(tmp_path, "orders", 0, kafka_log(10), flush_size=5)
    write_archive(tmp_path, "other", 0, kafka_log(10), flush_size=5)
    reader = open_reader(
        KafkaArchiveSource({"east": str(tmp_path)}, topics=["orders"], deserializer=lambda v: v["id"])
    )
    got = drain(reader)
    reader.close()
    assert [r.value for r in got] == list(range(10)) and {r.topic for r in got} == {"orders"}
    with pytest.raises(ConfigurationError, match="csv"):
        KafkaArchiveSource({"east": str(tmp_path)}, format="csv")
    with pytest.raises(ConfigurationError, match="root"):
        KafkaArchiveSource({})
    with pytest.raises(ConfigurationError, match="on_error"):
        KafkaArchiveSource({"east": str(tmp_path)}, on_error="ignore")
    assert KafkaArchiveSource({"east": str(tmp_path)}).bounded


def test_positions_handed_over_by_a_previous_stage_are_carried_on(tmp_path: Path) -> None:
    log = kafka_log(40)
    write_archive(tmp_path, "orders", 0, log, flush_size=20, offset_field="__offset")
    write_archive(tmp_path, "orders", 1, log, flush_size=20, offset_field="__offset")
    start = StageHandover(
        {"east/orders/0": 10, "east/orders/1": 500, "east/other/0": 7},
        {"east/orders/0": "exact", "east/orders/1": "exact", "east/other/0": "estimated"},
    )
    reader = open_reader(KafkaArchiveSource({"east": str(tmp_path)}, offset_field="__offset"), start=start)
    got = by_split(drain(reader))
    handover = reader.handover()
    reader.close()
    assert [r.offset for r in got["east/orders/0"]] == list(range(10, 40))
    assert "east/orders/1" not in got  # everything archived is before 500
    assert handover.positions == {"east/orders/0": 40, "east/orders/1": 500, "east/other/0": 7}
    assert handover.modes["east/other/0"] == "estimated"
    again = open_reader(
        KafkaArchiveSource({"east": str(tmp_path)}, offset_field="__offset"),
        start=start,
        restored=reader.snapshot(),
    )
    assert drain(again) == [] and again.handover() == handover
    again.close()


def test_key_and_header_files_in_parquet_and_json_as_the_sinks_write_them(tmp_path: Path) -> None:
    import json as jsonlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    log = kafka_log(6, headers=True)
    files = write_archive(tmp_path, "orders", 0, log, fmt="parquet")
    stem = str(files[0])[: -len(".snappy.parquet")]
    # keys.format.class=ParquetFormat: the key in a struct field "key"; headers in a field "headers"
    pq.write_table(pa.table({"key": [r.key for r in log]}), stem + ".keys.snappy.parquet")
    headers = [[{"key": k, "value": v} for k, v in r.headers] for r in log]
    pq.write_table(pa.table({"headers": headers}), stem + ".headers.snappy.parquet")
    reader = open_reader(KafkaArchiveSource({"east": str(tmp_path)}, format="parquet"))
    got = drain(reader)
    reader.close()
    assert [r.key for r in got] == [r.key.encode() for r in log]
    assert [r.headers for r in got] == [[(k, v.encode()) for k, v in r.headers] for r in log]
    # keys.format.class=JsonFormat: one JSON key per line; a struct key becomes compact JSON bytes
    json_root = tmp_path / "json"
    files = write_archive(json_root, "orders", 0, log)
    keys = b"".join(jsonlib.dumps({"id": r.offset, "k": r.key}).encode() + b"\n" for r in log)
    Path(str(files[0])[: -len(".json")] + ".keys.json").write_bytes(keys)
    reader = open_reader(KafkaArchiveSource({"east": str(json_root)}))
    got = drain(reader)
    reader.close()
    assert got[2].key == b'{"id":2,"k":"k2"}'


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_poll_columns_hands_out_columns_with_the_same_positions(tmp_path: Path, fmt: str) -> None:
    log = kafka_log(50, gaps="compacted")
    write_archive(tmp_path, "orders", 0, log, fmt=fmt, flush_size=20, offset_field="__offset", keys=True)
    source = KafkaArchiveSource({"east": str(tmp_path)}, format=fmt, offset_field="__offset")
    reader = open_reader(source)
    parts = reader.poll_columns(1.0, 15)
    assert sum(map(len, parts)) == 15 and parts[0].split_id == "east/orders/0"
    assert list(parts[0].offsets) == [r.offset for r in log[:15]]
    assert list(parts[0].keys) == [r.key.encode() for r in log[:15]]
    if fmt == "parquet":
        assert parts[0].values is None and parts[0].batch.column("id").to_pylist() == list(range(15))
    else:
        assert parts[0].batch is None and [v["id"] for v in parts[0].values] == list(range(15))
    assert reader.positions() == {"east/orders/0": log[14].offset + 1}
    rest = drain(reader)  # records go on right after the columns
    reader.close()
    assert [r.offset for r in rest] == [r.offset for r in log[15:]]


def test_json_values_in_the_converters_schema_envelope_are_unwrapped(tmp_path: Path) -> None:
    import json as jsonlib

    directory = tmp_path / "orders" / "partition=0"
    directory.mkdir(parents=True)
    lines = [{"schema": {"type": "struct"}, "payload": {"id": i, "__offset": 5 + 2 * i}} for i in range(3)]
    (directory / "orders+0+0000000005.json").write_text("".join(jsonlib.dumps(v) + "\n" for v in lines))
    reader = open_reader(KafkaArchiveSource({"east": str(tmp_path)}, offset_field="__offset"))
    got = drain(reader)
    reader.close()
    assert [(r.value["id"], r.offset) for r in got] == [(0, 5), (1, 7), (2, 9)]
