"""The Spark source handing a stream over to MirrorMaker 2's copy under a running query (API.md sections 9
and 10), on real MM2 (``harness.mm2``) and local Spark: the origin topic leaves the metadata file while
producers keep writing to it, and the query goes on with west's copy from the translated position.

Values name their origin partition and index (``<p>-<i>``), so each row is accounted for.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.mm2 import MM2Pair
from harness.mm2_streams import Writer, handover_streams
from harness.scenario import wait_for
from harness.spark import spark_session
from multicluster_source.testing import write_metadata_file

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")

pytestmark = pytest.mark.integration

PARTITIONS = 2


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local Spark session for the module, with the format registered."""
    with spark_session() as session:
        yield session


def _rows(spark: Any, name: str) -> list[tuple[str, int, bytes]]:
    return [
        (r["cluster"], r["partition"], bytes(r["value"]))
        for r in spark.sql(f"SELECT cluster, partition, value FROM {name}").collect()
    ]


def test_a_planned_switchover_under_a_running_query_reads_every_record_once(
    mm2_pair: MM2Pair, spark: Any, tmp_path: Path
) -> None:
    east, west, mm2 = mm2_pair.east, mm2_pair.west, mm2_pair.mm2
    topic = east.create_topic("spark-orders", partitions=PARTITIONS)
    writer = Writer(east, topic, partitions=PARTITIONS, keyed=True, name="spark-mm2-writer").start()
    path = write_metadata_file(tmp_path / "streams.yaml", handover_streams(mm2_pair, topic, origin=True))
    df = (
        spark.readStream.format("multicluster-kafka")
        .option("metadataFile", str(path))
        .option("streamIds", "orders")
        .option("startingOffsets", "earliest")
        .option("replicaSyncWait", "60s")  # waits only until MM2 has copied up to the position
        .load()
    )
    name = "handover_" + os.urandom(4).hex()
    query = df.writeStream.format("memory").queryName(name).trigger(processingTime="500 milliseconds").start()
    try:
        assert wait_for(lambda: len(_rows(spark, name)) >= 600, 90, interval=0.5)
        assert {c for c, _p, _v in _rows(spark, name)} == {"east"}, "the copy is not read while the origin is"
        write_metadata_file(path, handover_streams(mm2_pair, topic, origin=False))  # the switchover
        assert wait_for(lambda: any(c == "west" for c, _p, _v in _rows(spark, name)), 90, interval=0.5)
        writer.stop()
        mm2.wait_caught_up(topic)
        wanted = {f"{p}-{i}".encode() for p in range(PARTITIONS) for i in range(writer.next)}
        assert wait_for(lambda: wanted <= {v for _c, _p, v in _rows(spark, name)}, 90, interval=0.5)
        query.processAllAvailable()
        rows = _rows(spark, name)
    finally:
        writer.stop()
        query.stop()
    counts = Counter(v for _c, _p, v in rows)
    missing = wanted - set(counts)
    assert not missing, f"{len(missing)} records lost, e.g. {sorted(missing)[:5]}"
    assert {c for c, _p, _v in rows} == {"east", "west"}
    # the origin answers, so MirrorMaker 2's translation is exact (the copy of the last record read found)
    assert not [v for v, n in counts.items() if n > 1], "records read twice across the handover"
    for p in range(PARTITIONS):  # per partition: the origin's records up to the position, then the copy's
        indexes = [int(v.split(b"-")[1]) for c, part, v in rows if part == p and c == "east"]
        copied = [int(v.split(b"-")[1]) for c, part, v in rows if part == p and c == "west"]
        assert indexes == list(range(len(indexes)))
        assert copied == list(range(len(indexes), writer.next))
    assert west.bootstrap_servers not in query.lastProgress["sources"][0]["endOffset"]
