"""Replica handovers: carrying each origin split's position to the replica split that takes over from it.

The enumerator reads :func:`~multicluster_source.enumerator._copies.effective_metadata`, so a replica topic
appears exactly when its origin topic leaves (or its origin fails). :class:`ReplicaHandovers` does the rest,
on the coordinator thread:

1. **Decide** (:meth:`ReplicaHandovers.prepare`, before the enumerator retires the origin's splits): each
   origin split that leaves while a copy of it is to be read is *fenced* at the runtime (no record of it is
   handed out from then on, also none already fetched: see ``PositionTracker.fence``) and its position taken
   then: the next offset the caller has not received, and the last returned record's timestamp.
2. **Translate** (:meth:`ReplicaHandovers.admit`, when the replica topic's splits are discovered): off the
   coordinator thread (``call_async``: the translator may wait up to ``replica.sync.wait.ms`` for
   MirrorMaker 2) by the :class:`~multicluster_source.replicas.Translator` made for the declaration, one
   call per replica cluster and discovery.
3. **Start** the replica split at the translated offset (the enumerator's ``add`` callback); a replica split
   with no origin position starts at the source's starting offsets (mode ``start``).

Decided handovers not yet started and the translations done are checkpointed (:mod:`._replica_state`), so a
restore in between translates again from the same origin positions. Translators are made when a
``replicaOf`` is declared (so a MirrorMaker 2 translator follows the offset syncs from then on) and closed
when the declaration goes away and on close.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from multicluster_source.enumerator._copies import failed_origins, replica_splits_of
from multicluster_source.enumerator._replica_state import PendingHandover, ReplicaState
from multicluster_source.enumerator._settings import EnumeratorSettings
from multicluster_source.enumerator._split_table import SplitTable
from multicluster_source.framework._interfaces import SplitEnumeratorContext
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.metadata._model import ClusterMetadata
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.replicas._model import OriginPosition, Translation, Translator, start_translator

__all__ = ["ReplicaHandovers", "default_translator_factory"]

_log = logging.getLogger("multicluster_source.enumerator")
_MAX_DONE = 10_000  # translations kept for status() and checkpoints (the oldest go first)


def default_translator_factory(
    replica_of: ReplicaOf, origin: ClusterMetadata, replica: ClusterMetadata, **kwargs: Any
) -> Translator:
    """:func:`multicluster_source.replicas._translate.make_translator`, imported when first needed."""
    from multicluster_source.replicas._translate import make_translator

    return make_translator(replica_of, origin, replica, **kwargs)


class ReplicaHandovers:
    """The handovers of one enumerator (coordinator thread only)."""

    def __init__(
        self,
        context: SplitEnumeratorContext,
        settings: EnumeratorSettings,
        splits: SplitTable,
        add: Callable[[list[KafkaPartitionSplit]], None],
        restored: ReplicaState | None = None,
        changed: Callable[[], None] = lambda: None,
    ) -> None:
        self._ctx = context
        self._s = settings
        self._splits = splits  # the enumerator's split table (read only here)
        self._add = add
        self._changed = changed  # called before pending, done or auto_failed change
        state = restored or ReplicaState()
        self.pending: dict[str, PendingHandover] = {p.to_split: p for p in state.pending}
        self.done: list[Translation] = list(state.done)
        self._in_flight: set[str] = set()
        self._watched = False  # the runtime was last told to watch some splits
        self._translators: dict[str, _Made] = {}
        self._known: dict[str, ClusterMetadata] = {}  # last declared metadata of every cluster seen
        self._declared: dict[str, ClusterMetadata] = {}
        self._unreachable_since: dict[str, float] = {}
        self.auto_failed: set[str] = set(state.auto_failed)
        self._restored_times = dict(state.last_times)  # last returned timestamps at the restored checkpoint
        self._closed = False

    # ----------------------------------------------------------------------------------------- metadata

    def failed(self, declared: Mapping[str, ClusterMetadata]) -> set[str]:
        """Origins treated as failed now (declared ``failover: true``, or unreachable for too long)."""
        return failed_origins(declared, self.auto_failed)

    def declare(self, declared: Mapping[str, ClusterMetadata]) -> None:
        """Follow the declarations of a metadata version: make translators for new ones, close those of
        declarations that went away or changed (``failover`` aside: the same translator serves it)."""
        self._declared = dict(declared)
        self._known.update(declared)
        for cid in sorted(set(self._translators) - {c for c, m in declared.items() if m.replica_of}):
            self._close_translator(cid)
        for cid, cluster in sorted(declared.items()):
            r = cluster.replica_of
            if r is None:
                continue
            origin = self._known.get(r.cluster) or ClusterMetadata(r.cluster, "", frozenset())
            had = self._translators.get(cid)
            if (
                had is not None
                and _same(had.replica_of, r)
                and had.replica.same_connection(cluster)
                and had.origin.same_connection(origin)  # an origin that left keeps its last connection
            ):
                continue
            if had is not None:
                self._close_translator(cid)
            self._translators[cid] = _Made(r, cluster, origin, self._make(r, origin, cluster))
        self.auto_failed &= {m.replica_of.cluster for m in declared.values() if m.replica_of}
        self.watch()

    def _make(
        self, replica_of: ReplicaOf, origin: ClusterMetadata, replica: ClusterMetadata
    ) -> Translator | None:
        return start_translator(
            self._s.translator_factory or default_translator_factory,
            replica_of,
            origin,
            replica,
            group_id=self._s.group_id,
            properties=self._s.client_properties,
            otherwise="at the starting offsets",
            log=_log,
        )

    def _close_translator(self, cid: str) -> None:
        translator = self._translators.pop(cid).translator
        if translator is not None:
            try:
                translator.close()
            except Exception:
                _log.exception("cluster=%s: closing the replica translator failed", cid)

    def watch(self) -> None:
        """Have the runtime keep the last returned timestamp of every split a replica copies."""
        watch = getattr(self._ctx, "watch_positions", None)
        if watch is None:
            return
        # Only splits of clusters some replica names as its origin can be copied: look at those alone.
        origins = sorted({c.replica_of.cluster for c in self._declared.values() if c.replica_of is not None})
        ids = [
            split.split_id
            for split in self._splits.of_clusters(origins)
            if replica_splits_of(split.cluster_id, split.topic, split.partition, self._declared)
        ]
        if ids or self._watched:
            watch(ids)
        self._watched = bool(ids)

    # ------------------------------------------------------------------------------------------ decide

    def prepare(
        self, leaving: Sequence[KafkaPartitionSplit], effective: Mapping[str, ClusterMetadata]
    ) -> None:
        """Fence the origin splits in ``leaving`` that a replica to be read copies, and keep their positions
        as pending handovers (before the enumerator retires them)."""
        wanted: dict[str, list[tuple[str, ReplicaOf]]] = {}
        for split in leaving:
            copies = [
                (rsid, r)
                for rsid, r in replica_splits_of(
                    split.cluster_id, split.topic, split.partition, self._declared
                )
                if rsid.split("/")[1] in effective.get(rsid.split("/")[0], _EMPTY).topics
            ]
            if copies:
                wanted[split.split_id] = copies
        if not wanted:
            return
        self._changed()
        fence = getattr(self._ctx, "fence_positions", None)
        if fence is not None:
            known: dict[str, tuple[int, int | None]] = fence(sorted(wanted))
        else:
            known = {s: (o, None) for s, o in self._ctx.delivered_positions(sorted(wanted)).items()}
        failed = self.failed(self._declared)
        for origin_sid, copies in sorted(wanted.items()):
            split = self._splits[origin_sid]
            offset, ts = known.get(origin_sid, (split.starting_offset, None))
            if ts is None and offset == split.starting_offset:  # nothing returned since the restore
                ts = self._restored_times.get(origin_sid)
            position = OriginPosition(origin_sid, offset, ts)
            for rsid, r in copies:
                reachable = r.cluster not in failed
                self.pending[rsid] = PendingHandover(rsid, position, reachable)
                _log.info(
                    "cluster=%s: %s leaves at offset %d; %s takes over (%s)",
                    split.cluster_id,
                    origin_sid,
                    offset,
                    rsid,
                    "planned switchover" if reachable else "failover: the origin is not contacted",
                )

    # --------------------------------------------------------------------------------------- translate

    def admit(self, splits: Sequence[KafkaPartitionSplit]) -> list[KafkaPartitionSplit]:
        """Fresh splits of a discovery: those with a pending handover are translated (and added later);
        the others are returned for the enumerator to add as usual. Origin splits seen again are unfenced."""
        unfence = getattr(self._ctx, "unfence_positions", None)
        if unfence is not None:
            unfence([s.split_id for s in splits])
        normal: list[KafkaPartitionSplit] = []
        batches: dict[str, list[tuple[KafkaPartitionSplit, PendingHandover]]] = {}
        for split in splits:
            sid = split.split_id
            if sid in self._in_flight:
                continue
            handover = self.pending.get(sid)
            if handover is None:
                normal.append(split)
            else:
                batches.setdefault(split.cluster_id, []).append((split, handover))
        for cid, batch in sorted(batches.items()):
            self._translate(cid, batch)
        return normal

    def _translate(self, cid: str, batch: list[tuple[KafkaPartitionSplit, PendingHandover]]) -> None:
        entry = self._translators.get(cid)
        translator = entry.translator if entry is not None else None
        reachable = all(h.origin_reachable for _s, h in batch)
        origin = entry.origin if entry is not None else None
        if reachable and (origin is None or not origin.bootstrap_servers):
            reachable = False  # its connection is unknown (a restart after it left the metadata)
        wait_s = self._s.replica_sync_wait_s
        asks = [(h.origin, s.split_id) for s, h in batch]
        self._in_flight.update(s.split_id for s, _h in batch)

        def call() -> list[Translation]:
            if translator is None:
                raise RuntimeError(f"no translator for the replicaOf of cluster {cid!r}")
            return translator.translate(asks, origin_reachable=reachable, wait_s=wait_s)

        def done(result: list[Translation] | None, error: BaseException | None) -> None:
            if self._closed:
                return
            if error is not None or result is None or len(result) != len(batch):
                why = f"translation failed: {error}" if error is not None else "translation incomplete"
                _log.error("cluster=%s: %s; the replica splits start at the starting offsets", cid, why)
                result = [_start(h, s, why) for s, h in batch]
            self._started(batch, result)

        self._ctx.call_async(call, done)

    def _started(
        self, batch: list[tuple[KafkaPartitionSplit, PendingHandover]], result: list[Translation]
    ) -> None:
        ready: list[KafkaPartitionSplit] = []
        self._changed()
        for (split, handover), translation in zip(batch, result, strict=True):
            sid = split.split_id
            self._in_flight.discard(sid)
            if self.pending.get(sid) is not handover:
                continue  # superseded meanwhile
            del self.pending[sid]
            start = translation.to_offset if translation.mode != "start" else split.starting_offset
            if translation.mode == "start":
                translation = replace(translation, to_offset=start)
            self.done.append(translation)
            del self.done[:-_MAX_DONE]
            self._s.metrics.handover(translation.mode, translation.max_repeats)
            _log.info(
                "cluster=%s: %s starts at offset %d: handed over from %s offset %d, mode %s%s%s",
                split.cluster_id,
                sid,
                start,
                translation.from_split,
                translation.from_offset,
                translation.mode,
                f", at most {translation.max_repeats} record(s) may repeat"
                if translation.max_repeats
                else "",
                f" ({translation.detail})" if translation.detail else "",
            )
            self._ctx.forget_positions([sid])
            ready.append(split.starting_at(start))
        if ready:
            self._add(ready)

    # ----------------------------------------------------------------------------------------- failover

    def follow_origins(
        self, errors: Callable[[], Mapping[str, str | None]], reapply: Callable[[], None]
    ) -> None:
        """With ``replica.failover.unreachable.ms`` set: every second, note which declared origins fail
        (``errors()``: cluster id -> its current error) and ``reapply()`` the metadata once one has failed
        for that long (its copied topics then leave what is read, and its splits are handed over)."""
        limit = self._s.replica_failover_unreachable_ms
        if limit < 0:
            return

        def tick() -> None:
            if self._closed:
                return
            if self.check_reachability(errors(), limit):
                reapply()
            self._ctx.run_in_coordinator(tick, delay=1.0)

        self._ctx.run_in_coordinator(tick, delay=1.0)

    def check_reachability(self, errors: Mapping[str, str | None], unreachable_ms: int) -> bool:
        """Note which declared origins fail now (``errors``: cluster id -> current error); True when one
        has failed for ``unreachable_ms`` and is now treated as failed (the caller reconciles again)."""
        if unreachable_ms < 0:
            return False
        now = time.monotonic()
        origins = {m.replica_of.cluster for m in self._declared.values() if m.replica_of is not None}
        newly = False
        for origin in sorted(origins - self.auto_failed):
            if errors.get(origin) is None:
                self._unreachable_since.pop(origin, None)
                continue
            since = self._unreachable_since.setdefault(origin, now)
            if (now - since) * 1000 >= unreachable_ms:
                _log.warning(
                    "cluster=%s: unreachable for %d ms (%s): failing over to its replicas",
                    origin,
                    int((now - since) * 1000),
                    errors[origin],
                )
                self._changed()
                self.auto_failed.add(origin)
                newly = True
        return newly

    # ------------------------------------------------------------------------------------------- state

    def state(self, *, with_times: bool = True) -> ReplicaState:
        """What a checkpoint keeps (pending handovers, translations done, origins failed automatically, and
        unless ``with_times`` is False the timestamps of the last records delivered of watched splits)."""
        last = self.watched_times() if with_times else {}
        return ReplicaState(tuple(self.pending.values()), tuple(self.done), frozenset(self.auto_failed), last)

    def watched_times(self) -> Mapping[str, int]:
        """The timestamps of the last records delivered of the splits a replica copies (any thread)."""
        times = getattr(self._ctx, "watched_times", None)
        return times() if times is not None else {}

    def status(self) -> list[dict[str, Any]]:
        """``status()["handovers"]``: one entry per translated split."""
        return [t.to_status() for t in self.done]

    def close(self) -> None:
        """Close every translator."""
        self._closed = True
        for cid in sorted(self._translators):
            self._close_translator(cid)


_EMPTY = ClusterMetadata("", "", frozenset())


@dataclass(frozen=True)
class _Made:
    """A translator and what it was made for (its origin's connection: empty when unknown)."""

    replica_of: ReplicaOf
    replica: ClusterMetadata
    origin: ClusterMetadata
    translator: Translator | None


def _same(a: ReplicaOf, b: ReplicaOf) -> bool:
    return replace(a, failover=False) == replace(b, failover=False)


def _start(handover: PendingHandover, split: KafkaPartitionSplit, why: str) -> Translation:
    return Translation(
        handover.origin.split,
        split.split_id,
        handover.origin.offset,
        split.starting_offset,
        "start",
        None,
        why,
    )
