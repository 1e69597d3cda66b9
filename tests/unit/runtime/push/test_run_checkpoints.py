"""The push run's checkpoints without brokers (threads runtime over the fake source of ``test_push``).

A periodic checkpoint costs the driver's thread a capture only: while one is being written the driver keeps
handling the workers' messages (positions, events, heartbeats). Every checkpoint holds exactly the positions
the handlers had returned from when it was taken, also while positions move during its write; the last one is
durable and committed when ``run()`` returns, so a restore resumes right after the last record handled.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest
from unit.runtime.push.test_push import ENDS, Collect, FakeSource, _all_values, _run, wait_for

from multicluster_source import CheckpointError, RunControl, SourceRecord
from multicluster_source.framework import ObjectStoreCheckpointStorage
from multicluster_source.framework._storage import InMemoryObjectStore


class GatedStorage(ObjectStoreCheckpointStorage):
    """An object store checkpoint storage whose writes wait: ``hold(write_number)`` says how long (a
    callable run before the write; the writes are numbered from 1). Keeps the positions of every checkpoint
    written; ``begun`` counts the writes begun."""

    def __init__(self, store: InMemoryObjectStore, hold: Any = None) -> None:
        super().__init__(store, "j/")
        self.hold = hold
        self.writes: list[tuple[int, dict[str, int]]] = []
        self.started = threading.Event()
        self.begun = 0

    def write(
        self, checkpoint_id: int, source: str, enumerator: dict[str, Any], positions: dict[str, int]
    ) -> str:
        self.started.set()
        self.begun += 1
        if self.hold is not None:
            self.hold(len(self.writes) + 1)
        key = super().write(checkpoint_id, source, enumerator, positions)
        self.writes.append((checkpoint_id, dict(positions)))
        return key


class Gate:
    """A handler (``Collect``) whose calls after the first ``free`` records wait until ``opened`` is set."""

    def __init__(self, sink: Collect, opened: threading.Event, free: int = 20) -> None:
        self.sink, self.opened, self.free = sink, opened, free

    def open(self, reader: int) -> None:
        self.sink.open(reader)

    def close(self) -> None:
        self.sink.close()

    def __call__(self, records: list[SourceRecord]) -> None:
        if len(self.sink.values) >= self.free:
            assert self.opened.wait(30), "the gate was never opened"
        self.sink(records)


def _prefix_of_handled(positions: dict[str, int], handled: list[str]) -> bool:
    """Every record below each position was handled: a restore from these positions loses nothing."""
    return all(
        {v for v in handled if v.startswith(f"{sid}@") and int(v.rsplit("@", 1)[1]) < position}
        == {f"{sid}@{o}" for o in range(position)}
        for sid, position in positions.items()
    )


def test_the_driver_handles_the_workers_while_a_periodic_checkpoint_is_written() -> None:
    release = threading.Event()
    storage = GatedStorage(InMemoryObjectStore(), hold=lambda n: n == 1 and release.wait(30))
    source, sink, control = FakeSource(ENDS), Collect(), RunControl()
    # Past the first 20 records, the handlers wait until the first (periodic) checkpoint is being written.
    handler = Gate(sink, storage.started)
    outcome: dict[str, Any] = {}

    def run() -> None:
        outcome["result"] = _run(
            source, handler, checkpoint_storage=storage, checkpoint_interval=0.001, control=control
        )

    thread = threading.Thread(target=run, name="test-run")
    thread.start()
    try:
        assert storage.started.wait(30)
        # The write is held: the driver still takes in every position the handlers report (the old driver
        # wrote on its own thread and saw none of them until the write returned).
        assert wait_for(lambda: control.records == 400, 20), control.records
        assert not release.is_set() and not storage.writes and thread.is_alive()  # run() waits for it
    finally:
        release.set()
        thread.join(60)
    result = outcome["result"]
    assert result.finished and result.records == 400 and result.checkpoints == len(storage.writes) >= 2
    assert Counter(sink.values) == Counter(_all_values(ENDS))
    # The held checkpoint holds what was handled when it was taken, not what came during its write.
    first_id, first = storage.writes[0]
    assert first_id == 1 and sum(first.values()) <= 60 and _prefix_of_handled(first, sink.values)
    # The last one, durable before run() returned, holds everything; commits went out in order.
    latest = storage.latest()
    assert latest is not None and latest.positions == ENDS
    assert result.last_checkpoint == latest.path.as_posix()
    assert source.enumerator is not None
    committed: dict[str, int] = {}
    for moved in source.enumerator.commits:
        committed |= moved
    assert committed == ENDS


def test_a_stop_while_periodic_checkpoints_are_written_checkpoints_exactly_and_the_restore_resumes() -> None:
    store = InMemoryObjectStore()
    stop = threading.Event()
    first = Collect()

    def hold(n: int) -> None:  # every write waits until the handlers went on (or the run stops)
        seen = len(first.values)
        wait_for(lambda: len(first.values) >= seen + 10 or stop.is_set(), 10)

    storage = GatedStorage(store, hold=hold)

    def handler(records: list[SourceRecord]) -> None:
        # 50 records per periodic checkpoint begun, then a stop at 150 (with a third one maybe under way)
        wait_for(lambda: stop.is_set() or len(first.values) < 50 * (1 + storage.begun), 30)
        if stop.is_set():
            time.sleep(0.01)  # slow once stopped, so that the run stops before the end of the records
        first(records)
        if len(first.values) >= 150:
            stop.set()

    result = _run(
        FakeSource(ENDS), handler, checkpoint_storage=storage, checkpoint_interval=0.001, stop_event=stop
    )
    assert not result.finished and 150 <= result.records < 400 and result.records == len(first.values)
    assert result.checkpoints == len(storage.writes) >= 3  # two periodic ones at least, and the last one
    ids = [cid for cid, _ in storage.writes]
    assert ids == sorted(ids)
    for _cid, positions in storage.writes:  # each one exact at its time: a prefix of what was handled
        assert _prefix_of_handled(positions, first.values)
    # The last one holds exactly what the handlers returned from, and nothing more.
    latest = ObjectStoreCheckpointStorage(store, "j/").latest()
    assert latest is not None and latest.checkpoint_id == ids[-1]
    assert sum(latest.positions.values()) == len(first.values)
    assert _prefix_of_handled(latest.positions, first.values)

    second = Collect()
    again = _run(FakeSource(ENDS), second, checkpoint_storage=ObjectStoreCheckpointStorage(store, "j/"))
    assert again.finished and again.restored_from is not None
    assert Counter(first.values + second.values) == Counter(_all_values(ENDS))  # no loss, no repeat


def test_a_periodic_checkpoint_that_cannot_be_written_fails_the_run() -> None:
    def hold(n: int) -> None:
        raise CheckpointError("cannot write checkpoint j/chk-000000000001.json: disk full")

    storage = GatedStorage(InMemoryObjectStore(), hold=hold)
    handler = Gate(Collect(), storage.started)  # the run cannot end before the first periodic checkpoint
    with pytest.raises(CheckpointError, match="disk full"):
        _run(FakeSource(ENDS), handler, checkpoint_storage=storage, checkpoint_interval=0.001)
    assert not storage.writes
