"""The multi-cluster reader: one fetcher per cluster, restarted only when its own cluster changes.

All methods run on the reader's thread (see :mod:`multicluster_source.framework._interfaces`). Fetchers report
finished splits from their threads through a queue that :meth:`poll_events` drains.

A fetcher (its consumer and fetch thread) lives while its cluster has splits in this reader: one that has held
none for :data:`_AHEAD_S` (its topics removed while the cluster stays, its bounded splits finished, its
splits moved to other readers) is closed, unless the reader stands by for that cluster (its client is the one
ready to take over). Splits of that cluster that come later get a new fetcher.
"""

from __future__ import annotations

import json
import logging
import queue
from collections.abc import Sequence
from typing import Any

from multicluster_source._clock import clock
from multicluster_source.framework._clientconf import cluster_client_config
from multicluster_source.framework._events import (
    GetMetadataUpdateEvent,
    MetadataUpdateEvent,
    SourceEvent,
    SplitsFinishedEvent,
    SplitsPausedEvent,
    StandbySplitsEvent,
)
from multicluster_source.framework._interfaces import ReaderContext
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.metadata._model import ClusterMetadata
from multicluster_source.ops._clientlog import client_logging
from multicluster_source.reader._fetcher import ClusterFetcher
from multicluster_source.reader._settings import ReaderSettings
from multicluster_source.reader._warm import WarmConsumer

_log = logging.getLogger("multicluster_source.reader")

DEFAULT_FETCH_WAIT_MAX_MS = 100
"""The source's default for librdkafka's ``fetch.wait.max.ms`` (a client or cluster property overrides it)."""
_AHEAD_S = 30.0
"""How long a client opened for a cluster new in the metadata waits for this reader's first split of it, and
how long a fetcher keeps its client after its last split went."""
_IDLE_CHECK_S = 1.0
"""How often (at most) :meth:`MultiClusterReader.poll_events` looks for fetchers left without splits."""


class FetchBrokerStats:
    """``stats_cb`` of a consumer: which broker each partition is fetched from (leader or a follower).

    Filled only when ``statistics.interval.ms`` is set; shows fetch-from-follower (KIP-392) at work.
    """

    def __init__(self) -> None:
        self.partitions: dict[str, dict[str, int | None]] = {}

    def __call__(self, stats_json: str) -> None:
        """Called by librdkafka (on the thread that polls the consumer) with its statistics JSON."""
        try:
            data = json.loads(stats_json)
        except ValueError:
            return
        for topic, tdata in (data.get("topics") or {}).items():
            for partition, pdata in (tdata.get("partitions") or {}).items():
                if partition == "-1" or not isinstance(pdata, dict):
                    continue
                self.partitions[f"{topic}/{partition}"] = {
                    "leader": pdata.get("leader"),
                    "fetching_from": pdata.get("broker"),
                }


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
        self._standby: dict[str, KafkaPartitionSplit] = {}
        self._warm: dict[str, WarmConsumer] = {}
        self._ahead: dict[str, float] = {}  # cluster id -> monotonic time its client opened ahead is closed
        self._idle: dict[str, float] = {}  # cluster id -> monotonic time its fetcher was seen without splits
        self._idle_check = 0.0  # monotonic time of the next look for fetchers without splits
        self._stats: dict[str, FetchBrokerStats] = {}
        self._held: SplitsPausedEvent | None = None  # watermark alignment: splits to pause, limit
        self._clock = clock()  # the idle window's

    @property
    def index(self) -> int:
        """This reader's index."""
        return self._ctx.index

    def start(self) -> None:
        """Ask the enumerator for metadata; splits are held until it arrives."""
        self._ctx.send_event_to_enumerator(GetMetadataUpdateEvent())

    def split_ids(self) -> list[str]:
        """The splits this reader reads now (or holds until metadata arrives).

        Also called from other threads (``assignments()``, ``status()``): it reads copies of what the reader
        thread changes (``dict.copy`` and ``list`` take them in one C call, under the GIL)."""
        ids = {s.split_id for s in list(self._pending)}
        for fetcher in self._fetchers.copy().values():
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
        """The fetcher of ``cluster_id`` (made when there is none), about to be handed splits."""
        self._idle.pop(cluster_id, None)
        fetcher = self._fetchers.get(cluster_id)
        if fetcher is None:
            assert self._metadata is not None
            fetcher = self._new_fetcher(self._metadata[cluster_id], self._warm.pop(cluster_id, None))
            self._fetchers[cluster_id] = fetcher
        return fetcher

    def _client_conf(self, cluster: ClusterMetadata) -> dict[str, Any]:
        """A consumer configuration for ``cluster`` (secrets resolved: never log it)."""
        extra = {
            "group.id": self._s.group_id,
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "enable.partition.eof": "true" if self._s.bounded else "false",
        }
        cid = cluster.cluster_id
        conf: dict[str, Any] = cluster_client_config(
            cluster,
            self._s.client_properties,
            client_id=f"{self._s.client_id_prefix}-{cid}-reader-{self.index}",
            extra=extra,
        )
        conf.setdefault("auto.offset.reset", "earliest")
        conf.setdefault("queued.max.messages.kbytes", "16384")
        # librdkafka pauses a partition's fetching for fetch.queue.backoff.ms (default 1 s) whenever its local
        # queue is over the limit above; with a bounded hand-off that happens on every drain: keep it short.
        conf.setdefault("fetch.queue.backoff.ms", "10")
        # A partition assigned while a fetch to its broker is in flight is fetched only after that fetch
        # returns, and a broker with nothing new holds a fetch for fetch.wait.max.ms (librdkafka: 500 ms):
        # 100 ms keeps an added topic, a failover or a re-add within ~0.15 s on an idle cluster, for at most
        # 10 fetch requests a second per idle broker connection.
        conf.setdefault("fetch.wait.max.ms", str(DEFAULT_FETCH_WAIT_MAX_MS))
        if self._s.rack_id_supplier is not None and "client.rack" not in conf:
            rack_id = self._s.rack_id_supplier(cid, self._s.rack)
            if rack_id:
                conf["client.rack"] = rack_id
        if int(conf.get("statistics.interval.ms", "0") or 0) > 0:
            conf["stats_cb"] = self._stats.setdefault(cid, FetchBrokerStats())
        conf.update(client_logging(cid, f"reader {self.index}"))
        return conf

    def _new_fetcher(self, cluster: ClusterMetadata, warm: Any = None) -> ClusterFetcher:
        cid = cluster.cluster_id
        conf = self._client_conf(cluster)
        fetcher = ClusterFetcher(cid, conf, self._s.fetch, self._ctx, self._finished_q.put, consumer=warm)
        if self._held is not None:
            fetcher.hold(self._held.split_ids, self._held.limit_ms)
        fetcher.start()
        return fetcher

    # ------------------------------------------------------------------------------------ standbys

    def _set_standby(self, splits: Sequence[KafkaPartitionSplit]) -> None:
        self._standby = {s.split_id: s for s in splits}
        self._sync_warm()

    def _sync_warm(self) -> None:
        """Keep one connected, idle consumer per cluster this reader does not read yet and stands by for, or
        may read soon: a cluster new in the metadata, for up to ``_AHEAD_S`` until its splits come."""
        metadata = self._metadata or {}
        now = self._clock.monotonic()
        self._ahead = {
            cid: until
            for cid, until in self._ahead.items()
            if until > now and cid in metadata and cid not in self._fetchers
        }
        standby = {s.cluster_id for s in self._standby.values()}
        wanted = {cid for cid in standby | set(self._ahead) if cid in metadata and cid not in self._fetchers}
        for cid in sorted(set(self._warm) - wanted):
            self._close_warm(cid)
        for cid in sorted(wanted - set(self._warm)):
            topics = sorted(s.topic for s in self._standby.values() if s.cluster_id == cid)
            self._warm[cid] = WarmConsumer(
                cid,
                self._s.fetch.consumer_factory(self._client_conf(metadata[cid])),
                topics or metadata[cid].topics,
                f"mcs-warm-{self._s.fetch.source_name}-{self.index}-{cid}",
            )
            why = "standby client ready to take over" if cid in standby else "client connecting ahead"
            _log.info("reader=%d cluster=%s: %s", self.index, cid, why)

    def _close_warm(self, cluster_id: str) -> None:
        warm = self._warm.pop(cluster_id, None)
        if warm is not None:
            warm.close()

    def handle_source_event(self, event: SourceEvent) -> None:
        """Follow a metadata update: touch only the clusters that changed."""
        if isinstance(event, StandbySplitsEvent):
            self._set_standby(event.splits)
            return
        if isinstance(event, SplitsPausedEvent):
            self._held = event
            for fetcher in self._fetchers.values():
                fetcher.hold(event.split_ids, event.limit_ms)
            return
        if not isinstance(event, MetadataUpdateEvent):
            _log.warning("reader=%d: unknown event %r", self.index, event)
            return
        if event.version < self._version:
            return
        self._version = event.version
        new = dict(event.clusters)
        old = self._metadata or {}
        self._metadata = new
        until = self._clock.monotonic() + _AHEAD_S
        for cid in sorted(set(new) - set(old) - set(self._fetchers)):
            self._ahead[cid] = until
        for cid in sorted(set(self._warm)):
            if cid not in new or not old.get(cid, new[cid]).same_connection(new[cid]):
                self._close_warm(cid)
        for cid in sorted(set(self._fetchers) - set(new)):
            self._fetchers[cid].stop()  # stays visible in assignments() until it has really stopped
            del self._fetchers[cid]
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
        self._sync_warm()

    def notify_no_more_splits(self) -> None:
        """Bounded: no further splits will come."""
        self._no_more_splits = True

    def poll_events(self) -> None:
        """Report splits that fetchers finished; close clients that no split came for or that hold none."""
        finished: set[str] = set()
        while True:
            try:
                finished.update(self._finished_q.get_nowait())
            except queue.Empty:
                break
        if finished:
            self._ctx.send_event_to_enumerator(SplitsFinishedEvent(frozenset(finished)))
        now = self._clock.monotonic()
        if self._ahead and min(self._ahead.values()) <= now:
            self._sync_warm()  # a client opened ahead of splits that did not come is closed
        if now >= self._idle_check:
            self._idle_check = now + min(_IDLE_CHECK_S, _AHEAD_S / 4)
            self._close_idle(now)

    def _close_idle(self, now: float) -> None:
        """Stop the fetchers that have held no split for ``_AHEAD_S`` (none handed to them that is neither
        finished nor removed, none pending here), but those of clusters this reader stands by for.

        Their clusters' metrics stay: the clusters are still in the metadata (other readers may read them,
        and their counters keep counting when splits come back)."""
        keep = {s.cluster_id for s in self._standby.values()} | {s.cluster_id for s in self._pending}
        idle = self._idle
        self._idle = {
            cid: idle.get(cid, now)
            for cid, fetcher in self._fetchers.items()
            if cid not in keep and fetcher.outstanding() == 0
        }
        done = sorted(cid for cid, since in self._idle.items() if now - since >= _AHEAD_S)
        for cid in done:
            self._fetchers[cid].begin_stop()  # side by side
        for cid in done:
            left = self._fetchers[cid].stop()  # stays visible in assignments() until it has really stopped
            del self._fetchers[cid], self._idle[cid]
            self._stats.pop(cid, None)
            self._ahead.pop(cid, None)
            self._pending.extend(left)  # none: it held no split (routed again all the same)
            _log.info(
                "reader=%d cluster=%s: no split for %.0f s; its fetcher and client are closed",
                self.index,
                cid,
                _AHEAD_S,
            )
        if done:
            self._route()

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
        for fetcher in self._fetchers.values():
            fetcher.begin_stop()
        for cid in list(self._fetchers):
            self._fetchers.pop(cid).stop()
        for cid in list(self._warm):
            self._close_warm(cid)

    def status(self) -> dict[str, Any]:
        """A JSON-ready view of this reader."""
        return {
            "rack": self._s.rack,
            "clusters": sorted(self._fetchers.copy()),
            "splits": self.split_ids(),
            "standby": sorted(self._standby.copy()),
            "warm_clients": sorted(self._warm.copy()),
            "fetching_from": {cid: dict(st.partitions) for cid, st in sorted(self._stats.copy().items())},
            "stalls": {
                cid: {"total": f.stalls.total, "last": f.stalls.last.copy()}
                for cid, f in sorted(self._fetchers.copy().items())
                if f.stalls.total
            },
        }
