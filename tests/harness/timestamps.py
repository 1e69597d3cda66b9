"""Client messages with timestamps for event-time unit tests, and the plain per-record computation of each
split's event times that the source's batch-wise one is checked against."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Message

Row = tuple[int, str, int | None]  # partition, topic, timestamp (None: the message has none)


def msg(topic: str, partition: int, offset: int, ts: int | None) -> Any:
    """A consumed message of ``topic``/``partition`` at ``offset`` with Kafka timestamp ``ts``."""
    stamp = (0, -1) if ts is None else (1, ts)  # what librdkafka gives a message without timestamp
    return Message(topic=topic, partition=partition, offset=offset, value=b"v", timestamp=stamp)


def messages_of(rows: list[Row]) -> list[Any]:
    """One message per row, at offsets 0, 1, ... (cluster ``c``)."""
    return [msg(t, p, i, ts) for i, (p, t, ts) in enumerate(rows)]


def plain_times(rows: list[Row]) -> dict[str, tuple[int, int]]:
    """Split id (cluster ``c``) -> smallest and largest timestamp of its rows, one row at a time."""
    out: dict[str, tuple[int, int]] = {}
    for p, t, ts in rows:
        if ts is not None:
            sid = f"c/{t}/{p}"
            lo, hi = out.get(sid, (ts, ts))
            out[sid] = (min(lo, ts), max(hi, ts))
    return out
