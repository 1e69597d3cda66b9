"""``hybrid.open()`` and ``hybrid.run()`` periodic checkpoints on the archive stage (files on disk, no broker):
a ``poll`` (a step of the ``for`` loop, a step of ``run()``) due for one only captures it and goes on while
the hybrid state is written on ``mcs-hybrid-checkpoint-<source>``; none is taken while one is written; the
restore sees exactly the records returned before the capture; ``checkpoint()`` returns once its checkpoint
is on disk, after the one under way; a failed background write is logged and raised by the next ``poll`` due
for a checkpoint; ``close()`` waits for the write under way.

The hybrid state's writes are held on a :class:`threading.Event`. No timed assertion: the write waits for
the event at most :data:`LIMIT` seconds (a safety net), and :attr:`HeldWrites.waiting` tells that it is still
waiting when the caller's thread went on (a ``poll`` that had waited for the write would only have returned
once the write gave up waiting)."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest

from harness.hybrid_checkpoints import (
    LIMIT,
    SPLITS,
    HeldWrites,
    archive_hybrid,
    keys,
    restored,
    state_files,
)
from multicluster_source import HybridSource, SourceRecord
from multicluster_source.exceptions import CheckpointError
from multicluster_source.hybrid import HybridStream
from multicluster_source.hybrid._state import HybridStateStore

WRITER = "mcs-hybrid-checkpoint-"


def _everything(splits: dict[str, int]) -> set[tuple[str, int]]:
    return {(s, o) for s, n in splits.items() for o in range(n)}


def _due(stream: HybridStream) -> None:
    """The next ``poll`` is due for a periodic checkpoint (the interval of these tests is an hour)."""
    stream._last_checkpoint = float("-inf")


def _poll(stream: HybridStream, max_records: int = 7) -> list[SourceRecord]:
    got = stream.poll(LIMIT, max_records)
    assert got
    return got


def _writers() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(WRITER)]


def test_a_due_poll_returns_while_the_checkpoint_is_written_and_the_restore_is_exact(
    tmp_path: Path, hybrid: HybridSource, held: HeldWrites
) -> None:
    ckpt = tmp_path / "ckpt"
    stream = hybrid.open(checkpoint_dir=str(ckpt), checkpoint_interval=3600.0)
    before = [r for _ in range(3) for r in _poll(stream)]
    held.armed = True
    _due(stream)
    after = _poll(stream)  # captured the checkpoint of `before`; its write is held
    held.wait_held()
    assert _writers() == [WRITER + hybrid.name]
    _due(stream)
    after += _poll(stream)  # due again: none is taken while the last one is written
    after += _poll(stream)
    assert state_files(ckpt) == [] and held.writes == 0 and held.waiting
    held.release.set()
    stream.close()  # waits for the write under way
    assert held.writes == 1 and len(state_files(ckpt)) == 1 and _writers() == []
    assert held.threads == [WRITER + hybrid.name]
    rest = restored(hybrid, ckpt)
    # the restore goes on right after `before`: the records returned while it was written come again
    assert keys(rest) == sorted(_everything(SPLITS) - set(keys(before)))
    assert set(keys(after)) <= set(keys(rest))


def test_the_next_poll_after_the_write_tells_the_stage_and_a_due_one_is_taken_again(
    tmp_path: Path, hybrid: HybridSource, held: HeldWrites, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = tmp_path / "ckpt"
    commits: list[tuple[str, int]] = []
    with hybrid.open(checkpoint_dir=str(ckpt), checkpoint_interval=3600.0) as stream:
        reader = stream._reader
        assert reader is not None
        monkeypatch.setattr(
            reader, "commit", lambda cid: commits.append((threading.current_thread().name, cid))
        )
        _poll(stream)
        _due(stream)
        _poll(stream)  # captured checkpoint 1, written in the background
        writing = stream._background._thread
        assert writing is not None
        writing.join(LIMIT)  # the test waits for the write; the stream does not
        assert held.writes == 1 and commits == []
        _poll(stream)  # not due: tells the stage of checkpoint 1 (on the caller's thread)
        assert commits == [(threading.current_thread().name, 1)]
        _due(stream)
        _poll(stream)  # nothing under way: checkpoint 2 is taken
        assert stream.checkpoint() == 3  # waits for checkpoint 2, then writes its own
        assert held.writes == 3 and [cid for _, cid in commits] == [1, 2, 3]
    found = HybridStateStore(ckpt).latest()
    assert found is not None and found[0].checkpoint_id == 3


def test_checkpoint_waits_for_the_one_under_way_and_returns_once_its_own_is_on_disk(
    tmp_path: Path, hybrid: HybridSource, held: HeldWrites
) -> None:
    ckpt = tmp_path / "ckpt"
    with hybrid.open(checkpoint_dir=str(ckpt), checkpoint_interval=3600.0) as stream:
        got = _poll(stream, 50)
        held.armed = True
        _due(stream)
        got += _poll(stream)  # checkpoint 1 (of the first 50) is held
        held.wait_held()
        result: list[int] = []
        explicit = threading.Thread(target=lambda: result.append(stream.checkpoint()), name="test-explicit")
        explicit.start()  # the caller's thread of the stream from now on, until it returns
        assert held.waiting and result == [] and state_files(ckpt) == []
        held.release.set()
        explicit.join(LIMIT)
        assert result == [2] and held.writes == 2
        states = state_files(ckpt)  # in order: the periodic checkpoint's file, then the explicit one's
        assert [_checkpoint_id(p) for p in states] == [1, 2]
    assert keys(restored(hybrid, ckpt)) == sorted(_everything(SPLITS) - set(keys(got)))


def _checkpoint_id(path: Path) -> int:
    return int(json.loads(path.read_text())["checkpoint_id"])


def test_a_failed_background_write_is_logged_and_raised_by_the_next_due_poll(
    tmp_path: Path, hybrid: HybridSource, held: HeldWrites, caplog: pytest.LogCaptureFixture
) -> None:
    ckpt = tmp_path / "ckpt"
    with hybrid.open(checkpoint_dir=str(ckpt), checkpoint_interval=3600.0) as stream:
        _poll(stream)
        held.fail_once = True
        _due(stream)
        with caplog.at_level(logging.ERROR, logger="multicluster_source.hybrid"):
            _poll(stream)  # the capture went well; the write fails in the background
            assert stream.checkpoint() == 2  # waits for the failed one, then writes its own
        assert f"source={hybrid.name}: checkpoint 1 failed: " in caplog.text and "disk full" in caplog.text
        _poll(stream)  # not due: nothing raised
        _due(stream)
        with pytest.raises(CheckpointError, match="disk full"):
            stream.poll(LIMIT, 7)
        _due(stream)
        _poll(stream)  # raised once; this one is taken and written
    assert held.writes == 2


def test_a_checkpoint_in_the_for_loop_is_captured_mid_batch_and_restores_exactly(
    tmp_path: Path, hybrid: HybridSource, held: HeldWrites
) -> None:
    ckpt = tmp_path / "ckpt"
    handed: list[SourceRecord] = []
    with hybrid.open(checkpoint_dir=str(ckpt), checkpoint_interval=3600.0) as stream:
        for record in stream:
            handed.append(record)
            if len(handed) == 10:
                held.armed = True
                _due(stream)  # the loop captures it before the next record: it covers these 10
            elif len(handed) == 11:
                held.wait_held()  # the loop handed out a record while the write is held
            elif len(handed) == 16:
                break
        assert held.waiting and state_files(ckpt) == []
        held.release.set()
    assert held.writes == 1
    assert keys(restored(hybrid, ckpt)) == sorted(_everything(SPLITS) - set(keys(handed[:10])))


def test_run_goes_on_while_a_periodic_checkpoint_is_written(tmp_path: Path, held: HeldWrites) -> None:
    """``run()`` over the archive stage: the handler is called again while the checkpoint captured after its
    first call is written; none is taken meanwhile; a crash then restores right after the first call."""
    splits = {"east/orders/0": 600, "east/orders/1": 500}  # many files: a poll cannot take them all
    hybrid = archive_hybrid(tmp_path, splits)
    ckpt = tmp_path / "ckpt"
    calls: list[list[SourceRecord]] = []

    def handler(records: list[SourceRecord]) -> None:
        calls.append(records)
        if len(calls) == 1:
            held.armed = True  # the run captures a checkpoint of these records next, due at once
        elif len(calls) == 2:
            held.wait_held()  # this call came while that checkpoint is written
        else:
            assert held.waiting and held.writes == 0  # none was taken meanwhile
            held.release.set()
            raise RuntimeError("crash (test)")

    with pytest.raises(RuntimeError, match="crash"):
        hybrid.run(handler, checkpoint_dir=str(ckpt), checkpoint_interval=1e-9)
    assert held.writes == 1 and held.threads == [WRITER + hybrid.name] and _writers() == []
    assert keys(restored(hybrid, ckpt)) == sorted(_everything(splits) - set(keys(calls[0])))
