"""The stream's watermark: per-split watermarks of what was returned, combined (API.md section 8).

:class:`WatermarkCombiner` is the pure part: split watermarks in, the stream's watermark out (the minimum
over the active, non-idle splits; never decreasing). :class:`WatermarkTracker` feeds it from a stream:

* the coordinator tells it which splits exist: :meth:`~WatermarkTracker.assigned` for every assignment
  (a split seen before, moved by a failover, keeps its watermark) and :meth:`~WatermarkTracker.metadata`
  for every metadata update sent to the readers (splits of a removed cluster or topic are released at
  once: they stop holding the watermark back before their fetchers are even closed);
* the taker of records (:class:`~multicluster_source.runtime.core._delivery.Delivery`) calls
  :meth:`~WatermarkTracker.delivered` for every chunk it returned, so the watermark covers exactly what the
  caller has; it counts late records there (event time at or below the stream's watermark before the chunk).

Thread-safe: one lock; every call is O(splits) at most, once per chunk, never per record (except the late
count of a chunk whose smallest event time is at or below the watermark, and a user timestamp assigner).
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from multicluster_source.framework._records import SourceRecord
from multicluster_source.framework._watermarks import (
    EventTimes,
    TimestampAssigner,
    WatermarkStrategy,
    assigned_event_times,
    kafka_event_times,
    late_counts,
)
from multicluster_source.metadata._model import ClusterMetadata
from multicluster_source.runtime.eventtime._alignment import Aligner

_log = logging.getLogger("multicluster_source")

HOLD_ALL = -1  # an alignment limit below every event time: the group has no watermark yet
PENDING = "/*"  # after "cluster/topic": a topic of the metadata none of whose splits was assigned yet


@dataclass
class _Split:
    """One split's event-time state (mutable; kept by the combiner only)."""

    watermark: int | None
    last_active: float


class WatermarkCombiner:
    """Split watermarks -> the stream's watermark. Not thread-safe (the tracker holds the lock).

    ``idleness_s`` None: splits never go idle. Time is passed in (seconds, monotonic), so tests control it.
    """

    def __init__(self, idleness_s: float | None = None) -> None:
        self._idleness_s = idleness_s
        self._splits: dict[str, _Split] = {}
        self._released: set[str] = set()
        self._value: int | None = None

    @property
    def value(self) -> int | None:
        """The stream's watermark as last computed (None until every active split had one)."""
        return self._value

    def add(self, split_id: str, now: float) -> None:
        """A split is assigned: it holds the watermark back until it has one or goes idle. A split already
        known (moved to another reader) keeps its watermark."""
        self._released.discard(split_id)
        if split_id not in self._splits:
            self._splits[split_id] = _Split(None, now)

    def release(self, split_id: str) -> None:
        """A split left (its cluster or topic was removed): it no longer holds the watermark back."""
        if self._splits.pop(split_id, None) is not None:
            self._released.add(split_id)

    def split_ids(self) -> list[str]:
        """The splits that take part."""
        return list(self._splits)

    def advance(self, split_id: str, watermark: int, now: float) -> None:
        """``split_id`` returned records giving it ``watermark``; ignored for splits not (or no longer)
        assigned."""
        state = self._splits.get(split_id)
        if state is None:
            return
        state.last_active = now
        if state.watermark is None or watermark > state.watermark:
            state.watermark = watermark

    def is_idle(self, split_id: str, now: float) -> bool:
        """Whether the split returned nothing for the idleness time."""
        state = self._splits.get(split_id)
        return state is not None and self._idle(state, now)

    def _idle(self, state: _Split, now: float) -> bool:
        return self._idleness_s is not None and now - state.last_active >= self._idleness_s

    def compute(self, now: float) -> int | None:
        """The stream's watermark now: the minimum over active, non-idle splits when each has one, never
        below what it was; unchanged while some active split has none or every split is idle."""
        lowest: int | None = None
        idleness_s = self._idleness_s
        for state in self._splits.values():
            if idleness_s is not None and now - state.last_active >= idleness_s:
                continue  # idle
            mark = state.watermark
            if mark is None:
                return self._value
            if lowest is None or mark < lowest:
                lowest = mark
        if lowest is not None and (self._value is None or lowest > self._value):
            self._value = lowest
        return self._value

    def ahead(self, drift_ms: int, now: float) -> tuple[frozenset[str], int | None]:
        """Splits whose watermark is more than ``drift_ms`` above the group's (the minimum over the active,
        non-idle splits), and that limit (group + drift; None when no split is active). An active split
        without a watermark yet holds the group at its start: every split with a watermark is ahead of it,
        as it holds the stream's watermark back."""
        active = [s.watermark for s in self._splits.values() if not self._idle(s, now)]
        if not active:
            return frozenset(), None
        if None in active:  # the group has no watermark yet: whatever has one waits (limit: nothing)
            return frozenset(sid for sid, s in self._splits.items() if s.watermark is not None), HOLD_ALL
        limit = min(w for w in active if w is not None) + drift_ms
        held = frozenset(
            sid for sid, s in self._splits.items() if s.watermark is not None and s.watermark > limit
        )
        return held, limit

    def splits(self, now: float) -> dict[str, dict[str, Any]]:
        """split id -> ``{"watermark": ms | None, "idle": bool}`` (JSON-ready)."""
        return {
            sid: {"watermark": s.watermark, "idle": self._idle(s, now)}
            for sid, s in sorted(self._splits.items())
        }


class WatermarkTracker:
    """Watermarks of one stream (or of one push worker). See the module docstring."""

    def __init__(
        self,
        strategy: WatermarkStrategy,
        metrics: Any,
        make_records: Callable[[str, Sequence[Any]], list[SourceRecord]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.strategy = strategy
        self._bound = strategy.out_of_orderness_ms
        self._assigner = strategy.timestamp_assigner
        self._metrics = metrics
        self._make_records = make_records
        self._clock = clock
        self._lock = threading.Lock()
        self._combiner = WatermarkCombiner(strategy.idleness_s)
        self._published: int | None = None
        self._version = -1
        self._held: frozenset[str] = frozenset()

    @property
    def enabled(self) -> bool:
        """Whether the strategy computes event time at all."""
        return self.strategy.enabled

    # -------------------------------------------------------------------- coordinator side: which splits

    def assigned(self, split_ids: Iterable[str]) -> None:
        """Splits handed to readers (a split moved by a failover keeps its watermark); a topic waiting for
        its first split stops waiting."""
        now = self._clock()
        with self._lock:
            for sid in split_ids:
                self._combiner.add(sid, now)
                self._combiner.release(sid.rsplit("/", 1)[0] + PENDING)

    def metadata(self, clusters: Mapping[str, ClusterMetadata], version: int = 0) -> None:
        """The metadata readers now follow: splits of clusters or topics that left it are released (an
        event older than one seen is ignored)."""
        with self._lock:
            if version < self._version:
                return
            self._version = version
            known = self._combiner.split_ids()
            gone = [sid for sid in known if not _covered(sid, clusters)]
            for sid in gone:
                self._combiner.release(sid)
            now = self._clock()
            topics = {sid.rsplit("/", 1)[0] for sid in known}
            for (
                cid,
                cluster,
            ) in clusters.items():  # a topic without splits yet holds like a split without record
                for topic in cluster.topics - {t.split("/", 1)[1] for t in topics if t.startswith(cid + "/")}:
                    self._combiner.add(f"{cid}/{topic}{PENDING}", now)
            value = self._combiner.compute(now) if gone else None
        if gone:
            _log.info("watermarks: %d splits of removed clusters or topics released", len(gone))
            self._publish(value)

    # ---------------------------------------------------------------------- taker side: what was returned

    def delivered(
        self,
        cluster_id: str,
        messages: Sequence[Any],
        event_times: EventTimes | None,
        records: Sequence[SourceRecord] | None = None,
    ) -> None:
        """``messages`` (and ``records`` made of them, when the caller got records) were returned.

        ``event_times``: their split -> (smallest, largest) Kafka timestamp, as the fetcher computed it for
        the batch (or :func:`part_event_times` for a part of one); None: computed here. With a timestamp
        assigner, event times come from the records (made here on the batch path). Late records are counted
        outside the lock, against the watermark before this chunk (one caller thread delivers).
        """
        if not messages:
            return
        times, per_split = chunk_event_times(
            cluster_id, messages, event_times, records, self._assigner, self._make_records
        )
        now = self._clock()
        bound = self._bound
        with self._lock:
            combiner = self._combiner
            before = combiner.value
            for sid, (_low, high) in times.items():
                combiner.advance(sid, high - bound, now)
            value = combiner.compute(now)
        for topic, n in chunk_late_counts(messages, times, per_split, before).items():
            self._metrics.late_records(cluster_id, topic, n)
        self._publish(value)

    def advance(self, times: EventTimes) -> None:
        """Splits reached these event times (split -> (smallest, largest)) in records a push handler
        returned from (reported by its worker); late records are not counted here."""
        now = self._clock()
        with self._lock:
            for sid, (_low, high) in times.items():
                self._combiner.advance(sid, high - self._bound, now)
            value = self._combiner.compute(now)
        self._publish(value)

    # ------------------------------------------------------------------------------------------ reading

    @property
    def watermark(self) -> int | None:
        """The stream's watermark in ms (None until every active split had one, and without a strategy)."""
        if not self.strategy.enabled:
            return None
        with self._lock:
            value = self._combiner.compute(self._clock())
        self._publish(value)
        return value

    def hold_ahead(self, drift_ms: int) -> tuple[frozenset[str], int | None]:
        """Watermark alignment: the splits to hold now and the limit (see :meth:`WatermarkCombiner.ahead`)."""
        with self._lock:
            held, limit = self._combiner.ahead(drift_ms, self._clock())
            changed = held != self._held
            self._held = held
        if changed:
            self._metrics.set_paused_splits(len(held))
        return held, limit

    def status(self) -> dict[str, Any]:
        """JSON-ready: the strategy, the watermark, each split's watermark and idleness, and the splits
        watermark alignment holds."""
        with self._lock:
            now = self._clock()
            return {
                "strategy": self.strategy.describe(),
                "watermark": self._combiner.compute(now),
                "splits": self._combiner.splits(now),
                "paused": sorted(self._held),
            }

    def _publish(self, value: int | None) -> None:
        if value is not None and value != self._published:
            self._published = value
            self._metrics.set_watermark(value)


def _covered(split_id: str, clusters: Mapping[str, ClusterMetadata]) -> bool:
    cluster_id, topic, _partition = split_id.rsplit("/", 2)
    cluster = clusters.get(cluster_id)
    return cluster is not None and topic in cluster.topics


def chunk_event_times(
    cluster_id: str,
    messages: Sequence[Any],
    event_times: EventTimes | None,
    records: Sequence[SourceRecord] | None,
    assigner: TimestampAssigner | None,
    make_records: Callable[[str, Sequence[Any]], list[SourceRecord]] | None,
) -> tuple[EventTimes, dict[str, list[int]] | None]:
    """Split -> (smallest, largest) event time of ``messages`` (one cluster's, handed out together), and
    with a timestamp assigner the event times it gave per split (for :func:`chunk_late_counts`).

    Without an assigner: ``event_times`` as the fetcher found them, or the messages' Kafka timestamps. With
    one: over ``records``, made with ``make_records`` when the caller got none."""
    if assigner is None:
        times = event_times if event_times is not None else kafka_event_times(cluster_id, messages)
        return times, None
    if records is None:
        assert make_records is not None
        records = make_records(cluster_id, messages)
    per_split = assigned_event_times(records, assigner)
    return {sid: (min(v), max(v)) for sid, v in per_split.items()}, per_split


def chunk_late_counts(
    messages: Sequence[Any],
    times: EventTimes,
    per_split: Mapping[str, list[int]] | None,
    watermark: int | None,
) -> dict[str, int]:
    """topic -> records of a chunk (see :func:`chunk_event_times`) at or below ``watermark`` (none
    without one)."""
    if watermark is None:
        return {}
    if per_split is None:
        return late_counts(messages, times, watermark)
    return assigned_late_counts(per_split, watermark)


def assigned_late_counts(per_split: Mapping[str, list[int]], watermark: int) -> dict[str, int]:
    """topic -> how many of the event times a timestamp assigner gave (split id -> times) are at or below
    ``watermark`` (late records)."""
    out: dict[str, int] = {}
    for sid, stamps in per_split.items():
        if min(stamps) <= watermark:
            topic = sid.rsplit("/", 2)[1]
            out[topic] = out.get(topic, 0) + bisect_right(sorted(stamps), watermark)
    return out


def strategy_of(source: object) -> WatermarkStrategy:
    """The watermark strategy of a source (a source without one: ``no_watermarks()``)."""
    strategy = getattr(source, "watermark_strategy", None)
    return strategy if isinstance(strategy, WatermarkStrategy) else WatermarkStrategy.no_watermarks()


def stream_watermarks(
    source: Any,
    metrics: Any,
    make_records: Callable[[str, Sequence[Any]], list[SourceRecord]],
    coordinator: Any,
    restored: object | None,
) -> WatermarkTracker:
    """The watermark tracker of a stream over ``source``; with a strategy, ``coordinator`` (whose
    ``watermarks`` attribute it sets) tells it of assignments and metadata updates. After a restore it says
    in the log that watermarks start anew (they are not part of checkpoints, as in Flink)."""
    tracker = WatermarkTracker(strategy_of(source), metrics, make_records)
    if tracker.enabled:
        coordinator.watermarks = tracker
        if tracker.strategy.alignment is not None:
            Aligner(tracker, coordinator, tracker.strategy.alignment, getattr(source, "name", "?")).start()
        if restored is not None:
            _log.info(
                "source=%s: restored; watermarks are not checkpointed, so every split starts without one and "
                "holds the watermark back until its first record (or until it is idle)",
                getattr(source, "name", "?"),
            )
    return tracker
