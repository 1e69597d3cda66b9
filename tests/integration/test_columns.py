"""``poll_columns()`` on real Kafka: Arrow record batches of every record once, checkpoints that cover
exactly the rows returned (a restore goes on right after them), mixing with records, the asyncio stream,
and the live stage of a hybrid stream."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.cluster import Cluster
from harness.scenario import builder, cluster_md, settle, stream
from multicluster_source import HybridSource
from multicluster_source.framework import column_schema
from multicluster_source.framework._checkpoint import CheckpointStore
from multicluster_source.testing import InMemoryArchiveStage

pytestmark = pytest.mark.integration
pa = pytest.importorskip("pyarrow")


def _drain_columns(s: Any, count: int, timeout: float = 60.0, max_records: int = 100_000) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while sum(b.num_rows for b in got) < count and time.monotonic() < deadline:
        got.extend(s.poll_columns(timeout=0.2, max_records=max_records))
    return got


def _rows(batches: list[Any]) -> list[dict[str, Any]]:
    return [row for b in batches for row in b.to_pylist()]


def test_columns_carry_every_record_of_two_clusters_once(kafka_clusters: Any) -> None:
    east, west = kafka_clusters(2)
    te = east.create_topic("columns", partitions=3)
    tw = west.create_topic("columns", partitions=2)
    sent_e = east.produce_n(te, 600, partitions=3, prefix="e")
    sent_w = west.produce_n(tw, 400, partitions=2, prefix="w")
    source = builder([stream("s", cluster_md(east, te), cluster_md(west, tw))]).build()
    with source.open(parallelism=2) as s:
        batches = _drain_columns(s, 1000)
        extra = settle(s, 1.0)
    assert extra == []
    assert all(isinstance(b, pa.RecordBatch) and b.schema == column_schema() for b in batches)
    rows = _rows(batches)
    by_cluster: dict[str, Counter[bytes]] = {east.cluster_id: Counter(), west.cluster_id: Counter()}
    for row in rows:
        assert row["topic"] == (te if row["cluster"] == east.cluster_id else tw)
        assert row["timestamp"] is not None
        by_cluster[row["cluster"]][row["value"]] += 1
    assert by_cluster[east.cluster_id] == Counter(v for _p, v in sent_e)
    assert by_cluster[west.cluster_id] == Counter(v for _p, v in sent_w)
    offsets = Counter((r["cluster"], r["partition"], r["offset"]) for r in rows)
    assert max(offsets.values()) == 1


def test_a_checkpoint_covers_exactly_the_rows_returned_and_a_restore_goes_on_after_them(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = kafka_cluster.create_topic("columns-ckpt", partitions=2)
    kafka_cluster.produce_n(topic, 400, partitions=2)
    ckpt = tmp_path / "ckpt"
    source = builder([stream("s", cluster_md(kafka_cluster, topic))]).build()
    with source.open(checkpoint_dir=str(ckpt)) as s:
        first = _rows(_drain_columns(s, 150, max_records=150))
        records: list[Any] = []  # mixed with poll: it goes on right after the last row
        while len(records) < 50:
            records += s.poll(timeout=5.0, max_records=50 - len(records))
        s.checkpoint()
    assert len(first) == 150  # max_records cuts a batch: the rest stays for the next call
    returned = [(r["partition"], r["offset"]) for r in first] + [(r.partition, r.offset) for r in records]
    assert len(set(returned)) == 200
    latest = CheckpointStore(str(ckpt)).latest()
    assert latest is not None
    ends = {p: max(o for q, o in returned if q == p) + 1 for p in {p for p, _o in returned}}
    cid = kafka_cluster.cluster_id
    assert dict(latest.positions) == {f"{cid}/{topic}/{p}": e for p, e in ends.items()}
    with source.open(checkpoint_dir=str(ckpt)) as s:
        rest = _rows(_drain_columns(s, 200))
        assert settle(s, 1.0) == []
    again = {(r["partition"], r["offset"]) for r in rest}
    assert len(rest) == 200 and not again & set(returned)
    assert again | set(returned) == {(p, o) for p in (0, 1) for o in range(200)}


def test_the_asyncio_stream_polls_columns_and_restores_exactly(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = kafka_cluster.create_topic("columns-async", partitions=2)
    kafka_cluster.produce_n(topic, 300, partitions=2)
    ckpt = str(tmp_path / "ckpt")
    source = builder([stream("s", cluster_md(kafka_cluster, topic))]).build()

    async def take(n: int, max_records: int) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        async with source.open_async(checkpoint_dir=ckpt) as s:
            deadline = time.monotonic() + 60
            while len(rows) < n and time.monotonic() < deadline:
                batches = await s.poll_columns(timeout=0.2, max_records=min(max_records, n - len(rows)))
                rows.extend(_rows(batches))
            await s.checkpoint()
        return rows

    first = asyncio.run(take(120, 50))
    rest = asyncio.run(take(180, 100_000))
    keys = [(r["partition"], r["offset"]) for r in first + rest]
    assert len(first) == 120 and sorted(keys) == sorted((p, o) for p in (0, 1) for o in range(150))


def test_the_live_stage_of_a_hybrid_stream_hands_out_arrow_batches_after_the_archive(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = kafka_cluster.create_topic("columns-hybrid", partitions=1)
    kafka_cluster.produce(topic, [f"v{i}".encode() for i in range(100)], partition=0)
    cid = kafka_cluster.cluster_id
    archive = InMemoryArchiveStage({f"{cid}/{topic}/0": [f"v{i}".encode() for i in range(40)]})
    live = builder([stream("s", cluster_md(kafka_cluster, topic))]).build()
    hybrid = HybridSource.builder(archive).add_source(live).build()
    ckpt = str(tmp_path / "ckpt")
    with hybrid.open(checkpoint_dir=ckpt) as s:
        archived: list[Any] = []
        while len(archived) < 40:
            archived.extend(s.poll(timeout=1.0))
        batches: list[Any] = []
        deadline = time.monotonic() + 60
        while sum(b.num_rows for b in batches) < 30 and time.monotonic() < deadline:
            batches.extend(s.poll_columns(timeout=0.2, max_records=30 - sum(b.num_rows for b in batches)))
        assert not s.columnar  # a Kafka stage: Arrow batches, not ArchivedColumns parts
        s.checkpoint()
    assert [r["offset"] for r in _rows(batches)] == list(range(40, 70))
    with hybrid.open(checkpoint_dir=ckpt) as s:
        rest = _rows(_drain_columns(s, 30))
    assert [r["offset"] for r in rest] == list(range(70, 100))


def test_the_bytes_metric_counts_every_value_once_whether_columns_or_records_took_it(
    kafka_cluster: Any,
) -> None:
    from prometheus_client import CollectorRegistry

    topic = kafka_cluster.create_topic("colbytes", partitions=2)
    registry = CollectorRegistry()
    labels = {"cluster": kafka_cluster.cluster_id, "topic": topic}
    source = builder([stream("s", cluster_md(kafka_cluster, topic))]).build()
    sent: list[bytes] = []
    got = 0
    with source.open(registry=registry) as s:
        assert s.poll_columns(timeout=1.0) == []
        for chunk in range(6):  # records arrive while the caller keeps asking: it fetches them itself
            sent += [
                v
                for _p, v in kafka_cluster.produce_n(
                    topic, 500, partitions=2, prefix=f"v{chunk}-" + "x" * chunk
                )
            ]
            take = (
                (lambda: sum(b.num_rows for b in s.poll_columns(0.05, 333)))
                if chunk < 4
                else (lambda: len(s.poll(0.05, 250)))
            )
            deadline = time.monotonic() + 30
            while got < len(sent) and time.monotonic() < deadline:
                got += take()
        assert got == len(sent) == 3000
        records = registry.get_sample_value("multicluster_source_records_consumed_total", labels)
        nbytes = registry.get_sample_value("multicluster_source_bytes_consumed_total", labels)
    assert (records, nbytes) == (3000, sum(map(len, sent)))
