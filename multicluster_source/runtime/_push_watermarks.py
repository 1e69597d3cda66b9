"""Event time on the push API: what a worker reports of a handled batch, and the driver's watermark.

Workers send each handled batch's split event times with its positions (``Delivered.event_times``); the
driver feeds them to a :class:`~multicluster_source.runtime._watermarks.WatermarkTracker` through
:class:`RunWatermarks`, which tells ``RunControl.watermark`` and every live worker (``WatermarkAdvanced``,
for the handler's ``on_watermark(ms)`` hook) when the run's watermark moved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from multicluster_source.framework._interfaces import RecordBatch
from multicluster_source.framework._records import SourceRecord, records_of
from multicluster_source.framework._watermarks import EventTimes, assigned_event_times
from multicluster_source.reader._records import RecordMaker
from multicluster_source.runtime._messages import WatermarkAdvanced
from multicluster_source.runtime._watermarks import WatermarkTracker, strategy_of, stream_watermarks

WorkerEventTimes = Callable[[RecordBatch, "list[SourceRecord] | None"], "dict[str, tuple[int, int]] | None"]
"""What a push worker reports of a batch its handler returned from: split -> (smallest, largest)."""


def worker_event_times(source: Any) -> WorkerEventTimes | None:
    """How a push worker of ``source`` finds the event times of a batch (None: no watermark strategy): the
    fetcher's Kafka timestamps, or the timestamp assigner over the records (made for it on the batch
    handler path)."""
    strategy = strategy_of(source)
    if not strategy.enabled:
        return None
    assigner = strategy.timestamp_assigner
    if assigner is None:
        return _fetched_times
    make = RecordMaker(source.deserializer, source.options.deserialization_error_policy)

    def assigned(batch: RecordBatch, records: list[SourceRecord] | None) -> dict[str, tuple[int, int]]:
        made = records if records is not None else make(batch.cluster_id, batch.messages)
        return {sid: (min(v), max(v)) for sid, v in assigned_event_times(made, assigner).items()}

    return assigned


def _fetched_times(
    batch: RecordBatch, _records: list[SourceRecord] | None
) -> dict[str, tuple[int, int]] | None:
    return None if batch.event_times is None else dict(batch.event_times)


class RunWatermarks:
    """The push driver's watermark: split event times reported by the workers (``Delivered``) combined;
    ``RunControl.watermark`` and every live worker (a ``WatermarkAdvanced`` for the ``on_watermark`` hook)
    are told when it moves. Used on the driver's thread; ``driver`` offers ``_control``, ``_n``, ``_lost``
    and ``_send(index, message)``."""

    def __init__(self, tracker: WatermarkTracker, driver: Any) -> None:
        self._tracker = tracker
        self._driver = driver

    def delivered(self, times: EventTimes) -> None:
        """A worker's handler returned from records with these event times."""
        self._tracker.advance(times)
        self.publish()

    def publish(self) -> None:
        """Tell the control and the workers when the watermark moved (idleness moves it without records)."""
        value = self._tracker.watermark
        driver = self._driver
        if value is not None and value != driver._control._watermark:
            driver._control._watermark = value
            for i in range(driver._n):
                if i not in driver._lost:
                    driver._send(i, WatermarkAdvanced(value))


def run_watermarks(
    source: Any, metrics: Any, coordinator: Any, restored: object | None, driver: Any
) -> RunWatermarks | None:
    """The push driver's :class:`RunWatermarks`, or None without a watermark strategy."""
    tracker = stream_watermarks(source, metrics, records_of, coordinator, restored)
    return RunWatermarks(tracker, driver) if tracker.enabled else None
