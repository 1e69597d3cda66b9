"""The multi-cluster enumerator's checkpointed state and its versioned serialization.

Version 1 (JSON)::

    {"version": 1,
     "splits":   [<split v1>, ...],                     # active splits (finished ones included)
     "finished": ["<split id>", ...],
     "removed":  [{"split": <split v1>, "removed_at_ms": <int>}, ...],   # kept for the re-add retention
     "seen_topics": {"<cluster id>": ["<topic>", ...]},
     "metadata_version": <int>,
     "replicas": {"version": 1, ...}}                      # optional: replica handovers (_replica_state)

Cluster properties are never stored (they may hold secrets); restore reads fresh metadata from the service.
Readers of a newer version refuse older-incompatible input with :class:`CheckpointError`; older versions are
upgraded on read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from multicluster_source.exceptions import CheckpointError
from multicluster_source.framework._split import (
    KafkaPartitionSplit,
    make_split_id,
    split_from_dict,
    split_to_dict,
)

ENUMERATOR_STATE_VERSION = 1


@dataclass(frozen=True)
class RemovedSplit:
    """A split whose cluster or topic left the metadata, kept so that a re-add resumes where it was."""

    split: KafkaPartitionSplit
    removed_at_ms: int


@dataclass(frozen=True)
class EnumeratorState:
    """A snapshot of what the multi-cluster enumerator knows."""

    splits: tuple[KafkaPartitionSplit, ...] = ()
    finished: frozenset[str] = frozenset()
    removed: tuple[RemovedSplit, ...] = ()
    seen_topics: dict[str, frozenset[str]] = field(default_factory=dict)
    metadata_version: int = 0
    replicas: dict[str, Any] | None = None
    """The ``replicas`` section as written (:mod:`._replica_state` reads it); None: no handover known."""

    def to_dict(self) -> dict[str, Any]:
        """The current JSON-ready form."""
        return {
            "version": ENUMERATOR_STATE_VERSION,
            "splits": [split_to_dict(s) for s in sorted(self.splits, key=lambda s: s.split_id)],
            "finished": sorted(self.finished),
            "removed": [
                {"split": split_to_dict(r.split), "removed_at_ms": r.removed_at_ms}
                for r in sorted(self.removed, key=lambda r: r.split.split_id)
            ],
            "seen_topics": {c: sorted(t) for c, t in sorted(self.seen_topics.items())},
            "metadata_version": self.metadata_version,
        } | ({"replicas": self.replicas} if self.replicas else {})

    @staticmethod
    def from_dict(data: Any) -> EnumeratorState:
        """Read any known version."""
        if not isinstance(data, dict):
            raise CheckpointError("enumerator state must be an object")
        version = data.get("version")
        if version != 1:
            raise CheckpointError(
                f"unknown enumerator state version {version!r} (this library reads up to "
                f"{ENUMERATOR_STATE_VERSION})"
            )
        try:
            return EnumeratorState(
                splits=tuple(split_from_dict(s) for s in data.get("splits", [])),
                finished=frozenset(str(s) for s in data.get("finished", [])),
                removed=tuple(
                    RemovedSplit(split_from_dict(r["split"]), int(r["removed_at_ms"]))
                    for r in data.get("removed", [])
                ),
                seen_topics={str(c): frozenset(map(str, t)) for c, t in data.get("seen_topics", {}).items()},
                metadata_version=int(data.get("metadata_version", 0)),
                replicas=data.get("replicas"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"malformed enumerator state: {exc}") from exc

    def with_positions(self, positions: dict[str, int]) -> EnumeratorState:
        """The same state with every split starting at its checkpointed position (where one exists)."""

        def moved(split: KafkaPartitionSplit) -> KafkaPartitionSplit:
            pos = positions.get(split.split_id)
            return split if pos is None else split.starting_at(pos)

        return EnumeratorState(
            splits=tuple(moved(s) for s in self.splits),
            finished=self.finished,
            removed=tuple(RemovedSplit(moved(r.split), r.removed_at_ms) for r in self.removed),
            seen_topics=self.seen_topics,
            metadata_version=self.metadata_version,
            replicas=self.replicas,
        )


def state_split_ids(state: Mapping[str, Any]) -> set[str]:
    """Split ids of every split, active (``splits``) or retained (``removed``), in a serialized enumerator
    state; only the fields that name a split are read."""
    splits = [*state.get("splits", []), *(r["split"] for r in state.get("removed", []))]
    return {make_split_id(s["cluster"], s["topic"], s["partition"]) for s in splits}
