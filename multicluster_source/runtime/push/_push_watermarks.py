"""Event time on the push API: what a worker reports of a handled batch, and the driver's watermark.

Workers send each handled batch's split event times with its positions (``Delivered.event_times``) and count
its late records themselves (:class:`WorkerEventTimes`); the driver feeds the event times to a
:class:`~multicluster_source.runtime.eventtime._watermarks.WatermarkTracker` through :class:`RunWatermarks`,
which tells ``RunControl.watermark`` and every live worker (``WatermarkAdvanced``, for the handler's
``on_watermark(ms)`` hook) when the run's watermark moved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from multicluster_source.framework._interfaces import RecordBatch
from multicluster_source.framework._records import SourceRecord, records_of
from multicluster_source.framework._watermarks import EventTimes
from multicluster_source.reader._records import RecordMaker
from multicluster_source.runtime.eventtime._watermarks import (
    WatermarkTracker,
    chunk_event_times,
    chunk_late_counts,
    strategy_of,
    stream_watermarks,
)


class WorkerEventTimes:
    """What a push worker reports of a batch its handler returned from (split -> (smallest, largest) event
    time, for the driver's watermark), counting the batch's late records on the way into the worker's
    ``metrics`` (the driver's own with ``runtime="threads"``; a relayed recorder in worker processes and Ray
    actors). Late: an event time at or below the run's watermark as the worker last heard it from the driver
    before the batch was handed to the handler (so a worker that has not heard of a move yet counts against
    the value before it). Called on the worker's handler thread."""

    def __init__(self, source: Any, metrics: Any) -> None:
        strategy = strategy_of(source)
        self._assigner = strategy.timestamp_assigner
        self._metrics = metrics
        self._make: RecordMaker | None = None
        if self._assigner is not None:
            self._make = RecordMaker(source.deserializer, source.options.deserialization_error_policy)

    def __call__(
        self, batch: RecordBatch, records: list[SourceRecord] | None, watermark: int | None
    ) -> dict[str, tuple[int, int]] | None:
        """The event times of ``batch`` (whose ``records``, when the handler got records) to report."""
        if self._assigner is None and batch.event_times is None:
            return None
        times, per_split = chunk_event_times(
            batch.cluster_id, batch.messages, batch.event_times, records, self._assigner, self._make
        )
        for topic, n in chunk_late_counts(batch.messages, times, per_split, watermark).items():
            self._metrics.late_records(batch.cluster_id, topic, n)
        return dict(times)


def worker_event_times(source: Any, metrics: Any) -> WorkerEventTimes | None:
    """How a push worker of ``source`` reports the event times of a handled batch and counts its late
    records (None: no watermark strategy): the fetcher's Kafka timestamps, or the timestamp assigner over the
    records (made for it on the batch handler path)."""
    return WorkerEventTimes(source, metrics) if strategy_of(source).enabled else None


class RunWatermarks:
    """The push driver's watermark: split event times reported by the workers (``Delivered``) combined;
    ``moved(ms)`` is called when it moves (the driver tells ``RunControl.watermark`` and every live worker,
    a ``WatermarkAdvanced`` for the ``on_watermark`` hook). Used on the driver's thread."""

    def __init__(self, tracker: WatermarkTracker, moved: Callable[[int], None]) -> None:
        self._tracker = tracker
        self._moved = moved
        self._last: int | None = None

    def delivered(self, times: EventTimes) -> None:
        """A worker's handler returned from records with these event times."""
        self._tracker.advance(times)
        self.publish()

    def publish(self) -> None:
        """Tell the driver when the watermark moved (idleness moves it without records)."""
        value = self._tracker.watermark
        if value is not None and value != self._last:
            self._last = value
            self._moved(value)


def run_watermarks(
    source: Any, metrics: Any, coordinator: Any, restored: object | None, moved: Callable[[int], None]
) -> RunWatermarks | None:
    """The push driver's :class:`RunWatermarks`, or None without a watermark strategy."""
    tracker = stream_watermarks(source, metrics, records_of, coordinator, restored)
    return RunWatermarks(tracker, moved) if tracker.enabled else None
