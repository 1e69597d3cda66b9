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
from itertools import compress, pairwise
from operator import ne
from typing import Any, Final

from confluent_kafka import Message

from multicluster_source.exceptions import ConfigurationError, SourceFailedError

__all__ = [
    "EventTimes",
    "TimestampAssigner",
    "WatermarkAlignment",
    "WatermarkStrategy",
    "assigned_event_times",
    "fetch_event_times",
    "kafka_event_times",
]

TimestampAssigner = Callable[[Any], "int | None"]
"""``record -> event time in ms since the epoch`` (None: the record has no event time)."""

EventTimes = Mapping[str, tuple[int, int]]
"""split id -> (smallest, largest) event time in ms among a batch's messages of that split."""

_timestamp: Final = Message.timestamp
_partition: Final = Message.partition
_topic: Final = Message.topic


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
    monotonous: bool = False
    """``for_monotonous_timestamps()``: event times never decrease within a split, so only the first and last
    record of each split in a batch are looked at."""
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
        """Event times never decrease within a split: its watermark is its largest event time. The promise is
        trusted: of each split's records in a fetched batch only the first and the last are looked at (so
        this strategy costs almost nothing; a record breaking the promise may not move the watermark or be
        counted late)."""
        return WatermarkStrategy(enabled=True, monotonous=True)

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


def fetch_event_times(strategy: WatermarkStrategy) -> str | None:
    """What fetchers compute of event time for ``strategy``: ``"all"``, ``"ends"`` (monotonous) or None
    (no strategy, or a timestamp assigner: then event times come from records)."""
    if not strategy.enabled or strategy.timestamp_assigner is not None:
        return None
    return "ends" if strategy.monotonous else "all"


def kafka_event_times(
    cluster_id: str,
    messages: Sequence[Any],
    split_ids: Sequence[str] = (),
    topic: str | None = None,
    ends_only: bool = False,
) -> dict[str, tuple[int, int]]:
    """split id -> (smallest, largest) Kafka timestamp of ``messages`` (one cluster's client messages).

    ``split_ids``: the one split all messages belong to, when known (no message is asked for its
    partition). ``topic``: the only topic of the messages, when known. ``ends_only`` (monotonous timestamps):
    only the first and last message of each run of one split are read. Messages without a timestamp are left
    out; a split with none has no entry. Everything per message is a C-level ``map``; the runs of one split
    (the client returns each partition's messages together) are found by comparing neighbours.
    """
    n = len(messages)
    if not n:
        return {}
    runs: list[tuple[Any, int, int]]
    keys: list[Any] | None = None
    if len(split_ids) == 1:
        runs = [(None, 0, n)]
    else:
        if topic is not None:
            keys = list(map(_partition, messages))
        else:
            keys = list(zip(map(_topic, messages), map(_partition, messages), strict=True))
        if keys.count(keys[0]) == n:
            runs = [(keys[0], 0, n)]
        else:
            cuts = [0, *compress(range(1, n), map(ne, keys[1:], keys[:-1])), n]
            runs = [(keys[a], a, b) for a, b in pairwise(cuts)]
    stamps = None if ends_only else list(map(_timestamp, messages))
    out: dict[str, tuple[int, int]] = {}
    for key, a, b in runs:
        if stamps is None:
            low, high = _timestamp(messages[a]), _timestamp(messages[b - 1])
            if not (low[0] and high[0]):
                low, high = _present(list(map(_timestamp, messages[a:b])))
        else:
            seg = stamps[a:b]
            low, high = min(seg), max(seg)
            if not low[0] or low[0] != high[0]:  # a message without timestamp, or two timestamp types
                low, high = _present(seg)
        if not low[0]:
            continue
        if key is None:
            sid = split_ids[0]
        elif topic is not None:
            sid = f"{cluster_id}/{topic}/{key}"
        else:
            sid = f"{cluster_id}/{key[0]}/{key[1]}"
        seen = out.get(sid)
        out[sid] = (low[1], high[1]) if seen is None else (min(seen[0], low[1]), max(seen[1], high[1]))
    return out


def _present(stamps: list[tuple[int, int]]) -> tuple[tuple[int, int], tuple[int, int]]:
    """Smallest and largest of the timestamps that exist (``(0, -1)`` twice when none does)."""
    times = [t for kind, t in stamps if kind]
    return ((1, min(times)), (1, max(times))) if times else ((0, -1), (0, -1))


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
