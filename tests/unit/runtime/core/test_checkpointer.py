"""The checkpoint machinery without brokers: the position journal, the checkpoint thread, committed offsets.

A checkpoint taken after any sequence of changes equals one built from a full copy of the positions; it
stays exact while positions move during the write; offsets reach the clusters only after the checkpoint is
durable, and nothing is lost when the write (or the process) fails between the two.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from multicluster_source.enumerator._commit import CommitLedger, Offsets
from multicluster_source.enumerator._state import EnumeratorState, state_split_ids
from multicluster_source.exceptions import StreamClosedError
from multicluster_source.framework._checkpoint import CheckpointStore, encode_checkpoint, encode_json
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.runtime.core._checkpointer import Checkpointer, store_writer
from multicluster_source.runtime.core._handoff import PositionTracker

Written = list[tuple[int, dict[str, Any], dict[str, int]]]
SPLITS = [KafkaPartitionSplit(c, "t", p, 0) for c in ("east", "west") for p in range(20)]
IDS = [s.split_id for s in SPLITS]


class InlineCoordinator:
    """``call_sync`` on the calling thread (the enumerator below needs no thread of its own)."""

    def call_sync(self, fn: Callable[[], Any], timeout: float = 60.0) -> Any:
        return fn()


class Enumerator:
    """Holds splits; records what it was asked to commit, in order, with what was durable by then."""

    def __init__(self, splits: list[KafkaPartitionSplit], durable: Callable[[], Any] = lambda: None) -> None:
        self.splits = list(splits)
        self.finished: set[str] = set()
        self.commits: list[dict[str, int]] = []
        self.durable_at_commit: list[Any] = []
        self.captures = 0
        self._durable = durable

    def capture_state(self) -> EnumeratorState:
        self.captures += 1
        return EnumeratorState(splits=tuple(self.splits), finished=frozenset(self.finished))

    def notify_checkpoint_complete(self, checkpoint_id: int, positions: Mapping[str, int]) -> Any:
        self.commits.append(dict(positions))
        self.durable_at_commit.append(self._durable())
        return lambda timeout: None


def full_checkpoint(
    tracker: PositionTracker, enumerator: Enumerator
) -> tuple[dict[str, Any], dict[str, int]]:
    """What the previous implementation wrote: the whole state and a full copy of the kept positions."""
    state = enumerator.capture_state().to_dict()
    ids = state_split_ids(state)
    return state, {sid: pos for sid, pos in tracker.snapshot().items() if sid in ids}


def recording_write(into: Written) -> Any:
    def write(checkpoint_id: int, state: dict[str, Any], positions: dict[str, int]) -> int:
        into.append((checkpoint_id, state, dict(positions)))
        return checkpoint_id

    return write


def test_the_journal_replays_to_the_snapshot() -> None:
    rng = random.Random(7)
    tracker = PositionTracker({IDS[0]: 5, IDS[1]: 9})
    replayed: dict[str, int] = {}
    for _ in range(2000):
        roll = rng.random()
        if roll < 0.7:
            tracker.advance({rng.choice(IDS): rng.randrange(1000) for _ in range(rng.randrange(1, 4))})
        elif roll < 0.8:
            tracker.forget(rng.sample(IDS, 3))
        else:
            for sid, pos in tracker.take_changes().items():
                if pos is None:
                    replayed.pop(sid, None)
                else:
                    replayed[sid] = pos
            assert replayed == tracker.snapshot()


def test_a_checkpoint_after_any_changes_equals_a_full_one() -> None:
    rng = random.Random(11)
    tracker = PositionTracker()
    enumerator = Enumerator(SPLITS[:30])
    written: Written = []
    checkpointer = Checkpointer("s", InlineCoordinator(), enumerator, tracker)
    try:
        for checkpoint_id in range(1, 40):
            for _ in range(rng.randrange(0, 30)):
                tracker.advance({rng.choice(IDS): rng.randrange(10_000)})
            if rng.random() < 0.2:
                tracker.forget(rng.sample(IDS, 2))
            if rng.random() < 0.2:  # splits come and go, some finish: the state is serialized again
                enumerator.splits = rng.sample(SPLITS, 30)
                enumerator.finished = set(rng.sample([s.split_id for s in enumerator.splits], 3))
            expected = full_checkpoint(tracker, enumerator)
            assert checkpointer.take(checkpoint_id, recording_write(written)).result(5) == checkpoint_id
            assert written[-1][1:] == expected
    finally:
        checkpointer.close()


def test_a_checkpoint_stays_exact_while_positions_move_during_the_write() -> None:
    tracker = PositionTracker()
    enumerator = Enumerator(SPLITS)
    writing, release = threading.Event(), threading.Event()
    written: list[dict[str, int]] = []

    def slow_write(checkpoint_id: int, state: dict[str, Any], positions: dict[str, int]) -> None:
        writing.set()
        assert release.wait(5)
        written.append(dict(positions))

    checkpointer = Checkpointer("s", InlineCoordinator(), enumerator, tracker)
    try:
        tracker.advance({IDS[0]: 10, IDS[1]: 20})
        captured = tracker.snapshot()
        done = checkpointer.take(1, slow_write)
        assert writing.wait(5)
        tracker.advance({IDS[0]: 11, IDS[2]: 30})  # delivered while the checkpoint is written
        tracker.forget([IDS[1]])
        release.set()
        done.result(5)
        assert written == [captured]
        assert enumerator.commits == [captured]
        later: Written = []
        checkpointer.take(2, recording_write(later)).result(5)
        assert later[0][2] == {IDS[0]: 11, IDS[2]: 30}
        assert enumerator.commits[-1] == {IDS[0]: 11, IDS[2]: 30}  # what moved, not every position
    finally:
        checkpointer.close()


def test_offsets_are_committed_only_once_durable_and_a_failed_write_loses_nothing(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    enumerator = Enumerator(SPLITS, durable=lambda: store.latest())
    tracker = PositionTracker()
    checkpointer = Checkpointer("s", InlineCoordinator(), enumerator, tracker)
    fail = [True]

    def flaky(checkpoint_id: int, state: dict[str, Any], positions: dict[str, int]) -> Any:
        if fail[0]:
            raise OSError("disk full")
        return store_writer(store, "s")(checkpoint_id, state, positions)

    try:
        tracker.advance({IDS[0]: 3, IDS[1]: 4})
        with pytest.raises(OSError, match="disk full"):
            checkpointer.take(1, flaky).result(5)
        assert enumerator.commits == []  # nothing durable, nothing committed
        fail[0] = False
        tracker.advance({IDS[2]: 5})
        checkpointer.take(2, flaky).result(5)
        assert enumerator.commits == [{IDS[0]: 3, IDS[1]: 4, IDS[2]: 5}]  # the failed one's changes too
        durable = enumerator.durable_at_commit[0]
        assert durable is not None and durable.checkpoint_id == 2
        assert durable.positions == {IDS[0]: 3, IDS[1]: 4, IDS[2]: 5}
    finally:
        checkpointer.close()


def test_a_crash_between_write_and_commit_commits_everything_after_the_restore(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    tracker = PositionTracker()
    tracker.advance({sid: i for i, sid in enumerate(IDS)})
    state, kept = full_checkpoint(tracker, Enumerator(SPLITS))
    store.write(1, "s", state, kept)  # durable; the process dies before any commit
    restored = store.latest()
    assert restored is not None
    enumerator = Enumerator(SPLITS)
    checkpointer = Checkpointer("s", InlineCoordinator(), enumerator, PositionTracker(restored.positions))
    try:
        checkpointer.take(2, store_writer(store, "s")).result(5)
        assert enumerator.commits == [kept]  # the first checkpoint after a restore commits every position
        latest = store.latest()
        assert latest is not None and latest.positions == kept
    finally:
        checkpointer.close()


def test_an_unchanged_state_is_serialized_once() -> None:
    calls: list[int] = []

    class Counting(EnumeratorState):
        def to_dict(self) -> dict[str, Any]:
            calls.append(1)
            return super().to_dict()

    enumerator = Enumerator(SPLITS)
    enumerator.capture_state = lambda: Counting(splits=tuple(enumerator.splits))  # type: ignore[method-assign]
    checkpointer = Checkpointer("s", InlineCoordinator(), enumerator, PositionTracker())
    try:
        for checkpoint_id in (1, 2, 3):
            checkpointer.take(checkpoint_id, recording_write([])).result(5)
        assert len(calls) == 1
        enumerator.splits = SPLITS[:5]
        out: Written = []
        checkpointer.take(4, recording_write(out)).result(5)
        assert len(calls) == 2 and len(out[0][1]["splits"]) == 5
    finally:
        checkpointer.close()


def test_a_failed_background_checkpoint_is_raised_by_the_next_one() -> None:
    tracker = PositionTracker({IDS[0]: 1})
    checkpointer = Checkpointer("s", InlineCoordinator(), Enumerator(SPLITS), tracker)
    ok: Written = []

    def broken(checkpoint_id: int, state: dict[str, Any], positions: dict[str, int]) -> None:
        raise OSError("read-only file system")

    try:
        checkpointer.take_in_background(1, broken)
        checkpointer.take(2, recording_write(ok)).result(5)  # in order: the first one failed by now
        with pytest.raises(OSError, match="read-only"):
            checkpointer.take_in_background(3, recording_write([]))
        checkpointer.take_in_background(4, recording_write(ok))  # raised once only
    finally:
        checkpointer.close()
    assert [c for c, _s, _p in ok] == [2, 4]
    assert not checkpointer.busy
    assert not any(t.name == "mcs-checkpoint-s" for t in threading.enumerate())
    with pytest.raises(StreamClosedError, match="closed stream"):
        checkpointer.take(5, recording_write(ok))


class Cluster:
    """A per-cluster enumerator whose commits the test ends by hand."""

    def __init__(self, answering: bool = True) -> None:
        self.requests: list[tuple[Offsets, Future[None]]] = []
        self.commits_answered = answering

    def commit_offsets(self, offsets: Offsets) -> Future[None]:
        future: Future[None] = Future()
        self.requests.append((dict(offsets), future))
        return future


def test_the_ledger_hands_each_cluster_what_moved_and_keeps_what_has_no_enumerator() -> None:
    ledger = CommitLedger()
    east = Cluster()
    splits = {s.split_id: s for s in SPLITS}
    committed: list[tuple[str, Offsets]] = []
    record = lambda cid, offsets: committed.append((cid, offsets))  # noqa: E731
    enumerators: dict[str, Any] = {"east": east}
    wait = ledger.commit(1, {"east/t/0": 5, "east/t/1": 6, "west/t/0": 7}, splits, enumerators, record)
    assert [r for r, _f in east.requests] == [{("t", 0): 5, ("t", 1): 6}]
    east.requests[0][1].set_result(None)
    wait(1.0)
    assert committed == [("east", {("t", 0): 5, ("t", 1): 6})]
    assert ledger.owed() == {"west": {("t", 0): 7}}  # kept until west has a running enumerator again
    ledger.commit(2, {"east/t/1": 9, "gone/t/0": 1}, splits, enumerators, record)
    assert east.requests[1][0] == {("t", 1): 9}  # what moved only
    ledger.owe({"west": {("t", 0): 3, ("t", 1): 4}})  # a closed enumerator's owed offsets: the newer 7 wins
    enumerators["west"] = west = Cluster()
    ledger.commit(3, {}, splits, enumerators, record)
    assert [r for r, _f in west.requests] == [{("t", 0): 7, ("t", 1): 4}]
    assert [r for r, _f in east.requests][2:] == []  # nothing moved on east: no request at all
    assert ledger.owed() == {}


def _returns(wait: Callable[[float], None]) -> bool:
    """Whether ``wait(600)`` (a checkpoint's commit wait) returns within 30 s."""
    waiter = threading.Thread(target=wait, args=(600.0,), name="test-commit-wait")
    waiter.start()
    waiter.join(30)
    return not waiter.is_alive()


def test_a_checkpoint_does_not_wait_for_a_cluster_that_does_not_answer() -> None:
    """API section 4 (from 0.4): the wait is bounded, and a cluster that is down never holds it."""
    splits = {s.split_id: s for s in (*SPLITS, KafkaPartitionSplit("west", "t", 0, 0))}
    east, west = Cluster(), Cluster(answering=False)
    ledger = CommitLedger(limit=60.0)
    clusters: dict[str, Any] = {"east": east, "west": west}
    wait = ledger.commit(1, {"east/t/0": 5, "west/t/0": 7}, splits, clusters, lambda c, o: None)
    assert wait.skipped == ["west"]  # its offsets went to its committer all the same
    assert [r for r, _f in west.requests] == [{("t", 0): 7}]
    east.requests[0][1].set_result(None)
    assert _returns(wait), "the checkpoint waited for the cluster that does not answer"


def test_a_checkpoint_waits_for_an_answering_cluster_at_most_the_commit_wait() -> None:
    splits = {s.split_id: s for s in SPLITS}
    silent = Cluster()  # answered before, never answers this one
    clusters: dict[str, Any] = {"east": silent}
    wait = CommitLedger(limit=0.2).commit(1, {"east/t/0": 5}, splits, clusters, lambda c, o: None)
    assert _returns(wait), "the commit wait is bounded by checkpoint.commit.wait.ms"
    assert not silent.requests[0][1].done()  # still owed by the cluster's committer


def test_a_cluster_whose_client_is_gone_owes_every_offset() -> None:
    splits = {s.split_id: s for s in (KafkaPartitionSplit("east", t, p, 0) for t, p in THOUSANDS)}

    class Gone:
        commits_answered = True

        def commit_offsets(self, offsets: Offsets) -> Future[None]:
            raise RuntimeError("admin client closed")

    gone: dict[str, Any] = {"east": Gone()}
    ledger = CommitLedger()
    ledger.commit(1, {f"east/{t}/{p}": 3 for t, p in THOUSANDS}, splits, gone, lambda c, o: None)
    assert ledger.owed() == {"east": dict.fromkeys(THOUSANDS, 3)}


THOUSANDS = [(f"t{i // 100}", i % 100) for i in range(2_345)]


def test_encoding_a_slice_at_a_time_gives_the_bytes_of_one_dumps() -> None:
    rng = random.Random(3)
    positions = {f"c/t{i // 100}/{i % 100}": rng.randrange(10**9) for i in range(4_321)}
    state = EnumeratorState(splits=tuple(SPLITS) * 150, finished=frozenset(IDS)).to_dict()
    for value in (positions, state, {"a": [1, 2], "b": {}}, [], {}, [{"x": i} for i in range(5_000)]):
        assert encode_json(value) == json.dumps(value, separators=(",", ":")).encode()
    document = encode_checkpoint(9, "s", state, positions)
    assert json.loads(document)["positions"] == positions
    assert json.loads(document)["enumerator"] == state


def test_close_does_not_wait_long_for_a_cluster_that_does_not_answer(tmp_path: Path) -> None:
    silent = Cluster()  # its commit never ends
    ledger = CommitLedger()
    splits = {s.split_id: s for s in SPLITS}

    class Committing(Enumerator):
        def notify_checkpoint_complete(self, checkpoint_id: int, positions: Mapping[str, int]) -> Any:
            clusters: dict[str, Any] = {"east": silent}
            return ledger.commit(checkpoint_id, positions, splits, clusters, lambda c, o: None)

    tracker = PositionTracker({IDS[0]: 7})
    store = CheckpointStore(tmp_path)
    checkpointer = Checkpointer("s", InlineCoordinator(), Committing(SPLITS), tracker)
    checkpointer.take_in_background(1, store_writer(store, "s"))
    while not silent.requests:
        threading.Event().wait(0.01)
    checkpointer.close()  # waits CLOSE_COMMIT_WAIT_S for the commit, not COMMIT_WAIT_S
    assert not any(t.name == "mcs-checkpoint-s" for t in threading.enumerate())
    latest = store.latest()
    assert latest is not None and latest.positions == {IDS[0]: 7}  # durable all the same
