"""Consumers opened ahead of their splits: connected, with the metadata of their cluster's topics at hand.

A reader opens one for a cluster it may soon read and does not read yet: at start-up and when a cluster is
added (while the enumerator still discovers the splits), and for the clusters it stands by for (rack-aware
standbys). Connecting (bootstrap, metadata, the connection to each partition leader) takes a few round trips
that would otherwise come after the first split was assigned; librdkafka also starts fetching a partition
assigned before its topic's metadata is known only after its next metadata refresh.

Threads: the owning reader's thread creates and closes a :class:`WarmConsumer`; a thread of its own
(``mcs-warm-...``) connects it; the fetcher that takes it over calls :meth:`WarmConsumer.take` on its fetch
thread, which waits for connecting to end. Whoever closes it last closes the client, never while the
connecting thread still uses it. The connecting thread makes short calls (at most 0.5 s each) and checks
between them whether it was closed, so :meth:`WarmConsumer.close` joins it within about half a second even
when the cluster is down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

_log = logging.getLogger("multicluster_source.reader")

METADATA_TIMEOUT_S = 2.0
_CONNECT_TIMEOUT_S = 10.0
_STEP_S = 0.5  # the connecting thread's longest call: how long closing may wait for it
LEARN_MAX_TOPICS = 20
"""More topics at once are not asked for (see :func:`learn_topics`)."""
LEARN_MAX_PARTITIONS = 2000
"""A fetcher handed more new partitions at once does not ask for their topics (see :func:`learn_topics`)."""


def learn_topics(
    cluster_id: str,
    consumer: Any,
    topics: Iterable[str],
    known: dict[str, frozenset[int]],
    timeout: float = METADATA_TIMEOUT_S,
    stop: threading.Event | None = None,
) -> dict[str, Any]:
    """Ask ``consumer`` for the metadata of ``topics``; put the partitions of each that exists in ``known``
    and return its metadata (``confluent_kafka.admin.TopicMetadata``) by name.

    One request per topic (each a round trip of about a millisecond). A failed request is logged (debug) and
    skipped: the client learns the topic at its next metadata refresh anyway. Once ``stop`` is set no further
    request is made (a fetcher closing while its cluster is down).

    A fetcher asks this for every topic of the splits it is handed whose partition it has not seen in a
    metadata answer yet (a new topic, partitions added to a topic, a topic added again), before assigning
    them: librdkafka otherwise starts fetching such a partition only after its next metadata refresh (0.9-1.5
    s after ``incremental_assign`` on Apache Kafka, against ~0.015 s with the metadata at hand).

    Not for many at once: more than :data:`LEARN_MAX_TOPICS` topics are not asked for (nor, by a fetcher,
    more than :data:`LEARN_MAX_PARTITIONS` new partitions). A client that learned topics this way takes
    about 0.1 ms a partition longer to close (librdkafka tears those partitions down one by one): with 6,000
    partitions a consumer, 6 consumers closing side by side took 4.4-4.9 s against 0.4-0.5 s (36,000
    splits on Apache Kafka); and a big assignment starts with a metadata request of the client's own
    anyway, so learning gains little there.
    """
    found: dict[str, Any] = {}
    wanted = sorted(set(topics))
    if len(wanted) > LEARN_MAX_TOPICS:
        _log.debug("cluster=%s: %d topics: their metadata is left to the client", cluster_id, len(wanted))
        return found
    for topic in wanted:
        if stop is not None and stop.is_set():
            break
        try:
            answer = consumer.list_topics(topic, timeout=timeout)
        except Exception as exc:
            _log.debug("cluster=%s: metadata of %s not fetched: %s", cluster_id, topic, exc)
            continue
        meta = answer.topics.get(topic)
        if meta is not None and meta.error is None:
            known[topic] = frozenset(meta.partitions)
            found[topic] = meta
    return found


def leader_partitions(topics: dict[str, Any]) -> list[tuple[str, int]]:
    """One ``(topic, partition)`` for each partition leader among ``topics`` (name -> TopicMetadata)."""
    picked: dict[int, tuple[str, int]] = {}
    for topic, meta in sorted(topics.items()):
        for partition, info in sorted(meta.partitions.items()):
            if info.leader >= 0:
                picked.setdefault(info.leader, (topic, partition))
    return sorted(picked.values())


class WarmConsumer:
    """A consumer of one cluster, connecting on its own thread until a fetcher takes it over."""

    def __init__(self, cluster_id: str, consumer: Any, topics: Iterable[str], thread_name: str) -> None:
        """Start connecting ``consumer`` and learning the metadata of ``topics``."""
        self.cluster_id = cluster_id
        self.known_partitions: dict[str, frozenset[int]] = {}
        """Partitions per topic, from the metadata answers while connecting."""
        self._consumer = consumer
        self._topics = sorted(set(topics))
        self._lock = threading.Lock()
        self._closed = False
        self._taken = False
        self._done = False  # connecting ended
        self._thread = threading.Thread(target=self._connect, name=thread_name, daemon=True)
        self._thread.start()

    def _connect(self) -> None:
        try:
            deadline = time.monotonic() + METADATA_TIMEOUT_S
            found: dict[str, Any] = {}
            while not self._closed and time.monotonic() < deadline:
                found = learn_topics(
                    self.cluster_id, self._consumer, self._topics, self.known_partitions, timeout=_STEP_S
                )
                if found or not self._topics:
                    break
            from confluent_kafka import KafkaException, TopicPartition

            deadline = time.monotonic() + _CONNECT_TIMEOUT_S
            for topic, partition in leader_partitions(found):
                # a ListOffsets request goes to the partition's leader: its connection is open afterwards
                while not self._closed and time.monotonic() < deadline:
                    try:
                        self._consumer.get_watermark_offsets(
                            TopicPartition(topic, partition), timeout=_STEP_S, cached=False
                        )
                        break
                    except KafkaException:
                        continue  # not answered within the step: try again unless closed
        except Exception as exc:  # a client that cannot connect yet still reads later
            _log.debug("cluster=%s: consumer could not connect ahead: %s", self.cluster_id, exc)
        finally:
            with self._lock:
                self._done = True
                close = self._closed and not self._taken
            if close:
                self._close_client()

    def take(self) -> Any:
        """The consumer, once connecting ended (fetch thread); the fetcher closes it from then on."""
        self._thread.join(timeout=_CONNECT_TIMEOUT_S * 2)
        with self._lock:
            self._taken = True
        return self._consumer

    def close(self) -> None:
        """Close the consumer and join the connecting thread (within about 0.5 s); not after :meth:`take`."""
        with self._lock:
            if self._closed or self._taken:
                return
            self._closed = True
            connected = self._done
        if connected:
            self._close_client()
            return
        if self._thread is not threading.current_thread():
            self._thread.join(_STEP_S * 4)  # it sees the flag after its current call and closes the client
            if self._thread.is_alive():
                _log.warning("cluster=%s: consumer still connecting after close", self.cluster_id)

    def _close_client(self) -> None:
        try:
            self._consumer.close()
        except Exception as exc:
            _log.warning("cluster=%s: consumer close failed: %s", self.cluster_id, exc)
