"""Source events exchanged between the enumerator and the readers.

All are frozen dataclasses of plain values, so a runtime may carry them across processes.

The metadata update sequence (what happens when the subscribed metadata changes):

1. The enumerator reads the metadata service (on a poll, or at once when the service notifies it).
2. It diffs the new per-cluster metadata against the current one: clusters added, removed, reconnected
   (bootstrap servers or properties changed), and clusters whose topic set changed.
3. It stops the per-cluster enumerators of removed clusters (their scheduled work is cancelled by the context
   proxy), restarts those of reconnected clusters, and updates the topic sets of the others in place. The
   splits of removed clusters and topics are dropped from the assignment and remembered with their positions
   for ``stream-metadata-removed-retention-ms``.
4. It sends one :class:`MetadataUpdateEvent` with the whole new metadata to every reader.
5. Each reader diffs the event against what it had: it closes the fetchers of removed clusters, restarts
   the fetchers of reconnected clusters (they resume where they were), unassigns partitions of removed
   topics, and leaves every other cluster's fetcher running untouched.
6. Splits of added clusters and topics follow as ordinary split assignments once discovered; a reader holds
   a split whose cluster it does not know yet until a metadata event names it, and drops it if the event
   does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.metadata._model import ClusterMetadata


class SourceEvent:
    """Base of every event between enumerator and readers."""


@dataclass(frozen=True)
class MetadataUpdateEvent(SourceEvent):
    """The complete metadata the readers must follow now: cluster id -> cluster metadata (topics merged over
    the subscribed streams)."""

    clusters: Mapping[str, ClusterMetadata]
    version: int = 0
    """Increases with every reconciliation, so a reader can ignore a stale event."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "clusters", MappingProxyType(dict(self.clusters)))

    def __reduce__(self) -> tuple[Any, ...]:
        # A mappingproxy cannot be pickled: runtimes carry events to other processes and machines.
        return (MetadataUpdateEvent, (dict(self.clusters), self.version))


@dataclass(frozen=True)
class GetMetadataUpdateEvent(SourceEvent):
    """Sent by a reader at start-up: asks the enumerator for the current metadata."""


@dataclass(frozen=True)
class SplitsFinishedEvent(SourceEvent):
    """Sent by a reader when bounded splits reached their stopping offsets."""

    split_ids: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class StandbySplitsEvent(SourceEvent):
    """The complete set of splits a reader stands by for (replaces the previous set).

    Each split starts at its last checkpointed (or delivered) position: the reader keeps a connected client
    for their clusters so that, when their active reader fails, it takes them over without a cold start.
    """

    splits: tuple[KafkaPartitionSplit, ...] = ()


@dataclass(frozen=True)
class SplitsPausedEvent(SourceEvent):
    """Watermark alignment: the complete set of splits of the source to hold now (their watermark runs more
    than the allowed drift ahead of the group's); every other split reads. Sent to every reader whenever
    the set changes; a reader pauses those it reads at the client (``Consumer.pause``), and a split it gets
    later is paused as it is assigned."""

    split_ids: frozenset[str] = field(default_factory=frozenset)
    limit_ms: int | None = None
    """The group's watermark plus the allowed drift: a fetcher also pauses a split whose fetched records
    take its watermark past it, without waiting for the next set (None: no limit known)."""
