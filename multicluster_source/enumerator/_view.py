"""The multi-cluster enumerator's status, as the admin server and tests see it (coordinator thread)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from multicluster_source.enumerator._assignment import SplitAssigner
from multicluster_source.enumerator._copies import blocked_topics
from multicluster_source.enumerator._handover import ReplicaHandovers
from multicluster_source.enumerator._kafka import KafkaClusterEnumerator
from multicluster_source.metadata._model import ClusterMetadata


def enumerator_status(
    *,
    version: int,
    metadata: Mapping[str, ClusterMetadata],
    declared: Mapping[str, ClusterMetadata],
    enumerators: Mapping[str, KafkaClusterEnumerator],
    splits: Iterable[str],
    owner: Mapping[str, int],
    assigner: SplitAssigner,
    finished: Iterable[str],
    retained: Iterable[str],
    metadata_failures_in_a_row: int,
    failovers: list[dict[str, Any]],
    missing_streams: list[str],
    last_reconciliation: dict[str, Any] | None,
    handovers: ReplicaHandovers,
) -> dict[str, Any]:
    """A JSON-ready view of the multi-cluster enumerator (its own fields, given on its thread): metadata,
    splits and their readers, placement, handovers."""
    return {
        "metadata_version": version,
        "clusters": {
            cid: {
                "bootstrap_servers": md.bootstrap_servers,
                "topics": sorted(md.topics),
                "error": enumerators[cid].current_error() if cid in enumerators else None,
            }
            for cid, md in sorted(metadata.items())
        },
        "splits": {sid: owner.get(sid) for sid in sorted(splits)},
        "placement": assigner.status(),
        "live_readers": sorted(assigner.alive),
        "failovers": list(failovers),
        "finished": sorted(finished),
        "retained": sorted(retained),
        "metadata_failures_in_a_row": metadata_failures_in_a_row,
        "missing_streams": list(missing_streams),
        "last_reconciliation": last_reconciliation,
        "handovers": handovers.status(),
        "handovers_pending": sorted(handovers.pending),
        "replica_topics_held": blocked_topics(declared, metadata),
    }
