"""Exactly once from two source clusters into a sink cluster (API.md section 11), on real Apache Kafka.

Each test reads topics on ``east`` and ``west`` and writes one result per input record to a topic on
``central`` through an :class:`ExactlyOnceKafkaSink`; a ``read_committed`` consumer of the output is what a
user would check: every input's result exactly once.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from harness.cluster import Cluster
from harness.eos import read_output
from harness.scenario import builder, cluster_md, stream
from multicluster_source import (
    ConfigurationError,
    ExactlyOnceKafkaSink,
    FileMetadataService,
    ProducerFencedError,
)
from multicluster_source.testing import write_metadata_file

pytestmark = pytest.mark.integration


def results_of(values: Iterable[bytes]) -> Counter[str]:
    """Result value -> how many times it was written (each result is ``out:<input value>``)."""
    return Counter(v.decode() for v in values)


def two_cluster_source(east: Cluster, west: Cluster, tmp_path: Path, n: int, prefix: str) -> tuple[Any, Path]:
    """A topic of ``n`` records on each of east and west (values ``e-i`` and ``w-i``) in a metadata file."""
    te = east.create_topic(f"{prefix}-e", partitions=2)
    tw = west.create_topic(f"{prefix}-w", partitions=2)
    east.produce(te, [f"e-{i}".encode() for i in range(n)])
    west.produce(tw, [f"w-{i}".encode() for i in range(n)])
    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream("s", cluster_md(east, te), cluster_md(west, tw))])
    return builder(FileMetadataService(path), stream_ids=["s"]).build(), path


def make_sink(central: Cluster, name: str, **props: str) -> ExactlyOnceKafkaSink:
    return ExactlyOnceKafkaSink(
        {"bootstrap.servers": central.bootstrap_servers, **props},
        transactional_id=name,
        positions_topic=f"{name}.positions",
    )


def expected(n: int) -> Counter[str]:
    return Counter([f"out:e-{i}" for i in range(n)] + [f"out:w-{i}" for i in range(n)])


def test_results_and_positions_commit_together_and_a_restart_repeats_nothing(
    kafka_clusters: Any, tmp_path: Path
) -> None:
    """A job stops halfway (close commits), a second run of it goes on: every result exactly once."""
    east, west, central = kafka_clusters(3)
    source, _ = two_cluster_source(east, west, tmp_path, 300, "eos-basic")
    out = central.create_topic("eos-basic-out", partitions=3)
    sink = make_sink(central, f"eos-basic-{uuid.uuid4().hex[:6]}")
    taken = 0
    with source.open(sink=sink, checkpoint_interval=0.2) as stream:
        for record in stream:
            stream.produce(out, value=b"out:" + record.value, key=record.key)
            taken += 1
            if taken == 250:
                break
    assert stream.status()["sink"]["transactions"]["committed"] >= 1  # close() committed the rest
    with source.open(sink=sink, checkpoint_interval=0.2) as stream:
        deadline = time.monotonic() + 60
        while taken < 600 and time.monotonic() < deadline:
            for record in stream.poll(timeout=0.5):
                stream.produce(out, value=b"out:" + record.value)
                taken += 1
        assert stream.poll(timeout=1.0) == []
    assert results_of(read_output(central, out)) == expected(300)


def test_produce_without_a_sink_is_a_configuration_error(kafka_cluster: Cluster, tmp_path: Path) -> None:
    topic = kafka_cluster.create_topic("eos-nosink", partitions=1)
    source = builder([stream("s", cluster_md(kafka_cluster, topic))]).build()
    with source.open() as opened, pytest.raises(ConfigurationError, match="sink"):
        opened.produce("anything", value=b"x")


def test_a_transaction_timeout_below_the_interval_is_refused(kafka_clusters: Any, tmp_path: Path) -> None:
    east, west, central = kafka_clusters(3)
    source, _ = two_cluster_source(east, west, tmp_path, 1, "eos-timeout")
    sink = make_sink(central, "eos-timeout", **{"transaction.timeout.ms": "1000"})
    with pytest.raises(ConfigurationError, match=r"transaction\.timeout\.ms=1000"):
        source.open(sink=sink, checkpoint_interval=5.0)


def test_a_second_job_fences_the_first(kafka_clusters: Any, tmp_path: Path) -> None:
    """Same transactional id: the first job's open transaction is aborted and its next commit raises
    ProducerFencedError; nothing it produced after the second started is visible."""
    east, west, central = kafka_clusters(3)
    source, _ = two_cluster_source(east, west, tmp_path, 100, "eos-fence")
    out = central.create_topic("eos-fence-out", partitions=1)
    sink = make_sink(central, f"eos-fence-{uuid.uuid4().hex[:6]}")
    first = source.open(sink=sink, checkpoint_interval=None)
    try:
        records = []
        while len(records) < 50:
            records += first.poll(timeout=0.5, max_records=50 - len(records))
        for record in records:
            first.produce(out, value=b"zombie:" + record.value)
        second = source.open(sink=sink, checkpoint_interval=None)  # fences the first
        try:
            with pytest.raises(ProducerFencedError):
                first.checkpoint()
            got = 0
            deadline = time.monotonic() + 60
            while got < 200 and time.monotonic() < deadline:
                for record in second.poll(timeout=0.5):
                    second.produce(out, value=b"out:" + record.value)
                    got += 1
            second.checkpoint()
        finally:
            second.close()
    finally:
        first.close()
    values = results_of(read_output(central, out))
    assert not [v for v in values if v.startswith("zombie:")]
    assert values == expected(100)


def test_asyncio_stream_commits_exactly_once(kafka_clusters: Any, tmp_path: Path) -> None:
    east, west, central = kafka_clusters(3)
    source, _ = two_cluster_source(east, west, tmp_path, 100, "eos-async")
    out = central.create_topic("eos-async-out", partitions=1)
    sink = make_sink(central, f"eos-async-{uuid.uuid4().hex[:6]}")

    async def job(limit: int) -> int:
        n = 0
        async with source.open_async(sink=sink, checkpoint_interval=0.2) as stream:
            async for record in stream:
                await stream.produce(out, value=b"out:" + record.value)
                n += 1
                if n == limit:
                    break
            await stream.checkpoint()
        return n

    first = asyncio.run(job(120))

    async def rest() -> int:
        n = 0
        async with source.open_async(sink=sink, checkpoint_interval=0.2) as stream:
            while True:
                records = await stream.poll(timeout=2.0)
                if not records:
                    break
                for record in records:
                    await stream.produce(out, value=b"out:" + record.value)
                    n += 1
        return n

    assert first + asyncio.run(rest()) == 200
    assert results_of(read_output(central, out)) == expected(100)


def test_poll_batches_commit_exactly_once(kafka_clusters: Any, tmp_path: Path) -> None:
    east, west, central = kafka_clusters(3)
    source, _ = two_cluster_source(east, west, tmp_path, 150, "eos-batches")
    out = central.create_topic("eos-batches-out", partitions=1)
    sink = make_sink(central, f"eos-batches-{uuid.uuid4().hex[:6]}")
    n = 0
    with source.open(sink=sink, checkpoint_interval=0.1) as stream:
        deadline = time.monotonic() + 60
        while n < 300 and time.monotonic() < deadline:
            for batch in stream.poll_batches(timeout=0.5):
                for message in batch.messages:
                    stream.produce(out, value=b"out:" + message.value())
                    n += 1
    assert results_of(read_output(central, out)) == expected(150)
