"""The ``mirrormaker2`` translator: MirrorMaker 2's offset syncs, the copy of the last record received, and
MM2's checkpoints.

For one origin split at position ``P`` (the next offset the caller has not received):

1. When the syncs can be followed (the origin is reachable, or they live on the replica), wait (up to
   ``wait_s`` for the whole call) until the follower has read the syncs topic to its end and MM2 has
   synced the last origin record below ``P`` (or a later one): the replica then holds that record's copy.
2. The sync rule (:mod:`._store`): a sync at ``P``, or at the last record before it, is exact; else the
   conservative start after the latest sync below ``P``, with its repeat bound.
3. With the origin reachable, the conservative answer is refined (:mod:`._match`): the origin record
   before ``P`` is read and its copy looked for from the conservative start; found, the split starts right
   after it (exact).
4. Without the origin (a failover), the last returned record's timestamp narrows the conservative start
   (:func:`._match.narrow_by_time`: MM2 keeps timestamps; exact where one record alone in the window has
   that time).
5. No sync at or below ``P``: on a failover MM2's checkpoint for the source's group, when it is at or below
   ``P`` (conservative, bound unknown); else the replica's log start (conservative: everything before the
   first sync may repeat), refined as in 3 or 4.

A look-up failing in 3 or 4 leaves the conservative answer standing (with the failure in its detail); a
passing failure is first asked again while the wait lasts (``BaseTranslator.translate``), and the
answer settles for the conservative start only in the attempt made once the wait is over.

The answer is never past the copy of a record the caller has not received, so nothing MM2 copied is
skipped; what MM2 had not copied when the origin went away is MM2's loss, not the translation's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from multicluster_source.framework._split import parse_split_id
from multicluster_source.metadata._model import ClusterMetadata
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.replicas._base import BaseTranslator
from multicluster_source.replicas._codec import Checkpoint
from multicluster_source.replicas._follow import SyncFollower, read_checkpoints
from multicluster_source.replicas._lookup import ClusterLookup, RecordCopy, ReplicaLookupError
from multicluster_source.replicas._match import Match, find_copy, last_record_before, narrow_by_time
from multicluster_source.replicas._model import OriginPosition, Translation, TranslationMode
from multicluster_source.replicas._store import Lookup, SyncStore

__all__ = ["MirrorMaker2Translator"]

_SCAN_TIMEOUT_S = 10.0


class MirrorMaker2Translator(BaseTranslator):
    """Translates by MirrorMaker 2's offset syncs, record matching and checkpoints (see the module text).

    ``start()`` starts the follower of the offset syncs (thread ``mcs-replica-<replica id>-syncs``);
    ``close()`` joins it and closes every client.
    """

    def __init__(
        self,
        replica_of: ReplicaOf,
        origin: ClusterMetadata,
        replica: ClusterMetadata,
        *,
        group_id: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(replica_of, origin, replica, group_id=group_id, properties=properties)
        self.origin_lookup = ClusterLookup(origin, self.properties, role="origin")
        self.store = SyncStore()
        syncs_on = origin if replica_of.syncs_location == "source" else replica
        self.follower = SyncFollower(
            syncs_on,
            replica_of.offset_syncs_topic(replica.cluster_id),
            self.store,
            replica_id=replica.cluster_id,
            properties=self.properties,
        )
        self._checkpoints: dict[tuple[str, int], Checkpoint] | None = None

    def start(self) -> None:
        """Starts following the offset syncs; returns at once."""
        self.follower.start()

    def close(self) -> None:
        """Joins the follower and closes every client. Idempotent."""
        self.follower.close()
        self.origin_lookup.close()
        super().close()

    def translate(
        self,
        handovers: Sequence[tuple[OriginPosition, str]],
        *,
        origin_reachable: bool,
        wait_s: float,
    ) -> list[Translation]:
        """One :class:`Translation` per pair, in order (MM2's checkpoints are read afresh for each call)."""
        self._checkpoints = None
        return super().translate(handovers, origin_reachable=origin_reachable, wait_s=wait_s)

    def batched_lookups(self) -> Sequence[ClusterLookup]:
        """Both clusters' look-ups: a translation's reads and log ends are gathered (see ``translate``)."""
        return (self.origin_lookup, self.replica_lookup)

    def translate_one(
        self, position: OriginPosition, to_split: str, *, origin_reachable: bool, deadline: float
    ) -> Translation:
        self.follower.start()  # a translate before start() still follows
        _cid, otopic, opart = parse_split_id(position.split)
        _rid, rtopic, rpart = parse_split_id(to_split)
        at = position.offset
        last: RecordCopy | None = None
        notes: list[str] = []
        if origin_reachable:
            try:
                last = last_record_before(self.origin_lookup, otopic, opart, at)
            except ReplicaLookupError as exc:
                notes.append(f"origin record not read ({exc})")
        if origin_reachable or self.replica_of.syncs_location == "target":
            self._wait_for_sync(otopic, opart, last.offset if last is not None else at - 1, deadline)
        found = self.store.lookup(otopic, opart, at)
        if found.before is not None and found.exact:
            sync = found.before
            return self._answer(
                position, to_split, found.to_offset or 0, 0, f"offset sync {sync.upstream}->{sync.downstream}"
            )
        if at == 0:
            low, _high = self.replica_lookup.watermarks(rtopic, rpart)
            return self._answer(
                position, to_split, low, 0, "position 0, nothing received: the replica's log start"
            )
        if found.before is not None and last is not None and last.offset == found.before.upstream:
            sync = found.before
            detail = f"offset sync {sync.upstream}->{sync.downstream} for the last record before the position"
            return self._answer(position, to_split, sync.downstream + 1, 0, detail)
        start, bound, count, why, narrowable = self._conservative(
            found, otopic, opart, rtopic, rpart, origin_reachable
        )
        end = found.after.downstream if found.after is not None else None
        if last is not None:
            if found.before is not None:
                count = last.offset - found.before.upstream
            got = _refined(find_copy, self.replica_lookup, rtopic, rpart, last, start, end, count, deadline)
            if isinstance(got, Match):
                return self._answer(position, to_split, got.to_offset, got.max_repeats, got.detail)
            notes.append(
                f"the copy's search failed ({got})"
                if got is not None
                else f"the copy of origin offset {last.offset} was not found from replica offset {start}"
            )
        elif position.last_timestamp_ms is not None and narrowable:
            if found.before is not None:
                count = at - 1 - found.before.upstream
            got = _refined(
                narrow_by_time,
                self.replica_lookup,
                rtopic,
                rpart,
                position.last_timestamp_ms,
                start,
                end,
                count,
                deadline,
            )
            if isinstance(got, Match):
                return self._answer(
                    position, to_split, got.to_offset, got.max_repeats, f"{why}; {got.detail}"
                )
            notes.append(
                f"the narrowing by time failed ({got})"
                if got is not None
                else f"no replica record at the last returned record's time from offset {start}"
            )
        elif not origin_reachable:
            notes.append("origin unreachable: no record to match")
        return self._answer(position, to_split, start, bound, "; ".join([why, *notes]))

    def _conservative(
        self, found: Lookup, otopic: str, opart: int, rtopic: str, rpart: int, origin_reachable: bool
    ) -> tuple[int, int | None, int | None, str, bool]:
        """``(start, max_repeats, scan count, why, narrowable)`` without a record match (narrowable: the
        start is at or before the copy of the last record returned, so a scan from it may narrow it)."""
        if found.before is not None:
            sync = found.before
            why = f"after offset sync {sync.upstream}->{sync.downstream} (MM2's rule)"
            return found.to_offset or 0, found.max_repeats, None, why, True
        if not origin_reachable and self.group_id:
            checkpoint = self._checkpoint(rtopic, rpart)
            if checkpoint is not None and checkpoint.upstream <= found.position:
                why = (
                    f"no offset sync at or below the position; MM2 checkpoint of group {self.group_id}: "
                    f"{checkpoint.upstream}->{checkpoint.downstream}"
                )
                return checkpoint.downstream, None, None, why, checkpoint.upstream < found.position
        low, _high = self.replica_lookup.watermarks(rtopic, rpart)
        first = found.after
        if first is None:
            why = f"no offset sync for {otopic}/{opart} yet: from the replica's log start"
            return low, None, None, why, True
        why = f"the position is below the first offset sync kept ({first.upstream}->{first.downstream})"
        return low, max(0, first.downstream - low), None, f"{why}: from the replica's log start", True

    def _checkpoint(self, rtopic: str, rpart: int) -> Checkpoint | None:
        if self._checkpoints is None and self.group_id:
            try:
                self._checkpoints = read_checkpoints(
                    self.replica,
                    self.replica_of.mm2_checkpoints_topic(),
                    group_id=self.group_id,
                    properties=self.properties,
                )
            except Exception:  # no checkpoints is an answer too
                self._checkpoints = {}
        return (self._checkpoints or {}).get((rtopic, rpart))

    def _wait_for_sync(self, otopic: str, opart: int, upstream: int, deadline: float) -> None:
        """Until the follower is ready and has a sync at or above ``upstream``, or the deadline."""
        self.follower.wait_ready(deadline)
        while time.monotonic() < deadline:
            latest = self.store.latest(otopic, opart)
            if latest is not None and latest.upstream >= upstream:
                return
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def _answer(
        self, position: OriginPosition, to_split: str, to_offset: int, max_repeats: int | None, detail: str
    ) -> Translation:
        mode: TranslationMode = "exact" if max_repeats == 0 else "conservative"
        return Translation(position.split, to_split, position.offset, to_offset, mode, max_repeats, detail)


def _refined(
    search: Callable[..., Match | None],
    lookup: ClusterLookup,
    topic: str,
    partition: int,
    what: Any,
    start: int,
    end: int | None,
    count: int | None,
    deadline: float,
) -> Match | ReplicaLookupError | None:
    """``search`` (:func:`find_copy` of a record or :func:`narrow_by_time` of a time) over the replica
    offsets from ``start``; its look-up error is returned, for the conservative start to stand without
    it, unless the error may pass and the wait lasts: then it is raised, to be asked again
    (``BaseTranslator.translate``)."""
    try:
        return search(
            lookup, topic, partition, what, start=start, end=end, count=count, timeout_s=_SCAN_TIMEOUT_S
        )
    except ReplicaLookupError as exc:
        if exc.retriable and time.monotonic() < deadline:
            raise
        return exc
