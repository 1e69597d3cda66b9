"""AsyncSourceStream without brokers: bad arguments fail at once, use before opening is a clear error; a
periodic checkpoint does not hold ``poll`` while it is written, and checkpoints stay one at a time when the
poll that took one is cancelled."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from multicluster_source import (
    AsyncSourceStream,
    ClusterMetadata,
    ConfigurationError,
    KafkaStream,
    MultiClusterKafkaSource,
    StaticMetadataService,
)
from multicluster_source.testing import InMemoryMetadataService


def _source() -> MultiClusterKafkaSource:
    md = ClusterMetadata("east", "127.0.0.1:1", frozenset({"orders"}))
    service = StaticMetadataService([KafkaStream("orders", {"east": md})])
    return (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(service)
        .set_stream_ids(["orders"])
        .build()
    )


def test_bad_open_async_arguments_raise_at_once() -> None:
    source = _source()
    with pytest.raises(ConfigurationError, match="parallelism"):
        source.open_async(parallelism=0)
    with pytest.raises(ConfigurationError, match=r"checkpoint_interval.*needs checkpoint_dir"):
        source.open_async(checkpoint_interval=5.0)


def test_an_unopened_stream_says_how_to_open_it() -> None:
    stream = _source().open_async()
    assert isinstance(stream, AsyncSourceStream)
    with pytest.raises(RuntimeError, match=r"async with source\.open_async"):
        asyncio.run(stream.poll(timeout=0))
    assert stream.watermark is None
    asyncio.run(stream.close())  # closing what never opened is a no-op


# ------------------------------------------------------------------------------------------ checkpoints


def _no_clusters(tmp: Path, interval: float) -> AsyncSourceStream:
    """A stream whose metadata names no cluster (no client, no broker), checkpointing into ``tmp``."""
    source = (
        MultiClusterKafkaSource.builder()
        .set_name("aio")
        .set_kafka_metadata_service(InMemoryMetadataService([]))
        .set_stream_ids(["orders"])
        .set_property("partition.discovery.interval.ms", "-1")
        .build()
    )
    return source.open_async(checkpoint_dir=str(tmp), checkpoint_interval=interval)


def _written(tmp: Path) -> list[int]:
    return sorted(int(p.name[4:16]) for p in tmp.glob("chk-*.json"))


def test_a_periodic_checkpoint_being_written_does_not_hold_poll(tmp_path: Path) -> None:
    writing, release = threading.Event(), threading.Event()

    async def main() -> None:
        async with _no_clusters(tmp_path, 1e-6) as s:  # every poll is due for a periodic checkpoint
            stream = s.stream
            write = stream._write

            def held(checkpoint_id: int, state: dict[str, Any], positions: dict[str, int]) -> Any:
                writing.set()
                release.wait(30)
                return write(checkpoint_id, state, positions)

            stream._write = held
            try:
                # The poll captures checkpoint 1 and returns; its write is held on the checkpoint thread.
                assert await asyncio.wait_for(s.poll(timeout=0), 10) == []
                assert await asyncio.to_thread(writing.wait, 10)
                # While it is under way, polls take no other one, and are not held either.
                assert await asyncio.wait_for(s.poll(timeout=0), 10) == []
                assert stream._checkpoint_id == 1 and _written(tmp_path) == []
                # checkpoint() keeps its contract: it returns once its checkpoint is durable.
                explicit = asyncio.ensure_future(s.checkpoint())
                while stream._checkpoint_id < 2:  # captured; written after 1, which is held
                    await asyncio.sleep(0.005)
                await asyncio.sleep(0.05)
                assert not explicit.done()
            finally:
                release.set()
            assert await explicit == 2 and _written(tmp_path) == [1, 2]

    asyncio.run(main())


def test_a_cancelled_poll_s_checkpoint_is_captured_before_records_are_taken_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, gate = threading.Event(), threading.Event()

    async def main() -> None:
        async with _no_clusters(tmp_path, 1e-6) as s:
            stream = s.stream
            take = stream._checkpointer.take

            def held(checkpoint_id: int, write: Any) -> Any:  # a capture that waits (a busy coordinator)
                entered.set()
                gate.wait(30)
                return take(checkpoint_id, write)

            monkeypatch.setattr(stream._checkpointer, "take", held)
            try:
                polling = asyncio.ensure_future(s.poll(timeout=5))
                assert await asyncio.to_thread(entered.wait, 10)  # the periodic checkpoint's capture began
                s._interval = 3600.0  # no other periodic one from here on
                polling.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await polling
                # The capture goes on: the next poll takes nothing before it ended, and an explicit
                # checkpoint begins its own capture only then.
                again = asyncio.ensure_future(s.poll(timeout=0))
                explicit = asyncio.ensure_future(s.checkpoint())
                await asyncio.sleep(0.05)
                assert stream._checkpoint_id == 1 and not again.done() and not explicit.done()
            finally:
                gate.set()
            assert await again == []
            assert await explicit == 2 and _written(tmp_path) == [1, 2]

    asyncio.run(main())
