"""asyncio on real Kafka: ``source.open_async()`` reads every record on the standard loop and on uvloop, never
blocks the loop (a ticker measures it), loses no record to a cancelled ``poll``, and checkpoints exactly what
it returned."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop

from harness.cluster import Cluster
from harness.scenario import builder, cluster_md, keys, stream, values
from multicluster_source import AsyncSourceStream, MessageBatch, OffsetsInitializer, SourceRecord
from multicluster_source.framework._checkpoint import CheckpointStore

pytestmark = pytest.mark.integration

T = TypeVar("T")
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop] | None] = {
    "asyncio": None,
    "uvloop": uvloop.new_event_loop,
}


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, T]], T]:
    """Runs a coroutine to its end on a fresh loop of the kind the test is parametrized with."""
    factory = LOOPS[request.param]

    def go(coro: Coroutine[Any, Any, T]) -> T:
        with asyncio.Runner(loop_factory=factory) as runner:
            if factory is not None:
                assert isinstance(runner.get_loop(), uvloop.Loop)
            return runner.run(coro)

    return go


class Ticker:
    """A task that wakes every 10 ms and keeps the worst lateness: how long the loop was kept from it."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.ticks = 0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            start = time.monotonic()
            await asyncio.sleep(0.01)
            self.worst = max(self.worst, time.monotonic() - start - 0.01)
            self.ticks += 1

    def __enter__(self) -> Ticker:
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


def test_async_for_reads_every_record_without_blocking_the_loop(
    kafka_cluster: Cluster, run: Callable[[Coroutine[Any, Any, Any]], Any]
) -> None:
    topic = kafka_cluster.create_topic("async-for", partitions=3)
    sent = kafka_cluster.produce_n(topic, 3000, partitions=3)
    source = (
        builder([stream("s", cluster_md(kafka_cluster, topic))])
        .set_bounded(OffsetsInitializer.latest())
        .build()
    )

    async def main() -> tuple[list[SourceRecord], Ticker, dict[str, Any]]:
        got: list[SourceRecord] = []
        async with source.open_async(parallelism=2) as s:
            assert isinstance(s, AsyncSourceStream)
            with Ticker() as ticker:
                async for record in s:
                    got.append(record)
                    if len(got) % 500 == 0:
                        await asyncio.sleep(0.005)  # a handler that awaits now and then
                status = s.status()
                assert s.finished
        return got, ticker, status

    got, ticker, status = run(main())
    assert values(got) == {v: 1 for _p, v in sent}
    assert max(keys(got).values()) == 1
    assert ticker.ticks > 0 and ticker.worst < 0.05, f"loop blocked for {ticker.worst * 1000:.0f} ms"
    assert status["source"] == source.name and "clusters" in status


def test_an_idle_poll_waits_without_blocking_and_wakes_on_a_record(
    kafka_cluster: Cluster, run: Callable[[Coroutine[Any, Any, Any]], Any]
) -> None:
    topic = kafka_cluster.create_topic("async-idle", partitions=1)
    source = builder([stream("s", cluster_md(kafka_cluster, topic))]).build()

    async def main() -> tuple[list[SourceRecord], list[SourceRecord], float, Ticker]:
        async with source.open_async() as s:
            with Ticker() as ticker:
                empty = await s.poll(timeout=1.0)
                waiting = asyncio.create_task(s.poll(timeout=30.0))
                await asyncio.sleep(0.3)
                produced = time.monotonic()
                await asyncio.to_thread(kafka_cluster.produce, topic, [b"late"], partition=0)
                got = await waiting
                woke_after = time.monotonic() - produced
        return empty, got, woke_after, ticker

    empty, got, woke_after, ticker = run(main())
    assert empty == []
    assert [r.value for r in got] == [b"late"]
    assert woke_after < 10.0  # woken by the record, not by the 30 s timeout
    assert ticker.worst < 0.05, f"loop blocked for {ticker.worst * 1000:.0f} ms"


def test_cancelled_polls_lose_no_record(
    kafka_cluster: Cluster, run: Callable[[Coroutine[Any, Any, Any]], Any]
) -> None:
    topic = kafka_cluster.create_topic("async-cancel", partitions=2)
    kafka_cluster.produce_n(topic, 2000, partitions=2)
    source = (
        builder([stream("s", cluster_md(kafka_cluster, topic))])
        .set_bounded(OffsetsInitializer.latest())
        .build()
    )
    rng = random.Random(15)

    async def main() -> tuple[list[SourceRecord], int]:
        got: list[SourceRecord] = []
        cancelled = 0
        async with source.open_async(parallelism=2) as s:
            deadline = time.monotonic() + 60
            while not s.finished and time.monotonic() < deadline:
                task = asyncio.create_task(s.poll(timeout=0.05, max_records=rng.choice([1, 7, 50])))
                await asyncio.sleep(rng.choice([0, 0, 0.001, 0.01]))
                if task.cancel():
                    try:
                        await task
                    except asyncio.CancelledError:
                        cancelled += 1
                        continue
                got.extend(task.result())
        return got, cancelled

    got, cancelled = run(main())
    assert cancelled > 0  # the test did cancel polls in flight
    assert len(got) == 2000 and max(keys(got).values()) == 1


def test_batches_and_checkpoints_cover_what_was_returned(
    kafka_cluster: Cluster, tmp_path: Path, run: Callable[[Coroutine[Any, Any, Any]], Any]
) -> None:
    topic = kafka_cluster.create_topic("async-ckpt", partitions=2)
    kafka_cluster.produce_n(topic, 400, partitions=2)
    ckpt = str(tmp_path / "ckpt")
    source = builder([stream("s", cluster_md(kafka_cluster, topic))]).build()

    async def first() -> tuple[list[MessageBatch], int]:
        batches: list[MessageBatch] = []
        s = await source.open_async(checkpoint_dir=ckpt)
        try:
            while sum(len(b) for b in batches) < 150:
                batches.extend(
                    await s.poll_batches(timeout=0.5, max_records=150 - sum(len(b) for b in batches))
                )
            checkpoint_id = await s.checkpoint()
        finally:
            await s.close()
        return batches, checkpoint_id

    async def second() -> list[SourceRecord]:
        got: list[SourceRecord] = []
        async with source.open_async(checkpoint_dir=ckpt) as s:
            while len(got) < 250:
                got.extend(await s.poll(timeout=0.5))
            got.extend(await s.poll(timeout=1.0))
        return got

    batches, checkpoint_id = run(first())
    returned = {(m.partition(), m.offset()) for b in batches for m in b.messages}
    assert len(returned) == 150
    latest = CheckpointStore(ckpt).latest()
    assert latest is not None and latest.checkpoint_id == checkpoint_id
    rest = run(second())
    assert len(rest) == 250 and not returned & {(r.partition, r.offset) for r in rest}
