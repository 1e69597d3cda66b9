"""Committing one cluster's offsets under the group id, with a consumer, on a thread of its own.

Why a consumer and not the admin client: librdkafka (2.16.0 and earlier) can abort the whole process in the
admin client's coordinator-request error path (``rd_kafka_enq_once_del_source_return: Assertion
'eonce->refcnt > 0' failed``, its issue #4605) when a broker dies under ``alter_consumer_group_offsets`` and
the connection drops as it comes back. A consumer's ``commit(offsets=..., asynchronous=True)`` goes through
the consumer group's own coordinator handling, which that bug does not reach. The consumer never
subscribes nor is assigned anything: it commits as a "simple" consumer of the group (like the admin request
did, the group must have no active members).

:class:`GroupCommitter` owns that consumer and the thread ``mcs-commit-<cluster>``, which serves the
consumer's callbacks and sends what is owed. Offsets handed to :meth:`GroupCommitter.submit` are *owed*
until a commit stores them; a newer offset of a partition replaces an owed one. At most one round of commits
(what was owed when it started, in requests of at most ``REQUEST_PARTITIONS`` partitions) is in flight at a
time, so a cluster that is down never piles up requests: librdkafka answers a commit it could not send after
about 45 s (``_WAIT_COORD``), then what failed is owed again and sent after ``retry_backoff_s``, until the
cluster answers. A cluster is *answering* until a round fails or goes unanswered for ``answer_within_s`` (or
its client reports every broker down), and again once a round succeeds: a checkpoint waits only for the
commits of answering clusters (:mod:`._commit`).

Threads: ``submit``, ``answering``, ``owed`` and ``close`` from any thread; everything else, every consumer
call included, on ``mcs-commit-<cluster>``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from multicluster_source.enumerator._requests import groups
from multicluster_source.ops._clientlog import ClientErrorReporter, client_logging

_log = logging.getLogger("multicluster_source.enumerator")

Offsets = dict[tuple[str, int], int]
"""``(topic, partition) -> offset`` of one cluster."""

ConsumerFactory = Callable[[Mapping[str, Any]], Any]

_DOWN_ERRORS = frozenset({"_ALL_BROKERS_DOWN"})
"""Client errors after which the cluster is taken as not answering at once."""


def default_consumer_factory(conf: Mapping[str, Any]) -> Any:
    """A confluent-kafka Consumer for ``conf``."""
    from confluent_kafka import Consumer

    return Consumer(dict(conf))


class _DownAwareReporter(ClientErrorReporter):
    """The committer consumer's ``error_cb``: logs like any client's, and tells when every broker is down."""

    def __init__(self, cluster_id: str, on_down: Callable[[], None]) -> None:
        super().__init__(cluster_id, "committer")
        self._on_down = on_down

    def __call__(self, error: Any) -> None:
        super().__call__(error)
        if getattr(error, "name", lambda: "")() in _DOWN_ERRORS:
            self._on_down()


class _Round:
    """One round of commits: what was owed when it started, and the answers so far (committer thread)."""

    def __init__(self, offsets: Offsets, seq: int, started: float) -> None:
        self.offsets = offsets
        self.seq = seq  # every submit up to this one is covered by this round
        self.started = started
        self.waiting: dict[tuple[str, int], Offsets] = {}  # first partition of a request -> its offsets
        self.failed: Offsets = {}
        self.error: str | None = None


class GroupCommitter:
    """Commits one cluster's offsets under ``group_id``; see the module text."""

    def __init__(
        self,
        cluster_id: str,
        client_properties: Mapping[str, Any],
        group_id: str,
        *,
        answer_within_s: float = 5.0,
        retry_backoff_s: float = 1.0,
        consumer_factory: ConsumerFactory = default_consumer_factory,
    ) -> None:
        """``client_properties``: the cluster's client configuration, secrets resolved (never logged)."""
        self.cluster_id = cluster_id
        self._group_id = group_id
        self._props = dict(client_properties)
        self._answer_within_s = answer_within_s
        self._retry_backoff_s = retry_backoff_s
        self._factory = consumer_factory
        self._lock = threading.Condition()
        self._owed: Offsets = {}
        self._seq = 0  # submits so far
        self._futures: list[tuple[int, Future[None]]] = []
        self._answering = True
        self._retry_at = 0.0
        self._closing = False
        self._round: _Round | None = None  # the committer thread's
        self._thread = threading.Thread(target=self._run, name=f"mcs-commit-{cluster_id}", daemon=True)
        self._started = False

    # ------------------------------------------------------------------------------------- any thread

    @property
    def answering(self) -> bool:
        """Whether the cluster answered its last round of commits (and no round waits too long now)."""
        with self._lock:
            rnd = self._round
            if rnd is not None and time.monotonic() - rnd.started > self._answer_within_s:
                return False
            return self._answering

    def owed(self) -> Offsets:
        """What is not stored yet (owed, and the round in flight)."""
        with self._lock:
            out = dict(self._round.offsets) if self._round is not None else {}
            out.update(self._owed)
            return out

    def submit(self, offsets: Mapping[tuple[str, int], int]) -> Future[None]:
        """Owe ``offsets``; the future ends once they (or newer offsets of the same partitions) are stored.
        Never blocks; never raises for the cluster's state (a closed committer's future never ends)."""
        done: Future[None] = Future()
        with self._lock:
            if not offsets:
                done.set_result(None)
                return done
            self._owed.update(offsets)
            self._seq += 1
            self._futures.append((self._seq, done))
            if not self._started and not self._closing:
                self._started = True
                self._thread.start()
            self._lock.notify_all()
        return done

    def close(self, timeout: float = 5.0) -> Offsets:
        """Stop the thread and close the consumer (a commit under way is given up to ``timeout``); returns
        what is still owed (for the cluster's next committer)."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
            started = self._started
        if started and self._thread is not threading.current_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                _log.warning(
                    "cluster=%s: offset committer still closing after %.0f s", self.cluster_id, timeout
                )
        return self.owed()

    # ------------------------------------------------------------------------------ committer thread

    def _down(self) -> None:
        with self._lock:
            if self._answering:
                _log.warning(
                    "cluster=%s: every broker is down; offsets are owed and committed when it answers",
                    self.cluster_id,
                )
            self._answering = False

    def _consumer_conf(self) -> dict[str, Any]:
        conf = dict(self._props)
        conf.update(
            {
                "group.id": self._group_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "on_commit": self._answered,
            }
        )
        client_id = str(conf.get("client.id", "multicluster-source"))
        conf["client.id"] = f"{client_id.removesuffix('-enumerator')}-committer"
        conf.update(
            client_logging(self.cluster_id, "committer", _DownAwareReporter(self.cluster_id, self._down))
        )
        return conf

    def _run(self) -> None:
        consumer: Any = None
        try:
            while True:
                with self._lock:
                    if self._closing:
                        return
                    rnd: _Round | None = None
                    now = time.monotonic()
                    if consumer is not None and self._round is None and self._owed and now >= self._retry_at:
                        rnd = self._round = _Round(self._owed, self._seq, now)
                        self._owed = {}
                    if consumer is None or (rnd is None and self._round is None):
                        wait = self._retry_at - time.monotonic() if self._owed else 1.0
                        if consumer is not None or wait > 0:
                            self._lock.wait(max(0.01, min(wait, 1.0)))
                            continue
                if consumer is None:
                    consumer = self._make_consumer()
                    continue
                if rnd is not None:
                    self._send(consumer, rnd)
                consumer.poll(0.1)  # serves on_commit
        except Exception as exc:  # not expected: owe it all; the next submit starts a new thread
            _log.error("cluster=%s: offset committer failed: %s", self.cluster_id, exc)
            with self._lock:
                self._give_back_locked()
                self._answering = False
                self._started = False
                self._thread = threading.Thread(
                    target=self._run, name=f"mcs-commit-{self.cluster_id}", daemon=True
                )
        finally:
            if consumer is not None:
                try:
                    consumer.close()
                except Exception as exc:  # closing a client of a cluster that is gone
                    _log.debug("cluster=%s: closing the committer consumer: %s", self.cluster_id, exc)

    def _make_consumer(self) -> Any:
        """The consumer, or None after a failure (tried again after the retry backoff)."""
        try:
            return self._factory(self._consumer_conf())
        except Exception as exc:  # a bad property, say: logged, owed, tried again
            with self._lock:
                if self._answering:
                    _log.warning("cluster=%s: offset committer client failed: %s", self.cluster_id, exc)
                self._answering = False
                self._retry_at = time.monotonic() + self._retry_backoff_s
            return None

    def _send(self, consumer: Any, rnd: _Round) -> None:
        from confluent_kafka import TopicPartition

        for group in groups(sorted(rnd.offsets.items())):
            offsets = dict(group)
            rnd.waiting[group[0][0]] = offsets
            try:
                consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in group], asynchronous=True)
            except Exception as exc:  # refused at once (e.g. the client is closing)
                del rnd.waiting[group[0][0]]
                rnd.failed.update(offsets)
                rnd.error = str(exc)
        if not rnd.waiting:
            self._finish(rnd)

    def _answered(self, error: Any, partitions: list[Any]) -> None:
        """``on_commit`` (committer thread, inside ``poll``): one request's answer."""
        rnd = self._round
        if rnd is None or not partitions:
            return
        first = min((tp.topic, tp.partition) for tp in partitions)
        offsets = rnd.waiting.pop(first, None)
        if offsets is None:
            return
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if key not in offsets:
                continue
            bad = error if error is not None else tp.error
            if bad is not None:
                rnd.failed[key] = offsets[key]
                rnd.error = str(bad)
        if not rnd.waiting:
            self._finish(rnd)

    def _finish(self, rnd: _Round) -> None:
        with self._lock:
            self._round = None
            if rnd.failed:
                for key, offset in rnd.failed.items():
                    self._owed.setdefault(key, offset)  # a newer offset owed meanwhile wins
                self._retry_at = time.monotonic() + self._retry_backoff_s
                if self._answering:
                    _log.warning(
                        "cluster=%s: offset commit failed: %s; owed, committed when the cluster answers",
                        self.cluster_id,
                        rnd.error,
                    )
                self._answering = False
                return
            if not self._answering:
                _log.info("cluster=%s: offsets committed again", self.cluster_id)
            self._answering = True
            ready = [f for seq, f in self._futures if seq <= rnd.seq]
            self._futures = [(seq, f) for seq, f in self._futures if seq > rnd.seq]
        for future in ready:
            future.set_result(None)

    def _give_back_locked(self) -> None:
        rnd, self._round = self._round, None
        if rnd is not None:
            for key, offset in rnd.offsets.items():
                self._owed.setdefault(key, offset)
