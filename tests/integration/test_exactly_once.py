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
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from harness.cluster import Cluster
from harness.eos import read_output
from harness.scenario import builder, cluster_md, stream
from multicluster_source import (
    ClusterMetadata,
    ConfigurationError,
    ExactlyOnceKafkaSink,
    FileMetadataService,
    ProducerFencedError,
)
from multicluster_source.exceptions import ClusterIdentityError
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
        records: list[Any] = []
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


def pump(stream: Any, out: str, until: int, handled: int = 0, timeout: float = 90.0, **each: Any) -> int:
    """Poll and produce ``out:<value>`` for each record until ``until`` records were handled in all."""
    deadline = time.monotonic() + timeout
    while handled < until and time.monotonic() < deadline:
        for record in stream.poll(timeout=0.3, max_records=50):
            stream.produce(out, value=b"out:" + record.value)
            handled += 1
            hook = each.get("hook")
            if hook is not None:
                hook(record)
    return handled


def test_an_aborted_transaction_rewinds_the_readers_and_repeats_nothing(
    kafka_clusters: Any, tmp_path: Path
) -> None:
    """A result the sink cluster refuses (larger than its topic allows) makes the transaction abort: the
    stream rewinds to the last committed positions, the records come again, and each result is written
    once."""
    east, west, central = kafka_clusters(3)
    source, _ = two_cluster_source(east, west, tmp_path, 200, "eos-abort")
    out = central.create_topic("eos-abort-out", partitions=1)
    small = central.create_topic("eos-abort-small", partitions=1, config={"max.message.bytes": "1000"})
    sink = make_sink(central, f"eos-abort-{uuid.uuid4().hex[:6]}")
    poisoned: list[bytes] = []

    with source.open(sink=sink, checkpoint_interval=0.2) as stream:

        def poison(record: Any) -> None:
            if not poisoned and record.value.endswith(b"-150"):
                poisoned.append(record.value)  # once: the record comes again after the rewind
                stream.produce(small, value=b"x" * 5000)

        handled = pump(stream, out, 10_000, timeout=25, hook=poison)
        status = stream.status()["sink"]
    assert poisoned, "the poisoned record never came"
    assert status["transactions"]["aborted"] >= 1
    assert handled > 400  # what the aborted transaction held was handled again
    assert results_of(read_output(central, out)) == expected(200)
    assert read_output(central, small) == []


def test_a_cluster_id_now_pointing_at_another_kafka_cluster_fails_the_source(
    kafka_clusters: Any, tmp_path: Path
) -> None:
    """Cluster id ``a`` was east when the positions were committed; the metadata now gives ``a`` the servers
    of west, which has a topic of the same name: reading west at east's offsets would be wrong, so the
    source fails with ClusterIdentityError and commits nothing more."""
    east, west, central = kafka_clusters(3)
    te = east.create_topic("eos-identity", partitions=1)
    east.produce(te, [f"e-{i}".encode() for i in range(20)])
    west.admin().create_topics([NewTopic(te, num_partitions=1, replication_factor=1)])[te].result(30)
    west.produce(te, [f"w-{i}".encode() for i in range(50)])
    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream("s", ClusterMetadata("a", east.bootstrap_servers, frozenset({te})))])
    source = builder(FileMetadataService(path), stream_ids=["s"]).build()
    out = central.create_topic("eos-identity-out", partitions=1)
    sink = make_sink(central, f"eos-identity-{uuid.uuid4().hex[:6]}")
    with source.open(sink=sink) as opened:
        assert pump(opened, out, 20) == 20
    write_metadata_file(path, [stream("s", ClusterMetadata("a", west.bootstrap_servers, frozenset({te})))])
    with source.open(sink=sink) as opened, pytest.raises(ClusterIdentityError, match="another Kafka cluster"):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for record in opened.poll(timeout=0.5):
                opened.produce(out, value=b"out:" + record.value)
    assert len(read_output(central, out)) == 20


@pytest.mark.parametrize("which", ["sink", "source"])
def test_a_broker_restart_under_the_job_repeats_and_loses_nothing(
    kafka_clusters: Any, fresh_cluster: Any, tmp_path: Path, which: str
) -> None:
    """The sink cluster's broker (or a source cluster's) is killed while the job produces and commits, and
    started again: every result exactly once."""
    east, central = kafka_clusters(3)[0], kafka_clusters(3)[2]
    fresh = fresh_cluster(f"eos-{which}")
    source_cluster, sink_cluster = (east, fresh) if which == "sink" else (fresh, central)
    te = east.create_topic(f"eos-restart-{which}-e", partitions=2)
    tf = source_cluster.create_topic(f"eos-restart-{which}-f", partitions=2) if which == "source" else None
    east.produce(te, [f"e-{i}".encode() for i in range(300)])
    clusters = [cluster_md(east, te)]
    if tf is not None:
        fresh.produce(tf, [f"w-{i}".encode() for i in range(300)])
        clusters.append(ClusterMetadata("fresh", fresh.bootstrap_servers, frozenset({tf})))
    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream("s", *clusters)])
    source = (
        builder(FileMetadataService(path), stream_ids=["s"])
        .set_properties({"socket.timeout.ms": "5000", "reconnect.backoff.max.ms": "1000"})
        .build()
    )
    out = sink_cluster.create_topic(f"eos-restart-{which}-out", partitions=2)
    sink = make_sink(sink_cluster, f"eos-restart-{which}-{uuid.uuid4().hex[:6]}")
    total = 300 if tf is None else 600
    with source.open(sink=sink, checkpoint_interval=0.2) as opened:
        handled = 0
        deadline = time.monotonic() + 30
        while handled < total // 3 and time.monotonic() < deadline:
            for record in opened.poll(timeout=0.3, max_records=10):
                opened.produce(out, value=b"out:" + record.value)
                handled += 1
        fresh.stop_node(0, graceful=False)
        time.sleep(3.0)
        fresh.start_node(0)
        pump(opened, out, 100_000, handled, timeout=25)
        opened.checkpoint()
    want = Counter([f"out:e-{i}" for i in range(300)] + ([f"out:w-{i}" for i in range(300)] if tf else []))
    assert results_of(read_output(sink_cluster, out)) == want


def test_metadata_changes_under_the_sink_repeat_and_lose_nothing(kafka_clusters: Any, tmp_path: Path) -> None:
    """A cluster added, a topic removed and added back while the job produces: each result once, and the
    re-added topic resumes where it was (its positions stayed in the positions topic)."""
    east, west, central = kafka_clusters(3)
    te = east.create_topic("eos-meta-e", partitions=2)
    tw = west.create_topic("eos-meta-w", partitions=2)
    east.produce(te, [f"e-{i}".encode() for i in range(200)])
    west.produce(tw, [f"w-{i}".encode() for i in range(200)])
    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream("s", cluster_md(east, te))])
    source = builder(FileMetadataService(path), stream_ids=["s"]).build()
    out = central.create_topic("eos-meta-out", partitions=1)
    sink = make_sink(central, f"eos-meta-{uuid.uuid4().hex[:6]}")
    with source.open(sink=sink, checkpoint_interval=0.2) as opened:
        handled = pump(opened, out, 200)
        write_metadata_file(path, [stream("s", cluster_md(east, te), cluster_md(west, tw))])  # west added
        handled = pump(opened, out, 300, handled)
        write_metadata_file(path, [stream("s", cluster_md(east, te))])  # west's topic removed
        east.produce(te, [f"e-{i}".encode() for i in range(200, 250)])
        handled = pump(opened, out, 350, handled)
        settle_until = time.monotonic() + 2
        while time.monotonic() < settle_until:
            for record in opened.poll(timeout=0.2):
                opened.produce(out, value=b"out:" + record.value)
                handled += 1
    west.produce(tw, [f"w-{i}".encode() for i in range(200, 230)])
    write_metadata_file(path, [stream("s", cluster_md(east, te), cluster_md(west, tw))])  # re-added
    with source.open(sink=sink, checkpoint_interval=0.2) as opened:
        pump(opened, out, 100_000, timeout=15)
    want = Counter([f"out:e-{i}" for i in range(250)] + [f"out:w-{i}" for i in range(230)])
    assert results_of(read_output(central, out)) == want
