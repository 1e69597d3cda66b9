"""A fence on a push run: the driver's coordinator asks the worker that reads each split for the position
(and last timestamp) its handler was handed, and the worker answers after fencing its own tracker.

No sleeps: the stand-in workers answer on threads of their own as the coordinator's messages reach them, and
the tests wait on events."""

from __future__ import annotations

import logging
import pickle
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from confluent_kafka import Message

from multicluster_source.framework._interfaces import RecordBatch
from multicluster_source.framework._records import SourceRecord
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.runtime.core._handoff import PositionTracker
from multicluster_source.runtime.core._messages import (
    AssignSplits,
    Delivered,
    Fenced,
    FenceSplits,
    StartReader,
    StopWorker,
    WatchSplits,
)
from multicluster_source.runtime.push._coordinator import LinkedCoordinator
from multicluster_source.runtime.push._host import WorkerHost

A, B, C = "c/t/0", "c/t/1", "c/t/2"
WAIT_S = 30.0  # how long a test waits for an event that must come (a hang fails, it does not pass)


def _split(sid: str) -> KafkaPartitionSplit:
    cluster, topic, partition = sid.split("/")
    return KafkaPartitionSplit(cluster, topic, int(partition), 0)


class Workers:
    """Stand-in workers behind the coordinator's ``send``: every message is kept; a ``FenceSplits`` with a
    request is answered by ``answer(reader, message)`` on the thread ``test-worker-answers``."""

    def __init__(self, answer: Callable[[int, FenceSplits], None] | None = None) -> None:
        self.sent: list[tuple[int, object]] = []
        self._asked: queue.SimpleQueue[tuple[int, FenceSplits] | None] = queue.SimpleQueue()
        self._answer = answer
        self._thread = threading.Thread(target=self._run, name="test-worker-answers", daemon=True)
        self._thread.start()

    def send(self, reader: int, message: object) -> None:
        self.sent.append((reader, message))
        if isinstance(message, FenceSplits) and message.request:
            self._asked.put((reader, message))

    def _run(self) -> None:
        while (item := self._asked.get()) is not None:
            if self._answer is not None:
                self._answer(*item)

    def close(self) -> None:
        self._asked.put(None)
        self._thread.join(WAIT_S)

    def of(self, kind: type) -> list[tuple[int, Any]]:
        return [(r, m) for r, m in self.sent if isinstance(m, kind)]


def _coordinator(
    workers: Workers, tracker: PositionTracker, parallelism: int = 3, **kwargs: Any
) -> LinkedCoordinator:
    failures: list[BaseException] = []
    coordinator = LinkedCoordinator("s", parallelism, tracker, failures.append, send=workers.send, **kwargs)
    coordinator.assign_splits({0: [_split(A)], 1: [_split(B)]})
    return coordinator


def test_a_fence_takes_the_positions_and_times_the_owning_workers_handed_out() -> None:
    holder: list[LinkedCoordinator] = []

    def answer(reader: int, message: FenceSplits) -> None:
        coordinator = holder[0]
        if reader == 0:  # A is its own; it also knows an old position of B, which it no longer reads
            coordinator.fenced_reply(0, Fenced(message.request, {A: 12, B: 3}, {A: 1011}))
        else:
            coordinator.fenced_reply(2, Fenced(message.request, {A: 99, B: 99}, {}))  # not asked: ignored
            coordinator.fenced_reply(1, Fenced(message.request, {B: 9}, {}))

    workers = Workers(answer)
    tracker = PositionTracker({A: 5, B: 7, C: 4})
    tracker.watch([A, B])
    tracker.advance({B: 7}, {B: 900})
    coordinator = _coordinator(workers, tracker, reply_timeout=WAIT_S)
    holder.append(coordinator)
    try:
        positions = coordinator.fence_positions([A, B, C])
    finally:
        workers.close()
    # the owners' positions; B's timestamp, which its worker does not know, the driver's; C has no owner
    assert positions == {A: (12, 1011), B: (9, 900), C: (4, None)}
    fences = workers.of(FenceSplits)
    assert sorted(r for r, _m in fences) == [0, 1, 2] and {m.split_ids for _r, m in fences} == {(A, B, C)}
    requests = {r: m.request for r, m in fences}
    assert requests[0] == requests[1] != 0 and requests[2] == 0, "only the owners are asked"
    # the driver's tracker holds the exact positions, and refuses the reports still on their way
    assert tracker.get([A, B, C]) == {A: 12, B: 9, C: 4} and tracker.watched_times() == {A: 1011, B: 900}
    assert tracker.advance({A: 10, B: 8}) == {A, B} and tracker.get([A, B]) == {A: 12, B: 9}
    assert tracker.take_changes()[A] == 12


def test_splits_fenced_already_keep_their_settled_positions_and_ask_no_one() -> None:
    asked = threading.Event()

    def answer(reader: int, message: FenceSplits) -> None:
        asked.set()
        holder[0].fenced_reply(reader, Fenced(message.request, {A: 20}, {}))

    holder: list[LinkedCoordinator] = []
    workers = Workers(answer)
    tracker = PositionTracker({A: 5})
    coordinator = _coordinator(workers, tracker, reply_timeout=WAIT_S)
    holder.append(coordinator)
    try:
        assert coordinator.fence_positions([A]) == {A: (20, None)}  # a replica handover's fence
        assert asked.is_set()
        before = len(workers.sent)
        assert coordinator.fence_positions([A]) == {A: (20, None)}  # the same split retired after it
        assert len(workers.sent) == before, "the workers were told already"
    finally:
        workers.close()


def test_a_fence_does_not_wait_for_a_worker_that_is_gone() -> None:
    workers = Workers(lambda reader, message: holder[0].worker_gone(reader))  # it stops instead of answering
    holder: list[LinkedCoordinator] = []
    tracker = PositionTracker({A: 5, C: 7})
    coordinator = _coordinator(workers, tracker, reply_timeout=WAIT_S)
    coordinator.assign_splits({0: [_split(C)]})
    holder.append(coordinator)
    try:
        assert coordinator.fence_positions([A]) == {A: (5, None)}  # reader 0 went while the fence waited
        assert coordinator.fence_positions([C]) == {C: (7, None)}  # ... and is not asked again
    finally:
        workers.close()
    fences_of_c = [(r, m.request) for r, m in workers.of(FenceSplits) if m.split_ids == (C,)]
    assert fences_of_c == [(0, 0), (1, 0), (2, 0)], "told, not asked"


def test_a_silent_owner_leaves_the_drivers_position_after_the_timeout_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    workers = Workers()  # nobody answers
    tracker = PositionTracker({A: 5})
    coordinator = _coordinator(workers, tracker, reply_timeout=0.01)
    try:
        with caplog.at_level(logging.WARNING, logger="multicluster_source.push"):
            assert coordinator.fence_positions([A]) == {A: (5, None)}
        [(_r, fence)] = [(r, m) for r, m in workers.of(FenceSplits) if m.request]
        coordinator.fenced_reply(0, Fenced(fence.request, {A: 30}, {}))  # too late: changes nothing
    finally:
        workers.close()
    assert tracker.get([A]) == {A: 5}
    assert "workers [0] did not report their positions of ['c/t/0']" in caplog.text


def test_watched_splits_go_to_every_worker_when_they_change() -> None:
    workers = Workers()
    coordinator = _coordinator(workers, PositionTracker(), parallelism=2)
    try:
        coordinator.watch_positions([A, B])
        coordinator.watch_positions([A, B])
        coordinator.watch_positions([])
    finally:
        workers.close()
    assert [(r, m.split_ids) for r, m in workers.of(WatchSplits)] == [
        (0, (A, B)),
        (1, (A, B)),
        (0, ()),
        (1, ()),
    ]


# ------------------------------------------------------------------------------------------- the worker


class _QuietReader:
    """A reader that fetches nothing itself: the test emits the batches, as fetch threads would."""

    def start(self) -> None:
        pass

    def add_splits(self, splits: Sequence[KafkaPartitionSplit]) -> None:
        pass

    def handle_source_event(self, event: Any) -> None:
        pass

    def notify_no_more_splits(self) -> None:
        pass

    def poll_events(self) -> None:
        pass

    def is_finished(self) -> bool:
        return False

    def close(self) -> None:
        pass


def _batch(sid: str, first: int, end: int) -> RecordBatch:
    cluster, topic, partition = sid.split("/")
    messages = [
        Message(topic=topic, partition=int(partition), offset=o, value=b"v", timestamp=(1, 1000 + o))
        for o in range(first, end)
    ]
    return RecordBatch(cluster, messages, {sid: end})


def test_a_worker_answers_a_fence_with_what_its_handler_was_handed_and_drops_the_rest() -> None:
    sent: list[object] = []
    fenced, started = threading.Event(), threading.Event()
    in_handler, release = threading.Event(), threading.Event()
    handled: list[list[tuple[str, int]]] = []
    got_c = threading.Event()

    def send(message: object) -> None:
        sent.append(message)
        if isinstance(message, Fenced):
            fenced.set()

    def handler(records: list[SourceRecord]) -> None:
        handled.append([(f"{r.cluster_id}/{r.topic}/{r.partition}", r.offset) for r in records])
        if len(handled) == 1:
            in_handler.set()
            assert release.wait(WAIT_S)
        if any(r.partition == 2 for r in records):
            got_c.set()

    def make_reader(ctx: Any, on_read: Any) -> _QuietReader:
        started.set()
        return _QuietReader()

    host = WorkerHost(
        index=0,
        source_name="s",
        handler=handler,
        make_reader=make_reader,
        send=send,
        buffer_max_batches=4,
        track_topics=False,
    )
    thread = threading.Thread(target=host.run, name="test-host")
    thread.start()
    try:
        host.deliver(WatchSplits((A,)))
        host.deliver(StartReader())  # after the watch: the main loop took it first
        host.deliver(AssignSplits((_split(A), _split(C))))
        assert started.wait(WAIT_S)
        assert host.emit(_batch(A, 0, 10), lambda: False)
        assert in_handler.wait(WAIT_S)  # the handler is in A's first batch: it was handed it
        assert host.emit(_batch(A, 10, 20), lambda: False)  # waits in the hand-off
        host.deliver(FenceSplits((A,), request=7))
        assert fenced.wait(WAIT_S)
        release.set()
        assert host.emit(_batch(C, 0, 5), lambda: False)  # after A's second batch in the hand-off
        assert got_c.wait(WAIT_S)
    finally:
        release.set()
        host.deliver(StopWorker())
        thread.join(WAIT_S)
    [answer] = [m for m in sent if isinstance(m, Fenced)]
    assert answer == Fenced(7, {A: 10}, {A: 1009})
    assert [batch[-1] for batch in handled] == [(A, 9), (C, 4)], "A's second batch never reached the handler"
    delivered = [m for m in sent if isinstance(m, Delivered)]
    assert max(m.positions.get(A, 0) for m in delivered) == 10
    assert [m.last_times for m in delivered if A in m.positions] == [{A: 1009}], "watched: with its time"
    assert all(m.last_times is None for m in delivered if A not in m.positions), "C is not watched"


def test_the_exchange_survives_pickling() -> None:
    for message in (FenceSplits((A, B), request=3), WatchSplits((A,)), Fenced(3, {A: 12}, {A: 1011})):
        assert pickle.loads(pickle.dumps(message)) == message
    delivered = Delivered({A: 12}, 2, None, {A: 1011})
    assert pickle.loads(pickle.dumps(delivered)) == delivered


def test_the_driver_tracker_settles_only_splits_still_fenced() -> None:
    tracker = PositionTracker({A: 5, B: 7})
    tracker.fence([A])
    tracker.settle({A: (12, 1011), B: (30, 2000)})  # B was unfenced meanwhile: its own reports count
    assert tracker.get([A, B]) == {A: 12, B: 7} and tracker.times_of([A, B, C]) == {A: 1011}
