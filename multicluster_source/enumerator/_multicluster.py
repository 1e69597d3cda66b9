"""The multi-cluster enumerator: follows metadata, runs one enumerator per cluster, assigns splits.

It assumes a single thread: every method runs on the coordinator thread (the runtime's mailbox). Metadata
services are called from this thread only. See :mod:`multicluster_source.framework._events` for the update
sequence.

Its parts: :mod:`~multicluster_source.enumerator._follow` decides when the metadata is read again,
:mod:`~multicluster_source.enumerator._clusters` runs the per-cluster enumerators,
:mod:`~multicluster_source.enumerator._readers` hands splits to readers (standbys, failover) and
:mod:`~multicluster_source.enumerator._commit` commits checkpointed offsets; this module holds the split
table and reconciles each metadata version into all of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from multicluster_source.enumerator._assignment import SplitAssigner
from multicluster_source.enumerator._clusters import ClusterEnumerators, MetadataChange
from multicluster_source.enumerator._commit import CommitLedger, Offsets
from multicluster_source.enumerator._copies import covered, effective_metadata
from multicluster_source.enumerator._follow import MetadataFollower
from multicluster_source.enumerator._handover import ReplicaHandovers
from multicluster_source.enumerator._kafka import ClusterEnumeratorConfig
from multicluster_source.enumerator._published import StatePublisher
from multicluster_source.enumerator._readers import ReaderHandout
from multicluster_source.enumerator._replica_state import ReplicaState
from multicluster_source.enumerator._settings import EnumeratorSettings
from multicluster_source.enumerator._split_table import SplitTable
from multicluster_source.enumerator._state import EnumeratorState, RemovedSplit
from multicluster_source.enumerator._view import enumerator_status
from multicluster_source.exceptions import MetadataError
from multicluster_source.framework._clientconf import merge_stream_clusters
from multicluster_source.framework._events import (
    GetMetadataUpdateEvent,
    MetadataUpdateEvent,
    SourceEvent,
    SplitsFinishedEvent,
)
from multicluster_source.framework._interfaces import SplitEnumeratorContext
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.metadata._model import ClusterMetadata

_log = logging.getLogger("multicluster_source.enumerator")


class MultiClusterEnumerator:
    """Reconciles metadata into per-cluster enumerators and assigns their splits to readers."""

    def __init__(
        self,
        context: SplitEnumeratorContext,
        settings: EnumeratorSettings,
        restored: EnumeratorState | None = None,
    ) -> None:
        self._ctx = context
        self._s = settings
        self._metrics = settings.metrics
        self._metadata: dict[str, ClusterMetadata] = {}
        self._version = 0
        self._splits = SplitTable()
        self._assigner = SplitAssigner(
            context.parallelism,
            settings.mode,
            context.reader_racks,
            settings.num_standby,
            settings.standby_assignor,
        )
        self._owner = self._assigner.owner
        self._finished: set[str] = set()
        self._all_finished = False
        self._removed: dict[str, RemovedSplit] = {}
        self._seen: dict[str, frozenset[str]] = {}
        self._discovery_pending: set[str] = set()
        self._commits = CommitLedger(settings.commit_wait_s)
        self.last_reconciliation: dict[str, Any] | None = None
        self.missing_streams: list[str] = []  # subscribed ids the metadata lacks (last read)
        if restored is not None:
            self._splits = SplitTable(restored.splits)
            self._finished = set(restored.finished) & set(self._splits)
            self._removed = {r.split.split_id: r for r in restored.removed}
            self._seen = dict(restored.seen_topics)
            self._version = restored.metadata_version
        self._clusters = ClusterEnumerators(
            context,
            settings,
            self._on_splits,
            self._on_discovery_done,
            self._on_leaders,
            leader_racks=self._assigner.rack_aware,
        )
        self._readers = ReaderHandout(context, settings, self._assigner, self._splits, self._finished)
        replicas = ReplicaState.from_dict(restored.replicas if restored is not None else None)
        self._published = StatePublisher(
            self._splits,
            self._bare_state,
            lambda: self._handovers.state(with_times=False),
            lambda: self._handovers.watched_times(),
        )
        self._handovers = ReplicaHandovers(
            context, settings, self._splits, self._handed_over, replicas, self._published.changed
        )
        self._declared: dict[str, ClusterMetadata] = {}  # as the metadata says (_metadata: what is read)
        self._last_read: list[ClusterMetadata] = []
        self._follower = MetadataFollower(context, settings, self._read_and_apply, self._expire_removed)

    # ----------------------------------------------------------------------------------------- lifecycle

    @property
    def bounded(self) -> bool:
        """Whether the source stops at stopping offsets."""
        return self._s.bounded

    @property
    def failovers(self) -> list[dict[str, Any]]:
        """One record per failed reader: when, how many splits moved, to which readers."""
        return self._readers.failovers

    def start(self) -> None:
        """Read metadata (a failure is a MetadataError for ``open()``), start clusters, schedule polls."""
        streams = self._read_metadata()
        self._apply(streams, initial=True)
        if self.bounded:
            return
        self._follower.follow()
        self._handovers.follow_origins(
            self._origin_errors, lambda: self._apply(self._last_read, initial=False)
        )

    def close(self) -> None:
        """Stop polling, unsubscribe, close every per-cluster enumerator and replica translator."""
        self._follower.close()
        self._clusters.close_all()
        self._handovers.close()

    def _origin_errors(self) -> dict[str, str | None]:
        return {cid: e.current_error() for cid, e in self._clusters.enumerators().items()}

    # ------------------------------------------------------------------------------------------ metadata

    def _read_metadata(self) -> list[ClusterMetadata]:
        streams = self._s.subscriber.get_subscribed_streams(self._s.service)
        self._note_missing({s.stream_id for s in streams})
        clusters = [
            c for stream in sorted(streams, key=lambda s: s.stream_id) for c in stream.clusters.values()
        ]
        return clusters

    def _note_missing(self, found: set[str]) -> None:
        """Warn (once per change) about subscribed stream ids the metadata does not contain."""
        wanted = getattr(self._s.subscriber, "stream_ids", None)
        missing = sorted(set(wanted) - found) if isinstance(wanted, frozenset) else []
        if missing == self.missing_streams:
            return
        self.missing_streams = missing
        if missing:
            try:
                known = sorted(s.stream_id for s in self._s.service.get_all_streams())
            except Exception as exc:  # only for the message: the read itself succeeded
                known = [f"<unknown: {type(exc).__name__}>"]
            _log.warning(
                "source=%s: subscribed stream ids not in the metadata: %s (it contains: %s); "
                "nothing is read for them until they appear",
                self._s.source_name,
                ", ".join(missing),
                ", ".join(known) or "no streams",
            )
        else:
            _log.info("source=%s: every subscribed stream id is in the metadata now", self._s.source_name)

    def _read_and_apply(self) -> None:
        self._apply(self._read_metadata(), initial=False)

    def refresh(self) -> None:
        """Read the metadata now and reconcile (coordinator thread)."""
        self._follower.refresh()

    # ------------------------------------------------------------------------------------- reconciliation

    def _apply(self, cluster_list: list[ClusterMetadata], *, initial: bool) -> None:
        try:
            declared = merge_stream_clusters(cluster_list)
        except ValueError as exc:
            raise MetadataError(str(exc)) from exc
        new = effective_metadata(declared, self._handovers.failed(declared))  # replicaOf: see _copies
        old = self._metadata
        if not initial and new == old and declared == self._declared:
            return
        self._published.changed()
        self._declared, self._last_read = declared, cluster_list
        self._handovers.declare(declared)
        change = MetadataChange.between(old, new)
        # Build every new client configuration first: a bad placeholder rejects the whole update.
        configs = {c: self._clusters.config(new[c]) for c in [*change.added, *change.reconnected]}
        now_ms = int(self._s.clock() * 1000)
        self._metadata = new
        self._version += 1
        for cid in change.removed:
            self._commits.owe(self._clusters.close([cid]))
            self._discovery_pending.discard(cid)
        # Only the splits of clusters that changed can leave (the first time, restored splits of any cluster).
        touched = [*change.removed, *change.topics_changed, *change.reconnected, *change.added]
        scope = self._splits.values() if initial else self._splits.of_clusters(touched)
        leaving = [s for s in scope if not covered(s, new)]
        self._handovers.prepare(leaving, new)
        retired = self._retire(leaving, now_ms)
        for cid in change.removed:
            self._metrics.remove_cluster(cid)
        for cid in change.topics_changed:
            self._clusters.update_topics(new[cid])
            for topic in old[cid].topics - new[cid].topics:
                self._metrics.remove_topic(cid, topic)
        for cid in change.reconnected:
            self._commits.owe(self._clusters.close([cid]))
            for topic in old[cid].topics - new[cid].topics:
                self._metrics.remove_topic(cid, topic)
            self._start_cluster(new[cid], configs[cid])
        for cid in change.added:
            self._start_cluster(new[cid], configs[cid])
        self._metrics.set_active_clusters(len(new))
        self._metrics.reconciliation()
        self.last_reconciliation = change.record(self._version, now_ms, len(retired))
        if not initial or old:
            _log.info("source=%s: metadata v%d: %s", self._s.source_name, self._version, change)
        self._readers.broadcast(MetadataUpdateEvent(new, version=self._version))
        if initial:
            # Restored splits of clusters that are still there go back to readers.
            self._readers.assign([s for sid, s in sorted(self._splits.items()) if sid not in self._owner])
        elif retired:
            self._readers.place_standbys()
        self._settled(None if initial else touched)

    def _start_cluster(self, cluster: ClusterMetadata, config: ClusterEnumeratorConfig) -> None:
        cid = cluster.cluster_id
        known = {s.topic_partition for s in self._splits.of_clusters([cid])}
        seen = set(self._seen.get(cid, frozenset())) & set(cluster.topics)
        seen |= {tp[0] for tp in known}
        self._discovery_pending.add(cid)  # before start(): discovery may finish within it
        self._clusters.start(cluster, config, known=known, seen_topics=seen)

    def _retire(self, leaving: Sequence[KafkaPartitionSplit], now_ms: int) -> list[str]:
        """Move active splits whose cluster or topic left the metadata to the removed set, fenced at the
        runtime first: nothing fetched of them before now is handed out from now on, so the position kept
        for a re-add is the one the caller reached (``PositionTracker.fence``)."""
        gone = [s.split_id for s in leaving]
        fence = getattr(self._ctx, "fence_positions", None)
        if gone and fence is not None:
            fence(gone)
        for sid in gone:
            split = self._splits.pop(sid)
            self._assigner.release([sid])
            self._finished.discard(sid)
            if self._s.removed_retention_ms > 0:
                self._removed[sid] = RemovedSplit(split, now_ms)
        if gone:
            _log.info(
                "source=%s: %d splits left the metadata and are retained", self._s.source_name, len(gone)
            )
        return gone

    def _expire_removed(self) -> None:
        now_ms = int(self._s.clock() * 1000)
        limit = self._s.removed_retention_ms
        expired = [sid for sid, r in self._removed.items() if now_ms - r.removed_at_ms > limit]
        if expired:
            self._published.changed()
            for sid in expired:
                del self._removed[sid]
            self._ctx.forget_positions(expired)
            self._settled([])

    # ------------------------------------------------------------------------------------------- splits

    def _on_splits(self, cluster_id: str, splits: Sequence[KafkaPartitionSplit], initial: bool) -> None:
        self._published.changed()  # seen topics, retained splits
        now_ms = int(self._s.clock() * 1000)
        fresh: list[KafkaPartitionSplit] = []
        for split in self._handovers.admit([s for s in splits if s.split_id not in self._splits]):
            sid = split.split_id
            retained = self._removed.pop(sid, None)
            if retained is not None and now_ms - retained.removed_at_ms <= self._s.removed_retention_ms:
                position = self._ctx.delivered_positions([sid]).get(sid, retained.split.starting_offset)
                _log.info("cluster=%s: %s re-added; resuming at offset %d", cluster_id, sid, position)
                split = split.starting_at(position)
            else:
                self._ctx.forget_positions([sid])
            fresh.append(split)
        seen = set(self._seen.get(cluster_id, frozenset()))
        seen |= {s.topic for s in splits}
        self._seen[cluster_id] = frozenset(seen)
        for split in fresh:
            self._splits.put(split)
        self._readers.assign(fresh)
        self._settled([cluster_id])
        self._handovers.watch()

    def _handed_over(self, splits: list[KafkaPartitionSplit]) -> None:
        """Replica splits that start where their origin split's position translates to."""
        fresh = [s for s in splits if covered(s, self._metadata) and s.split_id not in self._splits]
        for split in fresh:
            self._removed.pop(split.split_id, None)
            self._splits.put(split)
        self._readers.assign(fresh)
        self._settled(sorted({s.cluster_id for s in fresh}))

    def _on_discovery_done(self, cluster_id: str) -> None:
        self._discovery_pending.discard(cluster_id)
        if self.bounded and not self._discovery_pending and not self._readers.no_more_splits:
            _log.info("source=%s: every split is known (bounded); no more splits", self._s.source_name)
            self._readers.signal_no_more_splits()
            self._check_finished()

    def _on_leaders(self, cluster_id: str, racks: dict[tuple[str, int], str | None]) -> None:
        for (topic, partition), rack in racks.items():
            self._assigner.leader_rack[f"{cluster_id}/{topic}/{partition}"] = rack

    def reader_failed(self, reader: int) -> None:
        """Move a failed reader's splits to their standbys (or other live readers), resuming each at the
        position the caller reached; place new standbys."""
        if self._readers.reader_failed(reader):
            self._settled()

    def is_finished(self) -> bool:
        """Bounded: every split is known and reached its stopping offset."""
        return self._all_finished

    def _check_finished(self) -> None:
        if self.bounded and self._readers.no_more_splits and self._finished.issuperset(self._splits.keys()):
            self._all_finished = True

    def _settled(self, clusters: Sequence[str] | None = None) -> None:
        """After a change: set the assigned-splits gauge of ``clusters`` still in the metadata (None: of every
        cluster) and publish the state for checkpoints."""
        for cid in self._metadata if clusters is None else clusters:
            if cid in self._metadata:
                ids = self._splits.ids_of(cid)
                self._metrics.set_assigned_splits(cid, len(ids) - len(self._finished.intersection(ids)))
        self._published.publish()

    # ------------------------------------------------------------------------------------------ readers

    def add_reader(self, reader: int) -> None:
        """A reader asked for metadata: answer it, then hand it what waits for it."""
        self._readers.register(reader, MetadataUpdateEvent(self._metadata, version=self._version))

    def handle_reader_event(self, reader: int, event: SourceEvent) -> None:
        """Readers ask for metadata and report finished splits."""
        if isinstance(event, GetMetadataUpdateEvent):
            self.add_reader(reader)
        elif isinstance(event, SplitsFinishedEvent):
            done = [self._splits[sid] for sid in event.split_ids if sid in self._splits]
            self._published.changed()
            self._finished.update(s.split_id for s in done)
            self._settled(sorted({s.cluster_id for s in done}))
            self._check_finished()
        else:
            _log.warning("source=%s: unknown event from reader %d: %r", self._s.source_name, reader, event)

    # -------------------------------------------------------------------------------------- checkpoints

    def capture_state(self) -> EnumeratorState:
        """The enumerator's state for a checkpoint as a frozen value, to serialize off this thread: copies of
        references only (splits are frozen), about a millisecond at 100,000 splits (coordinator thread)."""
        self._published.publish()
        state = self._published.current()
        assert state is not None  # published on this thread just now
        return state

    def published_state(self) -> EnumeratorState | None:
        """:meth:`capture_state` as of the last change, when nothing changed since (any thread: see
        :mod:`._published`); None when the coordinator thread must be asked."""
        return self._published.current()

    def _bare_state(self) -> EnumeratorState:
        return EnumeratorState(
            splits=tuple(self._splits.values()),
            finished=frozenset(self._finished),
            removed=tuple(self._removed.values()),
            seen_topics=dict(self._seen),
            metadata_version=self._version,
        )

    def snapshot_state(self, checkpoint_id: int) -> dict[str, Any]:
        """The enumerator's state for a checkpoint (JSON-ready, versioned)."""
        return self.capture_state().to_dict()

    def notify_checkpoint_complete(
        self, checkpoint_id: int, positions: Mapping[str, int]
    ) -> Callable[[float], None]:
        """Commit the checkpointed positions of active splits to their clusters under the group id: those
        given (what moved since the previous checkpoint) and what an earlier commit failed to store."""
        if not self._s.commit_offsets or not self._s.group_id:
            return lambda timeout: None
        return self._commits.commit(
            checkpoint_id, positions, self._splits, self._clusters.enumerators(), self._committed
        )

    def _committed(self, cluster_id: str, offsets: Offsets) -> None:
        if cluster_id not in self._metadata:
            return  # removed meanwhile: its label sets are gone and must stay gone
        self._metrics.set_committed(cluster_id, offsets)

    # ---------------------------------------------------------------------------------------- status

    def status(self) -> dict[str, Any]:
        """A JSON-ready view for the admin server and tests (coordinator thread)."""
        return enumerator_status(
            version=self._version,
            metadata=self._metadata,
            declared=self._declared,
            enumerators=self._clusters.enumerators(),
            splits=self._splits,
            owner=self._owner,
            assigner=self._assigner,
            finished=self._finished,
            retained=self._removed,
            metadata_failures_in_a_row=self._follower.failures,
            failovers=self.failovers,
            missing_streams=self.missing_streams,
            last_reconciliation=self.last_reconciliation,
            handovers=self._handovers,
        )
