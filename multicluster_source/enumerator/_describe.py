"""Describing a cluster's topics for partition discovery, a few hundred partitions per request.

A ``describe_topics`` answer costs about six Python objects per partition (its description, leader, replica
and in-sync nodes and their lists), all made at once when the answer arrives and alive until it is read.
Asking for 12,000 partitions in one request made 74,000 objects at a time; alive across the garbage
collector's young passes they were moved to its oldest generation, and one discovery round of three such
clusters (every 30 s by default) set off full collections of 0.4-0.6 s, during which every thread of the
process stands still (measured at 36,000 splits on Apache Kafka). So a round asks for the topics in groups
of about :data:`CHUNK_PARTITIONS` partitions (as far as the partition counts of earlier rounds tell), with at
most :data:`IN_FLIGHT` requests outstanding, lets go of each answer as soon as it is read, and holds off the
collector meanwhile (:func:`~multicluster_source.framework._gcpause.collector_held`, at most
:data:`HOLD_AT_MOST_S`): a few thousand objects are alive at a time, and none is seen by a collector pass.

Runs on an enumerator's I/O thread (see :mod:`._kafka`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import Any

from multicluster_source.enumerator._offsets import await_result
from multicluster_source.framework._gcpause import Hold, collector_held

__all__ = ["CHUNK_PARTITIONS", "HOLD_AT_MOST_S", "IN_FLIGHT", "describe_partitions", "topic_groups"]

CHUNK_PARTITIONS = 500
"""Partitions asked for per ``describe_topics`` request, at most (a topic is never split: one larger topic
is a request of its own)."""

IN_FLIGHT = 4
"""Requests outstanding at a time (a round of 120 topics of 100 partitions: 24 requests, 6 round trips)."""

HOLD_AT_MOST_S = 2.0
"""How long a round holds off the garbage collector at most (a cluster answering slowly: the rest of the round
runs with it on)."""

GUESS_PARTITIONS = 100
"""What a topic not described before counts for when grouping."""

_UNKNOWN_TOPIC = -188  # KafkaError._UNKNOWN_TOPIC: librdkafka's own "unknown topic" (a missing topic)

Found = tuple[list[tuple[str, int]], list[str], dict[tuple[str, int], int]]
"""(partitions found, topics missing, leader node id of each partition found; -1: no leader)."""


def topic_groups(topics: Iterable[str], counts: Mapping[str, int]) -> list[list[str]]:
    """``topics`` in order, in consecutive groups whose partitions (``counts``, :data:`GUESS_PARTITIONS` for
    a topic not in it) add up to at most :data:`CHUNK_PARTITIONS`, a larger topic alone."""
    groups: list[list[str]] = []
    size = CHUNK_PARTITIONS
    for topic in topics:
        n = max(1, counts.get(topic, GUESS_PARTITIONS))
        if not groups or size + n > CHUNK_PARTITIONS:
            groups.append([])
            size = 0
        groups[-1].append(topic)
        size += n
    return groups


def describe_partitions(
    admin: Any,
    topics: Iterable[str],
    counts: Mapping[str, int],
    timeout: float,
    stop: threading.Event | None,
) -> Found:
    """The partitions of ``topics`` (sorted by topic, then partition), the topics missing and each partition's
    leader, asked in groups (:func:`topic_groups`), :data:`IN_FLIGHT` at a time. A topic that does not exist
    (or is not authorized) is missing; any other error, e.g. a cluster that does not answer, is raised (the
    requests still out are dropped). ``stop``: see :func:`await_result`."""
    from confluent_kafka import TopicCollection

    out: Found = ([], [], {})
    pending: deque[tuple[Sequence[str], dict[str, Future[Any]]]] = deque()
    with collector_held(HOLD_AT_MOST_S) as hold:
        for group in topic_groups(sorted(topics), counts):
            # a copy: confluent-kafka answers through the dict it returned and fails when it lost entries
            futures = dict(admin.describe_topics(TopicCollection(group), request_timeout=timeout))
            pending.append((group, futures))
            if len(pending) >= IN_FLIGHT:
                _read(*pending.popleft(), timeout, stop, out, hold)
        while pending:
            _read(*pending.popleft(), timeout, stop, out, hold)
    return out


def _read(
    group: Sequence[str],
    futures: dict[str, Future[Any]],
    timeout: float,
    stop: threading.Event | None,
    out: Found,
    hold: Hold,
) -> None:
    """Read one request's answers into ``out``, dropping each as soon as it is read."""
    from confluent_kafka import KafkaException

    found, missing, leaders = out
    for topic in group:
        future = futures.pop(topic)
        while hold.held and not future.done() and not (stop is not None and stop.is_set()):
            # the hold ends in time even if the cluster is slow
            wait_futures([future], timeout=0.05)
            hold.check()
        try:
            description = await_result(future, timeout + 5, stop)
        except KafkaException as exc:
            error: Any = exc.args[0] if exc.args else None
            code = int(error.code()) if hasattr(error, "code") else -1
            if code < 0 and code != _UNKNOWN_TOPIC:
                raise  # local: the cluster did not answer (down, timed out, ...)
            missing.append(topic)  # absent (or not authorized): keep looking
            continue
        for info in sorted(description.partitions, key=lambda i: i.id):
            key = (topic, int(info.id))
            found.append(key)
            leader = getattr(info, "leader", None)
            leaders[key] = -1 if leader is None else int(leader.id)
        del description
