"""Checkpoints whose cost on the caller's thread is what changed since the last one.

:meth:`Checkpointer.take` runs on the thread that owns the stream (the caller's): it hands over the position
tracker's journal (O(1): what moved since the last checkpoint) and takes the enumerator's state as a
frozen value: the one it published after its last change when nothing changed since (an attribute read:
see :mod:`multicluster_source.enumerator._published`), else captured on the coordinator thread (references
only, but it waits for that thread). Everything that grows with the number of splits
runs on the checkpointer's own thread ``mcs-checkpoint-<source>``, one checkpoint after the other in the
order they were taken:

1. apply the changes to its own copy of every position (so the copy equals the tracker as of ``take``);
2. serialize the enumerator's state (reused while the state is equal to the last one) and keep the positions
   of the splits that state names;
3. ``write`` the checkpoint durably (atomic file write, fsync);
4. only then have the enumerator commit the positions that moved to the clusters (at-least-once: an offset
   reaches a cluster only once a checkpoint holding it is durable), and wait for the commits.

``take`` returns a future that ends after step 4; :meth:`SourceStream.checkpoint` waits for it (its
contract: durable and committed on return), a periodic checkpoint inside ``poll`` does not. The checkpoint is
exact: it holds precisely the positions delivered before ``take``, whatever is delivered while it is written.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from multicluster_source.enumerator._commit import CommitWait
from multicluster_source.enumerator._state import state_split_ids
from multicluster_source.exceptions import StreamClosedError
from multicluster_source.runtime.core._handoff import PositionTracker

_log = logging.getLogger("multicluster_source.runtime")
COMMIT_WAIT_S = 30.0
CLOSE_COMMIT_WAIT_S = 1.0
"""Once ``close()`` began, how long the commits of a checkpoint are still waited for (the checkpoint itself
is durable either way; a commit not waited for is logged, and may still complete)."""
DEFER_AT_MOST_S = 5.0
"""How long a periodic checkpoint waits at most for the enumerator to end a change (see :attr:`busy`)."""
Write = Callable[[int, dict[str, Any], dict[str, int]], Any]
"""``write(checkpoint_id, enumerator_state, positions)``: store one checkpoint durably."""


@dataclass(frozen=True)
class _Taken:
    checkpoint_id: int
    state: Any  # an EnumeratorState (or the JSON-ready dict of an enumerator without capture_state)
    changes: Mapping[str, int | None]
    write: Write
    done: Future[Any]


class Checkpointer:
    """Takes checkpoints of one source: capture on the caller's thread, the rest on its own thread."""

    def __init__(self, name: str, coordinator: Any, enumerator: Any, tracker: PositionTracker) -> None:
        self._name = name
        self._coordinator = coordinator
        self._enumerator = enumerator
        self._tracker = tracker
        self._positions: dict[str, int] = {}  # the checkpointer thread's copy of the tracker
        self._moved: dict[str, int] = {}  # positions changed since the last checkpoint written
        self._state: Any = None  # the last state serialized, its JSON-ready form and the split ids in it
        self._state_dict: dict[str, Any] = {}
        self._state_ids: set[str] = set()
        self._queue: queue.SimpleQueue[_Taken | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._in_flight = 0
        self._thread: threading.Thread | None = None
        self._closed = False
        self._background_error: BaseException | None = None
        self._closing_at: float | None = None
        self._deferred_since: float | None = None  # a periodic checkpoint waits for the enumerator since

    @property
    def busy(self) -> bool:
        """Whether a periodic checkpoint should wait: one taken is not yet written and committed, or the
        enumerator is in the middle of a change, so that taking one now would wait for its thread (for at
        most :data:`DEFER_AT_MOST_S`; then it is taken all the same). Explicit checkpoints never wait for
        this."""
        with self._lock:
            if self._in_flight > 0:
                return True
        published = getattr(self._enumerator, "published_state", None)
        if published is None or published() is not None:
            self._deferred_since = None
            return False
        now = time.monotonic()
        if self._deferred_since is None:
            self._deferred_since = now
        return now - self._deferred_since < DEFER_AT_MOST_S

    def take(self, checkpoint_id: int, write: Write) -> Future[Any]:
        """Capture a checkpoint now (what the tracker holds at this moment); the future gives what ``write``
        returned once the checkpoint is durable and its offsets committed (or the commit timed out), or
        raises what writing it raised."""
        if self._closed:
            raise StreamClosedError(f"source {self._name}: checkpoint() on a closed stream")
        changes = self._tracker.take_changes()
        capture = getattr(self._enumerator, "capture_state", None)
        published = getattr(self._enumerator, "published_state", None)
        try:
            state = published() if published is not None else None  # nothing changed: no wait
            if state is None and capture is not None:
                state = self._coordinator.call_sync(capture)
            elif state is None:
                state = self._coordinator.call_sync(lambda: self._enumerator.snapshot_state(checkpoint_id))
        except BaseException:
            self._queue.put(_Taken(checkpoint_id, None, changes, write, Future()))  # keep the changes
            raise
        done: Future[Any] = Future()
        with self._lock:  # in the queue before close()'s end mark, or not at all
            if self._closed:
                raise StreamClosedError(f"source {self._name}: checkpoint() on a closed stream")
            self._in_flight += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"mcs-checkpoint-{self._name}", daemon=True
                )
                self._thread.start()
            self._queue.put(_Taken(checkpoint_id, state, changes, write, done))
        return done

    def take_in_background(self, checkpoint_id: int, write: Write) -> None:
        """:meth:`take` without waiting (a periodic checkpoint). Raises, once, what the last checkpoint taken
        this way raised, before taking this one."""
        error, self._background_error = self._background_error, None
        if error is not None:
            raise error
        self.take(checkpoint_id, write).add_done_callback(self._note_failure)

    def _note_failure(self, done: Future[Any]) -> None:
        if done.exception() is not None:
            self._background_error = done.exception()

    def close(self, timeout: float = COMMIT_WAIT_S + 30.0) -> None:
        """Finish the checkpoints taken so far (writing them; their commits are waited for at most
        ``CLOSE_COMMIT_WAIT_S`` more), then stop and join the thread. Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._closing_at = time.monotonic()
                self._queue.put(None)
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                _log.warning("source=%s: checkpoint thread busy after %.0f s", self._name, timeout)

    # ------------------------------------------------------------------------------ checkpoint thread

    def _run(self) -> None:
        while True:
            taken = self._queue.get()
            if taken is None:
                return
            if taken.state is None:  # a capture that failed: only its changes are carried on
                self._apply(taken.changes)
                continue
            try:
                taken.done.set_result(self._complete(taken))
            except BaseException as exc:
                _log.error("source=%s: checkpoint %d failed: %s", self._name, taken.checkpoint_id, exc)
                taken.done.set_exception(exc)
            finally:
                with self._lock:
                    self._in_flight -= 1

    def _apply(self, changes: Mapping[str, int | None]) -> None:
        positions, moved = self._positions, self._moved
        for sid, pos in changes.items():
            if pos is None:
                positions.pop(sid, None)
                moved.pop(sid, None)
            else:
                positions[sid] = pos
                moved[sid] = pos

    def _complete(self, taken: _Taken) -> Any:
        self._apply(taken.changes)
        state, ids = self._serialized(taken.state)
        kept = {sid: pos for sid, pos in self._positions.items() if sid in ids}
        written = taken.write(taken.checkpoint_id, state, kept)
        # durable: what moved since the last checkpoint written (a failed one's changes included) is committed
        moved = {sid: pos for sid, pos in self._moved.items() if sid in ids}
        self._moved = {}
        cid, enumerator = taken.checkpoint_id, self._enumerator
        try:
            wait = self._coordinator.call_sync(lambda: enumerator.notify_checkpoint_complete(cid, moved))
        except BaseException:
            self._moved = moved | self._moved  # not committed: they go with the next checkpoint
            raise
        if isinstance(wait, CommitWait):  # closing: a cluster that does not answer is not waited for long
            wait(COMMIT_WAIT_S, stop=self._close_waited)
        else:
            wait(COMMIT_WAIT_S)
        return written

    def _close_waited(self) -> bool:
        closing = self._closing_at
        return closing is not None and time.monotonic() - closing > CLOSE_COMMIT_WAIT_S

    def _serialized(self, state: Any) -> tuple[dict[str, Any], set[str]]:
        """The JSON-ready state and its split ids; an equal state is not serialized again."""
        if isinstance(state, dict):
            return state, state_split_ids(state)
        if self._state is None or self._state != state:
            self._state_dict = state.to_dict()
            self._state_ids = state_split_ids(self._state_dict)
        self._state = state
        return self._state_dict, self._state_ids


def store_writer(store: Any, source: str) -> Write:
    """``write`` into a :class:`~multicluster_source.framework._checkpoint.CheckpointStore` (or nowhere
    when ``store`` is None: the checkpoint then only commits offsets)."""

    def write(checkpoint_id: int, state: dict[str, Any], positions: dict[str, int]) -> Any:
        return None if store is None else store.write(checkpoint_id, source, state, positions)

    return write
