"""Positions out of range: the fetcher, not the client, moves them (logged, counted, checkpointed).

The consumers never reset a position by themselves (``auto.offset.reset=error`` is what librdkafka gets, see
:func:`consumer_config`). When a position is no longer in the log (it aged out through retention or
``delete_records``, or the topic was recreated shorter), librdkafka stops fetching that partition and reports
``_AUTO_OFFSET_RESET``; the fetcher then moves it per the ``auto.offset.reset`` of the configuration it was
given (earliest, the default, or latest: looked up with ``get_watermark_offsets``), logs a warning naming
cluster, topic, partition, old and new offset, counts it in
``multicluster_source_offset_resets_total{cluster,topic}``, and hands the new position on so the next
checkpoint holds it. With ``auto.offset.reset=error`` set by the user the source fails instead
(:class:`OffsetOutOfRangeError`).

Everything here runs on the fetch thread that owns the consumer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from multicluster_source.exceptions import OffsetOutOfRangeError
from multicluster_source.framework._split import KafkaPartitionSplit

_log = logging.getLogger("multicluster_source.reader")

OffsetResetPolicy = Literal["earliest", "latest", "error"]
_RESET_KEY = "auto.offset.reset"
_LATEST = frozenset({"latest", "largest", "end"})
_WATERMARK_TIMEOUT_S = 10.0


def offset_reset_policy(conf: dict[str, Any]) -> OffsetResetPolicy:
    """What to do with an out-of-range position, from ``auto.offset.reset`` in ``conf`` (default earliest)."""
    value = str(conf.get(_RESET_KEY, "earliest")).strip().lower()
    if value in _LATEST:
        return "latest"
    if value == "error":
        return "error"
    return "earliest"  # build() lets only librdkafka's values through: earliest and its aliases remain


def consumer_config(conf: dict[str, Any]) -> dict[str, Any]:
    """``conf`` as given to librdkafka: ``auto.offset.reset=error``, so that the fetcher, not the client,
    handles an out-of-range position (logged and counted; see the module docs)."""
    return {**conf, _RESET_KEY: "error"}


class Progress(Protocol):
    """What the reset needs of a split's mutable progress."""

    split: KafkaPartitionSplit
    split_id: str
    next_offset: int


@dataclass
class ResetOutcome:
    """What a reset did: new positions to hand on, and splits that are finished at their new position."""

    positions: dict[str, int] = field(default_factory=dict)
    finished: list[tuple[str, int]] = field(default_factory=list)
    """(topic, partition) of splits to drop (already unassigned from the consumer)."""


def reset_positions(
    cluster_id: str,
    consumer: Any,
    policy: OffsetResetPolicy,
    progress: Mapping[tuple[str, int], Progress],
    resets: dict[tuple[str, int], int],
    count_reset: Callable[[str, str], None],
) -> ResetOutcome:
    """Move the partitions of ``resets`` ((topic, partition) -> reported offset) per ``policy``.

    Updates ``next_offset`` of the moved splits; a partition stopped by an offset reset error cannot be
    ``seek()``'d, so it is assigned afresh at its new position.
    """
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

    outcome = ResetOutcome()
    reassign: list[TopicPartition] = []
    for (topic, partition), reported in resets.items():
        p = progress.get((topic, partition))
        if p is None:
            continue  # unassigned since
        old = reported if reported >= 0 else p.next_offset
        if policy == "error":
            raise OffsetOutOfRangeError(cluster_id, topic, partition, old)
        tp = TopicPartition(topic, partition)
        new: int | None
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=_WATERMARK_TIMEOUT_S, cached=False)
            new = int(low if policy == "earliest" else high)
        except Exception as exc:  # the broker is away: let the client look the offset up itself
            _log.info("cluster=%s: watermarks of %s/%d not available: %s", cluster_id, topic, partition, exc)
            new = None
        _log.warning(
            "cluster=%s topic=%s partition=%d: offset %d is out of range (aged out of the log?); "
            "reset to the %s offset %s (auto.offset.reset=%s)",
            cluster_id,
            topic,
            partition,
            old,
            policy,
            "(looked up by the client)" if new is None else new,
            policy,
        )
        count_reset(cluster_id, topic)
        if new is not None and p.split.is_finished_at(new):
            outcome.finished.append((topic, partition))
            consumer.incremental_unassign([tp])
            continue
        if new is not None:
            p.next_offset = new
            outcome.positions[p.split_id] = new
        logical = OFFSET_BEGINNING if policy == "earliest" else OFFSET_END
        reassign.append(TopicPartition(topic, partition, logical if new is None else new))
    if reassign:
        consumer.incremental_unassign([TopicPartition(tp.topic, tp.partition) for tp in reassign])
        consumer.incremental_assign(reassign)
    return outcome
