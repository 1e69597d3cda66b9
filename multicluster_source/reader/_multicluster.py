"""The multi-cluster reader: one fetcher per cluster, restarted only when its own cluster changes.

All methods run on the reader's thread (see :mod:`multicluster_source._framework`). Fetchers report finished
splits from their threads through a queue that :meth:`poll_events` drains.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._clientconf import cluster_client_config
from .._clientlog import client_logging
from .._events import GetMetadataUpdateEvent, MetadataUpdateEvent, SourceEvent, SplitsFinishedEvent
from .._framework import ReaderContext
from .._split import KafkaPartitionSplit
from ..metadata._model import ClusterMetadata
from ._fetcher import ClusterFetcher, FetchSettings

_log = logging.getLogger("multicluster_source.reader")


@dataclass(frozen=True)
class ReaderSettings:
    """What every reader of a source shares."""

    group_id: str
    client_properties: Mapping[str, str]
    client_id_prefix: str
    bounded: bool
    fetch: FetchSettings


class MultiClusterReader:
    """Reads the splits assigned to one reader, across clusters, following metadata update events."""

    def __init__(self, context: ReaderContext, settings: ReaderSettings) -> None:
        self._ctx = context
        self._s = settings
        self._metadata: dict[str, ClusterMetadata] | None = None
        self._version = -1
        self._fetchers: dict[str, ClusterFetcher] = {}
        self._pending: list[KafkaPartitionSplit] = []
        self._finished_q: queue.SimpleQueue[list[str]] = queue.SimpleQueue()
        self._no_more_splits = False
        self._closed = False

    @property
    def index(self) -> int:
        """This reader's index."""
        return self._ctx.index

    def start(self) -> None:
        """Ask the enumerator for metadata; splits are held until it arrives."""
        self._ctx.send_event_to_enumerator(GetMetadataUpdateEvent())

    def split_ids(self) -> list[str]:
        """The splits this reader reads now (or holds until metadata arrives)."""
        ids = {s.split_id for s in self._pending}
        for fetcher in self._fetchers.values():
            ids |= fetcher.split_ids
        return sorted(ids)

    def add_splits(self, splits: Sequence[KafkaPartitionSplit]) -> None:
        """Route splits to their cluster's fetcher (held while no metadata is known)."""
        self._pending.extend(splits)
        self._route()

    def _route(self) -> None:
        if self._metadata is None or not self._pending:
            return
        by_cluster: dict[str, list[KafkaPartitionSplit]] = {}
        for split in self._pending:
            cluster = self._metadata.get(split.cluster_id)
            if cluster is None or split.topic not in cluster.topics:
                _log.info(
                    "reader=%d: dropping split %s: not in the current metadata", self.index, split.split_id
                )
                continue
            by_cluster.setdefault(split.cluster_id, []).append(split)
        self._pending = []
        for cid, splits in by_cluster.items():
            self._fetcher(cid).add_splits(splits)

    def _fetcher(self, cluster_id: str) -> ClusterFetcher:
        fetcher = self._fetchers.get(cluster_id)
        if fetcher is None:
            assert self._metadata is not None
            fetcher = self._new_fetcher(self._metadata[cluster_id])
            self._fetchers[cluster_id] = fetcher
        return fetcher

    def _new_fetcher(self, cluster: ClusterMetadata) -> ClusterFetcher:
        extra = {
            "group.id": self._s.group_id,
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "enable.partition.eof": "true" if self._s.bounded else "false",
        }
        conf = cluster_client_config(
            cluster,
            self._s.client_properties,
            client_id=f"{self._s.client_id_prefix}-{cluster.cluster_id}-reader-{self.index}",
            extra=extra,
        )
        conf.setdefault("auto.offset.reset", "earliest")
        conf.setdefault("queued.max.messages.kbytes", "16384")
        cid = cluster.cluster_id
        client_conf: dict[str, Any] = {**conf, **client_logging(cid, f"reader {self.index}")}
        fetcher = ClusterFetcher(cid, client_conf, self._s.fetch, self._ctx, self._finished_q.put)
        fetcher.start()
        return fetcher

    def handle_source_event(self, event: SourceEvent) -> None:
        """Follow a metadata update: touch only the clusters that changed."""
        if not isinstance(event, MetadataUpdateEvent):
            _log.warning("reader=%d: unknown event %r", self.index, event)
            return
        if event.version < self._version:
            return
        self._version = event.version
        new = dict(event.clusters)
        old = self._metadata or {}
        self._metadata = new
        for cid in sorted(set(self._fetchers) - set(new)):
            self._fetchers.pop(cid).stop()
            self._s.fetch.metrics.remove_cluster(cid)
            _log.info("reader=%d cluster=%s: cluster removed; its fetcher is closed", self.index, cid)
        for cid in sorted(set(self._fetchers) & set(new)):
            before, after = old.get(cid), new[cid]
            if before is None:
                continue
            gone_topics = before.topics - after.topics
            if not before.same_connection(after):
                moved = [s for s in self._fetchers.pop(cid).stop() if s.topic in after.topics]
                for topic in gone_topics:
                    self._s.fetch.metrics.remove_topic(cid, topic)
                self._s.fetch.metrics.reader_restart(cid)
                _log.info(
                    "reader=%d cluster=%s: connection settings changed; fetcher restarted with %d splits",
                    self.index,
                    cid,
                    len(moved),
                )
                if moved:
                    self._fetcher(cid).add_splits(moved)
            elif gone_topics:
                self._fetchers[cid].remove_topics(gone_topics)
        self._route()

    def notify_no_more_splits(self) -> None:
        """Bounded: no further splits will come."""
        self._no_more_splits = True

    def poll_events(self) -> None:
        """Report splits that fetchers finished."""
        finished: set[str] = set()
        while True:
            try:
                finished.update(self._finished_q.get_nowait())
            except queue.Empty:
                break
        if finished:
            self._ctx.send_event_to_enumerator(SplitsFinishedEvent(frozenset(finished)))

    def is_finished(self) -> bool:
        """No more splits will come and none is left to read."""
        return (
            self._no_more_splits
            and not self._pending
            and self._finished_q.empty()
            and all(f.outstanding() == 0 for f in self._fetchers.values())
        )

    def close(self) -> None:
        """Stop every fetcher (their consumers are closed on their threads)."""
        self._closed = True
        for cid in list(self._fetchers):
            self._fetchers.pop(cid).stop()

    def status(self) -> dict[str, Any]:
        """A JSON-ready view of this reader."""
        return {"clusters": sorted(self._fetchers), "splits": self.split_ids()}
