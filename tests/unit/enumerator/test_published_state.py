"""Checkpoints take the enumerator's state without waiting for its thread when nothing changed since it was
published, and never miss a split whose records the caller could have been handed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from unit.enumerator.test_enumerator_reconcile import cluster, make

from multicluster_source import KafkaStream
from multicluster_source.enumerator._published import StatePublisher
from multicluster_source.enumerator._replica_state import ReplicaState
from multicluster_source.enumerator._split_table import SplitTable
from multicluster_source.enumerator._state import EnumeratorState
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.runtime.core._checkpointer import Checkpointer
from multicluster_source.runtime.core._handoff import PositionTracker
from multicluster_source.testing import InMemoryMetadataService


def publisher(table: SplitTable, times: Callable[[], dict[str, int]] = dict) -> StatePublisher:
    return StatePublisher(table, lambda: EnumeratorState(splits=tuple(table.values())), ReplicaState, times)


def test_the_enumerator_publishes_after_each_change_and_checkpoints_read_it_as_is() -> None:
    service = InMemoryMetadataService([KafkaStream("s", {"east": cluster("east", "orders")})])
    enumerator, _ctx, _ = make(service)
    enumerator.start()
    enumerator.add_reader(0)
    enumerator.add_reader(1)
    published = enumerator.published_state()
    assert published is not None
    assert {s.split_id for s in published.splits} == {"east/orders/0", "east/orders/1"}
    assert published == enumerator.capture_state()

    service.set_streams([KafkaStream("s", {"east": cluster("east", "orders", "audit")})])
    after = enumerator.published_state()
    assert after is not None and "east/audit/0" in {s.split_id for s in after.splits}


def test_a_change_not_yet_published_sends_the_checkpoint_to_the_coordinator() -> None:
    table = SplitTable([KafkaPartitionSplit("east", "t", 0, 0)])
    pub = publisher(table)
    assert pub.current() is None, "nothing published yet"
    pub.publish()
    assert pub.current() is not None
    table.put(KafkaPartitionSplit("east", "t", 1, 0))  # a change under way on the coordinator thread
    assert pub.current() is None
    pub.publish()
    state = pub.current()
    assert state is not None and len(state.splits) == 2
    pub.changed()  # a change besides the split table
    assert pub.current() is None


def test_the_replicas_section_carries_the_timestamps_of_the_moment_it_is_taken() -> None:
    table = SplitTable([KafkaPartitionSplit("east", "t", 0, 0)])
    times = {"east/t/0": 100}
    pub = publisher(table, lambda: dict(times))
    pub.publish()
    first = pub.current()
    assert first is not None and first.replicas == {
        "version": 1,
        "pending": [],
        "done": [],
        "auto_failed": [],
        "last_times": {"east/t/0": 100},
    }
    times["east/t/0"] = 250  # a record delivered since; the enumerator did not change
    second = pub.current()
    assert second is not None and second.replicas is not None
    assert second.replicas["last_times"] == {"east/t/0": 250}


def test_a_published_state_never_lacks_a_split_the_caller_holds_a_position_of() -> None:
    """One thread adds splits and then hands out a position of each (as a reader would, after the
    coordinator put it in the table), publishing now and then; another takes checkpoints the way
    ``Checkpointer.take`` does (positions first, then the state). Every position taken belongs to a split
    of the state taken with it, whenever a state is given."""
    table = SplitTable()
    pub = publisher(table)
    positions: dict[str, int] = {}
    lock = threading.Lock()
    done = threading.Event()
    took = threading.Event()
    missing: list[str] = []
    taken = [0]

    def coordinator() -> None:
        for i in range(3_000):
            split = KafkaPartitionSplit("east", "t", i, 0)
            table.put(split)
            with lock:
                positions[split.split_id] = 1
            if i % 7 == 0:
                took.clear()
                pub.publish()
                if i % 70 == 0:
                    took.wait(1.0)  # let the caller take this one now and then
        done.set()

    def caller() -> None:
        while not done.is_set():
            with lock:
                held = set(positions)
            state = pub.current()
            if state is None:
                continue
            taken[0] += 1
            took.set()
            ids = {s.split_id for s in state.splits}
            missing.extend(sorted(held - ids)[:3])

    threads = [threading.Thread(target=coordinator), threading.Thread(target=caller)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert missing == []
    assert taken[0] > 0, "no checkpoint was taken from a published state"


class _InlineCoordinator:
    def call_sync(self, fn: Callable[[], Any], timeout: float = 60.0) -> Any:
        return fn()


def test_take_reads_the_published_state_and_asks_the_coordinator_only_after_a_change() -> None:
    table = SplitTable([KafkaPartitionSplit("east", "t", 0, 0)])
    pub = publisher(table)
    pub.publish()

    class Enumerator:
        captures = 0

        def published_state(self) -> EnumeratorState | None:
            return pub.current()

        def capture_state(self) -> EnumeratorState:  # on the coordinator thread
            self.captures += 1
            pub.publish()
            state = pub.current()
            assert state is not None
            return state

        def notify_checkpoint_complete(self, checkpoint_id: int, positions: Any) -> Any:
            return lambda timeout: None

    enumerator = Enumerator()
    tracker = PositionTracker({"east/t/0": 3})
    written: list[dict[str, int]] = []
    checkpointer = Checkpointer("src", _InlineCoordinator(), enumerator, tracker)
    try:
        checkpointer.take(1, lambda _i, _s, positions: written.append(dict(positions))).result(10)
        assert enumerator.captures == 0
        table.put(KafkaPartitionSplit("east", "t", 1, 0))
        tracker.advance({"east/t/1": 8})
        checkpointer.take(2, lambda _i, _s, positions: written.append(dict(positions))).result(10)
        assert enumerator.captures == 1
    finally:
        checkpointer.close()
    assert written == [{"east/t/0": 3}, {"east/t/0": 3, "east/t/1": 8}]


def test_a_periodic_checkpoint_waits_while_the_enumerator_changes_but_not_for_long(monkeypatch: Any) -> None:
    from multicluster_source.runtime.core import _checkpointer

    table = SplitTable([KafkaPartitionSplit("east", "t", 0, 0)])
    pub = publisher(table)

    class Enumerator:
        def published_state(self) -> EnumeratorState | None:
            return pub.current()

    checkpointer = Checkpointer("src", _InlineCoordinator(), Enumerator(), PositionTracker())
    try:
        assert checkpointer.busy, (
            "nothing published yet: a periodic checkpoint would wait for the coordinator"
        )
        pub.publish()
        assert not checkpointer.busy
        table.put(KafkaPartitionSplit("east", "t", 1, 0))  # a change under way
        assert checkpointer.busy
        monkeypatch.setattr(_checkpointer, "DEFER_AT_MOST_S", 0.0)
        assert not checkpointer.busy, "deferred long enough: taken all the same"
    finally:
        checkpointer.close()
