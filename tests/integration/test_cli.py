"""The command line on real Kafka, run as a user runs it (``python -m multicluster_source`` in a subprocess):
``describe`` shows partitions, end offsets, a group's committed offsets and lag; ``consume`` dumps a bounded
read as JSON lines or raw values from where ``--from`` says, shows a progress bar, or follows new records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from harness.cluster import Cluster
from harness.scenario import cluster_md, stream
from multicluster_source.testing import write_metadata_file

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "multicluster_source", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
        check=False,
    )


def _metadata(tmp_path: Path, cluster: Cluster, *topics: str) -> str:
    return str(
        write_metadata_file(tmp_path / "streams.yaml", [stream("orders", cluster_md(cluster, *topics))])
    )


def _commit(cluster: Cluster, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = cluster.consumer(**{"group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def test_describe_shows_end_offsets_committed_offsets_and_lag(kafka_cluster: Cluster, tmp_path: Path) -> None:
    topic = kafka_cluster.create_topic("cli-describe", partitions=2)
    kafka_cluster.produce_n(topic, 30, partitions=2)  # 15 per partition
    _commit(kafka_cluster, "billing", topic, {0: 10})
    meta = _metadata(tmp_path, kafka_cluster, topic)

    done = cli("describe", "--metadata", meta, "--group", "billing", "--json")
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    parts = doc["streams"]["orders"]["clusters"][kafka_cluster.cluster_id]["topics"][topic]
    assert parts == [
        {"partition": 0, "start": 0, "end": 15, "committed": 10, "lag": 5},
        {"partition": 1, "start": 0, "end": 15, "committed": None, "lag": None},
    ]
    text = cli("describe", "--metadata", meta, "--group", "billing")
    assert text.returncode == 0, text.stderr
    assert (
        f"stream orders\n  cluster {kafka_cluster.cluster_id} ({kafka_cluster.bootstrap_servers})"
        in text.stdout
    )
    assert f"topic {topic}: 2 partition(s), lag 5" in text.stdout


def test_describe_of_an_unknown_stream_names_the_streams_there(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = kafka_cluster.create_topic("cli-unknown", partitions=1)
    done = cli("describe", "--metadata", _metadata(tmp_path, kafka_cluster, topic), "--stream", "payments")
    assert done.returncode == 2
    assert "unknown stream(s) payments (streams in the metadata: orders)" in done.stderr


def test_consume_dumps_a_bounded_read_as_json_lines_with_a_progress_bar(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = kafka_cluster.create_topic("cli-consume", partitions=3)
    sent = kafka_cluster.produce_n(topic, 3000, partitions=3)
    kafka_cluster.produce(topic, [b"\xff\xfe"], partition=0, key=b"k", headers={"h": b"v"})
    meta = _metadata(tmp_path, kafka_cluster, topic)

    done = cli("consume", "--metadata", meta, "--progress")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 3001
    assert sorted(r["value"] for r in lines if "value" in r) == sorted(v.decode() for _p, v in sent)
    binary = next(r for r in lines if "value_base64" in r)
    assert binary["value_base64"] == "//4=" and binary["key"] == "k"
    assert binary["headers"] == [{"name": "h", "value": "v"}]
    assert binary["cluster"] == kafka_cluster.cluster_id and binary["topic"] == topic
    assert {(r["partition"], r["offset"]) for r in lines} == {
        (p, o) for p in range(3) for o in range(1000 + (p == 0))
    }
    assert "3.00k/3.00k" in done.stderr and "rec/s" in done.stderr  # tqdm: done/total and the rate


def test_consume_raw_values_from_latest_committed_and_timestamp(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = kafka_cluster.create_topic("cli-from", partitions=1)
    kafka_cluster.produce(topic, [f"old-{i}".encode() for i in range(5)], partition=0)
    time.sleep(0.05)
    cut_ms = int(time.time() * 1000)
    time.sleep(0.05)
    kafka_cluster.produce(topic, [f"new-{i}".encode() for i in range(3)], partition=0)
    _commit(kafka_cluster, "ops", topic, {0: 6})
    meta = _metadata(tmp_path, kafka_cluster, topic)

    def values(*args: str) -> list[str]:
        done = cli("consume", "--metadata", meta, "--format", "value", *args)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    assert values("--max-records", "2") == ["old-0", "old-1"]
    assert values("--from", "latest") == []
    assert values("--from", "committed", "--group", "ops") == ["new-1", "new-2"]
    assert values("--from", "timestamp", "--timestamp", str(cut_ms)) == ["new-0", "new-1", "new-2"]
    refused = cli("consume", "--metadata", meta, "--from", "committed")
    assert refused.returncode == 2 and "--from committed needs --group" in refused.stderr


def test_consume_follow_prints_records_produced_later(kafka_cluster: Cluster, tmp_path: Path) -> None:
    topic = kafka_cluster.create_topic("cli-follow", partitions=1)
    meta = _metadata(tmp_path, kafka_cluster, topic)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "multicluster_source",
            "consume",
            "--metadata",
            meta,
            "--follow",
            "--format",
            "value",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=ROOT,
    ) as proc:
        try:
            time.sleep(2.0)  # the reader starts and reaches the (empty) end; it does not stop there
            kafka_cluster.produce(topic, [b"a", b"b"], partition=0)
            assert proc.stdout is not None
            got = [proc.stdout.readline().strip(), proc.stdout.readline().strip()]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert got == ["a", "b"]
    assert proc.returncode == 0  # SIGTERM stops it like Ctrl-C: clients closed, a clean exit
