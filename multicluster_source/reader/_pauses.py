"""Splits held by watermark alignment, applied to one fetcher's consumer (on its fetch thread only).

The reader tells its fetchers which split ids to hold (:class:`~multicluster_source.framework._events.
SplitsPausedEvent`); each fetcher keeps the wish here and applies it to its consumer with ``pause`` and
``resume`` whenever the wish or its own splits change. These are the only pauses of a fetcher: a full hand-off
buffer makes the fetch thread wait instead (a pause would drop the partition's prefetched messages).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

_log = logging.getLogger("multicluster_source.reader")


class AlignmentPauses:
    """What alignment holds of one consumer's partitions: wanted split ids, applied ``(topic, partition)``."""

    def __init__(self, cluster_id: str, bound_ms: int = 0, aligned: bool = False) -> None:
        """``aligned``: until the coordinator's first word, each split fetches one batch and waits."""
        self._cluster_id = cluster_id
        self._bound_ms = bound_ms
        self.wanted: frozenset[str] = frozenset()
        self.limit: int | None = -1 if aligned else None
        self.applied: set[tuple[str, int]] = set()
        self._fetched: dict[str, int] = {}  # split id -> watermark of what was fetched (not yet returned)

    def want(self, split_ids: frozenset[str], limit: int | None) -> None:
        """The coordinator's latest wish (applied with :meth:`apply`)."""
        self.wanted, self.limit = split_ids, limit

    def fetched(
        self, consumer: Any, times: Mapping[str, tuple[int, int]], progress: Mapping[Any, Any]
    ) -> None:
        """A batch was fetched: pause at once a split it took past the limit."""
        fetched, bound = self._fetched, self._bound_ms
        over = False
        for sid, (_low, high) in times.items():
            mark = high - bound
            if mark > fetched.get(sid, mark - 1):
                fetched[sid] = mark
            over = over or (self.limit is not None and mark > self.limit)
        if over:
            self.apply(consumer, progress)

    def apply(self, consumer: Any, progress: Mapping[tuple[str, int], Any]) -> None:
        """Pause the wanted partitions this consumer reads (and those fetched past the limit); resume the
        others it paused before."""
        from confluent_kafka import TopicPartition

        limit, fetched = self.limit, self._fetched
        want = {
            tp
            for tp, p in progress.items()
            if p.split_id in self.wanted or (limit is not None and fetched.get(p.split_id, limit) > limit)
        }
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
        ids = {p.split_id for p in progress.values()}
        self._fetched = {sid: mark for sid, mark in fetched.items() if sid in ids}
