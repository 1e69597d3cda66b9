"""Lag reports of one fetcher: each costs what moved since the last one, plus a bounded slice of the rest.

A fetcher reports the current offset and lag of its partitions every ``lag_interval_s`` (on its fetch thread,
under its step lock), from the client's cached high watermarks. Asking for every assigned partition each time
cost about 50 ms at 18,000 partitions (a fake client; real ``SourceMetrics``), all of it holding the fetcher's
step and the GIL. So a report covers:

- the partitions whose position moved since the last report (batches handed on, offset resets) and the
  splits added since, at most :data:`LAG_SLICE` of them (the rest come in the next reports: 6,000 splits
  handed to a fetcher at once have their gauges within 6 reports; a report's cost stays bounded however
  many splits arrive at once: when each gauge was a prometheus-client child made on first use, reporting
  6,000 new ones held the fetcher about a second while its first records waited);
- and at most :data:`LAG_SLICE` others, taken in turn (round robin over the assignment), so that the lag of a
  partition that does not move (idle, paused by watermark alignment, or fetched in full while its high
  watermark grows) is refreshed too: while the assignment holds still, every partition is reported at least
  once every ``ceil(partitions / LAG_SLICE)`` reports (18 s at 18,000 partitions and the default interval).

The values are those of a full report: current offset = the split's next offset, lag = high watermark - next
offset (at least 0), lag left as it was when the client does not know the high watermark yet.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

LAG_SLICE = 1000
"""Partitions reported per lag report at most, of those that moved and of those that did not (each costs
~3 us: a dict entry each, set by one ``dict.update``)."""


class LagReports:
    """What the next lag report of one fetcher covers (used on its fetch thread, or under its step lock)."""

    def __init__(self, cluster_id: str, metrics: Any, slice_size: int | None = None) -> None:
        """``slice_size``: how many partitions that did not move each report covers at most (default
        :data:`LAG_SLICE`)."""
        self._cluster_id = cluster_id
        self._metrics = metrics
        self._slice = max(1, LAG_SLICE if slice_size is None else slice_size)
        self._due: set[tuple[str, int]] = set()  # moved or added since the last report
        self._ring: Sequence[Any] = ()  # the assigned partitions (TopicPartition), in a fixed order
        self._next = 0  # where the next slice of the ring starts

    def moved(self, keys: Iterable[tuple[str, int]]) -> None:
        """These partitions' positions moved (or their splits were just added): report them next time."""
        self._due.update(keys)

    def assigned(self, tps: Sequence[Any], progress: Mapping[tuple[str, int], Any]) -> None:
        """The fetcher's partitions changed: ``tps`` (``TopicPartition``, not copied) are all of them now, and
        ``progress`` their splits by ``(topic, partition)``. Partitions that went are forgotten."""
        self._ring = tps
        self._next = self._next % len(tps) if tps else 0
        if any(key not in progress for key in self._due):
            self._due = {key for key in self._due if key in progress}

    def report(self, consumer: Any, progress: Mapping[tuple[str, int], Any]) -> int:
        """Set the offset gauges of the due partitions and of the ring's next slice; returns how many were
        reported."""
        from confluent_kafka import TopicPartition

        if len(self._due) > self._slice:
            due = set(itertools.islice(self._due, self._slice))
            self._due -= due
        else:
            due, self._due = self._due, set()
        current: dict[tuple[str, int], int] = {}
        lag: dict[tuple[str, int], int] = {}
        for key in due:
            p = progress.get(key)
            if p is not None:
                self._row(consumer, TopicPartition(*key), key, p, current, lag)
        ring = self._ring
        if not ring:
            return self._set(current, lag)
        start = self._next
        end = start + min(self._slice, len(ring))
        chunk = list(ring[start:end]) + (list(ring[: end - len(ring)]) if end > len(ring) else [])
        self._next = end % len(ring)
        for tp in chunk:
            key = (tp.topic, tp.partition)
            if key in due:
                continue  # reported above
            p = progress.get(key)
            if p is not None:
                self._row(consumer, tp, key, p, current, lag)
        return self._set(current, lag)

    @staticmethod
    def _row(
        consumer: Any,
        tp: Any,
        key: tuple[str, int],
        p: Any,
        current: dict[tuple[str, int], int],
        lag: dict[tuple[str, int], int],
    ) -> None:
        try:
            _low, high = consumer.get_watermark_offsets(tp, cached=True)
        except Exception:
            return
        current[key] = p.next_offset
        if high is not None and high >= 0:
            lag[key] = max(0, high - p.next_offset)

    def _set(self, current: dict[tuple[str, int], int], lag: dict[tuple[str, int], int]) -> int:
        """Set the gauges (all at once where the metrics can: one hold of their lock, a ``dict.update``)."""
        set_many = getattr(self._metrics, "set_partition_offsets", None)
        if callable(set_many):
            set_many(self._cluster_id, current, lag)
        else:
            for (topic, partition), offset in current.items():
                behind = lag.get((topic, partition))
                self._metrics.set_offsets(self._cluster_id, topic, partition, current=offset, lag=behind)
        return len(current)
