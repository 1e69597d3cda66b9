"""Reader metrics of worker processes and Ray actors, relayed into the driver's registry.

A push worker in another process (``runtime="processes"``) or actor (``runtime="ray"``) records its reader's
metrics into a :class:`MetricsRecorder` instead of a registry of its own. The recorder keeps what changed
since it was last drained: counter increments summed per label set, the last value of each offset gauge, and
removals, in the order they happened. The worker sends a :class:`MetricsDelta` before each heartbeat (every
half second) and before it stops; the driver applies it to its own :class:`SourceMetrics` with
:func:`apply_metrics`, so the registry given to ``run()`` holds every reader's samples under the contract's
names and labels, and a removed cluster's label sets leave it as they do with the pull API.

Why this and not prometheus-client's multiprocess mode: that mode needs an environment variable set before
any import in every process, a shared directory (no use across Ray nodes), cannot remove one label set
(a removed cluster's samples would stay until the process ends), and exports per-process gauges that then
need aggregating. A delta per half second per worker is a few hundred bytes on a link the worker already
uses.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from multicluster_source.ops._metrics import SourceMetrics

__all__ = ["MetricsDelta", "MetricsRecorder", "apply_metrics"]

_Key = tuple[str, tuple[str, ...]]
"""(operation, labels): ``consumed`` (cluster, topic), ``restart`` (cluster), ``deser``, ``reset`` and
``late`` (cluster, topic), ``offsets`` (cluster, topic, partition)."""


@dataclass(frozen=True)
class MetricsDelta:
    """What a worker's reader metrics did since the last delta, in order: ``steps`` are
    ``("counts", ((key, (a, b)), ...))``, ``("gauges", ((key, (current, lag)), ...))`` and removals
    ``("remove_cluster" | "remove_topic" | "remove_partition", labels)``."""

    steps: tuple[tuple[str, Any], ...]


class MetricsRecorder:
    """Stands in for :class:`SourceMetrics` in a worker: the reader-side methods, recorded for the driver.

    Thread-safe (fetch threads, the reader thread and the handler thread record into it). Methods the
    readers do not call (enumerator metrics) are not offered.
    """

    def __init__(self, source_name: str) -> None:
        self._source_name = source_name
        self._lock = threading.Lock()
        self._counts: dict[_Key, list[int]] = {}
        self._gauges: dict[_Key, list[int | None]] = {}
        self._steps: list[tuple[str, Any]] = []
        self._closed = False

    @property
    def source_name(self) -> str:
        """The source's name."""
        return self._source_name

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _count(self, key: _Key, a: int, b: int = 0) -> None:
        with self._lock:
            entry = self._counts.get(key)
            if entry is None:
                self._counts[key] = [a, b]
            else:
                entry[0] += a
                entry[1] += b

    def record_consumed(self, cluster: str, topic: str, count: int, nbytes: int) -> None:
        """Count ``count`` records of ``nbytes`` bytes read from ``topic`` on ``cluster``."""
        self._count(("consumed", (cluster, topic)), count, nbytes)

    def reader_restart(self, cluster: str) -> None:
        """Count one restart of a reader's client for ``cluster``."""
        self._count(("restart", (cluster,)), 1)

    def deserialization_error(self, cluster: str, topic: str) -> None:
        """Count one record skipped because the deserializer raised."""
        self._count(("deser", (cluster, topic)), 1)

    def offset_reset(self, cluster: str, topic: str) -> None:
        """Count one out-of-range position reset."""
        self._count(("reset", (cluster, topic)), 1)

    def stalled_partition(self, cluster: str) -> None:
        """Count one stalled partition."""
        self._count(("stall", (cluster,)), 1)

    def late_records(self, cluster: str, topic: str, n: int) -> None:
        """Count ``n`` late records of ``topic`` on ``cluster`` (event time at or below the watermark)."""
        self._count(("late", (cluster, topic)), n)

    def set_offsets(
        self,
        cluster: str,
        topic: str,
        partition: int,
        current: int | None = None,
        lag: int | None = None,
        committed: int | None = None,
    ) -> None:
        """Set the current offset and lag of one partition (``committed`` is the driver's own)."""
        key = ("offsets", (cluster, topic, str(partition)))
        with self._lock:
            entry = self._gauges.setdefault(key, [None, None])
            if current is not None:
                entry[0] = current
            if lag is not None:
                entry[1] = lag

    def transaction(self, outcome: str, seconds: float, records: int, positions: int) -> None:
        """Count one transaction of a push worker's exactly-once sink (:meth:`SourceMetrics.transaction`)."""
        with self._lock:
            self._flush_locked()
            self._steps.append(("transaction", (outcome, seconds, records, positions)))

    def _remove(self, kind: str, labels: tuple[str, ...]) -> None:
        with self._lock:
            self._flush_locked()
            self._steps.append((kind, labels))

    def remove_cluster(self, cluster: str) -> None:
        """Remove every label set carrying ``cluster``."""
        self._remove("remove_cluster", (cluster,))

    def remove_topic(self, cluster: str, topic: str) -> None:
        """Remove every label set of ``topic`` on ``cluster``."""
        self._remove("remove_topic", (cluster, topic))

    def remove_partition(self, cluster: str, topic: str, partition: int) -> None:
        """Remove the offset gauges of one partition."""
        self._remove("remove_partition", (cluster, topic, str(partition)))

    def _flush_locked(self) -> None:
        if self._counts:
            self._steps.append(("counts", tuple((k, (v[0], v[1])) for k, v in self._counts.items())))
            self._counts = {}
        if self._gauges:
            self._steps.append(("gauges", tuple((k, (v[0], v[1])) for k, v in self._gauges.items())))
            self._gauges = {}

    def drain(self) -> MetricsDelta | None:
        """What changed since the last call, or None when nothing did."""
        with self._lock:
            self._flush_locked()
            if not self._steps:
                return None
            steps, self._steps = tuple(self._steps), []
        return MetricsDelta(steps)

    def close(self) -> None:
        """Nothing more is recorded (what is pending can still be drained)."""
        self._closed = True


def apply_metrics(metrics: SourceMetrics, delta: MetricsDelta) -> None:
    """Apply a worker's ``delta`` to the driver's ``metrics``, in the order the worker recorded it."""
    for kind, body in delta.steps:
        if kind == "counts":
            for (op, labels), (a, b) in body:
                if op == "consumed":
                    metrics.record_consumed(labels[0], labels[1], a, b)
                elif op == "late":
                    metrics.late_records(labels[0], labels[1], a)
                for _ in range(a if op not in ("consumed", "late") else 0):
                    if op == "restart":
                        metrics.reader_restart(labels[0])
                    elif op == "deser":
                        metrics.deserialization_error(labels[0], labels[1])
                    elif op == "reset":
                        metrics.offset_reset(labels[0], labels[1])
                    elif op == "stall":
                        metrics.stalled_partition(labels[0])
        elif kind == "gauges":
            for (_op, (cluster, topic, partition)), (current, lag) in body:
                metrics.set_offsets(cluster, topic, int(partition), current=current, lag=lag)
        elif kind == "transaction":
            metrics.transaction(body[0], body[1], body[2], body[3])
        elif kind == "remove_cluster":
            metrics.remove_cluster(body[0])
        elif kind == "remove_topic":
            metrics.remove_topic(body[0], body[1])
        elif kind == "remove_partition":
            metrics.remove_partition(body[0], body[1], int(body[2]))
