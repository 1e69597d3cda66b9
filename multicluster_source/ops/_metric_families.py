"""The metric families of a source and their registration in a registry, shared by the sources on it.

The metric names and labels are a contract (API.md section 6); there is deliberately no ``source`` label.
Several sources may share one registry (the global one by default): the metric objects are then shared
through a per-registry cache with reference counting (:func:`acquire`, :func:`release`), and

* counters add up across those sources;
* ``assigned_splits`` and ``active_clusters`` add up too (each source's own value is kept and the sum is
  exported);
* the per-partition offset gauges (``current_offset``, ``records_lag``, ``committed_offset``) show the value
  written last when two sources read the same partition.

What each source sets and removes is :class:`~multicluster_source.ops._metrics.SourceMetrics`.

Threads: :func:`acquire` and :func:`release` run when a :class:`SourceMetrics` is created or closed (any
thread; the cache has its own lock). The shared objects are then used from reader threads and the
coordinator, under :attr:`SharedMetrics.lock`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge

from multicluster_source.ops._partition_gauges import PartitionGauges

__all__ = [
    "ACTIVE",
    "BYTES",
    "COMMITTED",
    "CURRENT",
    "DESER_ERRORS",
    "FAILOVERS",
    "HANDOVERS",
    "HANDOVER_REPEATS",
    "LAG",
    "LATE",
    "METADATA_FAILURES",
    "METRIC_NAMES",
    "OFFSET_RESETS",
    "PAUSED",
    "PER_PARTITION",
    "RECONCILIATIONS",
    "RECORDS",
    "RESTARTS",
    "SPLITS",
    "STALLS",
    "TRANSACTIONS",
    "TXN_POSITIONS",
    "TXN_RECORDS",
    "TXN_SECONDS",
    "WATERMARK",
    "Labels",
    "MetricKey",
    "SharedMetrics",
    "acquire",
    "release",
]

Labels = tuple[str, ...]
MetricKey = tuple[str, Labels]  # (metric name, label values)

RECORDS: Final = "multicluster_source_records_consumed"
BYTES: Final = "multicluster_source_bytes_consumed"
LAG: Final = "multicluster_source_records_lag"
CURRENT: Final = "multicluster_source_current_offset"
COMMITTED: Final = "multicluster_source_committed_offset"
SPLITS: Final = "multicluster_source_assigned_splits"
ACTIVE: Final = "multicluster_source_active_clusters"
METADATA_FAILURES: Final = "multicluster_source_metadata_failures"
RECONCILIATIONS: Final = "multicluster_source_reconciliations"
RESTARTS: Final = "multicluster_source_reader_restarts"
DESER_ERRORS: Final = "multicluster_source_deserialization_errors"
FAILOVERS: Final = "multicluster_source_failovers"
OFFSET_RESETS: Final = "multicluster_source_offset_resets"
STALLS: Final = "multicluster_source_stalled_partitions"
LATE: Final = "multicluster_source_late_records"
WATERMARK: Final = "multicluster_source_watermark_ms"
PAUSED: Final = "multicluster_source_paused_splits"
HANDOVERS: Final = "multicluster_source_handovers"
HANDOVER_REPEATS: Final = "multicluster_source_handover_repeat_bound"
TRANSACTIONS: Final = "multicluster_source_sink_transactions"
TXN_SECONDS: Final = "multicluster_source_sink_commit_seconds"
TXN_RECORDS: Final = "multicluster_source_sink_records"
TXN_POSITIONS: Final = "multicluster_source_sink_positions"
#: Gauges whose exported value is the sum of every source's own value.
_SUMMED: Final = frozenset({SPLITS, ACTIVE, PAUSED, HANDOVER_REPEATS})
#: Gauges with a sample per partition, kept in a :class:`PartitionGauges` instead of gauge children.
PER_PARTITION: Final = (CURRENT, LAG, COMMITTED)


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
        _Spec(RECORDS, Counter, ("cluster", "topic"), "Records read from a topic of a cluster."),
        _Spec(
            BYTES,
            Counter,
            ("cluster", "topic"),
            "Bytes of record values read from a topic of a cluster (keys and headers are not counted).",
        ),
        _Spec(
            LAG,
            Gauge,
            ("cluster", "topic", "partition"),
            "Records between the next offset to read and the partition's high watermark.",
        ),
        _Spec(
            CURRENT,
            Gauge,
            ("cluster", "topic", "partition"),
            "Next offset the source will read from a partition.",
        ),
        _Spec(
            COMMITTED,
            Gauge,
            ("cluster", "topic", "partition"),
            "Offset last committed to the cluster for a partition.",
        ),
        _Spec(SPLITS, Gauge, ("cluster",), "Splits assigned to readers."),
        _Spec(ACTIVE, Gauge, (), "Clusters the source reads from."),
        _Spec(
            METADATA_FAILURES,
            Counter,
            (),
            "Stream metadata reads that failed (the last good metadata stayed in effect).",
        ),
        _Spec(RECONCILIATIONS, Counter, (), "Times the source applied changed stream metadata."),
        _Spec(RESTARTS, Counter, ("cluster",), "Times a reader's client for a cluster was recreated."),
        _Spec(
            DESER_ERRORS,
            Counter,
            ("cluster", "topic"),
            "Records skipped because the deserializer raised (deserialization-error-policy=skip).",
        ),
        _Spec(
            FAILOVERS,
            Counter,
            ("cluster",),
            "Times a standby reader took over the splits of a failed reader.",
        ),
        _Spec(
            OFFSET_RESETS,
            Counter,
            ("cluster", "topic"),
            "Times a partition's position was out of range (aged out of the log) and was reset per "
            "auto.offset.reset.",
        ),
        _Spec(
            STALLS,
            Counter,
            ("cluster",),
            "Times a partition's position stood still for reader.stall.timeout.ms while its broker had "
            "records beyond it; its consumer was made again.",
        ),
        _Spec(
            LATE,
            Counter,
            ("cluster", "topic"),
            "Records returned with an event time at or below the watermark (delivered all the same).",
        ),
        _Spec(WATERMARK, Gauge, (), "The stream's watermark (ms since the epoch), once it has one."),
        _Spec(
            PAUSED, Gauge, (), "Splits paused at the client by watermark alignment (ahead of their group)."
        ),
        _Spec(
            HANDOVERS,
            Counter,
            ("mode",),
            "Splits handed over to a replica cluster, by how the start was chosen (exact, conservative, "
            "identical, timestamp, start).",
        ),
        _Spec(
            HANDOVER_REPEATS,
            Gauge,
            (),
            "At most how many records the replica handovers so far may deliver a second time (the sum of "
            "their bounds; a timestamp handover adds nothing: its bound is unknown).",
        ),
        _Spec(
            TRANSACTIONS,
            Counter,
            ("outcome",),
            "Transactions of an exactly-once sink, by outcome (committed, aborted).",
        ),
        _Spec(
            TXN_SECONDS,
            Counter,
            (),
            "Seconds spent committing the sink's transactions (positions written and commit_transaction); "
            "divided by the committed transactions, the mean commit latency.",
        ),
        _Spec(TXN_RECORDS, Counter, (), "Records the job produced in the sink's committed transactions."),
        _Spec(
            TXN_POSITIONS,
            Counter,
            (),
            "Positions (one per split that moved) written in the sink's committed transactions.",
        ),
    )
}

#: Every exposed metric family name (counters with their ``_total`` suffix) -> label names.
METRIC_NAMES: Final[dict[str, tuple[str, ...]]] = {
    (s.name + "_total" if s.kind is Counter else s.name): s.labels for s in _SPECS.values()
}


@dataclass
class SharedMetrics:
    """The metric objects of one registry, shared by every source on it.  Guarded by ``lock``."""

    registry: CollectorRegistry
    counters: dict[str, Counter]
    gauges: dict[str, Gauge]
    lock: threading.Lock
    #: the per-partition gauges (:data:`PER_PARTITION`), registered as one collector.
    partitions: PartitionGauges
    sources: int = 0
    #: label set -> number of sources using it (for metrics that are not summed).
    owners: dict[MetricKey, int] = field(default_factory=dict)
    #: label set of a summed gauge -> {source token: that source's value}.
    parts: dict[MetricKey, dict[int, float]] = field(default_factory=dict)


_CACHE_LOCK: Final = threading.Lock()
_CACHE: dict[int, SharedMetrics] = {}  # id(registry) -> shared metrics; the entry holds the registry alive


def acquire(registry: CollectorRegistry) -> SharedMetrics:
    """The shared metrics of ``registry``, registering them for its first source; counts one more source.

    Raises ``ValueError`` from prometheus-client when another collector of the registry already uses one
    of the names (the registry is then left as it was).
    """
    with _CACHE_LOCK:
        shared = _CACHE.get(id(registry))
        if shared is None:
            counters: dict[str, Counter] = {}
            gauges: dict[str, Gauge] = {}
            lock = threading.Lock()
            partitions = PartitionGauges({name: _SPECS[name].doc for name in PER_PARTITION}, lock)
            registered: list[Any] = []
            try:
                registry.register(partitions)
                registered.append(partitions)
                for spec in _SPECS.values():
                    if spec.name in PER_PARTITION:
                        continue
                    if spec.kind is Counter:
                        counters[spec.name] = Counter(spec.name, spec.doc, spec.labels, registry=registry)
                        registered.append(counters[spec.name])
                    else:
                        gauges[spec.name] = Gauge(spec.name, spec.doc, spec.labels, registry=registry)
                        registered.append(gauges[spec.name])
            except Exception:
                # e.g. a name already registered by someone else: leave the registry as it was.
                for metric in registered:
                    registry.unregister(metric)
                raise
            shared = SharedMetrics(registry, counters, gauges, lock, partitions)
            _CACHE[id(registry)] = shared
        shared.sources += 1
        return shared


def release(shared: SharedMetrics) -> None:
    """Count one source less; unregister the metrics from the registry when it was the last."""
    with _CACHE_LOCK:
        shared.sources -= 1
        if shared.sources > 0:
            return
        del _CACHE[id(shared.registry)]
        for metric in [shared.partitions, *shared.counters.values(), *shared.gauges.values()]:
            shared.registry.unregister(metric)
