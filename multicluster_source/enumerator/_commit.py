"""Committing a completed checkpoint's positions to the clusters under the source's group id.

:class:`CommitLedger` hands each cluster what moved since the previous checkpoint through its per-cluster
enumerator, whose :class:`~multicluster_source.enumerator._committer.GroupCommitter` owes the offsets until a
commit stores them, retrying until the cluster answers (so a cluster that was down gets what it is owed when
it is back, without waiting for another checkpoint). A cluster without a running enumerator (removed, or
reconnecting) keeps what it is owed here, for its next enumerator.

:class:`CommitWait` is what a checkpoint waits on, and the wait is bounded: by ``checkpoint.commit.wait.ms``
for the clusters that answered their last commits, and not at all for a cluster that is down or did not
answer (its commit is logged as owed): the caller, and the healthy clusters' records, never wait for a
cluster that does not answer. Started on the coordinator thread; the wait runs on the checkpointer's thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import Protocol

from multicluster_source.framework._split import KafkaPartitionSplit

_log = logging.getLogger("multicluster_source.enumerator")

Offsets = dict[tuple[str, int], int]
"""``(topic, partition) -> offset`` of one cluster."""


class CommitWait:
    """``wait(timeout, stop)``: wait for a checkpoint's commits to the clusters that answer, at most
    ``limit`` seconds (and ``timeout``); ``stop`` (checked every 0.1 s) ends the wait early, e.g. when the
    source closes. Clusters not waited for, or not done in time, are logged: their offsets stay owed."""

    def __init__(
        self,
        checkpoint_id: int,
        futures: Mapping[str, Future[None]],
        limit: float,
        skipped: Sequence[str] = (),
    ) -> None:
        """``futures``: the commit of each cluster waited for; ``skipped``: clusters not answering."""
        self._checkpoint_id = checkpoint_id
        self._futures = dict(futures)
        self.limit = limit
        self.skipped = sorted(skipped)

    def __call__(self, timeout: float, stop: Callable[[], bool] = lambda: False) -> None:
        deadline = time.monotonic() + min(timeout, self.limit)
        pending = set(self._futures.values())
        while pending:
            left = deadline - time.monotonic()
            pending = wait_futures(pending, timeout=max(0.0, min(0.1, left))).not_done
            if left <= 0 or stop():
                break
        late = sorted(cid for cid, f in self._futures.items() if f in pending)
        for cid in late:
            _log.warning(
                "cluster=%s: offset commit of checkpoint %d not answered within %.1f s; owed, committed "
                "when the cluster answers",
                cid,
                self._checkpoint_id,
                self.limit,
            )
        for cid in self.skipped:  # its committer logged when it stopped answering, and does when it answers
            _log.debug(
                "cluster=%s: not answering; the offsets of checkpoint %d are owed, committed when it answers",
                cid,
                self._checkpoint_id,
            )


class Committer(Protocol):
    """What the ledger needs of a per-cluster enumerator (:class:`KafkaClusterEnumerator`)."""

    def commit_offsets(self, offsets: Mapping[tuple[str, int], int]) -> Future[None]:
        """Owe ``offsets``; the future ends once they are stored."""
        ...

    @property
    def commits_answered(self) -> bool:
        """Whether the cluster answered its last commits."""
        ...


class CommitLedger:
    """Offsets owed to clusters without a running enumerator, and each checkpoint's commits. Thread-safe."""

    def __init__(self, limit: float = 5.0) -> None:
        """``limit``: how long a checkpoint waits at most for the commits of clusters that answer."""
        self._lock = threading.Lock()
        self._owed: dict[str, Offsets] = {}
        self._limit = limit

    def owed(self) -> dict[str, Offsets]:
        """A copy of what is owed per cluster without a running enumerator (for tests and status)."""
        with self._lock:
            return {cid: dict(offsets) for cid, offsets in self._owed.items()}

    def owe(self, owed: Mapping[str, Offsets]) -> None:
        """Keep what closed enumerators still owed their clusters (a newer offset owed here wins)."""
        with self._lock:
            for cid, offsets in owed.items():
                mine = self._owed.setdefault(cid, {})
                for tp, offset in offsets.items():
                    mine.setdefault(tp, offset)

    def commit(
        self,
        checkpoint_id: int,
        positions: Mapping[str, int],
        splits: Mapping[str, KafkaPartitionSplit],
        enumerators: Mapping[str, Committer],
        committed: Callable[[str, Offsets], None],
    ) -> CommitWait:
        """Hand ``positions`` (split id -> offset) of the active ``splits``, and what was owed here, to each
        cluster with a running enumerator; ``committed(cluster_id, offsets)`` once a cluster stored them.
        Returns what the checkpoint waits on. Costs O(positions + owed)."""
        with self._lock:
            for sid, pos in positions.items():
                split = splits.get(sid)
                if split is not None:
                    self._owed.setdefault(split.cluster_id, {})[split.topic_partition] = pos
            # a cluster without a running enumerator (reconnecting) keeps what it is owed for a later one
            by_cluster = {cid: self._owed.pop(cid) for cid in list(self._owed) if cid in enumerators}
        futures: dict[str, Future[None]] = {}
        skipped: list[str] = []
        for cid, offsets in by_cluster.items():
            enumerator = enumerators[cid]
            answering = enumerator.commits_answered
            try:
                future = enumerator.commit_offsets(offsets)
            except Exception as exc:  # the cluster's client is gone or broken: owe them all
                _log.warning("cluster=%s: offset commit failed to start: %s", cid, exc)
                self.owe({cid: offsets})
                continue
            future.add_done_callback(self._done_callback(cid, offsets, committed))
            if answering:
                futures[cid] = future
            else:
                skipped.append(cid)
        return CommitWait(checkpoint_id, futures, self._limit, skipped)

    @staticmethod
    def _done_callback(
        cluster_id: str, offsets: Offsets, committed: Callable[[str, Offsets], None]
    ) -> Callable[[Future[None]], None]:
        def done(fut: Future[None]) -> None:
            if fut.exception() is None:
                committed(cluster_id, offsets)

        return done
