"""Splits held by watermark alignment, applied to one fetcher's consumer (on its fetch thread only).

The reader tells its fetchers which split ids to hold (:class:`~multicluster_source.framework._events.
SplitsPausedEvent`); each fetcher keeps the wish here and applies it to its consumer with ``pause`` and
``resume`` whenever the wish or its own splits change. The fetcher's back-pressure pause (its buffer is full)
resumes only the partitions alignment does not hold.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

_log = logging.getLogger("multicluster_source.reader")


class AlignmentPauses:
    """What alignment holds of one consumer's partitions: wanted split ids, applied ``(topic, partition)``."""

    def __init__(self, cluster_id: str) -> None:
        self._cluster_id = cluster_id
        self.wanted: frozenset[str] = frozenset()
        self.applied: set[tuple[str, int]] = set()

    def apply(self, consumer: Any, progress: Mapping[tuple[str, int], Any]) -> None:
        """Pause the wanted partitions this consumer reads and resume the others it paused before."""
        from confluent_kafka import TopicPartition

        want = {tp for tp, p in progress.items() if p.split_id in self.wanted}
        gone = self.applied - set(progress)
        to_pause = want - self.applied
        to_resume = (self.applied - want) - gone
        if to_pause:
            consumer.pause([TopicPartition(t, p) for t, p in sorted(to_pause)])
        if to_resume:
            consumer.resume([TopicPartition(t, p) for t, p in sorted(to_resume)])
        if to_pause or to_resume:
            _log.info(
                "cluster=%s: watermark alignment holds %d partitions (paused %d, resumed %d)",
                self._cluster_id,
                len(want),
                len(to_pause),
                len(to_resume),
            )
        self.applied = want

    def resume_others(self, consumer: Any) -> None:
        """After a back-pressure pause of every partition: resume all but those alignment holds."""
        assignment = consumer.assignment()
        if self.applied:
            assignment = [tp for tp in assignment if (tp.topic, tp.partition) not in self.applied]
        consumer.resume(assignment)
