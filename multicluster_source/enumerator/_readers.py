"""Handing splits to readers: registration, assignment, standby readers and failover.

:class:`ReaderHandout` sends each reader what the :class:`SplitAssigner` placed on it (holding it back until
the reader asked for metadata), keeps the standby readers told what they stand by for, and moves a failed
reader's splits to their standbys or the least-loaded live readers. It works on the multi-cluster
enumerator's split table and finished set, which the enumerator shares with it. Coordinator thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from multicluster_source.enumerator._assignment import SplitAssigner
from multicluster_source.enumerator._settings import EnumeratorSettings
from multicluster_source.enumerator._split_table import SplitTable
from multicluster_source.exceptions import SourceFailedError
from multicluster_source.framework._events import MetadataUpdateEvent, SourceEvent, StandbySplitsEvent
from multicluster_source.framework._interfaces import SplitEnumeratorContext
from multicluster_source.framework._split import KafkaPartitionSplit

_log = logging.getLogger("multicluster_source.enumerator")


class ReaderHandout:
    """What each reader was sent or waits for: active splits, standby splits, the end of the splits."""

    def __init__(
        self,
        context: SplitEnumeratorContext,
        settings: EnumeratorSettings,
        assigner: SplitAssigner,
        splits: SplitTable,
        finished: set[str],
    ) -> None:
        self._ctx = context
        self._s = settings
        self._assigner = assigner
        self._owner = assigner.owner
        self._splits = splits
        self._finished = finished
        self._registered: set[int] = set()
        self._unsent: dict[int, list[KafkaPartitionSplit]] = {}
        self._standby_sent: dict[int, frozenset[tuple[str, int]]] = {}
        self.no_more_splits = False
        """True once every reader was (or, registering later, will be) told that no split follows."""
        self.failovers: list[dict[str, Any]] = []
        """One record per failed reader: when, how many splits moved, to which readers."""

    def broadcast(self, event: SourceEvent) -> None:
        """Send ``event`` to every registered reader."""
        for reader in sorted(self._registered):
            self._ctx.send_event_to_reader(reader, event)

    def signal_no_more_splits(self) -> None:
        """Tell every reader, now or when it registers, that no split follows (bounded)."""
        self.no_more_splits = True
        for reader in sorted(self._registered):
            self._ctx.signal_no_more_splits(reader)

    def register(self, reader: int, metadata: MetadataUpdateEvent) -> None:
        """A reader asked for metadata: answer it, then hand it what waits for it."""
        if reader not in self._assigner.alive:
            return
        self._registered.add(reader)
        self._ctx.send_event_to_reader(reader, metadata)
        waiting = self._unsent.pop(reader, [])
        live = [s for s in waiting if self._owner.get(s.split_id) == reader]
        if live:
            self._ctx.assign_splits({reader: live})
        if self.no_more_splits:
            self._ctx.signal_no_more_splits(reader)
        self._standby_sent.pop(reader, None)
        self.place_standbys()

    def assign(self, splits: Sequence[KafkaPartitionSplit]) -> None:
        """Place new splits on readers, send them, and place standbys again."""
        if not splits:
            return
        assignment = self._assigner.place(splits, self._finished)
        self._send(assignment)
        self.place_standbys()

    def _send(self, assignment: Mapping[int, Sequence[KafkaPartitionSplit]]) -> None:
        ready = {r: list(s) for r, s in assignment.items() if r in self._registered}
        for reader, waiting in assignment.items():
            if reader not in self._registered:
                self._unsent.setdefault(reader, []).extend(waiting)
        if ready:
            self._ctx.assign_splits(ready)

    def place_standbys(self) -> None:
        """Recompute the standbys of the active splits; tell each registered reader whose set changed."""
        if self._assigner.num_standby <= 0:
            return
        active = [sid for sid in self._splits if sid not in self._finished and sid in self._owner]
        per_reader = self._assigner.place_standbys(active)
        positions = self._ctx.delivered_positions(sorted({sid for ids in per_reader.values() for sid in ids}))
        for reader, ids in per_reader.items():
            splits = tuple(
                self._splits[sid].starting_at(positions.get(sid, self._splits[sid].starting_offset))
                for sid in sorted(ids)
            )
            key = frozenset((s.split_id, s.starting_offset) for s in splits)
            if reader in self._registered and self._standby_sent.get(reader) != key:
                self._standby_sent[reader] = key
                self._ctx.send_event_to_reader(reader, StandbySplitsEvent(splits))

    def reader_failed(self, reader: int) -> bool:
        """Move a failed reader's splits to their standbys (or other live readers), resuming each at the
        position the caller reached; place new standbys. False when nothing moved: the reader was not
        alive, or it was the last one (then the source fails)."""
        if reader not in self._assigner.alive:
            return False
        lost = self._assigner.reader_lost(reader)
        self._registered.discard(reader)
        self._unsent.pop(reader, None)
        self._standby_sent.pop(reader, None)
        if not self._assigner.alive:
            self._ctx.fail(SourceFailedError(f"source {self._s.source_name}: every reader failed"))
            return False
        moving = [sid for sid in lost if sid not in self._finished and sid in self._splits]
        fence = getattr(self._ctx, "fence_positions", None)
        unfence = getattr(self._ctx, "unfence_positions", None)
        if fence is not None and unfence is not None and moving:
            # fenced and at once assigned anew, so guarded: what the failed reader fetched and left in the
            # hand-off is handed out only past the position the caller reached, never again from the standby
            positions = {sid: offset for sid, (offset, _ts) in fence(moving).items()}
            unfence(moving)
        else:
            positions = self._ctx.delivered_positions(moving)
        assignment: dict[int, list[KafkaPartitionSplit]] = {}
        load = self._assigner.loads(self._finished)
        for sid in moving:
            split = self._splits[sid].starting_at(positions.get(sid, self._splits[sid].starting_offset))
            self._splits.put(split)
            target = self._assigner.standby_target(sid)
            if target is None:
                target = min(sorted(self._assigner.alive), key=lambda r: (load[r], r))
                self._assigner.reasons[sid] = f"failover from reader {reader}: least loaded"
            else:
                self._assigner.reasons[sid] = f"failover from reader {reader}: standby"
            load[target] += 1
            self._owner[sid] = target
            assignment.setdefault(target, []).append(split)
        for sid in lost:  # finished splits keep an owner for the record
            if sid not in self._owner and sid in self._splits:
                self._owner[sid] = min(self._assigner.alive)
        clusters = sorted({self._splits[sid].cluster_id for sid in moving})
        for cid in clusters:
            self._s.metrics.failover(cid)
        self.failovers.append(
            {
                "reader": reader,
                "at_ms": int(self._s.clock() * 1000),
                "splits": len(moving),
                "to": {r: len(v) for r, v in sorted(assignment.items())},
            }
        )
        _log.warning(
            "source=%s: reader %d failed; %d splits of clusters %s move to readers %s",
            self._s.source_name,
            reader,
            len(moving),
            clusters,
            sorted(assignment),
        )
        self._send(assignment)
        self.place_standbys()
        return True
