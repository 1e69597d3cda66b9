"""asyncio on real Kafka: ``source.open_async()`` reads every record on the standard loop and on uvloop, never
blocks the loop (a ticker measures it), loses no record to a cancelled ``poll``, and checkpoints exactly what
it returned (also periodic checkpoints, written while polls go on)."""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop

from harness.cluster import Cluster
from harness.scenario import builder, cluster_md, keys, stream, values, wait_for
from multicluster_source import AsyncSourceStream, MessageBatch, OffsetsInitializer, SourceRecord
from multicluster_source.framework._checkpoint import CheckpointStore

pytestmark = pytest.mark.integration

T = TypeVar("T")
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop] | None] = {
    "asyncio": None,
    "uvloop": uvloop.new_event_loop,
}


class SlowSteps(logging.Handler):
    """Collects asyncio's debug-mode reports of loop steps that ran longer than ``slow_callback_duration``."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.steps: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Executing ") and " took " in message:
            self.steps.append(message)


class LoopRun:
    """Runs a coroutine to its end on a fresh loop of one kind, in debug mode (which also refuses loop calls
    from other threads): steps of the loop (a callback, a task step) that ran longer than 50 ms by the wall
    clock are kept in ``slow_steps`` to explain a failure. They are not asserted on: on a loaded machine the
    wall clock counts the time other processes had the CPU; the ticker takes that out."""

    def __init__(self, factory: Callable[[], asyncio.AbstractEventLoop] | None) -> None:
        self.factory = factory
        self.slow = SlowSteps()

    @property
    def slow_steps(self) -> list[str]:
        return self.slow.steps

    def __call__(self, coro: Coroutine[Any, Any, T]) -> T:
        log = logging.getLogger("asyncio")
        log.addHandler(self.slow)
        try:
            with asyncio.Runner(loop_factory=self.factory, debug=True) as runner:
                loop = runner.get_loop()
                loop.slow_callback_duration = 0.05
                if self.factory is not None:
                    assert isinstance(loop, uvloop.Loop)
                return runner.run(coro)
        finally:
            log.removeHandler(self.slow)


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> LoopRun:
    """A runner for the loop kind the test is parametrized with."""
    return LoopRun(LOOPS[request.param])


def _runqueue_wait() -> float:
    """Seconds the calling thread has spent runnable but waiting for a CPU (Linux schedstat; 0 elsewhere)."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class _GcTime:
    """Seconds Python's cyclic garbage collector has run in this process since the test began (a full pass
    over the test process's heap, pytest and every imported test module included, can take tens of ms)."""

    def __init__(self) -> None:
        self.total = 0.0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.total += time.perf_counter() - self._start


class Ticker:
    """A task that wakes every 10 ms and keeps the worst lateness: how long the loop was kept from it.

    ``worst`` is the lateness less the time the loop's thread waited for a CPU meanwhile (other processes on
    a loaded machine) and less the garbage collector's passes meanwhile (the process's, on whichever thread);
    ``worst_wall`` is the lateness as measured. What remains is time the process itself kept the loop from
    running: a step that blocked, or another of its threads holding the GIL.
    """

    def __init__(self) -> None:
        self.worst = 0.0
        self.worst_wall = 0.0
        self.ticks = 0
        self._task: asyncio.Task[None] | None = None
        self._gc = _GcTime()

    async def _tick(self) -> None:
        while True:
            start, waited, collected = time.monotonic(), _runqueue_wait(), self._gc.total
            await asyncio.sleep(0.01)
            late = time.monotonic() - start - 0.01
            self.worst_wall = max(self.worst_wall, late)
            excused = (_runqueue_wait() - waited) + (self._gc.total - collected)
            self.worst = max(self.worst, late - excused)
            self.ticks += 1

    def describe(self, run: LoopRun) -> str:
        return (
            f"loop blocked for {self.worst * 1000:.0f} ms ({self.worst_wall * 1000:.0f} ms by the wall clock); "
            f"steps over 50 ms by the wall clock: {run.slow_steps}"
        )

    def __enter__(self) -> Ticker:
        gc.callbacks.append(self._gc)
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._gc)
        assert self._task is not None
        self._task.cancel()


def test_async_for_reads_every_record_without_blocking_the_loop(kafka_cluster: Cluster, run: LoopRun) -> None:
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
    assert ticker.ticks > 0 and ticker.worst < 0.05, ticker.describe(run)
    assert status["source"] == source.name and "clusters" in status


def test_an_idle_poll_waits_without_blocking_and_wakes_on_a_record(
    kafka_cluster: Cluster, run: LoopRun
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
    assert ticker.worst < 0.05, ticker.describe(run)


@pytest.mark.parametrize("path", ["poll", "poll_batches"])
def test_cancelled_polls_lose_no_record(kafka_cluster: Cluster, run: LoopRun, path: str) -> None:
    topic = kafka_cluster.create_topic("async-cancel", partitions=2)
    kafka_cluster.produce_n(topic, 2000, partitions=2)
    source = (
        builder([stream("s", cluster_md(kafka_cluster, topic))])
        .set_bounded(OffsetsInitializer.latest())
        .build()
    )
    rng = random.Random(15)

    async def main() -> tuple[list[tuple[int, int]], int]:
        got: list[tuple[int, int]] = []
        cancelled = 0
        async with source.open_async(parallelism=2) as s:
            deadline = time.monotonic() + 60
            while not s.finished and time.monotonic() < deadline:
                n = rng.choice([1, 7, 50])
                call = s.poll(timeout=0.05, max_records=n) if path == "poll" else s.poll_batches(0.05, n)
                task: asyncio.Task[Any] = asyncio.create_task(call)
                await asyncio.sleep(rng.choice([0, 0, 0.001, 0.01]))
                if task.cancel():
                    try:
                        await task
                    except asyncio.CancelledError:
                        cancelled += 1
                        continue
                if path == "poll":
                    got.extend((r.partition, r.offset) for r in task.result())
                else:
                    got.extend((m.partition(), m.offset()) for b in task.result() for m in b.messages)
        return got, cancelled

    got, cancelled = run(main())
    assert cancelled > 0  # the test did cancel calls in flight
    assert sorted(got) == sorted((p, o) for p in range(2) for o in range(1000))


def test_batches_and_checkpoints_cover_what_was_returned(
    kafka_cluster: Cluster, tmp_path: Path, run: LoopRun
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


def test_periodic_checkpoints_cover_what_was_returned_before_the_poll_that_took_them(
    kafka_cluster: Cluster, tmp_path: Path, run: LoopRun
) -> None:
    topic = kafka_cluster.create_topic("async-periodic", partitions=2)
    kafka_cluster.produce_n(topic, 400, partitions=2)
    ckpt = str(tmp_path / "ckpt")
    source = builder([stream("s", cluster_md(kafka_cluster, topic))]).build()

    async def first() -> tuple[list[SourceRecord], list[SourceRecord]]:
        got: list[SourceRecord] = []
        async with source.open_async(checkpoint_dir=ckpt, checkpoint_interval=0.01) as s:
            while len(got) < 150:  # periodic checkpoints are written meanwhile
                got.extend(await s.poll(timeout=0.5, max_records=min(20, 150 - len(got))))
                await asyncio.sleep(0.02)  # one is due before the next poll (records come faster)
            while s.stream._checkpointer.busy:  # the last one taken is written: the next poll takes one
                await asyncio.sleep(0.01)
            after: list[SourceRecord] = []
            while not after:  # taken before this poll took records: it covers the 150 exactly
                after = await s.poll(timeout=0.5, max_records=10)
        return got, after  # close() takes no checkpoint of its own

    got, after = run(first())
    latest = CheckpointStore(ckpt).latest()
    assert latest is not None and latest.checkpoint_id > 1
    returned = {(r.partition, r.offset) for r in got}
    for split, position in latest.positions.items():
        partition = int(split.rsplit("/", 1)[1])
        assert {o for p, o in returned if p == partition} == set(range(position)), split
    assert sum(latest.positions.values()) == 150

    async def second() -> list[SourceRecord]:
        rest: list[SourceRecord] = []
        async with source.open_async(checkpoint_dir=ckpt) as s:
            while len(rest) < 250:
                rest.extend(await s.poll(timeout=0.5))
            rest.extend(await s.poll(timeout=1.0))
        return rest

    rest = run(second())  # from the checkpoint: what the first run returned after it comes again, once
    assert len(rest) == 250 and not returned & {(r.partition, r.offset) for r in rest}
    assert {(r.partition, r.offset) for r in after} <= {(r.partition, r.offset) for r in rest}


def test_an_open_cancelled_midway_closes_what_it_opened(kafka_cluster: Cluster, run: LoopRun) -> None:
    topic = kafka_cluster.create_topic("async-open-cancel", partitions=1)
    source = builder([stream("s", cluster_md(kafka_cluster, topic))]).build()

    async def main() -> None:
        opening = asyncio.create_task(source.open_async().open())
        await asyncio.sleep(0)  # the open runs in the executor now
        assert opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening

    run(main())
    name = source.name
    assert wait_for(lambda: not [t.name for t in threading.enumerate() if name in t.name], 30), [
        t.name for t in threading.enumerate() if name in t.name
    ]
