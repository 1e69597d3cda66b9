"""The three findings of the mixed-fault soak (issue 33), each on real Apache Kafka as a user would meet it.

1. A topic removed from the metadata and re-added within the retention time: records fetched before the
   removal and still waiting in the hand-off are not returned after it, and the re-added topic resumes where
   the caller stopped, so no record comes twice in one run.
2. A broker killed under an offset commit: the process does not abort inside the client (the commit path is
   one librdkafka's admin coordinator-request bug does not reach), and what the cluster is owed is committed
   once it is back.
3. ``checkpoint()`` while one cluster is down: it returns within the bounded commit wait, the healthy
   cluster's records keep flowing, and the down cluster gets its offsets when it answers again.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from harness.cluster import Cluster
from harness.scenario import builder, cluster_md, drain, settle, stream, wait_for
from multicluster_source import FileMetadataService, SourceRecord
from multicluster_source.testing import write_metadata_file

pytestmark = pytest.mark.integration


def _twice(records: list[SourceRecord], topic: str) -> list[int]:
    counts = Counter(r.offset for r in records if r.topic == topic)
    return sorted(o for o, n in counts.items() if n > 1)


@pytest.mark.parametrize(
    "poll_while_removed", [True, False], ids=["polled-while-removed", "idle-while-removed"]
)
def test_a_topic_removed_and_re_added_returns_no_record_twice(
    kafka_cluster: Cluster, tmp_path: Path, poll_while_removed: bool
) -> None:
    """Issue 33, finding 1: records of ``b`` fetched before its removal wait in the hand-off (the caller is
    idle); none of them is returned while ``b`` is out of the metadata, and after the re-add every record of
    ``b`` comes exactly once (idle while removed: the stale batches are still there when ``b`` resumes)."""
    a = kafka_cluster.create_topic("readd-a", partitions=1)
    b = kafka_cluster.create_topic("readd-b", partitions=1)
    kafka_cluster.produce(a, [f"a-{i}".encode() for i in range(200)])
    kafka_cluster.produce(b, [f"b-{i}".encode() for i in range(200)])
    path = tmp_path / "streams.yaml"
    both = [stream("s", cluster_md(kafka_cluster, a, b))]
    only_a = [stream("s", cluster_md(kafka_cluster, a))]
    write_metadata_file(path, both)
    source = (
        builder(FileMetadataService(path), stream_ids=["s"])
        .set_property("reader.batch.max.records", "10")
        .build()
    )
    got: list[SourceRecord] = []
    with source.open(parallelism=1) as s:
        # a few records at a time until one of b has come: the rest of what was fetched waits in the hand-off
        deadline = time.monotonic() + 60
        while not any(r.topic == b for r in got) and time.monotonic() < deadline:
            got += s.poll(timeout=0.5, max_records=5)
        assert any(r.topic == b for r in got), "no record of b came"
        time.sleep(2.0)  # the caller is idle: the fetcher fills the hand-off
        returned_before = sum(r.topic == b for r in got)
        write_metadata_file(path, only_a)
        # the enumerator retires b's split (the reader applies it once its fetch thread has room again)
        assert wait_for(lambda: s.status()["metadata"]["retained_splits"] == 1, 15)
        if poll_while_removed:
            after_removal = settle(s, 2.0)
            got += after_removal
            late = [r.offset for r in after_removal if r.topic == b]
            assert late == [], f"{len(late)} records of b fetched before its removal were returned after it"
        write_metadata_file(path, both)
        assert wait_for(lambda: s.status()["metadata"]["retained_splits"] == 0, 15)
        got += drain(s, 0, timeout=60, until=lambda g: sum(r.topic == b for r in got + g) >= 200)
        got += settle(s, 2.0)
    assert returned_before < 200
    assert _twice(got, b) == [], f"{len(_twice(got, b))} records of b returned twice"
    assert sorted(r.offset for r in got if r.topic == b) == list(range(200)), "b must resume, nothing lost"
    assert sorted(r.offset for r in got if r.topic == a) == list(range(200))
