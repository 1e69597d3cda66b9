"""Committing a completed checkpoint's positions to the clusters under the source's group id.

:func:`commit_positions` starts one offset commit per cluster through its per-cluster enumerator and
returns a function that waits for them; failures and timeouts are logged, never raised (the checkpoint is
complete either way). Started on the coordinator thread; the commits' callbacks run on the admin clients'
threads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures

from multicluster_source.enumerator._kafka import KafkaClusterEnumerator
from multicluster_source.framework._split import KafkaPartitionSplit

_log = logging.getLogger("multicluster_source.enumerator")

Offsets = dict[tuple[str, int], int]
"""``(topic, partition) -> offset`` of one cluster."""


def commit_positions(
    checkpoint_id: int,
    positions: Mapping[str, int],
    splits: Iterable[KafkaPartitionSplit],
    enumerators: Mapping[str, KafkaClusterEnumerator],
    committed: Callable[[str, Offsets], None],
) -> Callable[[float], None]:
    """Commit the checkpointed ``positions`` of ``splits`` whose cluster has a running enumerator; call
    ``committed(cluster_id, offsets)`` for each commit that succeeds. Returns ``wait(timeout)``."""
    by_cluster: dict[str, Offsets] = {}
    for split in splits:
        pos = positions.get(split.split_id)
        if pos is not None and split.cluster_id in enumerators:
            by_cluster.setdefault(split.cluster_id, {})[split.topic_partition] = pos
    futures: dict[str, Future[None]] = {}
    for cid, offsets in by_cluster.items():
        try:
            futures[cid] = enumerators[cid].commit_offsets(offsets)
        except Exception as exc:
            _log.warning("cluster=%s: offset commit failed to start: %s", cid, exc)
            continue
        futures[cid].add_done_callback(_done_callback(cid, offsets, committed))

    def wait(timeout: float) -> None:
        _done, not_done = wait_futures(list(futures.values()), timeout=timeout)
        for cid in sorted(c for c, f in futures.items() if f in not_done):
            _log.warning("cluster=%s: offset commit of checkpoint %d timed out", cid, checkpoint_id)

    return wait


def _done_callback(
    cluster_id: str, offsets: Offsets, committed: Callable[[str, Offsets], None]
) -> Callable[[Future[None]], None]:
    def done(fut: Future[None]) -> None:
        error = fut.exception()
        if error is not None:
            _log.warning("cluster=%s: offset commit failed: %s", cluster_id, error)
            return
        committed(cluster_id, offsets)

    return done
