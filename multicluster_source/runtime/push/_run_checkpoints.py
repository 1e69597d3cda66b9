"""The checkpoints of a push run (``source.run``): taken on the driver's thread, written off it.

The driver's thread handles every message of the workers (positions, events, heartbeats), so a checkpoint must
not hold it for what grows with the number of splits. :meth:`RunCheckpoints.take` has the source's
:class:`~multicluster_source.runtime.core._checkpointer.Checkpointer` capture the positions that moved since
the last checkpoint (the driver's position tracker, fed by the workers' ``Delivered`` messages) and the
enumerator's state; serializing, writing into the run's
:class:`~multicluster_source.framework._storage.CheckpointStorage` and committing offsets run on its thread
``mcs-checkpoint-<source>``, one checkpoint after the other. A checkpoint holds exactly the positions of the
``Delivered`` messages the driver handled before it was taken (what the handlers returned from), whatever
arrives while it is written.

A run with an exactly-once sink and no storage still "takes" checkpoints, that write nothing: they commit the
positions its workers committed with their results to the source clusters, for lag monitoring.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from multicluster_source.framework._storage import CheckpointStorage
from multicluster_source.runtime.core._checkpointer import Checkpointer
from multicluster_source.runtime.core._handoff import PositionTracker
from multicluster_source.runtime.push._control import RunControl, RunProgress


class RunCheckpoints:
    """A push run's checkpoints into ``storage`` (none without one, unless ``offsets_only``: they then
    only commit offsets), counted on ``control``."""

    def __init__(
        self, name: str, storage: CheckpointStorage | None, control: RunControl, *, offsets_only: bool = False
    ) -> None:
        self._name = name
        self._storage = storage
        self._offsets_only = offsets_only
        self._progress = RunProgress(control)
        self._checkpointer: Checkpointer | None = None
        self.last_id = 0
        """The id of the last checkpoint taken (or restored from)."""
        self.written = 0
        """Checkpoints written by this run."""
        self.last_written: str | None = None
        """Where the last one went (a path or object key)."""

    def start(self, coordinator: Any, enumerator: Any, tracker: PositionTracker) -> None:
        """Checkpoints can be taken from now on (the enumerator runs on ``coordinator``)."""
        if self._storage is not None or self._offsets_only:
            self._checkpointer = Checkpointer(self._name, coordinator, enumerator, tracker)

    def take(self, *, wait: bool = True, on_failure: Callable[[BaseException], None] | None = None) -> None:
        """Take a checkpoint of what the driver handled so far (on the driver's thread: a capture). ``wait``:
        return once it is durable and its offsets committed (or the commit timed out, which is logged), or
        raise what writing it raised. Else (a periodic one) return at once, take none while the last one is
        under way, and call ``on_failure`` (on the checkpoint thread) if writing it fails."""
        checkpointer = self._checkpointer
        if checkpointer is None or (not wait and checkpointer.busy):
            return
        self.last_id += 1
        done = checkpointer.take(self.last_id, self._write)
        if wait:
            done.result()
        elif on_failure is not None:
            done.add_done_callback(lambda f: _report(f.exception(), on_failure))

    def close(self) -> None:
        """Finish the checkpoints taken so far (written, commits waited for at most a second more once
        closing), then join the checkpoint thread: before the enumerator stops. Idempotent."""
        if self._checkpointer is not None:
            self._checkpointer.close()

    def _write(self, checkpoint_id: int, state: dict[str, Any], positions: dict[str, int]) -> str | None:
        if self._storage is None:  # offsets only: nothing to write
            return None
        written = self._storage.write(checkpoint_id, self._name, state, positions)
        self.last_written = written
        self.written += 1
        self._progress.checkpoints(self.written)
        return written


def _report(error: BaseException | None, on_failure: Callable[[BaseException], None]) -> None:
    if error is not None:
        on_failure(error)
