"""Bad metadata under a running source on a real broker (issue 8, part 2): a stream of randomly corrupted
metadata files never stops the source, never changes what it reads, and is counted; the next good file
applies. (Hand-picked bad files are in ``test_multicluster.py``; these come from the fuzzers' mutator.)"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from fuzz.inputs import random_mutation
from prometheus_client import CollectorRegistry

from harness.cluster import Cluster
from harness.scenario import builder, cluster_md, drain, stream, wait_for
from multicluster_source import FileMetadataService, SourceStream
from multicluster_source.exceptions import MetadataError
from multicluster_source.metadata import dump_streams, parse_streams
from multicluster_source.testing import write_metadata_file

pytestmark = pytest.mark.integration

BAD_FILES = 12


def _bad_variants(good: bytes, n: int, seed: int = 8) -> list[bytes]:
    """``n`` distinct corruptions of ``good`` that the parser rejects."""
    rng = random.Random(seed)
    out: list[bytes] = []
    while len(out) < n:
        candidate = random_mutation(rng, good)
        try:
            parse_streams(candidate.decode("utf-8"), source="probe")
        except (MetadataError, UnicodeDecodeError):
            if candidate not in out:
                out.append(candidate)
    return out


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _failures(registry: CollectorRegistry) -> float:
    return registry.get_sample_value("multicluster_source_metadata_failures_total") or 0.0


def _counted_above(registry: CollectorRegistry, n: float) -> Callable[[], bool]:
    return lambda: _failures(registry) > n


def _value_arrives(s: SourceStream, cluster: Cluster, topic: str, value: bytes) -> bool:
    cluster.produce(topic, [value])
    got = drain(s, 0, timeout=30, until=lambda g: any(r.value == value for r in g))
    return any(r.value == value for r in got)


def test_corrupted_metadata_files_keep_the_last_good_metadata(kafka_cluster: Cluster, tmp_path: Path) -> None:
    t1 = kafka_cluster.create_topic("meta-a", partitions=2)
    t2 = kafka_cluster.create_topic("meta-b", partitions=1)
    path = tmp_path / "streams.yaml"
    first = [stream("s", cluster_md(kafka_cluster, t1))]
    write_metadata_file(path, first)
    registry = CollectorRegistry()
    source = builder(FileMetadataService(path), stream_ids=["s"]).build()
    with source.open(parallelism=2, registry=registry) as s:
        assert _value_arrives(s, kafka_cluster, t1, b"before")
        assigned = s.assignments()
        for i, bad in enumerate(_bad_variants(dump_streams(first).encode(), BAD_FILES)):
            counted = _failures(registry)
            _write_atomically(path, bad)
            assert wait_for(_counted_above(registry, counted), 15), f"bad file {i} was not counted"
            assert _value_arrives(s, kafka_cluster, t1, f"during-{i}".encode()), (
                f"reading stopped at bad file {i}"
            )
            assert s.assignments() == assigned, f"bad file {i} changed the assignments"
        # The next good file applies at once, and a bad one after it keeps *that* one.
        second = [stream("s", cluster_md(kafka_cluster, t1, t2))]
        write_metadata_file(path, second)
        assert _value_arrives(s, kafka_cluster, t2, b"t2-added")
        path.write_text("- streamId: s\n  clusterMetadataList: [")
        assert wait_for(lambda: _failures(registry) >= BAD_FILES + 1, 15)
        assert _value_arrives(s, kafka_cluster, t2, b"t2-kept")
        assert _value_arrives(s, kafka_cluster, t1, b"t1-kept")


def test_a_reopened_source_still_follows_file_changes(kafka_cluster: Cluster, tmp_path: Path) -> None:
    """open() a second time (a restart in the same process): the file service must notify again.

    The discovery poll is 10 minutes, so only the change notification can apply the change here.
    """
    t1 = kafka_cluster.create_topic("reopen-a", partitions=1)
    t2 = kafka_cluster.create_topic("reopen-b", partitions=1)
    path = tmp_path / "streams.yaml"
    only_t1 = [stream("s", cluster_md(kafka_cluster, t1))]
    source = (
        builder(FileMetadataService(path), stream_ids=["s"], fast=False)
        .set_property("stream-metadata-discovery-interval-ms", "600000")
        .build()
    )
    for attempt in (1, 2):
        write_metadata_file(path, only_t1)
        with source.open() as s:
            assert _value_arrives(s, kafka_cluster, t1, f"t1-{attempt}".encode())
            write_metadata_file(path, [stream("s", cluster_md(kafka_cluster, t1, t2))])
            assert _value_arrives(s, kafka_cluster, t2, f"t2-{attempt}".encode()), (
                f"open #{attempt}: the added topic was not read (metadata service not watching)"
            )
