"""The offset-sync history a translation needs, per origin partition (:class:`SyncStore`), and MirrorMaker 2's
rule over it (:meth:`SyncStore.lookup`).

MM2's syncs topic is compacted: only the newest sync of a partition survives the cleaner, so a translator
follows the syncs as they flow and keeps its own history, as MM2's ``OffsetSyncStore`` does. This one keeps,
per partition, the newest :data:`RECENT` syncs all, and older ones thinned out the further they lie in the
past (each time the history is full, a few syncs stay per power of two of age), at most :data:`MAX_SYNCS`
in all: positions near the live end translate as closely as the syncs allow, older ones still translate,
within a fraction of how far behind they are.

The rule (MM2's ``translateDownstream``): take the latest sync whose upstream offset is at or below the
position; equal -> its downstream offset (the copy of the record at the position: exact); else downstream
+ 1 (conservative: may repeat, never skips). The repeat bound of a conservative answer, assuming MM2 copied
each origin record once and nothing else writes to the replica topic: the copies after the sync's
downstream offset are of origin offsets above the sync's upstream one, so at most ``position - upstream -
1`` of them are of records below the position; where a later sync exists, also at most the replica offsets
between the two syncs. A bound of 0 (a sync for the record just before the position) is an exact answer.
"""

from __future__ import annotations

import bisect
import threading
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

from multicluster_source.replicas._codec import OffsetSync

__all__ = ["MAX_SYNCS", "RECENT", "Lookup", "SyncStore"]

MAX_SYNCS = 128
"""At most this many syncs are kept per origin partition, as two 8-byte offsets each: measured about 2 KB per
partition with a full history (20 MB for 10,000 partitions of whatever topics MM2 copies; MM2's own store
keeps 64 per partition)."""
RECENT = 32
"""The newest syncs of a partition, kept all."""


@dataclass(frozen=True)
class Lookup:
    """A position's place among a partition's syncs.

    ``before`` is the latest sync at or below the position (None: the position lies below every sync kept),
    ``after`` the earliest sync above it (None: none yet). ``to_offset``/``max_repeats``/``exact`` are the
    rule's answer when ``before`` exists.
    """

    position: int
    before: OffsetSync | None
    after: OffsetSync | None

    @property
    def to_offset(self) -> int | None:
        """MM2's translation: ``before.downstream`` (+1 unless ``before`` is at the position)."""
        if self.before is None:
            return None
        return self.before.downstream + (0 if self.before.upstream == self.position else 1)

    @property
    def max_repeats(self) -> int | None:
        """At most this many replica records from :attr:`to_offset` on copy records below the position."""
        if self.before is None:
            return None
        if self.before.upstream == self.position:
            return 0
        bound = self.position - self.before.upstream - 1
        if self.after is not None:
            bound = min(bound, max(0, self.after.downstream - self.before.downstream - 1))
        return bound

    @property
    def exact(self) -> bool:
        """Whether the answer repeats nothing (a sync at the position, or at the record just before)."""
        return self.max_repeats == 0


class _Partition:
    """One origin partition's syncs as two parallel ascending arrays of offsets (no object per sync kept)."""

    __slots__ = ("downstream", "partition", "topic", "upstream")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition
        self.upstream = array("q")  # ascending; 8 bytes per offset
        self.downstream = array("q")

    def add(self, sync: OffsetSync) -> None:
        if self.upstream and (sync.upstream <= self.upstream[-1] or sync.downstream <= self.downstream[-1]):
            if sync.upstream == self.upstream[-1] and sync.downstream == self.downstream[-1]:
                return  # the same sync again (MM2 re-emits one after a restart)
            # MM2 copied again from an older position (a restart), or a topic was re-created: the syncs that
            # do not lie strictly below the new one describe copies it supersedes
            keep = 0
            while keep < len(self.upstream) and (
                self.upstream[keep] < sync.upstream and self.downstream[keep] < sync.downstream
            ):
                keep += 1
            del self.upstream[keep:], self.downstream[keep:]
        self.upstream.append(sync.upstream)
        self.downstream.append(sync.downstream)
        if len(self.upstream) > MAX_SYNCS:
            self._thin()

    def _thin(self) -> None:
        """Thin the older part out by age (the newest RECENT all stay, and the oldest one).

        An older sync's age is how far its upstream offset lies below the newest's; ages of one power of
        two form a group, and each group keeps a few syncs spread over it (the same number each, what fits
        half the room left). So a position's nearest sync below it lies within about a fraction of its age
        whatever the history's length: positions a few hundred records behind MM2 keep a close sync, ones
        far behind a proportionally farther one. Dropping every other older sync at each thinning, as this
        did before, left nothing between the oldest sync and the last few hundred records of a busy
        partition: a consumer a thousand records behind got the oldest sync, and a start far back.
        """
        older = len(self.upstream) - RECENT
        newest = self.upstream[-1]
        groups: dict[int, list[int]] = {}
        for i in range(older):
            groups.setdefault((newest - self.upstream[i]).bit_length(), []).append(i)
        each = max(1, (MAX_SYNCS - RECENT) // 2 // len(groups))
        kept = [0]
        for age in sorted(groups, reverse=True):  # the oldest group first: offsets stay ascending
            members = groups[age]
            if len(members) <= each:
                picked = members
            elif each == 1:
                picked = [members[-1]]  # the group's newest: the closest sync below the younger positions
            else:
                picked = [members[round(j * (len(members) - 1) / (each - 1))] for j in range(each)]
            kept.extend(i for i in picked if i != kept[-1])
        kept.extend(range(older, len(self.upstream)))
        self.upstream = array("q", (self.upstream[i] for i in kept))
        self.downstream = array("q", (self.downstream[i] for i in kept))

    def sync(self, i: int) -> OffsetSync:
        return OffsetSync(self.topic, self.partition, self.upstream[i], self.downstream[i])

    def syncs(self) -> list[OffsetSync]:
        return [self.sync(i) for i in range(len(self.upstream))]

    def lookup(self, position: int) -> Lookup:
        i = bisect.bisect_right(self.upstream, position)  # syncs [0, i) are at or below the position
        before = self.sync(i - 1) if i > 0 else None
        after = self.sync(i) if i < len(self.upstream) else None
        return Lookup(position, before, after)


class SyncStore:
    """Offset syncs per origin ``(topic, partition)``; thread-safe (the follower adds, translators look)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self.added = 0
        """Syncs added so far."""

    def add(self, sync: OffsetSync) -> None:
        """Adds one sync (in the order MM2 wrote them)."""
        with self._lock:
            part = self._partitions.get((sync.topic, sync.partition))
            if part is None:
                part = self._partitions[(sync.topic, sync.partition)] = _Partition(sync.topic, sync.partition)
            part.add(sync)
            self.added += 1

    def add_all(self, syncs: Iterable[OffsetSync]) -> None:
        """Adds syncs in order."""
        for sync in syncs:
            self.add(sync)

    def lookup(self, topic: str, partition: int, position: int) -> Lookup:
        """The position's place among the partition's syncs (both sides None when it has none)."""
        with self._lock:
            part = self._partitions.get((topic, partition))
            return part.lookup(position) if part is not None else Lookup(position, None, None)

    def latest(self, topic: str, partition: int) -> OffsetSync | None:
        """The newest sync of the partition."""
        with self._lock:
            part = self._partitions.get((topic, partition))
            return part.sync(len(part.upstream) - 1) if part is not None and part.upstream else None

    def syncs(self, topic: str, partition: int) -> list[OffsetSync]:
        """The syncs kept for the partition, oldest first."""
        with self._lock:
            part = self._partitions.get((topic, partition))
            return part.syncs() if part is not None else []

    def partitions(self) -> int:
        """How many origin partitions have syncs."""
        with self._lock:
            return len(self._partitions)
