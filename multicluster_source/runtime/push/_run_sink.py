"""The push driver's side of a run's exactly-once sink: :class:`RunSinkGuard`.

The workers commit (:mod:`._worker_sink`); the driver decides where the run starts and makes sure that a
worker it gives up commits nothing more before that worker's splits start elsewhere:

* :meth:`RunSinkGuard.restored`: the positions the sink read at the start win over the checkpoint's;
* :meth:`RunSinkGuard.lost`: a worker lost or failed is fenced at the sink (``init_transactions`` under its
  transactional id aborts its open transaction), the committed positions are read back, and its splits'
  positions in the driver's tracker become those, before the enumerator moves them;
* :meth:`RunSinkGuard.silent`: the same for a worker that did not answer a fence, which the driver's loop
  then gives up (:class:`GiveUp`).

Called on the driver's thread (``restored``, ``lost``) and on the coordinator thread (``silent``); fencing
holds a lock, and each worker is fenced once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from multicluster_source.exceptions import MultiClusterSourceError
from multicluster_source.framework._checkpoint import Checkpoint
from multicluster_source.runtime.core._handoff import PositionTracker
from multicluster_source.runtime.core._sink_state import sink_restored
from multicluster_source.sink._transactions import TransactionalSink
from multicluster_source.sink._workers import fence_ids, worker_ids

__all__ = ["GiveUp", "RunSinkGuard"]

_log = logging.getLogger("multicluster_source.sink")


@dataclass(frozen=True)
class GiveUp:
    """The guard fenced a silent worker at the sink: the driver's loop gives it up."""

    reason: str


class RunSinkGuard:
    """What the driver of a run with an exactly-once sink does about it (see the module). ``give_up(n,
    message)`` puts a message from worker ``n`` into the driver's loop."""

    def __init__(self, session: TransactionalSink, name: str, give_up: Callable[[int, object], None]) -> None:
        self._session = session
        self._name = name
        self._give_up = give_up
        self._lock = threading.Lock()
        self._fenced: set[int] = set()

    def restored(self, restored: Checkpoint | None, bounded: bool) -> Checkpoint | None:
        """Where the run starts: ``restored`` with the sink's positions over its own."""
        return sink_restored(restored, self._session, self._name, bounded)

    def coordinator_options(self, source: Any) -> dict[str, Any]:
        """What the driver's coordinator needs of the sink: the Kafka cluster ids the enumerators learn (for
        the workers to write with positions), and :meth:`silent`."""
        return {"identities": getattr(source, "identities", None), "on_silent": self.silent}

    def fence(self, workers: Sequence[int]) -> Mapping[str, int]:
        """Fence ``workers``' transactional ids and read the committed positions back (each worker once)."""
        session = self._session
        with self._lock:
            fresh = sorted(set(workers) - self._fenced)
            if fresh:
                fence_ids(session.sink, worker_ids(session.sink, fresh), self._name)
                self._fenced.update(fresh)
                session.read_back()
                _log.warning("source=%s: workers %s fenced at the exactly-once sink", self._name, fresh)
            return dict(session.committed)

    def lost(
        self,
        index: int,
        owned: Sequence[str],
        tracker: PositionTracker,
        fail: Callable[[BaseException], None],
    ) -> bool:
        """Worker ``index`` is given up: fence it, and set its splits (``owned``) at their committed positions
        in the driver's ``tracker``. False (after ``fail``) when the sink could not be reached."""
        try:
            stored = self.fence([index])
        except MultiClusterSourceError as exc:
            fail(exc)
            return False
        tracker.advance({sid: stored[sid] for sid in owned if sid in stored}, reset=True)
        return True

    def silent(self, workers: Sequence[int]) -> Mapping[str, int]:
        """The coordinator's ``on_silent``: workers that did not answer a fence are fenced at the sink and
        given up by the driver's loop; the committed positions."""
        stored = self.fence(workers)
        for n in workers:
            self._give_up(n, GiveUp(f"worker {n} did not answer a fence; fenced at the exactly-once sink"))
        return stored
