"""The README's asyncio example and command-line session, run as written against a real broker.

The README's placeholders are mapped onto the harness: ``kafka-east:9092`` is the test cluster's address,
``orders`` and ``_stream_metadata`` are unique topics of this test; the outputs are compared after mapping back.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from harness.cluster import Cluster, unique_name
from multicluster_source import ClusterMetadata, KafkaStream
from multicluster_source.testing import write_metadata_file

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _block_after(marker: str, start: int = 0) -> tuple[str, int]:
    at = README.index(marker, start)
    match = re.compile(r"```[a-z]*\n(.*?)```", re.S).search(README, at)
    assert match is not None, f"no code block after {marker!r}"
    return match.group(1), match.end()


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=cwd, check=False)


def _orders(cluster: Cluster, tmp_path: Path) -> str:
    topic = cluster.create_topic("orders", partitions=1)
    cluster.produce(topic, [b"order-0", b"order-1", b"order-2"], partition=0)
    md = ClusterMetadata("east", cluster.bootstrap_servers, frozenset({topic}))
    write_metadata_file(tmp_path / "streams.yaml", [KafkaStream("orders", {"east": md})])
    return topic


def test_the_asyncio_example_reads_the_stream(kafka_cluster: Cluster, tmp_path: Path) -> None:
    _orders(kafka_cluster, tmp_path)
    code, _ = _block_after("<!-- tested: tests/integration/test_readme.py (asyncio) -->")
    done = _run([sys.executable, "-c", code], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "3 records, first order-0\n"
    assert (tmp_path / "ckpt").is_dir()


def test_the_command_line_session_prints_what_the_readme_shows(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = _orders(kafka_cluster, tmp_path)
    metadata_topic = unique_name("_stream_metadata")
    consumer = kafka_cluster.consumer(**{"group.id": "billing", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    consumer.close()
    to_test = {"kafka-east:9092": kafka_cluster.bootstrap_servers, "_stream_metadata": metadata_topic}
    to_readme = sorted(
        [
            (kafka_cluster.bootstrap_servers, "kafka-east:9092"),
            (metadata_topic, "_stream_metadata"),
            (topic, "orders"),
        ],
        key=lambda pair: -len(pair[0]),
    )

    session, end = _block_after("<!-- tested: tests/integration/test_readme.py (cli) -->")
    commands: list[tuple[str, list[str]]] = []
    for line in session.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        else:
            commands[-1][1].append(line)
    assert len(commands) == 4
    for command, expected in commands:
        for readme_value, test_value in to_test.items():
            command = command.replace(readme_value, test_value)
        argv = shlex.split(command)
        argv = (
            [sys.executable, "-m", "multicluster_source", *argv[1:]]
            if argv[0] == "multicluster-source"
            else [
                sys.executable,
                *argv[1:],
            ]
        )
        done = _run(argv, tmp_path)
        assert done.returncode == 0, f"{command}\n{done.stderr}"
        got = done.stdout
        for test_value, readme_value in to_readme:
            got = got.replace(test_value, readme_value)
        assert got.splitlines() == expected, f"{command}\n{done.stderr}"

    code, _ = _block_after("In code, the same topic is a metadata service like any other:", end)
    for readme_value, test_value in to_test.items():
        code = code.replace(readme_value, test_value)
    done = _run([sys.executable, "-c", code], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['orders']", "set()"]
