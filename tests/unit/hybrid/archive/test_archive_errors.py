"""Bad archives give a clear ArchiveError naming the file (and the record where one is to blame); with
on_error="skip" they are logged and listed in status(), never dropped silently."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.archive import kafka_log, value_file_bytes, write_archive
from multicluster_source import KafkaArchiveSource, MultiClusterSourceError
from multicluster_source.exceptions import ConfigurationError
from multicluster_source.hybrid import ArchiveError


def open_reader(source: KafkaArchiveSource, parallelism: int = 1):
    return source.open_stage(parallelism=parallelism, start=None, restored=None, registry=None, work_dir=None)


def drain(reader) -> list[Any]:
    got: list[Any] = []
    try:
        while not reader.finished:
            got.extend(reader.poll(1.0, 1000))
    finally:
        reader.close()
    return got


def test_malformed_json_line_names_the_file_and_the_record(tmp_path: Path) -> None:
    files = write_archive(tmp_path, "orders", 0, kafka_log(30), flush_size=10)
    lines = files[1].read_bytes().splitlines(keepends=True)
    lines[3] = b'{"id": 3, "name": \n'
    files[1].write_bytes(b"".join(lines))
    with pytest.raises(ArchiveError, match=r"orders\+0\+0000000010\.json, record 4: malformed JSON") as info:
        drain(open_reader(KafkaArchiveSource({"east": str(tmp_path)})))
    assert info.value.path == str(files[1]) and info.value.line == 4
    assert isinstance(info.value, MultiClusterSourceError)
    reader = open_reader(KafkaArchiveSource({"east": str(tmp_path)}))
    with pytest.raises(ArchiveError):
        while not reader.finished:
            reader.poll(1.0, 1000)
    with pytest.raises(ArchiveError, match="record 4"):  # raised again, not an empty poll
        reader.poll(0.1, 10)
    reader.close()


@pytest.mark.parametrize("fmt", ["avro", "parquet"])
def test_truncated_avro_and_parquet_files_name_the_file(tmp_path: Path, fmt: str) -> None:
    files = write_archive(tmp_path, "orders", 0, kafka_log(30), fmt=fmt, flush_size=10)
    files[2].write_bytes(files[2].read_bytes()[:-40])
    with pytest.raises(ArchiveError, match=rf"(?i){re.escape(files[2].name)}.*malformed {fmt}"):
        drain(open_reader(KafkaArchiveSource({"east": str(tmp_path)}, format=fmt)))


def test_on_error_skip_logs_the_file_lists_it_and_reads_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = write_archive(tmp_path, "orders", 0, kafka_log(30), fmt="avro", flush_size=10)
    files[1].write_bytes(b"Obj\x01 not avro at all")
    reader = open_reader(KafkaArchiveSource({"east": str(tmp_path)}, format="avro", on_error="skip"))
    status = None
    with caplog.at_level(logging.WARNING):
        got: list[Any] = []
        while not reader.finished:
            got.extend(reader.poll(1.0, 100))
        status = reader.status()
        reader.close()
    assert [r.value["id"] for r in got] == list(range(10)) + list(range(20, 30))
    assert len(status["skipped"]) == 1 and files[1].name in status["skipped"][0]
    assert any(files[1].name in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_missing_partition_directory_is_named(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_archive(tmp_path, "orders", 0, kafka_log(10))
    write_archive(tmp_path, "orders", 2, kafka_log(10))
    with pytest.raises(ArchiveError, match=r"orders/partition=1: missing partition directory"):
        open_reader(KafkaArchiveSource({"east": str(tmp_path)}))
    with caplog.at_level(logging.WARNING):
        reader = open_reader(KafkaArchiveSource({"east": str(tmp_path)}, on_error="skip"))
        assert reader.status()["missing_partitions"] == [str(tmp_path / "orders" / "partition=1")]
        got = drain(reader)
    assert len(got) == 20
    assert any("partition=1" in r.getMessage() for r in caplog.records)


def test_a_root_that_does_not_exist_is_named(tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match="nope: does not exist"):
        open_reader(KafkaArchiveSource({"east": str(tmp_path / "nope")}))
    with pytest.raises(ArchiveError, match="nope: does not exist"):
        open_reader(KafkaArchiveSource({"east": str(tmp_path / "nope")}, topics=["orders"]))


def test_s3_files_that_overlap_are_named(tmp_path: Path) -> None:
    log = kafka_log(30)
    write_archive(tmp_path, "orders", 0, log, flush_size=10)
    # a file starting at offset 15 while the one from offset 10 holds 10 records
    directory = tmp_path / "orders" / "partition=0"
    (directory / "orders+0+0000000020.json").rename(directory / "orders+0+0000000015.json")
    with pytest.raises(
        ArchiveError,
        match=r"orders\+0\+0000000010\.json: holds 10 records from offset 10, so it "
        r"overlaps the next file, which starts at offset 15",
    ):
        drain(open_reader(KafkaArchiveSource({"east": str(tmp_path)})))


def test_hdfs_files_that_overlap_or_share_a_start_are_named_at_open(tmp_path: Path) -> None:
    log = kafka_log(30)
    write_archive(tmp_path, "orders", 0, log, layout="hdfs", flush_size=10)
    directory = tmp_path / "orders" / "partition=0"
    (directory / "orders+0+0000000010+0000000019.json").rename(
        directory / "orders+0+0000000009+0000000019.json"
    )
    with pytest.raises(ArchiveError, match=r"0000000009\+0000000019\.json: overlaps .*ends at offset 9"):
        open_reader(KafkaArchiveSource({"east": str(tmp_path)}))
    s3 = tmp_path / "s3"
    write_archive(s3, "orders", 0, log, flush_size=10)
    (s3 / "orders" / "partition=0" / "orders+0+00000000010.json").write_bytes(
        b"{}\n"
    )  # 11 digits, same start
    with pytest.raises(ArchiveError, match="start at offset 10"):
        open_reader(KafkaArchiveSource({"east": str(s3)}))


def test_offsets_out_of_order_in_the_offset_field_name_the_record(tmp_path: Path) -> None:
    log = kafka_log(20)
    files = write_archive(tmp_path, "orders", 0, log, flush_size=10, offset_field="__offset")
    swapped = list(log[10:20])
    swapped[4], swapped[5] = swapped[5], swapped[4]
    files[1].write_bytes(value_file_bytes(swapped, "jsonl", offset_field="__offset"))
    with pytest.raises(
        ArchiveError, match=r"0000000010\.json, record 6: offset 14 does not follow offset 15"
    ):
        drain(open_reader(KafkaArchiveSource({"east": str(tmp_path)}, offset_field="__offset")))


def test_a_record_without_the_offset_field_is_named(tmp_path: Path) -> None:
    files = write_archive(tmp_path, "orders", 0, kafka_log(10), flush_size=10)
    with pytest.raises(
        ArchiveError, match=rf"{re.escape(files[0].name)}, record 1: the record has no field '__offset'"
    ):
        drain(open_reader(KafkaArchiveSource({"east": str(tmp_path)}, offset_field="__offset")))
    parquet = tmp_path / "p"
    write_archive(parquet, "orders", 0, kafka_log(10), fmt="parquet")
    with pytest.raises(ArchiveError, match="has no column '__offset'"):
        drain(
            open_reader(KafkaArchiveSource({"east": str(parquet)}, format="parquet", offset_field="__offset"))
        )


def test_a_key_file_that_does_not_match_its_value_file_is_named(tmp_path: Path) -> None:
    write_archive(tmp_path, "orders", 0, kafka_log(20), flush_size=10, keys=True)
    directory = tmp_path / "orders" / "partition=0"
    (directory / "orders+0+0000000010.keys.avro").write_bytes(
        (directory / "orders+0+0000000000.keys.avro").read_bytes()[:0]
        or value_file_bytes(kafka_log(3), "avro")
    )
    with pytest.raises(ArchiveError, match=r"0000000010\.keys\.avro: holds 3 entries for the 10 records"):
        drain(open_reader(KafkaArchiveSource({"east": str(tmp_path)})))


def test_files_of_another_format_are_left_out_and_listed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_archive(tmp_path, "orders", 0, kafka_log(10))
    stray = tmp_path / "orders" / "partition=0" / "orders+0+0000000010.avro"
    stray.write_bytes(b"")
    (tmp_path / "orders" / "partition=0" / "+tmp").mkdir()
    with caplog.at_level(logging.WARNING):
        reader = open_reader(KafkaArchiveSource({"east": str(tmp_path)}))
    assert reader.status()["left_out"] == [str(stray)]
    assert len(drain(reader)) == 10
    assert any(stray.name in r.getMessage() for r in caplog.records)


def test_the_package_imports_without_the_archive_extras_and_names_the_extra_when_used(tmp_path: Path) -> None:
    code = f"""
import sys
for name in ("pyarrow", "fastavro", "fsspec", "pyiceberg"):
    sys.modules[name] = None
import multicluster_source
from multicluster_source import KafkaArchiveSource
from multicluster_source.exceptions import ConfigurationError
source = KafkaArchiveSource({{"east": {str(tmp_path)!r}}})
try:
    source.open_stage(parallelism=1, start=None, restored=None, registry=None, work_dir=None)
except ConfigurationError as e:
    print("ERROR", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'multicluster-kafka-source[archive]'" in out and "pyarrow" in out
    assert issubclass(ConfigurationError, ValueError)


def test_a_topic_asked_for_but_not_archived_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_archive(tmp_path, "orders", 0, kafka_log(10))
    with caplog.at_level(logging.WARNING):
        got = drain(open_reader(KafkaArchiveSource({"east": str(tmp_path)}, topics=["orders", "refunds"])))
    assert len(got) == 10
    assert any("holds no topic refunds" in r.getMessage() for r in caplog.records)
