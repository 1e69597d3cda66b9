"""The multi-cluster enumerator: follows metadata, runs one enumerator per cluster, assigns splits.

It assumes a single thread: every method runs on the coordinator thread (the runtime's mailbox). Metadata
services are called from this thread only. See :mod:`multicluster_source.framework._events` for the update
sequence.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any, Literal

from multicluster_source.enumerator._assignment import SplitAssigner
from multicluster_source.enumerator._kafka import (
    AdminFactory,
    ClusterEnumeratorConfig,
    KafkaClusterEnumerator,
    default_admin_factory,
)
from multicluster_source.enumerator._offsets import OffsetsInitializer
from multicluster_source.enumerator._proxy import StoppableContextProxy
from multicluster_source.enumerator._standby import RackAwareStandbyAssignor
from multicluster_source.enumerator._state import EnumeratorState, RemovedSplit
from multicluster_source.exceptions import MetadataError, SourceFailedError
from multicluster_source.framework._clientconf import (
    admin_properties,
    cluster_client_config,
    merge_stream_clusters,
)
from multicluster_source.framework._events import (
    GetMetadataUpdateEvent,
    MetadataUpdateEvent,
    SourceEvent,
    SplitsFinishedEvent,
    StandbySplitsEvent,
)
from multicluster_source.framework._interfaces import Cancellable, SplitEnumeratorContext
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.metadata._model import ClusterMetadata, KafkaMetadataService
from multicluster_source.metadata._subscriber import KafkaStreamSubscriber

_log = logging.getLogger("multicluster_source.enumerator")


@dataclass(frozen=True)
class EnumeratorSettings:
    """The multi-cluster enumerator's configuration (built by the source from its options)."""

    source_name: str
    service: KafkaMetadataService
    subscriber: KafkaStreamSubscriber
    group_id: str | None
    starting: OffsetsInitializer
    stopping: OffsetsInitializer | None
    client_properties: Mapping[str, str]
    client_id_prefix: str
    metadata_interval_s: float | None
    """None: read metadata once (bounded, or ``stream-metadata-discovery-interval-ms=-1``)."""
    failure_threshold: int
    """Consecutive metadata failures before the source fails; -1 never."""
    removed_retention_ms: int
    partition_discovery_interval_s: float | None
    commit_offsets: bool
    mode: Literal["per_cluster", "global"]
    metrics: Any
    num_standby: int = 0
    standby_assignor: RackAwareStandbyAssignor | None = None
    debounce_s: float = 0.1
    """Delay between a change notification and the metadata read it triggers (coalesces bursts)."""
    admin_factory: AdminFactory = default_admin_factory
    clock: Callable[[], float] = time.time


@dataclass
class _Cluster:
    metadata: ClusterMetadata
    enumerator: KafkaClusterEnumerator
    proxy: StoppableContextProxy


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
        self._clusters: dict[str, _Cluster] = {}
        self._metadata: dict[str, ClusterMetadata] = {}
        self._version = 0
        self._splits: dict[str, KafkaPartitionSplit] = {}
        self._assigner = SplitAssigner(
            context.parallelism,
            settings.mode,
            context.reader_racks,
            settings.num_standby,
            settings.standby_assignor,
        )
        self._owner = self._assigner.owner
        self._finished: set[str] = set()
        self._standby_sent: dict[int, frozenset[tuple[str, int]]] = {}
        self._all_finished = False
        self.failovers: list[dict[str, Any]] = []
        self._removed: dict[str, RemovedSplit] = {}
        self._seen: dict[str, frozenset[str]] = {}
        self._registered: set[int] = set()
        self._unsent: dict[int, list[KafkaPartitionSplit]] = {}
        self._discovery_pending: set[str] = set()
        self._no_more_splits = False
        self._failures = 0
        self._last_failure: str | None = None
        self._refresh_pending = False
        self._poll_handle: Cancellable | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._closed = False
        self.last_reconciliation: dict[str, Any] | None = None
        if restored is not None:
            self._splits = {s.split_id: s for s in restored.splits}
            self._finished = set(restored.finished) & set(self._splits)
            self._removed = {r.split.split_id: r for r in restored.removed}
            self._seen = dict(restored.seen_topics)
            self._version = restored.metadata_version

    # ----------------------------------------------------------------------------------------- lifecycle

    @property
    def bounded(self) -> bool:
        """Whether the source stops at stopping offsets."""
        return self._s.stopping is not None

    def start(self) -> None:
        """Read metadata (a failure is a MetadataError for ``open()``), start clusters, schedule polls."""
        service = self._s.service
        streams = self._read_metadata()
        self._apply(streams, initial=True)
        if self.bounded:
            return
        subscribe = getattr(service, "subscribe", None)
        if callable(subscribe):
            self._unsubscribe = subscribe(self._on_service_changed)
        if self._s.metadata_interval_s is not None:
            self._poll_handle = self._ctx.run_in_coordinator(self._poll, delay=self._s.metadata_interval_s)

    def close(self) -> None:
        """Stop polling, unsubscribe, close every per-cluster enumerator."""
        self._closed = True
        if self._poll_handle is not None:
            self._poll_handle.cancel()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for cid in list(self._clusters):
            self._clusters.pop(cid).enumerator.close()

    # ------------------------------------------------------------------------------------------ metadata

    def _read_metadata(self) -> list[ClusterMetadata]:
        streams = self._s.subscriber.get_subscribed_streams(self._s.service)
        clusters = [
            c for stream in sorted(streams, key=lambda s: s.stream_id) for c in stream.clusters.values()
        ]
        return clusters

    def _on_service_changed(self) -> None:
        # Called from the service's watcher thread: hop onto the coordinator after the debounce delay,
        # coalescing a burst of notifications into one read.
        if self._refresh_pending or self._closed:
            return
        self._refresh_pending = True
        self._ctx.run_in_coordinator(self._refresh, delay=self._s.debounce_s)

    def _poll(self) -> None:
        self._refresh()
        if not self._closed and self._s.metadata_interval_s is not None:
            self._poll_handle = self._ctx.run_in_coordinator(self._poll, delay=self._s.metadata_interval_s)

    def refresh(self) -> None:
        """Read the metadata now and reconcile (coordinator thread)."""
        self._refresh()

    def _refresh(self) -> None:
        self._refresh_pending = False
        if self._closed:
            return
        try:
            clusters = self._read_metadata()
            self._apply(clusters, initial=False)
        except Exception as exc:  # a bad read never stops a running source
            self._metadata_failed(exc)
            return
        if self._failures:
            _log.info(
                "source=%s: metadata is good again after %d failures", self._s.source_name, self._failures
            )
        self._failures = 0
        self._last_failure = None
        self._expire_removed()

    def _metadata_failed(self, exc: Exception) -> None:
        self._failures += 1
        self._metrics.metadata_failure()
        message = str(exc)
        if message != self._last_failure:
            _log.warning(
                "source=%s: metadata read failed, keeping the last good metadata: %s",
                self._s.source_name,
                message,
            )
            self._last_failure = message
        threshold = self._s.failure_threshold
        if threshold > 0 and self._failures >= threshold:
            error = MetadataError(f"{self._failures} consecutive metadata failures; last: {message}")
            error.__cause__ = exc
            self._ctx.fail(error)

    # ------------------------------------------------------------------------------------- reconciliation

    def _apply(self, cluster_list: list[ClusterMetadata], *, initial: bool) -> None:
        try:
            new = merge_stream_clusters(cluster_list)
        except ValueError as exc:
            raise MetadataError(str(exc)) from exc
        old = self._metadata
        if not initial and new == old:
            return
        removed = sorted(old.keys() - new.keys())
        added = sorted(new.keys() - old.keys())
        reconnect = sorted(c for c in old.keys() & new.keys() if not old[c].same_connection(new[c]))
        retopic = sorted(
            c for c in old.keys() & new.keys() if c not in reconnect and old[c].topics != new[c].topics
        )
        # Build every new client configuration first: a bad placeholder rejects the whole update.
        configs = {c: self._cluster_config(new[c]) for c in [*added, *reconnect]}
        now_ms = int(self._s.clock() * 1000)
        self._metadata = new
        self._version += 1
        for cid in removed:
            self._clusters.pop(cid).enumerator.close()
            self._discovery_pending.discard(cid)
        retired = self._retire_uncovered(now_ms)
        for cid in removed:
            self._metrics.remove_cluster(cid)
        for cid in retopic:
            cluster = self._clusters[cid]
            cluster.metadata = new[cid]
            cluster.enumerator.update_topics(new[cid].topics)
            for topic in old[cid].topics - new[cid].topics:
                self._metrics.remove_topic(cid, topic)
        for cid in reconnect:
            self._clusters.pop(cid).enumerator.close()
            for topic in old[cid].topics - new[cid].topics:
                self._metrics.remove_topic(cid, topic)
            self._start_cluster(new[cid], configs[cid])
        for cid in added:
            self._start_cluster(new[cid], configs[cid])
        self._metrics.set_active_clusters(len(new))
        self._metrics.reconciliation()
        change = {
            "version": self._version,
            "at_ms": now_ms,
            "added": added,
            "removed": removed,
            "reconnected": reconnect,
            "topics_changed": retopic,
            "splits_retired": len(retired),
        }
        self.last_reconciliation = change
        if not initial or old:
            _log.info(
                "source=%s: metadata v%d: added=%s removed=%s reconnected=%s topics_changed=%s",
                self._s.source_name,
                self._version,
                added,
                removed,
                reconnect,
                retopic,
            )
        event = MetadataUpdateEvent(new, version=self._version)
        for reader in sorted(self._registered):
            self._ctx.send_event_to_reader(reader, event)
        if initial:
            # Restored splits of clusters that are still there go back to readers.
            self._assign([s for sid, s in sorted(self._splits.items()) if sid not in self._owner])
        elif retired:
            self._place_standbys()
        self._update_split_gauges()

    def _cluster_config(self, cluster: ClusterMetadata) -> ClusterEnumeratorConfig:
        props = admin_properties(
            cluster_client_config(
                cluster,
                self._s.client_properties,
                client_id=f"{self._s.client_id_prefix}-{cluster.cluster_id}-enumerator",
            )
        )
        return ClusterEnumeratorConfig(
            cluster=cluster,
            client_properties=props,
            group_id=self._s.group_id,
            starting=self._s.starting,
            stopping=self._s.stopping,
            discovery_interval_s=None if self.bounded else self._s.partition_discovery_interval_s,
            leader_racks=self._assigner.rack_aware,
            request_timeout_s=min(30.0, float(props.get("socket.timeout.ms", "60000")) / 1000.0),
        )

    def _start_cluster(self, cluster: ClusterMetadata, config: ClusterEnumeratorConfig) -> None:
        cid = cluster.cluster_id
        proxy = StoppableContextProxy(
            cid, self._ctx, self._on_splits, self._on_discovery_done, self._on_leaders
        )
        known = {s.topic_partition for s in self._splits.values() if s.cluster_id == cid}
        seen = set(self._seen.get(cid, frozenset())) & set(cluster.topics)
        seen |= {tp[0] for tp in known}
        enumerator = KafkaClusterEnumerator(
            config, proxy, known=known, seen_topics=seen, admin_factory=self._s.admin_factory
        )
        self._clusters[cid] = _Cluster(cluster, enumerator, proxy)
        self._discovery_pending.add(cid)
        enumerator.start()

    def _retire_uncovered(self, now_ms: int) -> list[str]:
        """Move active splits whose cluster or topic left the metadata to the removed set."""
        gone = [
            sid
            for sid, split in self._splits.items()
            if split.cluster_id not in self._metadata
            or split.topic not in self._metadata[split.cluster_id].topics
        ]
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
        for sid in expired:
            del self._removed[sid]
        if expired:
            self._ctx.forget_positions(expired)

    # ------------------------------------------------------------------------------------------- splits

    def _on_splits(self, cluster_id: str, splits: Sequence[KafkaPartitionSplit], initial: bool) -> None:
        now_ms = int(self._s.clock() * 1000)
        fresh: list[KafkaPartitionSplit] = []
        for split in splits:
            sid = split.split_id
            if sid in self._splits:
                continue
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
            self._splits[split.split_id] = split
        self._assign(fresh)
        self._update_split_gauges()

    def _on_discovery_done(self, cluster_id: str) -> None:
        self._discovery_pending.discard(cluster_id)
        if self.bounded and not self._discovery_pending and not self._no_more_splits:
            self._no_more_splits = True
            _log.info("source=%s: every split is known (bounded); no more splits", self._s.source_name)
            for reader in sorted(self._registered):
                self._ctx.signal_no_more_splits(reader)
            self._check_finished()

    def _on_leaders(self, cluster_id: str, racks: dict[tuple[str, int], str | None]) -> None:
        for (topic, partition), rack in racks.items():
            self._assigner.leader_rack[f"{cluster_id}/{topic}/{partition}"] = rack

    def _assign(self, splits: Sequence[KafkaPartitionSplit]) -> None:
        if not splits:
            return
        assignment = self._assigner.place(splits, self._finished)
        self._send(assignment)
        self._place_standbys()

    def _send(self, assignment: Mapping[int, Sequence[KafkaPartitionSplit]]) -> None:
        ready = {r: list(s) for r, s in assignment.items() if r in self._registered}
        for reader, waiting in assignment.items():
            if reader not in self._registered:
                self._unsent.setdefault(reader, []).extend(waiting)
        if ready:
            self._ctx.assign_splits(ready)

    def _place_standbys(self) -> None:
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

    def reader_failed(self, reader: int) -> None:
        """Move a failed reader's splits to their standbys (or other live readers), resuming each at the
        position the caller reached; place new standbys."""
        if reader not in self._assigner.alive:
            return
        lost = self._assigner.reader_lost(reader)
        self._registered.discard(reader)
        self._unsent.pop(reader, None)
        self._standby_sent.pop(reader, None)
        if not self._assigner.alive:
            self._ctx.fail(SourceFailedError(f"source {self._s.source_name}: every reader failed"))
            return
        moving = [sid for sid in lost if sid not in self._finished and sid in self._splits]
        positions = self._ctx.delivered_positions(moving)
        assignment: dict[int, list[KafkaPartitionSplit]] = {}
        load = self._assigner.loads(self._finished)
        for sid in moving:
            split = self._splits[sid].starting_at(positions.get(sid, self._splits[sid].starting_offset))
            self._splits[sid] = split
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
            self._metrics.failover(cid)
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
        self._place_standbys()
        self._update_split_gauges()

    def is_finished(self) -> bool:
        """Bounded: every split is known and reached its stopping offset."""
        return self._all_finished

    def _check_finished(self) -> None:
        if self.bounded and self._no_more_splits and all(sid in self._finished for sid in self._splits):
            self._all_finished = True

    def _update_split_gauges(self) -> None:
        counts: dict[str, int] = dict.fromkeys(self._metadata, 0)
        for sid, split in self._splits.items():
            if sid not in self._finished and split.cluster_id in counts:
                counts[split.cluster_id] += 1
        for cid, count in counts.items():
            self._metrics.set_assigned_splits(cid, count)

    # ------------------------------------------------------------------------------------------ readers

    def add_reader(self, reader: int) -> None:
        """A reader asked for metadata: answer it, then hand it what waits for it."""
        if reader not in self._assigner.alive:
            return
        self._registered.add(reader)
        self._ctx.send_event_to_reader(reader, MetadataUpdateEvent(self._metadata, version=self._version))
        waiting = self._unsent.pop(reader, [])
        live = [s for s in waiting if self._owner.get(s.split_id) == reader]
        if live:
            self._ctx.assign_splits({reader: live})
        if self._no_more_splits:
            self._ctx.signal_no_more_splits(reader)
        self._standby_sent.pop(reader, None)
        self._place_standbys()

    def handle_reader_event(self, reader: int, event: SourceEvent) -> None:
        """Readers ask for metadata and report finished splits."""
        if isinstance(event, GetMetadataUpdateEvent):
            self.add_reader(reader)
        elif isinstance(event, SplitsFinishedEvent):
            self._finished |= {sid for sid in event.split_ids if sid in self._splits}
            self._update_split_gauges()
            self._check_finished()
        else:
            _log.warning("source=%s: unknown event from reader %d: %r", self._s.source_name, reader, event)

    # -------------------------------------------------------------------------------------- checkpoints

    def snapshot_state(self, checkpoint_id: int) -> dict[str, Any]:
        """The enumerator's state for a checkpoint (JSON-ready, versioned)."""
        state = EnumeratorState(
            splits=tuple(self._splits.values()),
            finished=frozenset(self._finished),
            removed=tuple(self._removed.values()),
            seen_topics=dict(self._seen),
            metadata_version=self._version,
        )
        return state.to_dict()

    def notify_checkpoint_complete(
        self, checkpoint_id: int, positions: Mapping[str, int]
    ) -> Callable[[float], None]:
        """Commit the checkpointed positions of active splits to their clusters under the group id."""
        if not self._s.commit_offsets or not self._s.group_id:
            return lambda timeout: None
        by_cluster: dict[str, dict[tuple[str, int], int]] = {}
        for sid, split in self._splits.items():
            pos = positions.get(sid)
            if pos is not None and split.cluster_id in self._clusters:
                by_cluster.setdefault(split.cluster_id, {})[split.topic_partition] = pos
        futures: dict[str, Future[None]] = {}
        for cid, offsets in by_cluster.items():
            try:
                futures[cid] = self._clusters[cid].enumerator.commit_offsets(offsets)
            except Exception as exc:
                _log.warning("cluster=%s: offset commit failed to start: %s", cid, exc)
                continue
            futures[cid].add_done_callback(self._committed_callback(cid, offsets))

        def wait(timeout: float) -> None:
            _done, not_done = wait_futures(list(futures.values()), timeout=timeout)
            for cid in sorted(c for c, f in futures.items() if f in not_done):
                _log.warning("cluster=%s: offset commit of checkpoint %d timed out", cid, checkpoint_id)

        return wait

    def _committed_callback(
        self, cluster_id: str, offsets: dict[tuple[str, int], int]
    ) -> Callable[[Future[None]], None]:
        def done(fut: Future[None]) -> None:
            error = fut.exception()
            if error is not None:
                _log.warning("cluster=%s: offset commit failed: %s", cluster_id, error)
                return
            if cluster_id not in self._metadata:
                return  # removed meanwhile: its label sets are gone and must stay gone
            for (topic, partition), offset in offsets.items():
                self._metrics.set_offsets(cluster_id, topic, partition, committed=offset)

        return done

    # ---------------------------------------------------------------------------------------- status

    def status(self) -> dict[str, Any]:
        """A JSON-ready view for the admin server and tests (coordinator thread)."""
        return {
            "metadata_version": self._version,
            "clusters": {
                cid: {"bootstrap_servers": md.bootstrap_servers, "topics": sorted(md.topics)}
                for cid, md in sorted(self._metadata.items())
            },
            "splits": {sid: self._owner.get(sid) for sid in sorted(self._splits)},
            "placement": self._assigner.status(),
            "live_readers": sorted(self._assigner.alive),
            "failovers": list(self.failovers),
            "finished": sorted(self._finished),
            "retained": sorted(self._removed),
            "metadata_failures_in_a_row": self._failures,
            "last_reconciliation": self.last_reconciliation,
        }
