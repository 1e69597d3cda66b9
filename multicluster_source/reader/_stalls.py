"""The stall watchdog of one fetcher: a partition whose position does not move while its broker has records
beyond it.

librdkafka has had consumers that stop fetching a partition after a broker restart (its issues #5153, open,
and #4804, a partition stuck on the internal broker) and a pause that outlives ``unassign()``; a stream then
waits for ever with no error. Each lag interval, on the fetch thread, :class:`StallWatch` looks at the splits
whose position has not moved for ``reader.stall.timeout.ms`` and that are not held back on purpose (watermark
alignment); for those it asks the broker for the partition's end (not the client's cached high watermark,
which a partition that is not fetched never updates). A split with records beyond its position is *stalled*,
also when the client's own position is past the split's: the client stepped over what it never returns
(transaction markers), which is no stall only when nothing lies beyond the client's position either; with
records beyond it for a whole timeout, the client took messages that never reached the split (a chaos soak
saw three partitions stand still for 150 s after their broker came back from a pause, with no stall
reported). When the client cannot even tell the partition's end (librdkafka's issue #4804: after a broker
came back, a client may keep a partition on its internal broker, with no connection that fetches or answers
for it), a short-lived second client asks: if it gets an answer with records beyond the position, the split
is stalled; if it gets none either, the broker is down, which is no stall. A stalled split
it is logged with the cluster id, counted in ``multicluster_source_stalled_partitions_total{cluster}``, shown
in the reader's ``status()``, and the fetcher re-creates its consumer at every split's position (a new client
has none of the old one's fetch state or pauses). A split that stalls again is handled again, no sooner than
one timeout later.

A fetch thread blocked on a full hand-off (the caller is slower than the cluster) does not run these checks,
so back-pressure is never taken for a stall.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from multicluster_source._clock import clock

_log = logging.getLogger("multicluster_source.reader")

_ASK_AT_MOST = 20
"""Candidates whose end is asked of the broker in one check (each is a request; the rest wait a check)."""


class StallWatch:
    """Finds stalled splits of one fetcher (fetch thread only)."""

    def __init__(
        self,
        cluster_id: str,
        timeout_s: float | None,
        metrics: Any,
        ask_timeout_s: float = 5.0,
        second_client: Callable[[], Any] | None = None,
    ) -> None:
        """``timeout_s``: how long a position may stand still with records beyond it; None: never checked.
        ``second_client()``: a new client of the same cluster, asked (and closed) when the fetcher's own
        cannot tell a partition's end."""
        self._cluster_id = cluster_id
        self._second_client = second_client
        self._clock = clock()  # the one clock of periodic work (tests drive a ManualClock)
        self._timeout_s = timeout_s
        self._metrics = metrics
        self._ask_timeout_s = ask_timeout_s
        self._seen: dict[tuple[str, int], tuple[int, float]] = {}  # key -> (position, since)
        self.total = 0
        """Stalls found since the fetcher started."""
        self.last: dict[str, dict[str, Any]] = {}
        """Split id -> what was found at its latest stall (for ``status()``)."""

    def check(
        self, consumer: Any, progress: Mapping[tuple[str, int], Any], held: set[tuple[str, int]]
    ) -> list[str]:
        """The split ids stalled now (their consumer must be re-created); ``held``: partitions paused on
        purpose."""
        timeout = self._timeout_s
        if timeout is None:
            return []
        now = self._clock.monotonic()
        seen = self._seen
        candidates: list[tuple[tuple[str, int], Any, float]] = []
        for key, p in progress.items():
            last = seen.get(key)
            if last is None or last[0] != p.next_offset or key in held:
                seen[key] = (p.next_offset, now)
            elif now - last[1] >= timeout:
                candidates.append((key, p, now - last[1]))
        if len(seen) > len(progress):
            self._seen = {key: v for key, v in seen.items() if key in progress}
        stalled: list[str] = []
        unanswered: list[tuple[tuple[str, int], Any, float]] = []
        for key, p, still in candidates[:_ASK_AT_MOST]:
            self._seen[key] = (p.next_offset, now)  # asked: the next look is a timeout later
            end = self._end(consumer, key)
            if end is None:
                unanswered.append((key, p, still))
                continue
            if end <= p.next_offset:
                continue  # nothing beyond the position: idle, not stalled
            client = self._client_position(consumer, key)
            if client is not None and client > p.next_offset and end <= client:
                continue  # past what it never returns (transaction markers) with nothing beyond: idle
            self._stalled(stalled, p, end, still, f"the client's position: {client}")
        if unanswered and self._second_client is not None:
            self._ask_another_client(unanswered, stalled)
        return stalled

    def _ask_another_client(
        self, unanswered: list[tuple[tuple[str, int], Any, float]], stalled: list[str]
    ) -> None:
        """The fetcher's client did not tell these partitions' ends: a new client asks, the first of them
        first (no answer there either: the broker is down, none is a stall)."""
        assert self._second_client is not None
        try:
            other = self._second_client()
        except Exception as exc:
            _log.debug("cluster=%s: a second client could not be made: %s", self._cluster_id, exc)
            return
        try:
            for key, p, still in unanswered:
                end = self._end(other, key)
                if end is None:
                    return  # the broker does not answer another client either: down, not stalled
                if end > p.next_offset:
                    self._stalled(
                        stalled, p, end, still, "its client no longer reaches the broker; another does"
                    )
        finally:
            try:
                other.close()
            except Exception as exc:
                _log.debug("cluster=%s: closing the second client failed: %s", self._cluster_id, exc)

    def _stalled(self, stalled: list[str], p: Any, end: int, still: float, why: str) -> None:
        stalled.append(p.split_id)
        self.total += 1
        self.last[p.split_id] = {
            "position": p.next_offset,
            "end": end,
            "why": why,
            "still_s": round(still, 1),
            "at": time.time(),
        }
        _log.warning(
            "cluster=%s: %s stalled: position %d has not moved for %.0f s while the broker has records up to "
            "%d (%s); the consumer is made again at its position",
            self._cluster_id,
            p.split_id,
            p.next_offset,
            still,
            end,
            why,
        )
        self._metrics.stalled_partition(self._cluster_id)

    @staticmethod
    def _client_position(consumer: Any, key: tuple[str, int]) -> int | None:
        """The offset the client returns next of ``key`` (None: unknown)."""
        from confluent_kafka import TopicPartition

        try:
            [tp] = consumer.position([TopicPartition(*key)])
        except Exception:
            return None
        return int(tp.offset) if tp.offset is not None and tp.offset >= 0 else None

    def _end(self, consumer: Any, key: tuple[str, int]) -> int | None:
        from confluent_kafka import TopicPartition

        try:
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(*key), timeout=self._ask_timeout_s, cached=False
            )
        except Exception as exc:  # the broker does not answer: a broker fault, which the client reports
            _log.debug("cluster=%s: end of %s unknown: %s", self._cluster_id, key, exc)
            return None
        return int(high) if high is not None and high >= 0 else None
