"""The docs pages' examples that need a broker, run as written (markers ``tested: ...test_docs_examples.py``).

Each page's placeholders are mapped onto the harness: ``kafka-east:9092`` is the test cluster's address,
``orders``, ``refunds`` and ``_stream_metadata`` are unique topics of the test; outputs are compared after
mapping back. ``streams.yaml`` is written the way the page describes it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from docblocks import argv_of, marked_block, run_example, run_python, session
from harness.cluster import Cluster, unique_name
from harness.eos import read_output
from multicluster_source import ClusterMetadata, KafkaStream
from multicluster_source.testing import write_metadata_file

pytestmark = pytest.mark.integration


def _orders(cluster: Cluster, tmp_path: Path) -> str:
    topic = cluster.create_topic("orders", partitions=1)
    cluster.produce(topic, [b"order-0", b"order-1", b"order-2"], partition=0)
    md = ClusterMetadata("east", cluster.bootstrap_servers, frozenset({topic}))
    write_metadata_file(tmp_path / "streams.yaml", [KafkaStream("orders", {"east": md})])
    return topic


def test_the_asyncio_example_reads_the_stream(kafka_cluster: Cluster, tmp_path: Path) -> None:
    _orders(kafka_cluster, tmp_path)
    done = run_python(marked_block("asyncio").code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "3 records, first order-0\n"
    assert (tmp_path / "ckpt").is_dir()


def test_the_first_metadata_change_adds_a_topic_to_the_running_source(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    orders = kafka_cluster.create_topic("orders", partitions=1)
    refunds = kafka_cluster.create_topic("refunds", partitions=1)
    kafka_cluster.produce(orders, [b"order-0"], partition=0)
    kafka_cluster.produce(refunds, [b"refund-0"], partition=0)
    code = marked_block("first-change").code
    # Both topics hold a record from the start: the example must only see refunds after adding it.
    for doc_value, test_value in {
        "kafka-east:9092": kafka_cluster.bootstrap_servers,
        'topics="orders"': f'topics="{orders}"',
        'topics="orders, refunds"': f'topics="{orders}, {refunds}"',
        '"refunds" not in seen': f'"{refunds}" not in seen',
    }.items():
        assert doc_value in code, doc_value
        code = code.replace(doc_value, test_value)
    done = run_python(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.replace(refunds, "refunds").replace(orders, "orders") == "['orders', 'refunds']\n"


def test_the_push_job_on_worker_processes_handles_every_record(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = _orders(kafka_cluster, tmp_path)
    # a script file, not -c: spawned workers import the handler from the main module's file
    (tmp_path / "job.py").write_text(marked_block("push-processes").code)
    done = run_example([sys.executable, "job.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.replace(topic, "orders").splitlines()
    assert lines == [
        "east orders 0 order-0",
        "east orders 1 order-1",
        "east orders 2 order-2",
        "3 records, finished: True",
    ]
    again = run_example([sys.executable, "job.py"], tmp_path)  # restored from the final checkpoint
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == ["0 records, finished: True"]


def test_the_metadata_topic_session_prints_what_the_guide_shows(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = _orders(kafka_cluster, tmp_path)
    metadata_topic = unique_name("_stream_metadata")
    consumer = kafka_cluster.consumer(**{"group.id": "billing", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    consumer.close()
    to_test = {"kafka-east:9092": kafka_cluster.bootstrap_servers, "_stream_metadata": metadata_topic}
    to_docs = sorted(
        [
            (kafka_cluster.bootstrap_servers, "kafka-east:9092"),
            (metadata_topic, "_stream_metadata"),
            (topic, "orders"),
        ],
        key=lambda pair: -len(pair[0]),
    )

    commands = session(marked_block("metadata-topic-session"))
    assert len(commands) == 4
    for command, expected in commands:
        for doc_value, test_value in to_test.items():
            command = command.replace(doc_value, test_value)
        done = run_example(argv_of(command), tmp_path)
        assert done.returncode == 0, f"{command}\n{done.stderr}"
        got = done.stdout
        for test_value, doc_value in to_docs:
            got = got.replace(test_value, doc_value)
        assert got.splitlines() == expected, f"{command}\n{done.stderr}"

    code = marked_block("metadata-topic-code").code
    for doc_value, test_value in to_test.items():
        code = code.replace(doc_value, test_value)
    done = run_python(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['orders']", "set()"]


def _billing_twice(cluster: Cluster, tmp_path: Path, block: str, job: str, more: dict[str, str]) -> None:
    """The guide's billing job (block ``block``), twice: 3 results, then none (it starts after what the
    first run committed); the output holds each total once."""
    _orders(cluster, tmp_path)
    totals = cluster.create_topic("billing.totals", partitions=1)
    code = marked_block(block).code
    for doc_value, test_value in {
        "kafka-central:9092": cluster.bootstrap_servers,
        '"billing.totals"': f'"{totals}"',
        '"billing.positions"': f'"{job}.positions"',
        'transactional_id="billing"': f'transactional_id="{job}"',
        **more,
    }.items():
        assert doc_value in code, doc_value
        code = code.replace(doc_value, test_value)
    first = run_python(code, tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "3 results\n"
    again = run_python(code, tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout == "0 results\n"
    assert sorted(read_output(cluster, totals)) == [b"total:order-0", b"total:order-1", b"total:order-2"]


def test_the_exactly_once_job_writes_each_result_once(kafka_cluster: Cluster, tmp_path: Path) -> None:
    """The guide's job, twice: the second run starts after what the first committed and writes nothing."""
    _billing_twice(
        kafka_cluster, tmp_path, "exactly-once", unique_name("billing"), {"timeout=5.0": "timeout=3.0"}
    )


def test_the_push_exactly_once_job_writes_each_result_once(kafka_cluster: Cluster, tmp_path: Path) -> None:
    """The guide's push job, twice: two workers commit each result once; the second run writes nothing."""
    _billing_twice(kafka_cluster, tmp_path, "exactly-once-run", unique_name("billing-run"), {})
