"""A reader left without splits of a cluster that stays in the metadata closes its client for that cluster
after the window (``_AHEAD_S``, shortened here), and reads that cluster with a new one when splits come back.
Real Apache Kafka; the window is the only thing changed."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from harness.scenario import builder, cluster_md, drain, stream, wait_for
from multicluster_source import FileMetadataService
from multicluster_source.reader import _multicluster
from multicluster_source.testing import write_metadata_file

pytestmark = pytest.mark.integration


def _fetch_threads(cluster_id: str) -> list[str]:
    """This process's fetch threads of ``cluster_id`` (one per reader holding a consumer of it)."""
    return sorted(
        t.name
        for t in threading.enumerate()
        if t.name.startswith("mcs-fetch-") and t.name.endswith(f"-{cluster_id}")
    )


def _librdkafka_clients() -> int:
    """librdkafka clients alive in this process (one ``rdk:main`` thread each)."""
    count = 0
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            count += (task / "comm").read_text().strip() == "rdk:main"
        except OSError:
            continue
    return count


def test_a_reader_whose_topic_is_removed_closes_its_client_of_the_cluster_and_reads_it_anew_later(
    kafka_clusters: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_multicluster, "_AHEAD_S", 2.0)
    (east,) = kafka_clusters(1)
    keep = east.create_topic("keep", partitions=1)  # one reader: the other has none of it
    flip = east.create_topic("flip", partitions=4)  # both readers
    east.produce_n(flip, 40, partitions=4, prefix="first")
    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream("s", cluster_md(east, keep, flip))])
    with builder(FileMetadataService(path), stream_ids=["s"]).build().open(parallelism=2) as s:
        first = drain(s, 40)
        assert len(_fetch_threads(east.cluster_id)) == 2
        gc.collect()  # clients of the test itself that are garbage go now, not while counting
        clients = _librdkafka_clients()

        write_metadata_file(path, [stream("s", cluster_md(east, keep))])  # east stays, flip goes
        assert wait_for(lambda: len(_fetch_threads(east.cluster_id)) == 1, 30), _fetch_threads(
            east.cluster_id
        )
        assert wait_for(lambda: _librdkafka_clients() == clients - 1, 10), (_librdkafka_clients(), clients)
        east.produce(keep, [b"keep-1"])  # the reader holding keep still reads it
        during = drain(s, 1, timeout=20)

        write_metadata_file(path, [stream("s", cluster_md(east, keep, flip))])  # flip back: both readers
        east.produce_n(flip, 8, partitions=4, prefix="again")
        again = drain(s, 8, timeout=30)
        assert len(_fetch_threads(east.cluster_id)) == 2
    assert sorted(r.value for r in first) == sorted(f"first-{i}".encode() for i in range(40))
    assert [r.value for r in during] == [b"keep-1"]
    assert sorted(r.value for r in again) == sorted(f"again-{i}".encode() for i in range(8))
