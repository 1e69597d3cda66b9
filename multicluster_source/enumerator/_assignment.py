"""Which reader reads which split, and which readers stand by for it.

Rules, in order:

* with reader racks and a known leader rack, a split goes to the least-loaded reader in its leader's rack,
  unless that reader already has more splits than the least-loaded reader of all (balance wins over
  locality, so loads never differ by more than one); the reason is kept for the status and a debug log;
* otherwise ``global`` mode takes the least-loaded reader, and ``per_cluster`` mode spreads each topic's
  partitions round-robin from a stable hash of ``cluster/topic`` (as Kafka's own source does per cluster);
* standbys (``num.standby.replicas``) are placed by a :class:`RackAwareStandbyAssignor` over racks, then on
  the least standby-loaded live reader of the chosen rack that is not the split's active reader.

Only live readers are chosen; a failed reader is taken out for good. Coordinator thread only.
"""

from __future__ import annotations

import logging
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from multicluster_source.enumerator._standby import RackAwareStandbyAssignor
from multicluster_source.framework._split import KafkaPartitionSplit

_log = logging.getLogger("multicluster_source.enumerator")


class SplitAssigner:
    """Owner and standby bookkeeping for the multi-cluster enumerator."""

    def __init__(
        self,
        parallelism: int,
        mode: Literal["per_cluster", "global"],
        reader_racks: Mapping[int, str | None],
        num_standby: int = 0,
        standby_assignor: RackAwareStandbyAssignor | None = None,
    ) -> None:
        self.parallelism = parallelism
        self.mode = mode
        self.racks = {r: rack for r, rack in reader_racks.items() if rack and 0 <= r < parallelism}
        self.num_standby = num_standby
        self.standby_assignor = standby_assignor
        self.alive: set[int] = set(range(parallelism))
        self.owner: dict[str, int] = {}
        self.reasons: dict[str, str] = {}
        self.standby: dict[str, list[int]] = {}
        self.leader_rack: dict[str, str | None] = {}

    @property
    def rack_aware(self) -> bool:
        """Whether readers have racks."""
        return bool(self.racks)

    def loads(self, finished: Iterable[str] = ()) -> list[int]:
        """Active, unfinished splits per reader."""
        load = [0] * self.parallelism
        for reader, count in Counter(self.owner.values()).items():  # counted in C: O(splits) but fast
            load[reader] += count
        owner = self.owner
        for sid in set(finished):
            done_by = owner.get(sid)
            if done_by is not None:
                load[done_by] -= 1
        return load

    def place(
        self, splits: Sequence[KafkaPartitionSplit], finished: Iterable[str] = ()
    ) -> dict[int, list[KafkaPartitionSplit]]:
        """Choose an owner for each split (recorded); returns reader -> splits."""
        load = self.loads(finished)
        out: dict[int, list[KafkaPartitionSplit]] = {}
        for split in sorted(splits, key=lambda s: s.split_id):
            reader, reason = self._choose(split, load)
            load[reader] += 1
            self.owner[split.split_id] = reader
            self.reasons[split.split_id] = reason
            out.setdefault(reader, []).append(split)
            _log.debug("split %s -> reader %d (%s)", split.split_id, reader, reason)
        return out

    def _choose(self, split: KafkaPartitionSplit, load: list[int]) -> tuple[int, str]:
        alive = sorted(self.alive)
        least = min(alive, key=lambda r: (load[r], r))
        leader_rack = self.leader_rack.get(split.split_id)
        if self.racks and leader_rack:
            local = [r for r in alive if self.racks.get(r) == leader_rack]
            if not local:
                return least, f"balanced: no reader in leader rack {leader_rack}"
            best = min(local, key=lambda r: (load[r], r))
            if load[best] <= load[least]:
                return best, f"leader rack {leader_rack}"
            return least, f"balance over locality: readers of leader rack {leader_rack} are fuller"
        if self.racks:
            return least, "balanced: leader rack unknown"
        if self.mode == "global":
            return least, "global: least loaded"
        start = zlib.crc32(f"{split.cluster_id}/{split.topic}".encode()) % len(alive)
        return alive[(start + split.partition) % len(alive)], "per_cluster: round-robin"

    def release(self, split_ids: Iterable[str]) -> None:
        """Forget splits that left."""
        for sid in split_ids:
            self.owner.pop(sid, None)
            self.reasons.pop(sid, None)
            self.standby.pop(sid, None)
            self.leader_rack.pop(sid, None)

    def reader_lost(self, reader: int) -> list[str]:
        """Take a failed reader out; returns the split ids it owned (now without an owner)."""
        self.alive.discard(reader)
        lost = sorted(sid for sid, r in self.owner.items() if r == reader)
        for sid in lost:
            del self.owner[sid]
        return lost

    def standby_target(self, split_id: str) -> int | None:
        """The first live standby reader of a split, if it has one."""
        for reader in self.standby.get(split_id, []):
            if reader in self.alive:
                return reader
        return None

    def place_standbys(self, active: Iterable[str]) -> dict[int, set[str]]:
        """Recompute standbys for the given active split ids; returns reader -> standby split ids."""
        self.standby = {}
        per_reader: dict[int, set[str]] = {r: set() for r in sorted(self.alive)}
        if self.num_standby <= 0 or self.standby_assignor is None or not self.racks:
            return per_reader
        split_racks = {
            sid: rack for sid in active if (rack := self.racks.get(self.owner.get(sid, -1))) is not None
        }
        live_racks = {self.racks[r] for r in self.alive if r in self.racks}
        if not split_racks or not live_racks:
            return per_reader
        placed = self.standby_assignor.assign_standbys(split_racks, live_racks)
        load = dict.fromkeys(per_reader, 0)
        for rack in sorted(placed):
            members = [r for r in sorted(self.alive) if self.racks.get(r) == rack]
            for sid in sorted(placed[rack]):
                owner = self.owner.get(sid)
                choices = [r for r in members if r != owner and r not in self.standby.get(sid, [])]
                if not choices:
                    continue
                reader = min(choices, key=lambda r: (load[r], r))
                load[reader] += 1
                self.standby.setdefault(sid, []).append(reader)
                per_reader[reader].add(sid)
        return per_reader

    def status(self) -> dict[str, dict[str, object]]:
        """Per split: reader, reason, leader rack and standbys."""
        return {
            sid: {
                "reader": reader,
                "reason": self.reasons.get(sid),
                "leader_rack": self.leader_rack.get(sid),
                "standby_readers": self.standby.get(sid, []),
            }
            for sid, reader in sorted(self.owner.items())
        }
