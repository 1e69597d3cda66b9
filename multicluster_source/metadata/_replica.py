"""A cluster's declaration that its topics copy another cluster's (``replicaOf`` in the metadata)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

OffsetsMode = Literal["mirrormaker2", "identical", "timestamp"]
"""How positions map from the origin topic to its replica (the ``replicaOf.offsets`` key)."""

SyncsLocation = Literal["source", "target"]
"""Where MirrorMaker 2 writes its offset syncs: on the origin (``source``, MM2's default) or on the replica
(``target``, ``offset-syncs.topic.location=target``, what a disaster-recovery set-up needs)."""


@dataclass(frozen=True)
class ReplicaOf:
    """A cluster's declaration that some of its topics copy topics of another (origin) cluster.

    ``topics`` maps replica topic -> origin topic explicitly; topics not in it follow MM2's default
    replication policy (``<origin cluster>.<topic>`` copies ``<topic>``), so a replica cluster's own topics
    (no ``<origin>.`` prefix, not in the mapping) are ordinary topics. ``syncs_topic`` defaults to
    ``mm2-offset-syncs.<replica cluster id>.internal`` when ``syncs_location`` is ``source`` and
    ``mm2-offset-syncs.<origin cluster id>.internal`` when it is ``target``; ``checkpoints_topic`` to
    ``<origin cluster id>.checkpoints.internal`` (on the replica). ``failover`` marks the origin as failed
    (``replicaOf.failover: true``): its copied topics are not read even where the metadata still lists them,
    and positions are translated without contacting it.
    """

    cluster: str
    offsets: OffsetsMode = "mirrormaker2"
    topics: Mapping[str, str] = field(default_factory=dict)
    syncs_location: SyncsLocation = "source"
    syncs_topic: str | None = None
    checkpoints_topic: str | None = None
    failover: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", MappingProxyType(dict(self.topics)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            ReplicaOf,
            (
                self.cluster,
                self.offsets,
                dict(self.topics),
                self.syncs_location,
                self.syncs_topic,
                self.checkpoints_topic,
                self.failover,
            ),
        )

    def __hash__(self) -> int:
        return hash(
            (
                self.cluster,
                self.offsets,
                tuple(sorted(self.topics.items())),
                self.syncs_location,
                self.syncs_topic,
                self.checkpoints_topic,
                self.failover,
            )
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReplicaOf):
            return NotImplemented
        same: bool = self.__reduce__()[1] == other.__reduce__()[1]
        return same

    def origin_topic(self, replica_topic: str) -> str | None:
        """The origin topic ``replica_topic`` copies, or None when it is the replica cluster's own topic."""
        if replica_topic in self.topics:
            return self.topics[replica_topic]
        prefix = f"{self.cluster}."
        if replica_topic.startswith(prefix) and len(replica_topic) > len(prefix):
            return replica_topic[len(prefix) :]
        return None

    def offset_syncs_topic(self, replica_cluster_id: str) -> str:
        """The offset-syncs topic's name (on the origin for ``source``, on the replica for ``target``)."""
        if self.syncs_topic:
            return self.syncs_topic
        other = replica_cluster_id if self.syncs_location == "source" else self.cluster
        return f"mm2-offset-syncs.{other}.internal"

    def mm2_checkpoints_topic(self) -> str:
        """MM2's checkpoints topic on the replica cluster."""
        return self.checkpoints_topic or f"{self.cluster}.checkpoints.internal"
