"""What the pull stream and the push driver do alike with their enumerator: checkpoint it, and stop it.

Both run on the thread that owns the run (the caller's thread of a stream, the driver's thread of a push
run); every enumerator call goes through the coordinator's mailbox, as the enumerator assumes one thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from multicluster_source.enumerator._state import state_split_ids
from multicluster_source.metadata._model import KafkaMetadataService
from multicluster_source.runtime._local import Coordinator

_log = logging.getLogger("multicluster_source.runtime")
T = TypeVar("T")
COMMIT_WAIT_S = 30.0


def take_checkpoint(
    coordinator: Coordinator,
    enumerator: Any,
    checkpoint_id: int,
    positions: Mapping[str, int],
    write: Callable[[dict[str, Any], dict[str, int]], T],
) -> T:
    """Snapshot the enumerator, ``write(state, positions)`` the checkpoint (positions of the splits the
    state keeps only), then have the enumerator commit those offsets; returns what ``write`` returned once
    the commit is done or timed out (which the enumerator logs)."""
    state = coordinator.call_sync(lambda: enumerator.snapshot_state(checkpoint_id))
    ids = state_split_ids(state)
    kept = {sid: pos for sid, pos in positions.items() if sid in ids}
    written = write(state, kept)
    wait = coordinator.call_sync(lambda: enumerator.notify_checkpoint_complete(checkpoint_id, kept))
    wait(COMMIT_WAIT_S)
    return written


def stop_enumeration(
    name: str,
    coordinator: Coordinator | None,
    enumerator: Any,
    metadata_service: KafkaMetadataService | None,
) -> None:
    """Close the enumerator on its thread, stop the coordinator, close the metadata service; a failure of
    one is logged and does not keep the others open."""
    if coordinator is not None:
        if enumerator is not None:
            try:
                coordinator.call_sync(enumerator.close, timeout=30)
            except Exception:
                _log.exception("source=%s: enumerator close failed", name)
        coordinator.stop()
    try:
        if metadata_service is not None:
            metadata_service.close()
    except Exception:
        _log.exception("source=%s: metadata service close failed", name)
