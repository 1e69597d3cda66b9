"""Prometheus metrics of a source, with exact label clean-up when clusters, topics or partitions go away.

:class:`SourceMetrics` is what a source records through: it creates a label set on first use, remembers
it, and removes exactly the label sets it created when a cluster, topic or partition goes away or the
source closes. The metric families themselves, and how several sources share them on one registry (counters
and the summed gauges add up, a label set leaves the exposition when no source on the registry uses it any
longer), are in :mod:`multicluster_source.ops._metric_families`.

Threads: every method may be called from reader threads and the coordinator (see :class:`SourceMetrics`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client import REGISTRY, CollectorRegistry, Counter

from multicluster_source.ops._metric_families import (
    ACTIVE,
    BYTES,
    COMMITTED,
    CURRENT,
    DESER_ERRORS,
    FAILOVERS,
    HANDOVER_REPEATS,
    HANDOVERS,
    LAG,
    LATE,
    METADATA_FAILURES,
    OFFSET_RESETS,
    PAUSED,
    PER_PARTITION,
    RECONCILIATIONS,
    RECORDS,
    RESTARTS,
    SPLITS,
    STALLS,
    TRANSACTIONS,
    TXN_POSITIONS,
    TXN_RECORDS,
    TXN_SECONDS,
    WATERMARK,
    Labels,
    MetricKey,
    acquire,
    release,
)
from multicluster_source.ops._partition_gauges import PartitionKey

__all__ = ["SourceMetrics"]

_Matcher = Callable[[MetricKey], bool]


class SourceMetrics:
    """The Prometheus metrics of one source (API.md section 6, plus deserialization errors, failovers and
    offset resets).

    Every method is thread-safe and may be called from reader threads and the coordinator. A label set is
    created on first use and remembered, so :meth:`remove_cluster`, :meth:`remove_topic` and
    :meth:`remove_partition` remove exactly what this source created. After :meth:`close` every method is a
    no-op. Callers stop the readers of a cluster before :meth:`remove_cluster`: a later ``record_consumed``
    for it would create its label set again.
    """

    def __init__(self, registry: CollectorRegistry | None, source_name: str) -> None:
        """Register (or share) the metrics in ``registry`` (``None``: prometheus-client's global registry).

        Raises ``ValueError`` from prometheus-client when another collector of the registry already uses
        one of the names.
        """
        self._registry = REGISTRY if registry is None else registry
        self._source_name = source_name
        self._shared = acquire(self._registry)
        self._token = id(self)
        self._closed = False
        # Caches read without a lock on the hot path; written only under the shared lock.
        self._consumed: dict[tuple[str, str], tuple[Counter, Counter]] = {}
        self._counter_children: dict[MetricKey, Counter] = {}
        # This source's share of the per-partition gauges: name -> cluster -> partitions it set.
        self._mine: dict[str, dict[str, set[PartitionKey]]] = {name: {} for name in PER_PARTITION}
        # Label sets of summed gauges this source has a part in.
        self._parts: set[MetricKey] = set()
        self._repeat_bound = 0

    @property
    def source_name(self) -> str:
        """The name of the source these metrics belong to (for messages; it is not a label)."""
        return self._source_name

    @property
    def registry(self) -> CollectorRegistry:
        """The registry the metrics are registered in."""
        return self._registry

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    # -------------------------------------------------------------------------------------------- recording

    def record_consumed(self, cluster: str, topic: str, count: int, nbytes: int) -> None:
        """Count ``count`` records of ``nbytes`` bytes read from ``topic`` on ``cluster``."""
        pair = self._consumed.get((cluster, topic))
        if pair is None:
            pair = self._consumed_children(cluster, topic)
            if pair is None:
                return
        if count:  # a column taker counts the bytes of what it takes apart (count 0)
            pair[0].inc(count)
        if nbytes:
            pair[1].inc(nbytes)

    def set_offsets(
        self,
        cluster: str,
        topic: str,
        partition: int,
        current: int | None = None,
        lag: int | None = None,
        committed: int | None = None,
    ) -> None:
        """Set the offset gauges of one partition; a gauge whose argument is ``None`` is left unchanged."""
        key = (topic, partition)
        with self._shared.lock:
            for name, value in ((CURRENT, current), (LAG, lag), (COMMITTED, committed)):
                if value is not None:
                    self._set_locked(name, cluster, {key: value})

    def set_partition_offsets(
        self, cluster: str, current: Mapping[PartitionKey, int], lag: Mapping[PartitionKey, int]
    ) -> None:
        """Set the current offset and the lag of many partitions of ``cluster`` (``(topic, partition)`` ->
        value; a partition missing from ``lag`` keeps its lag): one hold of the shared lock and a
        ``dict.update`` each, whatever the number of partitions new to the gauges."""
        with self._shared.lock:
            if current:
                self._set_locked(CURRENT, cluster, current)
            if lag:
                self._set_locked(LAG, cluster, lag)

    def set_committed(self, cluster: str, offsets: Mapping[PartitionKey, int]) -> None:
        """Set the committed offset of many partitions of ``cluster`` (``(topic, partition)`` -> offset)."""
        if offsets:
            with self._shared.lock:
                self._set_locked(COMMITTED, cluster, offsets)

    def _set_locked(self, name: str, cluster: str, values: Mapping[PartitionKey, float]) -> None:
        """Caller holds the shared lock."""
        if self._closed:
            return
        mine = self._mine[name].get(cluster)
        if mine is None:
            mine = self._mine[name][cluster] = set()
        self._shared.partitions.set_many(name, cluster, values, mine)

    def set_assigned_splits(self, cluster: str, n: int) -> None:
        """Set how many splits of ``cluster`` this source has assigned to its readers."""
        self._set_part(SPLITS, (cluster,), n)

    def set_active_clusters(self, n: int) -> None:
        """Set how many clusters this source reads from."""
        self._set_part(ACTIVE, (), n)

    def metadata_failure(self) -> None:
        """Count one failed stream metadata read."""
        if not self._closed:
            self._shared.counters[METADATA_FAILURES].inc()

    def reconciliation(self) -> None:
        """Count one application of changed stream metadata."""
        if not self._closed:
            self._shared.counters[RECONCILIATIONS].inc()

    def reader_restart(self, cluster: str) -> None:
        """Count one restart of a reader's client for ``cluster``."""
        self._inc(RESTARTS, (cluster,))

    def deserialization_error(self, cluster: str, topic: str) -> None:
        """Count one record of ``topic`` on ``cluster`` skipped because the deserializer raised."""
        self._inc(DESER_ERRORS, (cluster, topic))

    def failover(self, cluster: str) -> None:
        """Count one takeover by a standby reader of splits of ``cluster``."""
        self._inc(FAILOVERS, (cluster,))

    def offset_reset(self, cluster: str, topic: str) -> None:
        """Count one out-of-range position of ``topic`` on ``cluster`` reset per ``auto.offset.reset``."""
        self._inc(OFFSET_RESETS, (cluster, topic))

    def stalled_partition(self, cluster: str) -> None:
        """Count one stalled partition of ``cluster`` (see :mod:`multicluster_source.reader._stalls`)."""
        self._inc(STALLS, (cluster,))

    def transaction(self, outcome: str, seconds: float, records: int, positions: int) -> None:
        """Count one transaction of an exactly-once sink (``committed`` or ``aborted``) and, for a committed
        one, its commit time, records produced and positions written."""
        self._inc(TRANSACTIONS, (outcome,))
        if outcome != "committed":
            return
        with self._shared.lock:
            if self._closed:
                return
            counters = self._shared.counters
            counters[TXN_SECONDS].inc(seconds)
            counters[TXN_RECORDS].inc(records)
            counters[TXN_POSITIONS].inc(positions)

    def late_records(self, cluster: str, topic: str, n: int) -> None:
        """Count ``n`` late records of ``topic`` on ``cluster`` (event time at or below the watermark)."""
        child = self._counter_children.get((LATE, (cluster, topic)))
        if child is None:
            with self._shared.lock:
                if self._closed:
                    return
                child = self._own_counter((LATE, (cluster, topic)))
        child.inc(n)

    def set_watermark(self, ms: int) -> None:
        """Show the stream's watermark (the value written last when sources share a registry)."""
        if not self._closed:
            self._shared.gauges[WATERMARK].set(ms)

    def handover(self, mode: str, max_repeats: int | None) -> None:
        """Count one split handed over to a replica (``mode``: how its start was chosen) and add its bound
        of records that may come twice (None: unknown, nothing added)."""
        self._inc(HANDOVERS, (mode,))
        if max_repeats:
            self._repeat_bound += max_repeats
            self._set_part(HANDOVER_REPEATS, (), self._repeat_bound)

    def set_paused_splits(self, n: int) -> None:
        """Show how many splits watermark alignment pauses now (summed over sources sharing a registry)."""
        self._set_part(PAUSED, (), n)

    # ---------------------------------------------------------------------------------------------- removal

    def remove_partition(self, cluster: str, topic: str, partition: int) -> None:
        """Remove the offset gauges of one partition."""
        key = (topic, partition)
        with self._shared.lock:
            if not self._closed:
                self._release_locked(cluster, lambda mine: [key] if key in mine else [])

    def remove_topic(self, cluster: str, topic: str) -> None:
        """Remove every label set of ``topic`` on ``cluster``, its partitions' gauges included."""
        with self._shared.lock:
            if self._closed:
                return
            self._remove_locked(lambda key: len(key[1]) >= 2 and key[1][0] == cluster and key[1][1] == topic)
            self._release_locked(cluster, lambda mine: [k for k in mine if k[0] == topic])

    def remove_cluster(self, cluster: str) -> None:
        """Remove every label set carrying ``cluster``; afterwards no sample of this source names it."""
        with self._shared.lock:
            if self._closed:
                return
            self._remove_locked(lambda key: len(key[1]) >= 1 and key[1][0] == cluster)
            self._release_locked(cluster, list)

    def close(self) -> None:
        """Remove this source's label sets; unregister the metrics when no other source uses the registry.

        Idempotent. Unlabelled counters keep their value while another source shares the registry.
        """
        with self._shared.lock:
            if self._closed:
                return
            self._closed = True
            self._remove_locked(lambda key: True)
            for clusters in self._mine.values():
                for cluster in list(clusters):
                    self._release_locked(cluster, list)
        release(self._shared)

    # ---------------------------------------------------------------------------------------------- helpers

    def _consumed_children(self, cluster: str, topic: str) -> tuple[Counter, Counter] | None:
        with self._shared.lock:
            if self._closed:
                return None
            labels = (cluster, topic)
            pair = (self._own_counter((RECORDS, labels)), self._own_counter((BYTES, labels)))
            self._consumed[labels] = pair
            return pair

    def _inc(self, name: str, labels: Labels) -> None:
        child = self._counter_children.get((name, labels))
        if child is None:
            with self._shared.lock:
                if self._closed:
                    return
                child = self._own_counter((name, labels))
        child.inc()

    def _own_counter(self, key: MetricKey) -> Counter:
        """The counter child of ``key``, taking a share of it.  Caller holds the shared lock."""
        child = self._counter_children.get(key)
        if child is None:
            child = self._shared.counters[key[0]].labels(*key[1])
            self._take(key)
            self._counter_children[key] = child
        return child

    def _take(self, key: MetricKey) -> None:
        owners = self._shared.owners
        owners[key] = owners.get(key, 0) + 1

    def _set_part(self, name: str, labels: Labels, value: float) -> None:
        key = (name, labels)
        shared = self._shared
        with shared.lock:
            if self._closed:
                return
            parts = shared.parts.setdefault(key, {})
            parts[self._token] = value
            self._parts.add(key)
            gauge = shared.gauges[name]
            (gauge.labels(*labels) if labels else gauge).set(sum(parts.values()))

    def _release_locked(
        self, cluster: str, which: Callable[[set[PartitionKey]], Iterable[PartitionKey]]
    ) -> None:
        """Drop this source's share of the per-partition gauges of ``cluster`` that ``which`` picks from
        those it set.  Caller holds the shared lock."""
        for name, clusters in self._mine.items():
            mine = clusters.get(cluster)
            if not mine:
                continue
            keys = list(which(mine))
            mine.difference_update(keys)
            if not mine:
                del clusters[cluster]
            self._shared.partitions.release(name, cluster, keys)

    def _remove_locked(self, match: _Matcher) -> None:
        """Drop this source's share of every label set ``match`` selects.  Caller holds the shared lock."""
        shared = self._shared
        for labels in [k for k in self._consumed if match((RECORDS, k))]:
            del self._consumed[labels]
        owned: list[tuple[MetricKey, Counter]] = []
        for ckey in [k for k in self._counter_children if match(k)]:
            owned.append((ckey, shared.counters[ckey[0]]))
            del self._counter_children[ckey]
        for key, metric in owned:
            left = shared.owners[key] - 1
            if left:
                shared.owners[key] = left
            else:
                del shared.owners[key]
                metric.remove(*key[1])
        for key in [k for k in self._parts if match(k)]:
            self._parts.discard(key)
            parts = shared.parts[key]
            parts.pop(self._token, None)
            gauge = shared.gauges[key[0]]
            if parts:
                (gauge.labels(*key[1]) if key[1] else gauge).set(sum(parts.values()))
            elif key[1]:
                del shared.parts[key]
                gauge.remove(*key[1])
            else:
                del shared.parts[key]
                gauge.set(0)
