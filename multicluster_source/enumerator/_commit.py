"""Committing a completed checkpoint's positions to the clusters under the source's group id.

:class:`CommitLedger` starts the offset commits of each cluster through its per-cluster enumerator, in
requests of at most :data:`~multicluster_source.enumerator._requests.REQUEST_PARTITIONS` offsets sent at
once (one request of 12,000 costs the process ~8 times the CPU of twelve of 1,000: see
:mod:`~multicluster_source.enumerator._requests`), and returns a function that waits for them; failures and
timeouts are logged, never raised (the checkpoint is complete either way). A checkpoint hands over the
positions that moved since the previous one, so a commit carries what changed, not every split; offsets
whose request failed stay owed and go with the next one (unless a newer offset of the same partition
replaced them). Started on the coordinator thread; the commits' callbacks run on the admin clients' threads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures

from multicluster_source.enumerator._kafka import KafkaClusterEnumerator
from multicluster_source.enumerator._requests import groups
from multicluster_source.framework._split import KafkaPartitionSplit

_log = logging.getLogger("multicluster_source.enumerator")

Offsets = dict[tuple[str, int], int]
"""``(topic, partition) -> offset`` of one cluster."""


class CommitWait:
    """``wait(timeout)``: wait for a checkpoint's commits, logging those not done in time; ``stop`` (checked
    every 0.1 s) ends the wait early, e.g. when the source closes and a cluster does not answer."""

    def __init__(self, checkpoint_id: int, futures: Mapping[str, Sequence[Future[None]]]) -> None:
        """``futures``: each cluster's commit requests."""
        self._checkpoint_id = checkpoint_id
        self._futures = {cid: list(fs) for cid, fs in futures.items()}

    def __call__(self, timeout: float, stop: Callable[[], bool] = lambda: False) -> None:
        deadline = time.monotonic() + timeout
        pending = {f for fs in self._futures.values() for f in fs}
        while pending:
            left = deadline - time.monotonic()
            pending = wait_futures(pending, timeout=max(0.0, min(0.1, left))).not_done
            if left <= 0 or stop():
                break
        for cid in sorted(c for c, fs in self._futures.items() if any(f in pending for f in fs)):
            _log.warning("cluster=%s: offset commit of checkpoint %d timed out", cid, self._checkpoint_id)


class CommitLedger:
    """Offsets owed to each cluster: checkpointed, not yet stored by a commit. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owed: dict[str, Offsets] = {}

    def owed(self) -> dict[str, Offsets]:
        """A copy of what is owed per cluster (for tests and status)."""
        with self._lock:
            return {cid: dict(offsets) for cid, offsets in self._owed.items()}

    def commit(
        self,
        checkpoint_id: int,
        positions: Mapping[str, int],
        splits: Mapping[str, KafkaPartitionSplit],
        enumerators: Mapping[str, KafkaClusterEnumerator],
        committed: Callable[[str, Offsets], None],
    ) -> CommitWait:
        """Commit ``positions`` (split id -> offset) of the active ``splits`` and what earlier commits left
        owed, to each cluster with a running enumerator (in requests of at most ``REQUEST_PARTITIONS``);
        call ``committed(cluster_id, offsets)`` for each request that succeeds. Returns ``wait(timeout)``.
        Costs O(positions + owed)."""
        with self._lock:
            for sid, pos in positions.items():
                split = splits.get(sid)
                if split is not None:
                    self._owed.setdefault(split.cluster_id, {})[split.topic_partition] = pos
            # a cluster without a running enumerator (reconnecting) keeps what it is owed for a later one
            by_cluster = {cid: self._owed.pop(cid) for cid in list(self._owed) if cid in enumerators}
        futures: dict[str, list[Future[None]]] = {}
        for cid, owed in by_cluster.items():
            requests = [dict(group) for group in groups(sorted(owed.items()))]
            for i, offsets in enumerate(requests):
                try:
                    future = enumerators[cid].commit_offsets(offsets)
                except Exception as exc:
                    _log.warning("cluster=%s: offset commit failed to start: %s", cid, exc)
                    for rest in requests[i:]:  # the cluster's client is gone or broken: owe them all
                        self._owe_again(cid, rest)
                    break
                future.add_done_callback(self._done_callback(cid, offsets, committed))
                futures.setdefault(cid, []).append(future)

        return CommitWait(checkpoint_id, futures)

    def _owe_again(self, cluster_id: str, offsets: Offsets) -> None:
        """A commit failed: its offsets are owed again, except where a newer one is owed already."""
        with self._lock:
            owed = self._owed.setdefault(cluster_id, {})
            for tp, offset in offsets.items():
                owed.setdefault(tp, offset)

    def _done_callback(
        self, cluster_id: str, offsets: Offsets, committed: Callable[[str, Offsets], None]
    ) -> Callable[[Future[None]], None]:
        def done(fut: Future[None]) -> None:
            error = fut.exception()
            if error is not None:
                _log.warning("cluster=%s: offset commit failed: %s", cluster_id, error)
                self._owe_again(cluster_id, offsets)
                return
            committed(cluster_id, offsets)

        return done
