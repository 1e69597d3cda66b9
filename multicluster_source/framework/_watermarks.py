"""Event time: :class:`WatermarkStrategy` (what the user sets) and the event times of a batch.

A strategy is a frozen value: ``for_bounded_out_of_orderness(seconds)``, ``for_monotonous_timestamps()`` or
``no_watermarks()`` (the default), refined by ``with_timestamp_assigner``, ``with_idleness`` and
``with_alignment``, each returning a new strategy.

The event times of a batch are computed once per batch, as cheaply as possible: with the Kafka timestamp
(no assigner) :func:`kafka_event_times` reads every message's timestamp by C-level ``map`` calls and takes
the smallest and largest per split (the smallest decides whether a batch may hold late records at all, so
lateness costs per-record work only for batches that may have some). A record without a timestamp (Kafka's
``TIMESTAMP_NOT_AVAILABLE``, or an assigner returning None) has no event time: it neither moves a watermark
nor counts as late.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import groupby
from operator import itemgetter
from typing import Any, Final

from confluent_kafka import Message

from multicluster_source.exceptions import ConfigurationError, SourceFailedError

__all__ = [
    "EventTimes",
    "TimestampAssigner",
    "WatermarkAlignment",
    "WatermarkStrategy",
    "assigned_event_times",
    "kafka_event_times",
]

TimestampAssigner = Callable[[Any], "int | None"]
"""``record -> event time in ms since the epoch`` (None: the record has no event time)."""

EventTimes = Mapping[str, tuple[int, int]]
"""split id -> (smallest, largest) event time in ms among a batch's messages of that split."""

_timestamp: Final = Message.timestamp
_partition: Final = Message.partition
_topic: Final = Message.topic
_second: Final = itemgetter(1)
_first: Final = itemgetter(0)


def _seconds(where: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(f"WatermarkStrategy.{where}: needs a number of seconds, got {value!r}")
    if value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise ConfigurationError(f"WatermarkStrategy.{where}: must be {bound} seconds, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class WatermarkAlignment:
    """Watermark alignment of a strategy: its group, the drift allowed and how often it is checked."""

    group: str
    max_drift_s: float
    update_interval_s: float = 1.0


@dataclass(frozen=True)
class WatermarkStrategy:
    """How a source derives event time and watermarks from its records (API.md section 8).

    Use the constructors, not the fields: ``WatermarkStrategy.for_bounded_out_of_orderness(5.0)``,
    ``for_monotonous_timestamps()`` or ``no_watermarks()``, then ``with_timestamp_assigner``,
    ``with_idleness``, ``with_alignment``. A split's watermark is the largest event time it returned minus
    ``out_of_orderness_ms``.
    """

    enabled: bool = False
    """False for ``no_watermarks()``: no event time is computed (and nothing costs time)."""
    out_of_orderness_ms: int = 0
    timestamp_assigner: TimestampAssigner | None = None
    """None: the Kafka timestamp of each record."""
    idleness_s: float | None = None
    alignment: WatermarkAlignment | None = None

    @staticmethod
    def no_watermarks() -> WatermarkStrategy:
        """No event time and no watermarks (the default): ``stream.watermark`` stays None."""
        return WatermarkStrategy()

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        """Event times never decrease within a split: its watermark is its largest event time."""
        return WatermarkStrategy(enabled=True)

    @staticmethod
    def for_bounded_out_of_orderness(seconds: float) -> WatermarkStrategy:
        """Records of a split arrive at most ``seconds`` out of order: its watermark is its largest event
        time minus that bound."""
        bound = _seconds("for_bounded_out_of_orderness()", seconds, positive=False)
        return WatermarkStrategy(enabled=True, out_of_orderness_ms=round(bound * 1000))

    def with_timestamp_assigner(self, assigner: TimestampAssigner) -> WatermarkStrategy:
        """Take event times from ``assigner(record) -> ms`` (the record as ``poll`` returns it, value
        deserialized) instead of the Kafka timestamp."""
        if not callable(assigner):
            raise ConfigurationError("WatermarkStrategy.with_timestamp_assigner(): needs a callable(record)")
        return replace(self, timestamp_assigner=assigner)

    def with_idleness(self, seconds: float) -> WatermarkStrategy:
        """A split that returned no record for ``seconds`` stops holding the watermark back, until its next
        record."""
        return replace(self, idleness_s=_seconds("with_idleness()", seconds, positive=True))

    def with_alignment(self, group: str, max_drift: float, update_interval: float = 1.0) -> WatermarkStrategy:
        """Pause splits whose watermark is more than ``max_drift`` seconds ahead of their group's."""
        if not isinstance(group, str) or not group:
            raise ConfigurationError(
                f"WatermarkStrategy.with_alignment(): group must be a non-empty string, got {group!r}"
            )
        drift = _seconds("with_alignment(max_drift=...)", max_drift, positive=False)
        interval = _seconds("with_alignment(update_interval=...)", update_interval, positive=True)
        return replace(self, alignment=WatermarkAlignment(group, drift, interval))

    @property
    def idleness_ms(self) -> int | None:
        """The idleness timeout in ms, or None without idleness."""
        return None if self.idleness_s is None else round(self.idleness_s * 1000)

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary (for status answers)."""
        return {
            "enabled": self.enabled,
            "out_of_orderness_ms": self.out_of_orderness_ms,
            "timestamp_assigner": self.timestamp_assigner is not None,
            "idleness_ms": self.idleness_ms,
            "alignment": None
            if self.alignment is None
            else {
                "group": self.alignment.group,
                "max_drift_ms": round(self.alignment.max_drift_s * 1000),
            },
        }


def kafka_event_times(
    cluster_id: str, messages: Sequence[Any], split_ids: Sequence[str] = (), topic: str | None = None
) -> dict[str, tuple[int, int]]:
    """split id -> (smallest, largest) Kafka timestamp of ``messages`` (one cluster's client messages).

    ``split_ids``: the splits the messages belong to, when known (a fetcher's batch: the splits whose
    position moved); with exactly one, no message is asked for its partition. ``topic``: the only topic of
    the messages, when known. Messages without a timestamp are left out (their timestamp is negative); a
    split with none has no entry.
    """
    if not messages:
        return {}
    stamps = list(map(_second, map(_timestamp, messages)))
    if len(split_ids) == 1:
        low, high = min(stamps), max(stamps)
        if low < 0:
            present = [s for s in stamps if s >= 0]
            return {split_ids[0]: (min(present), max(present))} if present else {}
        return {split_ids[0]: (low, high)}
    keys: list[Any]
    if topic is not None:
        keys = list(map(_partition, messages))
    else:
        keys = list(zip(map(_topic, messages), map(_partition, messages), strict=True))
    out: dict[str, tuple[int, int]] = {}
    for key, group in groupby(zip(keys, stamps, strict=True), key=_first):
        values = list(map(_second, group))
        low, high = min(values), max(values)
        if low < 0:
            values = [v for v in values if v >= 0]
            if not values:
                continue
            low = min(values)
        sid = f"{cluster_id}/{topic}/{key}" if topic is not None else f"{cluster_id}/{key[0]}/{key[1]}"
        seen = out.get(sid)
        out[sid] = (low, high) if seen is None else (min(seen[0], low), max(seen[1], high))
    return out


def assigned_event_times(records: Sequence[Any], assigner: TimestampAssigner) -> dict[str, list[int]]:
    """split id -> event times ``assigner`` gave ``records`` (records without one left out).

    Raises :class:`SourceFailedError` naming the record when the assigner fails or returns no int.
    """
    out: dict[str, list[int]] = {}
    for record in records:
        try:
            ts = assigner(record)
        except Exception as exc:
            raise SourceFailedError(f"timestamp assigner failed for record {_where(record)}: {exc}") from exc
        if ts is None:
            continue
        if isinstance(ts, bool) or not isinstance(ts, int):
            raise SourceFailedError(
                f"timestamp assigner returned {ts!r}, not an int of ms, for record {_where(record)}"
            )
        out.setdefault(record.split_id, []).append(ts)
    return out


def _where(record: Any) -> str:
    return (
        f"cluster={record.cluster_id} topic={record.topic} partition={record.partition} "
        f"offset={record.offset}"
    )
