"""The push driver's coordinator: the enumerator's context whose readers sit behind links to workers.

:class:`LinkedCoordinator` is the local runtime's
:class:`~multicluster_source.runtime.core._local.Coordinator` (the mailbox thread, timers, I/O threads, the
position tracker) whose assignments, events and fences become messages to the workers
(:mod:`multicluster_source.runtime.core._messages`). Called on the coordinator thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from multicluster_source.framework._events import SourceEvent
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.runtime.core._local import Coordinator
from multicluster_source.runtime.core._messages import AssignSplits, EventToReader, FenceSplits, NoMoreSplits


class LinkedCoordinator(Coordinator):
    """The push driver's coordinator: its readers are behind links, so assignments and events become
    messages to the workers."""

    def __init__(self, *args: Any, send: Callable[[int, object], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._send_to = send

    def assign_splits(self, assignment: Mapping[int, Sequence[KafkaPartitionSplit]]) -> None:
        """Send splits to readers."""
        self._observe(assignment, None)
        for reader, splits in assignment.items():
            self._send_to(reader, AssignSplits(tuple(splits)))

    def send_event_to_reader(self, reader: int, event: SourceEvent) -> None:
        """Send an event to one reader."""
        self._observe(None, event)
        self._send_to(reader, EventToReader(event))

    def signal_no_more_splits(self, reader: int) -> None:
        """Tell a reader no more splits come."""
        self._send_to(reader, NoMoreSplits())

    def fence_positions(self, split_ids: Sequence[str]) -> dict[str, tuple[int, int | None]]:
        """Fence ``split_ids`` here (positions reported from now on are refused) and at every worker (which
        hands out none of their records from when it hears of it; its handler may have had some in between,
        which the position taken here does not cover: the bound of a push run)."""
        positions = super().fence_positions(split_ids)
        if split_ids:
            message = FenceSplits(tuple(split_ids))
            for reader in range(self._parallelism):
                self._send_to(reader, message)
        return positions
