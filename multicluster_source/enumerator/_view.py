"""The multi-cluster enumerator's status, as the admin server and tests see it (coordinator thread)."""

from __future__ import annotations

from typing import Any

from multicluster_source.enumerator._copies import blocked_topics


def enumerator_status(e: Any) -> dict[str, Any]:
    """A JSON-ready view of the multi-cluster enumerator ``e`` (its own fields, read on its thread):
    metadata, splits and their readers, placement, handovers."""
    enumerators = e._clusters.enumerators()
    return {
        "metadata_version": e._version,
        "clusters": {
            cid: {
                "bootstrap_servers": md.bootstrap_servers,
                "topics": sorted(md.topics),
                "error": enumerators[cid].current_error() if cid in enumerators else None,
            }
            for cid, md in sorted(e._metadata.items())
        },
        "splits": {sid: e._owner.get(sid) for sid in sorted(e._splits)},
        "placement": e._assigner.status(),
        "live_readers": sorted(e._assigner.alive),
        "failovers": list(e.failovers),
        "finished": sorted(e._finished),
        "retained": sorted(e._removed),
        "metadata_failures_in_a_row": e._follower.failures,
        "missing_streams": list(e.missing_streams),
        "last_reconciliation": e.last_reconciliation,
        "handovers": e._handovers.status(),
        "handovers_pending": sorted(e._handovers.pending),
        "replica_topics_held": blocked_topics(e._declared, e._metadata),
    }
