"""``hybrid.open_async()`` checkpoints on the archive stage (files on disk, no broker): a due ``poll`` only
captures the checkpoint and goes on while it is written; the restore sees exactly the records returned
before the capture; ``await checkpoint()`` returns once the checkpoint is on disk; a failed background
write is raised by the next ``poll`` due for a checkpoint; ``close()`` waits for the write under way.

The hybrid state's writes are held on a :class:`threading.Event` (no timed assertion: a ``poll`` that waited
for the write would never return, and ``asyncio.wait_for`` turns that into a failure)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harness.hybrid_checkpoints import (
    LIMIT,
    SPLITS,
    HeldWrites,
    keys,
    restored,
    state_files,
)
from multicluster_source import HybridSource, SourceRecord
from multicluster_source.exceptions import CheckpointError
from multicluster_source.hybrid import AsyncHybridStream
from multicluster_source.hybrid._state import HybridStateStore


def _due(stream: AsyncHybridStream) -> None:
    """The next ``poll`` is due for a periodic checkpoint (the interval of these tests is an hour)."""
    stream._last_checkpoint = float("-inf")


async def _poll(stream: AsyncHybridStream, max_records: int = 7) -> list[SourceRecord]:
    got = await asyncio.wait_for(stream.poll(LIMIT, max_records), LIMIT)
    assert got
    return got


def test_a_due_poll_returns_while_the_checkpoint_is_written_and_the_restore_is_exact(
    tmp_path: Path, hybrid: HybridSource, held: HeldWrites
) -> None:
    ckpt = tmp_path / "ckpt"

    async def main() -> tuple[list[SourceRecord], list[SourceRecord]]:
        stream = await hybrid.open_async(checkpoint_dir=str(ckpt), checkpoint_interval=3600.0)
        before = [r for _ in range(3) for r in await _poll(stream)]
        held.armed = True
        _due(stream)
        after = await _poll(stream)  # captured the checkpoint of `before`; its write is held
        await asyncio.to_thread(held.entered.wait, LIMIT)
        _due(stream)
        after += await _poll(stream)  # due again: none is taken while the last one is written
        after += await _poll(stream)
        assert state_files(ckpt) == [] and held.writes == 0
        held.release.set()
        await stream.close()  # waits for the write under way
        assert held.writes == 1 and len(state_files(ckpt)) == 1
        return before, after

    before, after = asyncio.run(main())
    everything = [(s, o) for s, n in SPLITS.items() for o in range(n)]
    rest = restored(hybrid, ckpt)
    # the restore goes on right after `before`: the records returned while it was written come again
    assert keys(rest) == sorted(set(everything) - set(keys(before)))
    assert set(keys(after)) <= set(keys(rest))


def test_checkpoint_returns_once_the_checkpoint_is_on_disk(
    tmp_path: Path, hybrid: HybridSource, held: HeldWrites
) -> None:
    ckpt = tmp_path / "ckpt"

    async def main() -> list[SourceRecord]:
        async with hybrid.open_async(checkpoint_dir=str(ckpt), checkpoint_interval=3600.0) as stream:
            got = await _poll(stream, 50)
            held.armed = True
            explicit = asyncio.ensure_future(stream.checkpoint())
            await asyncio.to_thread(held.entered.wait, LIMIT)
            assert not explicit.done() and state_files(ckpt) == []
            more = await _poll(stream)  # polls go on while it is written; the checkpoint is of `got`
            held.release.set()
            checkpoint_id = await asyncio.wait_for(explicit, LIMIT)
            [state] = state_files(ckpt)
            found = HybridStateStore(ckpt).latest()
            assert found is not None and found[1] == state and found[0].checkpoint_id == checkpoint_id == 1
            held.armed = False
            assert await stream.checkpoint() == 2 and len(state_files(ckpt)) == 2  # of `got` and `more`
            return got + more

    returned = asyncio.run(main())
    everything = [(s, o) for s, n in SPLITS.items() for o in range(n)]
    assert keys(restored(hybrid, ckpt)) == sorted(set(everything) - set(keys(returned)))


def test_a_failed_background_write_is_raised_by_the_next_due_poll(
    tmp_path: Path, hybrid: HybridSource, held: HeldWrites
) -> None:
    ckpt = tmp_path / "ckpt"

    async def main() -> None:
        async with hybrid.open_async(checkpoint_dir=str(ckpt), checkpoint_interval=3600.0) as stream:
            await _poll(stream)
            held.fail_once = True
            _due(stream)
            await _poll(stream)  # the capture went well; the write fails in the background
            assert await stream.checkpoint() == 2  # waits for the failed one, then writes its own
            await _poll(stream)  # not due: nothing raised
            _due(stream)
            with pytest.raises(CheckpointError, match="disk full"):
                await stream.poll(LIMIT, 7)
            _due(stream)
            await _poll(stream)  # raised once; this one is taken and written
            await stream.close()
            assert held.writes == 2

    asyncio.run(main())
