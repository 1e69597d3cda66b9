"""The per-cluster enumerator: partition discovery, offset resolution and offset commits for one cluster.

Runs on the coordinator thread; its network calls run on I/O threads through its context proxy. Those calls
only start requests and wait for their futures a slice at a time (:func:`await_result`), so :meth:`close`
ends a round that waits for a cluster that is down within a fraction of a second: the I/O thread lets go of
the admin client, and the runtime joins it.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from multicluster_source.enumerator._committer import (
    ConsumerFactory,
    GroupCommitter,
    default_consumer_factory,
)
from multicluster_source.enumerator._describe import describe_partitions
from multicluster_source.enumerator._offsets import (
    OffsetsInitializer,
    await_result,
    resolve_offsets,
)
from multicluster_source.enumerator._proxy import StoppableContextProxy
from multicluster_source.exceptions import ClusterIdentityError, HandoverGapError
from multicluster_source.framework._interfaces import Cancellable
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.metadata._model import ClusterMetadata
from multicluster_source.ops._clientlog import ClientErrorReporter, client_logging

_log = logging.getLogger("multicluster_source.enumerator")

AdminFactory = Callable[[Mapping[str, Any]], Any]


def default_admin_factory(conf: Mapping[str, Any]) -> Any:
    """A confluent-kafka AdminClient for ``conf``."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(dict(conf))


@dataclass(frozen=True)
class ClusterEnumeratorConfig:
    """Everything a per-cluster enumerator needs; ``client_properties`` are resolved (secrets inside)."""

    cluster: ClusterMetadata
    client_properties: Mapping[str, str]
    group_id: str | None
    starting: OffsetsInitializer
    stopping: OffsetsInitializer | None
    discovery_interval_s: float | None
    """None: discover once (bounded sources, or ``partition.discovery.interval.ms=-1``)."""
    request_timeout_s: float = 30.0
    retry_backoff_s: float = 1.0
    leader_racks: bool = False
    """Learn the rack of every partition's leader (for rack-aware assignment) on each discovery round."""
    read_committed: bool = True
    """The readers' ``isolation.level`` is ``read_committed`` (librdkafka's default): ``latest`` offsets are
    the last stable offsets, not the high watermarks."""
    commit_properties: Mapping[str, str] | None = None
    """The client configuration of the offset committer's consumer (consumer properties kept); None: the
    admin client's."""
    commit_wait_s: float = 5.0
    """``checkpoint.commit.wait.ms``: a commit not answered within it marks the cluster as not answering."""
    identities: Any = None
    """A :class:`~._identity.ClusterIdentities` to tell the Kafka ``cluster.id`` (an exactly-once sink):
    learned before the first discovery round makes splits; None: not asked."""


@dataclass(frozen=True)
class _Discovered:
    splits: list[KafkaPartitionSplit]
    missing_topics: list[str]
    topics_asked: frozenset[str]
    leader_racks: dict[tuple[str, int], str | None]
    deferred: int = 0
    """New partitions whose offsets the cluster could not give yet (a retriable error): found again next."""


class KafkaClusterEnumerator:
    """Discovers the partitions of one cluster's topics and turns new ones into splits.

    It remembers which partitions it already knows (restored from a checkpoint or discovered), and which
    topics it has seen: a topic's partitions found on its first discovery start at the starting offsets,
    partitions added to a known topic later start at the earliest offset.
    """

    def __init__(
        self,
        config: ClusterEnumeratorConfig,
        context: StoppableContextProxy,
        *,
        known: set[tuple[str, int]] | None = None,
        seen_topics: set[str] | None = None,
        admin_factory: AdminFactory = default_admin_factory,
        consumer_factory: ConsumerFactory = default_consumer_factory,
    ) -> None:
        self.config = config
        self._consumer_factory = consumer_factory
        self._committer: GroupCommitter | None = None
        self._context = context
        self._topics = frozenset(config.cluster.topics)
        self._known: set[tuple[str, int]] = set(known or ())
        self._seen: set[str] = set(seen_topics or ())
        self._admin_factory = admin_factory
        self._admin: Any = None
        self._warned_missing: set[str] = set()
        self._last_error: str | None = None
        self._deferring = False  # the last round left partitions it could not resolve for later
        self._client_errors = ClientErrorReporter(config.cluster.cluster_id, "enumerator")
        self._rounds = 0
        self._generation = 0
        self._next: Cancellable | None = None
        self._snapshot = (self._topics, frozenset(self._known), frozenset(self._seen))
        self._closing = threading.Event()
        """Set by :meth:`close`: a discovery round on an I/O thread stops waiting, lets go of the client."""
        self._identified = config.identities is None  # set on an I/O thread, once

    @property
    def cluster_id(self) -> str:
        """The cluster this enumerator serves."""
        return self.config.cluster.cluster_id

    @property
    def seen_topics(self) -> frozenset[str]:
        """Topics whose partitions were discovered at least once (checkpointed)."""
        return frozenset(self._seen)

    def admin(self) -> Any:
        """The cluster's admin client, created on first use; its errors (authentication, TLS, ...) are
        logged naming the cluster and kept for :meth:`current_error`."""
        if self._admin is None:
            conf = dict(self.config.client_properties)
            conf.update(client_logging(self.cluster_id, "enumerator", self._client_errors))
            self._admin = self._admin_factory(conf)
        return self._admin

    def current_error(self) -> str | None:
        """Why this cluster does not work now (the client's latest error, else the failed discovery), or
        None once a discovery round succeeded. Serves the admin client's pending callbacks first, so an
        authentication or TLS error shows while a discovery round still waits for its answer."""
        serve = getattr(self._admin, "poll", None)
        if callable(serve):
            serve(0)
        return self._client_errors.last or self._last_error

    def start(self) -> None:
        """Create the admin client and schedule discovery: now, then every interval (or once)."""
        self.admin()
        self._schedule(0.0)

    def _schedule(self, delay: float) -> None:
        # One chain of discovery rounds at a time: a new schedule supersedes the pending one; a round
        # already running still delivers its (de-duplicated) result but does not schedule the next.
        self._generation += 1
        generation = self._generation
        if self._next is not None:
            self._next.cancel()

        def handler(result: _Discovered | None, error: BaseException | None) -> None:
            self._on_discovered(result, error, generation)

        self._next = self._context.call_async(self._discover, handler, initial_delay=delay)

    def discover_now(self) -> None:
        """Run a discovery round at once (after a topic change)."""
        self._schedule(0.0)

    def update_topics(self, topics: frozenset[str]) -> set[tuple[str, int]]:
        """Follow a new topic set in place; returns the known partitions of removed topics (forgotten)."""
        removed_topics = self._topics - topics
        added = topics - self._topics
        self._topics = frozenset(topics)
        dropped = {tp for tp in self._known if tp[0] in removed_topics}
        self._known -= dropped
        self._seen -= removed_topics
        self._refresh_snapshot()
        if added:
            self.discover_now()
        return dropped

    def forget(self, partitions: set[tuple[str, int]]) -> None:
        """Forget partitions (their splits were removed), so a later discovery finds them again."""
        self._known -= partitions
        self._refresh_snapshot()

    def _refresh_snapshot(self) -> None:
        self._snapshot = (self._topics, frozenset(self._known), frozenset(self._seen))

    def _discover(self) -> _Discovered:
        """One discovery round. Runs on an I/O thread: it reads only the immutable snapshot."""
        topics, known, seen = self._snapshot
        admin = self._admin
        serve = getattr(admin, "poll", None)  # an admin client serves error_cb and logger only in poll()
        try:
            return self._discover_with(admin, topics, known, seen)
        except BaseException as error:
            # The error goes to the coordinator (and may wait there after close): its frames must not hold
            # the admin client, which has no close() and lives, threads and connections, while referenced.
            traceback.clear_frames(error.__traceback__)
            raise
        finally:
            if callable(serve):
                serve(0)
            admin = serve = None  # this frame stays in the traceback too

    def _discover_with(
        self, admin: Any, topics: frozenset[str], known: frozenset[tuple[str, int]], seen: frozenset[str]
    ) -> _Discovered:
        config = self.config
        if not self._identified:  # before any split is made: a cluster id that moved fails the source
            described = await_result(
                admin.describe_cluster(request_timeout=config.request_timeout_s),
                config.request_timeout_s + 5,
                self._closing,
            )
            config.identities.learn(self.cluster_id, described.cluster_id, config.cluster.bootstrap_servers)
            self._identified = True
        found, missing, leaders = describe_partitions(
            admin, topics, Counter(t for t, _p in known), config.request_timeout_s, self._closing
        )
        leader_racks: dict[tuple[str, int], str | None] = {}
        if config.leader_racks and leaders:
            nodes = await_result(
                admin.describe_cluster(request_timeout=config.request_timeout_s),
                config.request_timeout_s + 5,
                self._closing,
            )
            rack_of = {node.id: (node.rack or None) for node in nodes.nodes}
            leader_racks = {tp: rack_of.get(leader) for tp, leader in leaders.items()}
        new = [tp for tp in found if tp not in known]
        first_sight = [tp for tp in new if tp[0] not in seen]
        later = [tp for tp in new if tp[0] in seen]
        cid = config.cluster.cluster_id

        deferred: list[tuple[str, int]] = []

        def resolve(
            initializer: OffsetsInitializer, partitions: list[tuple[str, int]]
        ) -> dict[tuple[str, int], int]:
            return resolve_offsets(
                initializer,
                admin=admin,
                cluster_id=cid,
                group_id=config.group_id,
                partitions=partitions,
                timeout=config.request_timeout_s,
                read_committed=config.read_committed,
                stop=self._closing,
                deferred=deferred,
            )

        # A partition the cluster cannot answer for yet (its leader just elected, ...) does not hold up the
        # others: it is left unknown, and found again by the next round, soon (see _on_discovered).
        starts = resolve(config.starting, first_sight)
        starts.update(resolve(OffsetsInitializer.earliest(), later))
        stops = resolve(config.stopping, new) if config.stopping is not None else {}
        ready = [tp for tp in new if tp in starts and (config.stopping is None or tp in stops)]
        splits = [KafkaPartitionSplit(cid, t, p, max(0, starts[(t, p)]), stops.get((t, p))) for t, p in ready]
        return _Discovered(splits, missing, topics, leader_racks, len(new) - len(ready))

    def _on_discovered(
        self, result: _Discovered | None, error: BaseException | None, generation: int
    ) -> None:
        cid = self.cluster_id
        chain = generation == self._generation
        if isinstance(error, (HandoverGapError, ClusterIdentityError)):
            _log.error("cluster=%s: %s", cid, error)
            self._context.fail(error)
            return
        if error is not None or result is None:
            message = f"{type(error).__name__}: {error}"
            if message != self._last_error:
                _log.warning("cluster=%s: partition discovery failed, will retry: %s", cid, message)
                self._last_error = message
            if chain:
                retry = self.config.discovery_interval_s or self.config.retry_backoff_s
                self._schedule(min(retry, self.config.retry_backoff_s * 5))
            return
        if self._last_error is not None:
            _log.info("cluster=%s: partition discovery works again", cid)
            self._last_error = None
        self._client_errors.clear()
        for topic in result.missing_topics:
            if topic in self._topics and topic not in self._warned_missing:
                _log.warning("cluster=%s: topic %r does not exist (yet); will keep looking", cid, topic)
                self._warned_missing.add(topic)
        fresh = [s for s in result.splits if s.topic in self._topics and s.topic_partition not in self._known]
        for split in fresh:
            self._known.add(split.topic_partition)
        self._seen |= {t for t in result.topics_asked if t in self._topics and t not in result.missing_topics}
        self._rounds += 1
        self._refresh_snapshot()
        if result.leader_racks:
            self._context.leaders_discovered(
                {tp: rack for tp, rack in result.leader_racks.items() if tp[0] in self._topics}
            )
        if fresh:
            _log.info("cluster=%s: discovered %d new partitions", cid, len(fresh))
            self._context.splits_discovered(fresh, initial=self._rounds == 1)
        if not chain:
            return
        interval = self.config.discovery_interval_s
        if result.deferred:
            if not self._deferring:  # once, until every partition could be resolved
                _log.warning(
                    "cluster=%s: %d partitions cannot be read yet (leaders not ready); looking again every "
                    "%.0f s",
                    cid,
                    result.deferred,
                    self.config.retry_backoff_s,
                )
            self._deferring = True
            self._schedule(self.config.retry_backoff_s)
            return
        if self._deferring:
            _log.info("cluster=%s: every partition found can be read", cid)
            self._deferring = False
        if interval is None and result.missing_topics:
            # Discovering once (bounded): wait for every topic it was told about, retrying with a log line.
            self._schedule(self.config.retry_backoff_s)
            return
        self._context.discovery_done()
        if interval is not None:
            self._schedule(interval)

    def commit_offsets(self, offsets: Mapping[tuple[str, int], int]) -> Future[None]:
        """Owe ``offsets`` to the cluster under the group id; the future ends once they (or newer offsets of
        the same partitions) are stored. The cluster's :class:`GroupCommitter` (made on first use) commits
        them with a consumer on its own thread and retries until the cluster answers."""
        if not offsets or not self.config.group_id:
            done: Future[None] = Future()
            done.set_result(None)
            return done
        if self._committer is None:
            self._committer = GroupCommitter(
                self.cluster_id,
                self.config.commit_properties or self.config.client_properties,
                self.config.group_id,
                answer_within_s=self.config.commit_wait_s,
                retry_backoff_s=self.config.retry_backoff_s,
                consumer_factory=self._consumer_factory,
            )
        return self._committer.submit(offsets)

    @property
    def commits_answered(self) -> bool:
        """Whether the cluster answers offset commits (True before the first one): a checkpoint waits for
        the commits of such clusters only."""
        return self._committer is None or self._committer.answering

    def close(self) -> dict[tuple[str, int], int]:
        """Stop scheduled work, end a discovery round that still waits (it lets go of the admin client within
        a fraction of a second; the runtime joins its I/O thread), drop the admin client (confluent-kafka
        admin clients have no close: the last reference destroys it) and close the offset committer (its
        thread closes its consumer). Returns the offsets still owed to the cluster."""
        self._closing.set()
        self._context.stop()
        self._admin = None
        committer, self._committer = self._committer, None
        return committer.close(timeout=1.0) if committer is not None else {}
