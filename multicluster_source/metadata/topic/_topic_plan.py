"""The writer's diff: which records make the metadata topic hold exactly the wanted streams.

:func:`plan_publish` compares the wanted streams with a :class:`MetadataSnapshot` of the topic and returns a
:class:`WritePlan`: the records to write in one transaction (the format is described in
``_topic_records``). Free of Kafka; the transactional writer (``_topic_writer``) writes the plan.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from multicluster_source.metadata._model import KafkaStream
from multicluster_source.metadata._validate import validate_streams
from multicluster_source.metadata.topic._topic_log import MetadataSnapshot
from multicluster_source.metadata.topic._topic_records import (
    ClusterDefinition,
    ClusterKey,
    CommitKey,
    PartKey,
    StreamCommit,
    StreamPart,
    cluster_key,
    commit_key,
    encode_value,
    parse_key,
    part_key,
)

__all__ = ["PlannedRecord", "WritePlan", "plan_publish"]

# --------------------------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class PlannedRecord:
    """One record to write: ``value`` None is a tombstone."""

    key: str
    value: bytes | None


@dataclass(frozen=True)
class WritePlan:
    """What a publish writes, in order, in one transaction, and what it means.

    Order: changed cluster records; then for each written stream its parts, its commit, and tombstones of
    parts it no longer has; then each deleted stream's commit tombstone and part tombstones; cluster
    tombstones last.
    """

    records: tuple[PlannedRecord, ...] = ()
    clusters_written: tuple[str, ...] = ()
    clusters_deleted: tuple[str, ...] = ()
    streams_written: tuple[str, ...] = ()
    streams_deleted: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        """Whether there is nothing to write."""
        return not self.records


def plan_publish(
    streams: Iterable[KafkaStream], *, current: MetadataSnapshot, source: str = "streams"
) -> WritePlan:
    """Diff ``streams`` (the wanted metadata) against ``current`` (what the topic holds).

    A cluster record is written when its definition differs from the topic's; a stream's parts and commit
    are all written when the stream is inconsistent, its committed parts differ, or any of its part or
    commit records in the topic differs (a leftover part of an unfinished write must not survive
    compaction alone). Streams and clusters the topic has but ``streams`` lacks get tombstones.
    Raises :class:`~multicluster_source.exceptions.MetadataValidationError` (with ``source``) for streams
    that break the metadata rules.
    """
    wanted = list(streams)
    validate_streams(wanted, source=source)
    clusters: dict[str, ClusterDefinition] = {}
    parts: dict[str, tuple[StreamPart, ...]] = {}
    for stream in wanted:
        parts[stream.stream_id] = tuple(
            StreamPart(cid, stream.clusters[cid].topics, stream.clusters[cid].replica_of)
            for cid in sorted(stream.clusters)
        )
        for cluster in stream.clusters.values():
            clusters[cluster.cluster_id] = ClusterDefinition.of(cluster)

    log = current.log
    present_parts: dict[str, set[int]] = {}
    present_commits: set[str] = set()
    present_clusters: set[str] = set()
    for text in log:
        parsed = parse_key(text)
        if isinstance(parsed, PartKey):
            present_parts.setdefault(parsed.stream_id, set()).add(parsed.index)
        elif isinstance(parsed, CommitKey):
            present_commits.add(parsed.stream_id)
        elif isinstance(parsed, ClusterKey):
            present_clusters.add(parsed.cluster_id)

    records: list[PlannedRecord] = []
    clusters_written = sorted(cid for cid, d in clusters.items() if log.get(cluster_key(cid)) != d)
    records += [PlannedRecord(cluster_key(c), encode_value(clusters[c])) for c in clusters_written]

    streams_written: list[str] = []
    for sid in sorted(parts):
        wanted_parts = parts[sid]
        count = len(wanted_parts)
        stale = sorted(i for i in present_parts.get(sid, ()) if i >= count)
        differs = (
            sid in current.inconsistent
            or current.stream_parts.get(sid) != wanted_parts
            or log.get(commit_key(sid)) != StreamCommit(count)
            or any(log.get(part_key(sid, i)) != p for i, p in enumerate(wanted_parts))
            or bool(stale)
        )
        if not differs:
            continue
        streams_written.append(sid)
        records += [PlannedRecord(part_key(sid, i), encode_value(p)) for i, p in enumerate(wanted_parts)]
        records.append(PlannedRecord(commit_key(sid), encode_value(StreamCommit(count))))
        records += [PlannedRecord(part_key(sid, i), None) for i in stale]

    known_streams = present_commits | set(present_parts) | set(current.streams) | set(current.inconsistent)
    streams_deleted = sorted(known_streams - set(parts))
    for sid in streams_deleted:
        records.append(PlannedRecord(commit_key(sid), None))
        records += [PlannedRecord(part_key(sid, i), None) for i in sorted(present_parts.get(sid, ()))]

    clusters_deleted = sorted((present_clusters | set(current.clusters)) - set(clusters))
    records += [PlannedRecord(cluster_key(c), None) for c in clusters_deleted]
    return WritePlan(
        records=tuple(records),
        clusters_written=tuple(clusters_written),
        clusters_deleted=tuple(clusters_deleted),
        streams_written=tuple(streams_written),
        streams_deleted=tuple(streams_deleted),
    )
