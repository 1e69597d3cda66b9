"""The periodic checkpoints of a synchronous :class:`HybridStream`, written off the caller's thread.

A ``poll`` (or a step of the ``for`` loop, or of ``run()``'s loop over the stages it reads in-process) due for
a periodic checkpoint only captures it (:meth:`HybridStream.capture_checkpoint`: exact, it holds the records
returned before it) and goes on. Which thread calls what:

- the caller's thread: the capture; starting the write; at a later ``poll`` (the first after the write
  ended), joining the writing thread and the stage's ``commit(id)`` (a stage reader is called from that one
  thread); a ``poll`` due for a checkpoint raises, once, what the last write (or commit) raised;
- ``mcs-hybrid-checkpoint-<source>``, one thread per checkpoint, at most one at a time, joined by the
  caller's thread: the captured ``write()``: it waits until the stage's own part is durable (a Kafka stage's
  source checkpoint, which that source's ``mcs-checkpoint-<source>`` thread writes and commits), then writes
  the hybrid state file. It touches nothing else of the stream.

None is captured while the last one is being written or waits for its ``commit`` (nor while a Kafka stage's
source is busy, see :attr:`Checkpointer.busy`): the due checkpoint is taken by a later ``poll``.
``checkpoint()``, a switch and ``close()`` wait for the one under way first
(:meth:`BackgroundCheckpoint.settle` with ``wait=True``), so the hybrid state files are written one at a
time, in order.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["BackgroundCheckpoint", "Captured", "stage_busy"]

_log = logging.getLogger("multicluster_source.hybrid")
Captured = tuple[int, Callable[[], None], Callable[[], None]]
"""What :meth:`HybridStream.capture_checkpoint` returns: (id, write, commit)."""


def stage_busy(reader: object) -> bool:
    """A Kafka stage's source would make a periodic checkpoint wait (see :attr:`Checkpointer.busy`)."""
    checkpointer = getattr(getattr(reader, "stream", None), "_checkpointer", None)
    return checkpointer is not None and bool(checkpointer.busy)


class BackgroundCheckpoint:
    """The periodic checkpoint of one hybrid stream being written (see the module docstring). Every method
    is called from the stream's caller thread."""

    def __init__(self, source: str) -> None:
        self._source = source
        self._thread: threading.Thread | None = None
        self._captured: Captured | None = None
        self._ended = False  # set last by the writing thread
        self._outcome: BaseException | None = None  # what the write raised (set by the writing thread)
        self._failure: BaseException | None = None  # a failed write or commit, for the next due poll

    def idle(self) -> bool:
        """:meth:`settle`, then whether no checkpoint is being written (a new one may start)."""
        self.settle()
        return self._thread is None

    def start(self, captured: Captured) -> None:
        """Write ``captured`` on a thread of its own (only when :meth:`idle`)."""
        checkpoint_id, write, _commit = captured
        self._ended, self._outcome = False, None
        thread = threading.Thread(
            target=self._write,
            args=(checkpoint_id, write),
            name=f"mcs-hybrid-checkpoint-{self._source}",
            daemon=True,
        )
        thread.start()
        self._thread, self._captured = thread, captured

    def _write(self, checkpoint_id: int, write: Callable[[], None]) -> None:
        """The writing thread: ``write()``; what it raised is logged and kept."""
        try:
            write()
        except BaseException as exc:
            _log.error("source=%s: checkpoint %d failed: %s", self._source, checkpoint_id, exc)
            self._outcome = exc
        finally:
            self._ended = True

    def settle(self, *, wait: bool = False) -> None:
        """Once the write under way ended (with ``wait``: wait for it), join its thread and tell the stage
        (``commit``); a failed write or commit is kept for :meth:`raise_failure`."""
        thread, captured = self._thread, self._captured
        if thread is None or captured is None or not (wait or self._ended):
            return
        thread.join()
        self._thread = self._captured = None
        failure = self._outcome
        if failure is None:
            try:
                captured[2]()
            except Exception as exc:
                _log.error("source=%s: checkpoint %d: commit failed: %s", self._source, captured[0], exc)
                failure = exc
        if failure is not None:
            self._failure = failure

    def raise_failure(self) -> None:
        """Raise, once, what the last background write (or its commit) raised."""
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure
