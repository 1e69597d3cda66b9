"""The enumerator's state as of its last change, for checkpoints taken without waiting for its thread.

A checkpoint pairs the positions the caller was handed with the enumerator's state. Capturing that state on
the coordinator thread means waiting for it: for whatever it is busy with (assigning thousands of discovered
splits) and for two hand-overs of the GIL, while fetch threads keep it busy (5-10 ms each). Instead, the
coordinator publishes a frozen copy of its state after each change, and the caller's thread takes it when
nothing changed since: an attribute read.

Exactness: every change to the split table moves its version before the change is seen by any other
thread (a split is in the table before a reader is handed it), and every other change moves
:meth:`StatePublisher.changed` before it is made. The caller's thread reads the published copy and then
the current stamp: when they agree, no change was made between the publication and that read, so the copy
holds every split whose records the caller could have been handed. When they do not, the caller asks the
coordinator thread as before (:meth:`~multicluster_source.runtime.core._checkpointer.Checkpointer.take`).

The replicas section's timestamps of the last records delivered come from the runtime at the moment the
copy is taken (they move with every record, not with the enumerator's changes).

Threads: :meth:`changed` and :meth:`publish` run on the coordinator thread; :meth:`current` on any thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from multicluster_source.enumerator._replica_state import ReplicaState
from multicluster_source.enumerator._split_table import SplitTable
from multicluster_source.enumerator._state import EnumeratorState


class StatePublisher:
    """Keeps the last published state of one enumerator, with the stamp it was published at."""

    def __init__(
        self,
        splits: SplitTable,
        capture: Callable[[], EnumeratorState],
        replicas: Callable[[], ReplicaState],
        times: Callable[[], Mapping[str, int]],
    ) -> None:
        self._splits = splits
        self._capture = capture  # the state without its replicas section
        self._replicas = replicas  # the replicas section without the delivered timestamps
        self._times = times  # the delivered timestamps of the splits a replica copies (any thread)
        self._generation = 0
        self._published: tuple[EnumeratorState, ReplicaState, tuple[int, int]] | None = None

    def _stamp(self) -> tuple[int, int]:
        return self._splits.version, self._generation

    def changed(self) -> None:
        """Something besides the split table is about to change (coordinator thread)."""
        self._generation += 1

    def publish(self) -> None:
        """Publish the current state, unless it is already (coordinator thread)."""
        stamp = self._stamp()
        published = self._published
        if published is None or published[2] != stamp:
            self._published = (self._capture(), self._replicas(), stamp)

    def current(self) -> EnumeratorState | None:
        """The published state when nothing changed since it was published, else None (any thread)."""
        published = self._published
        if published is None or published[2] != self._stamp():
            return None
        state, replicas, _stamp = published
        times = self._times()
        if times:
            replicas = dataclasses.replace(replicas, last_times=dict(times))
        return dataclasses.replace(state, replicas=replicas.to_dict()) if replicas else state
