"""The push driver's coordinator: the enumerator's context whose readers sit behind links to workers.

:class:`LinkedCoordinator` is the local runtime's
:class:`~multicluster_source.runtime.core._local.Coordinator` (the mailbox thread, timers, I/O threads, the
position tracker) whose assignments, events and fences become messages to the workers
(:mod:`multicluster_source.runtime.core._messages`). Called on the coordinator thread, but for
:meth:`~LinkedCoordinator.fenced_reply` and :meth:`~LinkedCoordinator.worker_gone`, which the driver calls as
a transport hands it a worker's message.

A fence (a replica handover, a split leaving the metadata, a failover) takes the exact position of a split
from the worker that reads it, as ``poll`` takes it from its own tracker: the driver's tracker is fed by the
workers' ``Delivered`` reports, which lag behind what the handlers were handed. The coordinator sends
``FenceSplits`` with a request number to each split's owner (its last assignment) and waits, up to
``reply_timeout`` seconds, for that worker's ``Fenced``: the positions and last timestamps its own tracker
fenced under the lock its handler thread takes records under. Those replace the driver's copies (the
driver's tracker refuses the reports still on their way, the split being fenced there first). A worker that
does not answer in time (or is gone) leaves the driver's copy, logged: its handler's records past it may
come again from where the split goes.

With an exactly-once sink a worker answers a fence once the transaction holding the fenced records' results
committed, and a worker that does not answer (or is gone) is fenced at the sink instead (``on_silent``, the
driver's: its transactional id fenced, the committed positions read back), so that no later commit of it
can overlap with where its splits start next. ``identities`` (the sink's): every worker learns the Kafka
cluster ids to write with its positions (``ClusterIds``) before splits of a newly identified cluster.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from multicluster_source.framework._events import SourceEvent
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.runtime.core._local import Coordinator
from multicluster_source.runtime.core._messages import (
    AssignSplits,
    ClusterIds,
    EventToReader,
    Fenced,
    FenceSplits,
    NoMoreSplits,
    WatchSplits,
)

_log = logging.getLogger("multicluster_source.push")

FENCE_REPLY_TIMEOUT_S = 5.0
"""How long a fence waits for the owning workers' positions before it takes the driver's copies."""


class _FenceRequest:
    """One fence's wait: the workers still to answer, and the answers."""

    def __init__(self, waiting: set[int]) -> None:
        self.waiting = waiting
        self.replies: dict[int, Fenced] = {}
        self.done = threading.Event()


class LinkedCoordinator(Coordinator):
    """The push driver's coordinator: its readers are behind links, so assignments and events become
    messages to the workers, and a fence asks the owning workers for their positions."""

    def __init__(
        self,
        *args: Any,
        send: Callable[[int, object], None],
        reply_timeout: float = FENCE_REPLY_TIMEOUT_S,
        identities: Any = None,
        on_silent: Callable[[Sequence[int]], Mapping[str, int]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._send_to = send
        self._reply_timeout = reply_timeout
        self._identities = identities
        self._ids_sent: dict[int, dict[str, str]] = {}
        self._on_silent = on_silent
        self._owners: dict[str, int] = {}  # split id -> the reader it was last assigned to
        self._watching: tuple[str, ...] = ()  # what the workers were last told to watch
        self._lock = threading.Lock()  # the requests and gone workers (the transports' threads answer)
        self._requests: dict[int, _FenceRequest] = {}
        self._numbers = itertools.count(1)
        self._gone: set[int] = set()

    def assign_splits(self, assignment: Mapping[int, Sequence[KafkaPartitionSplit]]) -> None:
        """Send splits to readers."""
        self._observe(assignment, None)
        for reader, splits in assignment.items():
            for split in splits:
                self._owners[split.split_id] = reader
            if self._identities is not None:
                ids = self._identities.snapshot()
                if ids != self._ids_sent.get(reader):
                    self._ids_sent[reader] = ids
                    self._send_to(reader, ClusterIds(ids))
            self._send_to(reader, AssignSplits(tuple(splits)))

    def owned_by(self, reader: int) -> list[str]:
        """The splits last assigned to ``reader`` (any thread: a copy of the table)."""
        return [sid for sid, owner in list(self._owners.items()) if owner == reader]

    def send_event_to_reader(self, reader: int, event: SourceEvent) -> None:
        """Send an event to one reader."""
        self._observe(None, event)
        self._send_to(reader, EventToReader(event))

    def signal_no_more_splits(self, reader: int) -> None:
        """Tell a reader no more splits come."""
        self._send_to(reader, NoMoreSplits())

    def forget_positions(self, split_ids: Sequence[str]) -> None:
        """Drop positions (and owners) of splits gone for good."""
        super().forget_positions(split_ids)
        for sid in split_ids:
            self._owners.pop(sid, None)

    def watch_positions(self, split_ids: Sequence[str]) -> None:
        """Keep the last handed-out record's timestamp of ``split_ids``, here and at every worker (which
        report them with the positions, and with a fence)."""
        super().watch_positions(split_ids)
        ids = tuple(split_ids)
        if ids != self._watching:
            self._watching = ids
            for reader in range(self._parallelism):
                self._send_to(reader, WatchSplits(ids))

    def fence_positions(self, split_ids: Sequence[str]) -> dict[str, tuple[int, int | None]]:
        """Fence ``split_ids`` here (positions reported from now on are refused) and at every worker (which
        hands out none of their records from then on, none fetched before either); their positions then: for
        splits not fenced yet, those the owning worker had handed to its handler when it fenced them (see the
        module; waits up to ``reply_timeout`` seconds for them)."""
        fresh = [s for s in split_ids if s not in self._tracker.fenced]
        positions = super().fence_positions(split_ids)
        if not fresh:
            return positions  # fenced already: every worker was told, and the positions were settled then
        owned: dict[int, list[str]] = {}
        with self._lock:
            for sid in fresh:
                owner = self._owners.get(sid)
                if owner is not None and owner not in self._gone:
                    owned.setdefault(owner, []).append(sid)
            number = next(self._numbers)
            request = _FenceRequest(set(owned))
            if owned:
                self._requests[number] = request
        ids = tuple(fresh)
        for reader in range(self._parallelism):
            self._send_to(reader, FenceSplits(ids, number if reader in owned else 0))
        if not owned:
            return positions
        answered = request.done.wait(self._reply_timeout)
        with self._lock:
            self._requests.pop(number, None)
            replies = dict(request.replies)
        exact: dict[str, tuple[int, int | None]] = {}
        for reader, reply in replies.items():
            for sid in owned[reader]:
                if sid in reply.positions:
                    ts = reply.last_times.get(sid)
                    exact[sid] = (
                        reply.positions[sid],
                        ts if ts is not None else positions.get(sid, (0, None))[1],
                    )
        silent = sorted(set(owned) - set(replies))
        if silent and self._on_silent is not None:  # fenced at the sink: the committed positions are exact
            stored = self._on_silent(silent)
            for reader in silent:
                for sid in owned[reader]:
                    if sid in stored:
                        exact[sid] = (stored[sid], positions.get(sid, (0, None))[1])
            _log.warning(
                "source=%s: workers %s did not answer the fence of %s: fenced at the sink, their splits move "
                "at their committed positions",
                self.source_name,
                silent,
                sorted(sid for r in silent for sid in owned[r]),
            )
            answered = True
        self._tracker.settle(exact)
        positions.update(exact)
        if not answered:
            silent = sorted(set(owned) - set(replies))
            _log.warning(
                "source=%s: workers %s did not report their positions of %s within %.1f s of the fence: the "
                "driver's are taken, which may lag behind what their handlers were handed (those records may "
                "come again)",
                self.source_name,
                silent,
                sorted(sid for r in silent for sid in owned[r]),
                self._reply_timeout,
            )
        return positions

    def fenced_reply(self, reader: int, reply: Fenced) -> None:
        """A worker's answer to a fence (any thread: the driver calls it as the transport hands it over)."""
        with self._lock:
            request = self._requests.get(reply.request)
            if request is None or reader not in request.waiting:
                return  # late (the fence took the driver's copies) or not asked for
            request.replies[reader] = reply
            request.waiting.discard(reader)
            if not request.waiting:
                request.done.set()

    def worker_gone(self, reader: int) -> None:
        """A worker stopped, was lost or given up (any thread): no fence waits for it from now on."""
        with self._lock:
            self._gone.add(reader)
            for request in self._requests.values():
                request.waiting.discard(reader)
                if not request.waiting:
                    request.done.set()
