"""Topic tracking (KIP-558, adapted to many clusters): which (cluster, topic) pairs a source really read.

The first time a reader of a source reads a record of a (cluster, topic) that is not in the source's active
set, one status record is appended to a :class:`TopicStatusStore`. The active set is the latest value per
key: a value means "read", a tombstone (``None``) removes the key. Metadata says what a source may read;
this says what it did read, so operators can tell whether a cluster is still in use before switching it off.

Keys (plain UTF-8 text)::

    topic:<source>:<cluster>/<topic>

Source names are ``[A-Za-z0-9._-]`` and hold no ``:``, so the first ``:`` after the prefix ends the source
name. Topic names are ``[A-Za-z0-9._-]`` and cluster ids hold no ``/`` (explicit ids are ``[A-Za-z0-9._-]``;
an id defaulted from ``bootstrapServers`` may hold ``:``, ``,``, ``[`` and ``]``, never ``/``), so the only
``/`` separates cluster and topic. A key that does not parse, or that belongs to another source, is skipped:
older readers survive newer writers, and several sources may share one status topic.

Values (JSON objects; unknown fields are ignored, a value that is not an object still counts, since the key
alone decides membership, as in the seed)::

    {"version": 1, "source": "billing", "cluster": "east", "topic": "orders", "reader": 2,
     "discovered_ms": 1718000000000}

Here: the key format, :class:`TopicTracker` and :class:`TopicTrackingDisabledError`. The stores (in memory,
a local file, a compacted Kafka topic) are in :mod:`multicluster_source.ops._topic_stores`.

Threads: :meth:`TopicTracker.record` is called from fetch threads; appends run on one writer thread
``mcs-tracking-<source>`` so a slow or unreachable store never stalls reading. A failed append is logged and
retried when a record of that topic arrives again after a back-off.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from multicluster_source.exceptions import MultiClusterSourceError
from multicluster_source.ops._topic_stores import TopicStatusStore

__all__ = [
    "RESET_DISABLED",
    "TRACKING_DISABLED",
    "TopicTracker",
    "TopicTrackingDisabledError",
    "parse_topic_status_key",
    "topic_status_key",
]

_log = logging.getLogger("multicluster_source.tracking")

KEY_PREFIX: Final = "topic:"
VALUE_VERSION: Final = 1
TRACKING_DISABLED: Final = "Topic tracking is disabled."
RESET_DISABLED: Final = "Topic tracking reset is disabled."


def topic_status_key(source: str, cluster: str, topic: str) -> str:
    """The status key of ``topic`` on ``cluster`` read by ``source``: ``topic:<source>:<cluster>/<topic>``."""
    return f"{KEY_PREFIX}{source}:{cluster}/{topic}"


def parse_topic_status_key(key: str) -> tuple[str, str, str] | None:
    """``(source, cluster, topic)`` of a status key, or None for a key this version does not know."""
    if not key.startswith(KEY_PREFIX):
        return None
    source, sep, rest = key[len(KEY_PREFIX) :].partition(":")
    if not sep or not source:
        return None
    cluster, sep, topic = rest.partition("/")
    if not sep or not cluster or not topic or "/" in topic or ":" in topic:
        return None
    return source, cluster, topic


class TopicTrackingDisabledError(MultiClusterSourceError):
    """Topic tracking (or its reset) is disabled for this source; ``message`` is the seed's wording."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# ------------------------------------------------------------------------------------------------ tracker


@dataclass(frozen=True)
class _Write:
    pair: tuple[str, str]
    key: str
    value: dict[str, Any] | None
    previous: Any = None  # the value a tombstone replaces (restored when the tombstone fails)


class TopicTracker:
    """The active (cluster, topic) set of one source, recorded in a :class:`TopicStatusStore`.

    ``record`` is cheap when the pair is known (one set lookup) and appends exactly once per pair between
    resets, however many readers race. ``reset`` and ``forget`` write tombstones; both, and ``record``,
    return before the store has the records (the writer thread appends in order; ``flush`` waits).
    """

    def __init__(
        self,
        source_name: str,
        store: TopicStatusStore,
        *,
        enabled: bool = True,
        allow_reset: bool = True,
        clock: Callable[[], float] = time.time,
        retry_backoff_s: float = 5.0,
    ) -> None:
        self.source_name = source_name
        self.store = store
        self.enabled = enabled
        self.allow_reset = allow_reset
        self._clock = clock
        self._backoff = retry_backoff_s
        self._lock = threading.Condition()
        self._active: dict[tuple[str, str], Any] = {}
        self._retry_after: dict[tuple[str, str], float] = {}
        self._queue: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._pending = 0
        self._recording = False
        self._started = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"mcs-tracking-{source_name}", daemon=True)

    # ---------------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Load the store and start the writer thread (nothing happens when tracking is disabled).

        A store that cannot be loaded raises :class:`MultiClusterSourceError` naming the source and store."""
        if not self.enabled or self._started:
            return
        try:
            entries = self.store.load()
        except MultiClusterSourceError:
            raise
        except Exception as exc:
            raise MultiClusterSourceError(
                f"source {self.source_name}: topic tracking store {self.store.describe()} could not be "
                f"loaded: {exc}"
            ) from exc
        with self._lock:
            for key, value in entries.items():
                parsed = parse_topic_status_key(key)
                if parsed is not None and parsed[0] == self.source_name:
                    self._active[(parsed[1], parsed[2])] = value
            self._started = True
            self._recording = True
        self._thread.start()
        _log.info(
            "source=%s: topic tracking in %s: %d topics recorded so far",
            self.source_name,
            self.store.describe(),
            len(self._active),
        )

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every queued append is done; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Stop recording, finish queued appends (up to ``timeout``), stop the thread, close the store."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._recording = False
        if self._started:
            if not self.flush(timeout):
                _log.warning("source=%s: topic status appends still queued at close", self.source_name)
            self._queue.put(None)
            self._thread.join(timeout)
            if self._thread.is_alive():
                _log.error("source=%s: topic tracking thread did not stop", self.source_name)
        try:
            self.store.close()
        except Exception:
            _log.exception("source=%s: topic status store close failed", self.source_name)

    # ------------------------------------------------------------------------------------------ record

    def record(self, cluster: str, topic: str, reader: int) -> None:
        """A record of ``topic`` on ``cluster`` was read by ``reader`` (any thread)."""
        pair = (cluster, topic)
        if pair in self._active or not self._recording:
            return
        with self._lock:
            if pair in self._active or not self._recording:
                return
            retry = self._retry_after.get(pair)
            if retry is not None and time.monotonic() < retry:
                return
            value = {
                "version": VALUE_VERSION,
                "source": self.source_name,
                "cluster": cluster,
                "topic": topic,
                "reader": reader,
                "discovered_ms": int(self._clock() * 1000),
            }
            self._active[pair] = value
            self._enqueue_locked(_Write(pair, topic_status_key(self.source_name, *pair), value))

    def active(self) -> dict[str, list[str]]:
        """Cluster id -> sorted topics this source has read (since the last reset)."""
        if not self.enabled:
            raise TopicTrackingDisabledError(TRACKING_DISABLED)
        with self._lock:
            pairs = sorted(self._active)
        out: dict[str, list[str]] = {}
        for cluster, topic in pairs:
            out.setdefault(cluster, []).append(topic)
        return out

    def details(self) -> list[dict[str, Any]]:
        """The recorded value of every active pair (as stored; for status pages)."""
        if not self.enabled:
            return []
        with self._lock:
            return [
                dict(v) if isinstance(v, dict) else {"cluster": c, "topic": t}
                for (c, t), v in sorted(self._active.items())
            ]

    def reset(self) -> int:
        """Tombstone every active topic of this source; they are recorded again as records arrive.

        Raises :class:`TopicTrackingDisabledError` when tracking or reset is disabled. Returns the number
        of tombstones queued.
        """
        if not self.enabled:
            raise TopicTrackingDisabledError(TRACKING_DISABLED)
        if not self.allow_reset:
            raise TopicTrackingDisabledError(RESET_DISABLED)
        with self._lock:
            return self._tombstone_all_locked()

    def forget(self, timeout: float = 30.0) -> int:
        """Close for good: tombstone this source's whole history (even when reset is not allowed, and when
        tracking is disabled: the store is then read for it) and stop recording. Returns tombstones written.
        """
        if self._closed:
            raise MultiClusterSourceError("topic tracker is closed: forget before closing")
        if not self._started:
            return self._forget_unstarted()
        with self._lock:
            self._recording = False
            n = self._tombstone_all_locked()
        if not self.flush(timeout):
            _log.warning("source=%s: forgetting topic history timed out", self.source_name)
        return n

    def forget_on_close(self) -> None:
        """:meth:`forget` as the source closes for good: the outcome is logged, a failure does not raise."""
        try:
            n = self.forget()
            _log.info("source=%s: closed for good; %d tracked topics forgotten", self.source_name, n)
        except Exception:
            _log.exception("source=%s: forgetting the topic history failed", self.source_name)

    def _forget_unstarted(self) -> int:
        entries = self.store.load()
        n = 0
        for key in sorted(entries):
            parsed = parse_topic_status_key(key)
            if parsed is not None and parsed[0] == self.source_name:
                self.store.append(key, None)
                n += 1
        return n

    def _tombstone_all_locked(self) -> int:
        items = sorted(self._active.items())
        self._active.clear()
        self._retry_after.clear()
        for pair, previous in items:
            key = topic_status_key(self.source_name, *pair)
            self._enqueue_locked(_Write(pair, key, None, previous))
        if items:
            _log.info("source=%s: topic tracking reset: %d topics", self.source_name, len(items))
        return len(items)

    def _enqueue_locked(self, write: _Write) -> None:
        self._pending += 1
        self._queue.put(write)

    # ----------------------------------------------------------------------------------- writer thread

    def _run(self) -> None:
        while True:
            write = self._queue.get()
            if write is None:
                return
            try:
                self.store.append(write.key, write.value)
            except Exception as exc:
                self._failed(write, exc)
            finally:
                with self._lock:
                    self._pending -= 1
                    self._lock.notify_all()

    def _failed(self, write: _Write, exc: Exception) -> None:
        with self._lock:
            if write.value is not None:
                # Not recorded: forget it so the next record of the topic (after a back-off) tries again.
                if self._active.get(write.pair) is write.value:
                    del self._active[write.pair]
                    self._retry_after[write.pair] = time.monotonic() + self._backoff
                what = "recording"
            else:
                # The store still has it: keep it active so another reset tombstones it again.
                self._active.setdefault(write.pair, write.previous)
                what = "resetting"
        _log.warning(
            "source=%s: topic tracking: %s %s/%s failed: %s",
            self.source_name,
            what,
            write.pair[0],
            write.pair[1],
            exc,
        )
