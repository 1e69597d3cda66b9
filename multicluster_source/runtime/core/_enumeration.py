"""Stopping the enumerator, the same for the pull stream and the push driver (and the stream's readers with
its checkpoint thread). Both take checkpoints through :class:`~._checkpointer.Checkpointer`.

They run on the thread that owns the run (the caller's thread of a stream, the driver's thread of a push
run); every enumerator call goes through the coordinator's mailbox, as the enumerator assumes one thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from multicluster_source.enumerator._state import state_split_ids
from multicluster_source.framework._gcpause import stop_watchdog
from multicluster_source.metadata._model import KafkaMetadataService
from multicluster_source.runtime.core._checkpointer import Checkpointer
from multicluster_source.runtime.core._local import Coordinator, ReaderRunner
from multicluster_source.runtime.core._memory import release_freed_memory

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
    the commit is done or timed out (which the enumerator logs).

    The checkpoint of 0.2, all of it on the calling thread: no runtime uses it any more (the stream and the
    push driver use :class:`~._checkpointer.Checkpointer`); kept as the *before* of
    ``benchmarks/_scale_sweep.py``."""
    state = coordinator.call_sync(lambda: enumerator.snapshot_state(checkpoint_id))
    ids = state_split_ids(state)
    kept = {sid: pos for sid, pos in positions.items() if sid in ids}
    written = write(state, kept)
    wait = coordinator.call_sync(lambda: enumerator.notify_checkpoint_complete(checkpoint_id, kept))
    wait(COMMIT_WAIT_S)
    return written


def stop_readers(runners: Sequence[ReaderRunner], checkpointer: Checkpointer | None) -> None:
    """Stop every started reader side by side (each closes its clients on its thread), finish the checkpoints
    taken so far meanwhile, then join every reader: as long as the slowest reader, not the sum of them."""
    started = [r for r in runners if r.reader is not None]
    for runner in started:
        runner.stop(wait=False)
    if checkpointer is not None:
        checkpointer.close()  # what was taken is written and committed before the enumerator stops
    for runner in started:
        runner.stop()


def stop_enumeration(
    name: str,
    coordinator: Coordinator | None,
    enumerator: Any,
    metadata_service: KafkaMetadataService | None,
) -> None:
    """Close the enumerator on its thread, stop the coordinator, close the metadata service; a failure of
    one is logged and does not keep the others open. Last (every client of the source is closed by now),
    give the memory they freed back to the system (:mod:`._memory`)."""
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
    stop_watchdog()  # the collector's (framework._gcpause), when no other source holds it off now
    release_freed_memory()
