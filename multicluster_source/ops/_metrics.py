"""Prometheus metrics of a source, with exact label clean-up when clusters, topics or partitions go away.

The metric names and labels are a contract (API.md section 6); there is deliberately no ``source`` label.
Several sources may share one registry (the global one by default): the metric objects are then shared
through a per-registry cache with reference counting, and

* counters add up across those sources;
* ``assigned_splits`` and ``active_clusters`` add up too (each source's own value is kept and the sum is
  exported);
* the per-partition offset gauges (``current_offset``, ``records_lag``, ``committed_offset``) show the value
  written last when two sources read the same partition.

A label set is removed from the exposition only when no source on the registry uses it any longer, and the
metric objects are unregistered when the last source on the registry closes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

__all__ = ["METRIC_NAMES", "SourceMetrics"]

Labels = tuple[str, ...]


@dataclass(frozen=True)
class _Spec:
    """One metric: exposition name (without ``_total``), type, label names and help text."""

    name: str
    kind: type[Counter] | type[Gauge]
    labels: tuple[str, ...]
    doc: str


_SPECS: Final[dict[str, _Spec]] = {
    s.name: s
    for s in (
        _Spec(
            "multicluster_source_records_consumed",
            Counter,
            ("cluster", "topic"),
            "Records read from a topic of a cluster.",
        ),
        _Spec(
            "multicluster_source_bytes_consumed",
            Counter,
            ("cluster", "topic"),
            "Bytes of record keys and values read from a topic of a cluster.",
        ),
        _Spec(
            "multicluster_source_records_lag",
            Gauge,
            ("cluster", "topic", "partition"),
            "Records between the next offset to read and the partition's high watermark.",
        ),
        _Spec(
            "multicluster_source_current_offset",
            Gauge,
            ("cluster", "topic", "partition"),
            "Next offset the source will read from a partition.",
        ),
        _Spec(
            "multicluster_source_committed_offset",
            Gauge,
            ("cluster", "topic", "partition"),
            "Offset last committed to the cluster for a partition.",
        ),
        _Spec("multicluster_source_assigned_splits", Gauge, ("cluster",), "Splits assigned to readers."),
        _Spec("multicluster_source_active_clusters", Gauge, (), "Clusters the source reads from."),
        _Spec(
            "multicluster_source_metadata_failures",
            Counter,
            (),
            "Stream metadata reads that failed (the last good metadata stayed in effect).",
        ),
        _Spec(
            "multicluster_source_reconciliations",
            Counter,
            (),
            "Times the source applied changed stream metadata.",
        ),
        _Spec(
            "multicluster_source_reader_restarts",
            Counter,
            ("cluster",),
            "Times a reader's client for a cluster was recreated.",
        ),
        _Spec(
            "multicluster_source_deserialization_errors",
            Counter,
            ("cluster", "topic"),
            "Records skipped because the deserializer raised (deserialization-error-policy=skip).",
        ),
        _Spec(
            "multicluster_source_failovers",
            Counter,
            ("cluster",),
            "Times a standby reader took over the splits of a failed reader.",
        ),
        _Spec(
            "multicluster_source_offset_resets",
            Counter,
            ("cluster", "topic"),
            "Times a partition's position was out of range (aged out of the log) and was reset per "
            "auto.offset.reset.",
        ),
    )
}

#: Every exposed metric family name (counters with their ``_total`` suffix) -> label names.
METRIC_NAMES: Final[dict[str, tuple[str, ...]]] = {
    (s.name + "_total" if s.kind is Counter else s.name): s.labels for s in _SPECS.values()
}

_RECORDS: Final = "multicluster_source_records_consumed"
_BYTES: Final = "multicluster_source_bytes_consumed"
_LAG: Final = "multicluster_source_records_lag"
_CURRENT: Final = "multicluster_source_current_offset"
_COMMITTED: Final = "multicluster_source_committed_offset"
_SPLITS: Final = "multicluster_source_assigned_splits"
_ACTIVE: Final = "multicluster_source_active_clusters"
_METADATA_FAILURES: Final = "multicluster_source_metadata_failures"
_RECONCILIATIONS: Final = "multicluster_source_reconciliations"
_RESTARTS: Final = "multicluster_source_reader_restarts"
_DESER_ERRORS: Final = "multicluster_source_deserialization_errors"
_FAILOVERS: Final = "multicluster_source_failovers"
_OFFSET_RESETS: Final = "multicluster_source_offset_resets"
#: Gauges whose exported value is the sum of every source's own value.
_SUMMED: Final = frozenset({_SPLITS, _ACTIVE})

_Key = tuple[str, Labels]  # (metric name, label values)
_Matcher = Callable[[_Key], bool]


@dataclass
class _Shared:
    """The metric objects of one registry, shared by every source on it.  Guarded by ``lock``."""

    registry: CollectorRegistry
    counters: dict[str, Counter]
    gauges: dict[str, Gauge]
    lock: threading.Lock = field(default_factory=threading.Lock)
    sources: int = 0
    #: label set -> number of sources using it (for metrics that are not summed).
    owners: dict[_Key, int] = field(default_factory=dict)
    #: label set of a summed gauge -> {source token: that source's value}.
    parts: dict[_Key, dict[int, float]] = field(default_factory=dict)


_CACHE_LOCK: Final = threading.Lock()
_CACHE: dict[int, _Shared] = {}  # id(registry) -> shared metrics; the entry holds the registry alive


def _acquire(registry: CollectorRegistry) -> _Shared:
    with _CACHE_LOCK:
        shared = _CACHE.get(id(registry))
        if shared is None:
            counters: dict[str, Counter] = {}
            gauges: dict[str, Gauge] = {}
            try:
                for spec in _SPECS.values():
                    if spec.kind is Counter:
                        counters[spec.name] = Counter(spec.name, spec.doc, spec.labels, registry=registry)
                    else:
                        gauges[spec.name] = Gauge(spec.name, spec.doc, spec.labels, registry=registry)
            except Exception:
                # e.g. a name already registered by someone else: leave the registry as it was.
                for metric in [*counters.values(), *gauges.values()]:
                    registry.unregister(metric)
                raise
            shared = _Shared(registry, counters, gauges)
            _CACHE[id(registry)] = shared
        shared.sources += 1
        return shared


def _release(shared: _Shared) -> None:
    with _CACHE_LOCK:
        shared.sources -= 1
        if shared.sources > 0:
            return
        del _CACHE[id(shared.registry)]
        for metric in [*shared.counters.values(), *shared.gauges.values()]:
            shared.registry.unregister(metric)


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
        self._shared = _acquire(self._registry)
        self._token = id(self)
        self._closed = False
        # Caches read without a lock on the hot path; written only under the shared lock.
        self._consumed: dict[tuple[str, str], tuple[Counter, Counter]] = {}
        self._counter_children: dict[_Key, Counter] = {}
        self._gauge_children: dict[_Key, Gauge] = {}
        # Label sets of summed gauges this source has a part in.
        self._parts: set[_Key] = set()

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
        pair[0].inc(count)
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
        labels = (cluster, topic, str(partition))
        for name, value in ((_CURRENT, current), (_LAG, lag), (_COMMITTED, committed)):
            if value is not None:
                child = self._gauge_children.get((name, labels)) or self._gauge_child(name, labels)
                if child is not None:
                    child.set(value)

    def set_assigned_splits(self, cluster: str, n: int) -> None:
        """Set how many splits of ``cluster`` this source has assigned to its readers."""
        self._set_part(_SPLITS, (cluster,), n)

    def set_active_clusters(self, n: int) -> None:
        """Set how many clusters this source reads from."""
        self._set_part(_ACTIVE, (), n)

    def metadata_failure(self) -> None:
        """Count one failed stream metadata read."""
        if not self._closed:
            self._shared.counters[_METADATA_FAILURES].inc()

    def reconciliation(self) -> None:
        """Count one application of changed stream metadata."""
        if not self._closed:
            self._shared.counters[_RECONCILIATIONS].inc()

    def reader_restart(self, cluster: str) -> None:
        """Count one restart of a reader's client for ``cluster``."""
        self._inc(_RESTARTS, (cluster,))

    def deserialization_error(self, cluster: str, topic: str) -> None:
        """Count one record of ``topic`` on ``cluster`` skipped because the deserializer raised."""
        self._inc(_DESER_ERRORS, (cluster, topic))

    def failover(self, cluster: str) -> None:
        """Count one takeover by a standby reader of splits of ``cluster``."""
        self._inc(_FAILOVERS, (cluster,))

    def offset_reset(self, cluster: str, topic: str) -> None:
        """Count one out-of-range position of ``topic`` on ``cluster`` reset per ``auto.offset.reset``."""
        self._inc(_OFFSET_RESETS, (cluster, topic))

    # ---------------------------------------------------------------------------------------------- removal

    def remove_partition(self, cluster: str, topic: str, partition: int) -> None:
        """Remove the offset gauges of one partition."""
        labels = (cluster, topic, str(partition))
        self._remove(lambda key: key[1] == labels)

    def remove_topic(self, cluster: str, topic: str) -> None:
        """Remove every label set of ``topic`` on ``cluster``, its partitions' gauges included."""
        self._remove(lambda key: len(key[1]) >= 2 and key[1][0] == cluster and key[1][1] == topic)

    def remove_cluster(self, cluster: str) -> None:
        """Remove every label set carrying ``cluster``; afterwards no sample of this source names it."""
        self._remove(lambda key: len(key[1]) >= 1 and key[1][0] == cluster)

    def close(self) -> None:
        """Remove this source's label sets; unregister the metrics when no other source uses the registry.

        Idempotent. Unlabelled counters keep their value while another source shares the registry.
        """
        with self._shared.lock:
            if self._closed:
                return
            self._closed = True
            self._remove_locked(lambda key: True)
        _release(self._shared)

    # ---------------------------------------------------------------------------------------------- helpers

    def _consumed_children(self, cluster: str, topic: str) -> tuple[Counter, Counter] | None:
        with self._shared.lock:
            if self._closed:
                return None
            labels = (cluster, topic)
            pair = (self._own_counter((_RECORDS, labels)), self._own_counter((_BYTES, labels)))
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

    def _gauge_child(self, name: str, labels: Labels) -> Gauge | None:
        key = (name, labels)
        shared = self._shared
        with shared.lock:
            if self._closed:
                return None
            child = self._gauge_children.get(key)
            if child is None:
                child = shared.gauges[name].labels(*labels)
                self._take(key)
                self._gauge_children[key] = child
            return child

    def _own_counter(self, key: _Key) -> Counter:
        """The counter child of ``key``, taking a share of it.  Caller holds the shared lock."""
        child = self._counter_children.get(key)
        if child is None:
            child = self._shared.counters[key[0]].labels(*key[1])
            self._take(key)
            self._counter_children[key] = child
        return child

    def _take(self, key: _Key) -> None:
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

    def _remove(self, match: _Matcher) -> None:
        with self._shared.lock:
            if not self._closed:
                self._remove_locked(match)

    def _remove_locked(self, match: _Matcher) -> None:
        """Drop this source's share of every label set ``match`` selects.  Caller holds the shared lock."""
        shared = self._shared
        for labels in [k for k in self._consumed if match((_RECORDS, k))]:
            del self._consumed[labels]
        owned: list[tuple[_Key, Counter | Gauge]] = []
        for ckey in [k for k in self._counter_children if match(k)]:
            owned.append((ckey, shared.counters[ckey[0]]))
            del self._counter_children[ckey]
        for gkey in [k for k in self._gauge_children if match(k)]:
            owned.append((gkey, shared.gauges[gkey[0]]))
            del self._gauge_children[gkey]
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
