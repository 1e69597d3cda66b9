"""Helpers for scenario tests: build sources over harness clusters, drain streams, check deliveries."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from harness.cluster import Cluster
from multicluster_source import (
    ClusterMetadata,
    KafkaMetadataService,
    KafkaStream,
    MultiClusterKafkaSource,
    MultiClusterKafkaSourceBuilder,
    SourceRecord,
    SourceStream,
    StaticMetadataService,
)


def cluster_md(cluster: Cluster, *topics: str, **properties: str) -> ClusterMetadata:
    """ClusterMetadata of a harness cluster."""
    return ClusterMetadata(cluster.cluster_id, cluster.bootstrap_servers, frozenset(topics), properties)


def stream(stream_id: str, *clusters: ClusterMetadata) -> KafkaStream:
    """A KafkaStream of the given cluster parts."""
    return KafkaStream(stream_id, {c.cluster_id: c for c in clusters})


def builder(
    service: KafkaMetadataService | Iterable[KafkaStream],
    *,
    stream_ids: Iterable[str] | None = None,
    group: str | None = None,
    fast: bool = True,
) -> MultiClusterKafkaSourceBuilder:
    """A builder over ``service`` (or a static service of streams) with a unique group and fast discovery."""
    if not isinstance(service, KafkaMetadataService):
        streams = list(service)
        service = StaticMetadataService(streams)
        stream_ids = stream_ids or [s.stream_id for s in streams]
    b = MultiClusterKafkaSource.builder().set_kafka_metadata_service(service)
    if stream_ids is not None:
        b.set_stream_ids(list(stream_ids))
    b.set_group_id(group or f"g-{uuid.uuid4().hex[:8]}")
    if fast:
        b.set_property("stream-metadata-discovery-interval-ms", "500")
        b.set_property("partition.discovery.interval.ms", "500")
    return b


def drain(
    stream: SourceStream,
    count: int,
    *,
    timeout: float = 60.0,
    until: Callable[[list[SourceRecord]], bool] | None = None,
) -> list[SourceRecord]:
    """Poll until ``count`` records (or ``until(records)``) or ``timeout``; returns what came."""
    got: list[SourceRecord] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got.extend(stream.poll(timeout=0.2))
        if (until is not None and until(got)) or (until is None and len(got) >= count):
            break
    return got


def settle(stream: SourceStream, seconds: float) -> list[SourceRecord]:
    """Poll for ``seconds``; returns what came (to prove nothing more arrives)."""
    got: list[SourceRecord] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got.extend(stream.poll(timeout=0.1))
    return got


def keys(records: Iterable[SourceRecord]) -> Counter[tuple[str, str, int, int]]:
    """Multiset of (cluster, topic, partition, offset)."""
    return Counter((r.cluster_id, r.topic, r.partition, r.offset) for r in records)


def values(records: Iterable[SourceRecord]) -> Counter[bytes]:
    """Multiset of record values."""
    return Counter(r.value for r in records)


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, interval: float = 0.05) -> bool:
    """True once ``predicate()`` is true; False after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def samples_with_label(registry: Any, label: str, value: str) -> list[tuple[str, Mapping[str, str]]]:
    """Every multicluster_source_* sample in ``registry`` carrying ``label=value``."""
    out = []
    for family in registry.collect():
        for sample in family.samples:
            if sample.name.startswith("multicluster_source_") and sample.labels.get(label) == value:
                out.append((sample.name, sample.labels))
    return out
