"""The running hybrid source for asyncio code: :class:`AsyncHybridStream` (``hybrid.open_async()``).

It wraps a :class:`HybridStream`. Taking records is non-blocking (the stage's ``poll`` with ``timeout=0``,
on the loop's thread, never switching there); between tries it sleeps on the loop (5 ms, growing to 50 ms
while nothing comes). Blocking work runs in the loop's default executor: opening, the switch to the next
stage (which opens its clients), capturing checkpoints, writing them, and closing. A ``poll`` cancelled
while it sleeps has taken nothing; ``async for`` takes one record per step, so a checkpoint covers exactly
the records handed out.

Checkpoints, as on :class:`AsyncSourceStream`: a ``poll`` due for a periodic one (``checkpoint_interval``)
only captures it (:meth:`HybridStream.capture_checkpoint` in the executor: exact, what was returned before
it) and goes on; it is written in the background (a Kafka stage's source checkpoint on that source's
checkpoint thread, then the hybrid state in the executor) and the stage is told on the loop's thread once it
is durable. None is taken while the last one is being written; one that failed is logged and raised by the
next ``poll`` due for a checkpoint. ``checkpoint()`` waits for the one under way, then captures its own and
returns once it is durable. A switch and ``close()`` wait for the checkpoint under way first. One step in
the executor touches the stream at a time (a capture, a switch): a ``poll`` waits for it before it takes
records, also one whose caller was cancelled (what such a capture raised, the next ``poll`` raises).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Generator
from types import TracebackType
from typing import Any, TypeVar

from multicluster_source.framework._records import MessageBatch, SourceRecord
from multicluster_source.hybrid._periodic import Captured, stage_busy
from multicluster_source.hybrid._stream import (
    HybridStream,
    fetch_in_threads,
    ready_batches,
    ready_columns,
    ready_records,
    stage_reader,
)

__all__ = ["AsyncHybridStream"]

_log = logging.getLogger("multicluster_source.hybrid")
T = TypeVar("T")
_FIRST_SLEEP_S = 0.005
_MAX_SLEEP_S = 0.05


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Mark a future's outcome as seen (a failed background checkpoint is logged and kept)."""
    if not future.cancelled():
        future.exception()


class AsyncHybridStream:
    """A running hybrid source for asyncio code::

    async with hybrid.open_async(parallelism=2, checkpoint_dir="ckpt/") as stream:
        async for record in stream:
            await handle(record)
    """

    def __init__(self, opener: Callable[[], HybridStream], checkpoint_interval: float | None = None) -> None:
        self._opener = opener
        self._interval = checkpoint_interval
        self._stream: HybridStream | None = None
        self._closed = False
        self._last_checkpoint = time.monotonic()
        self._busy: asyncio.Future[None] | None = (
            None  # a checkpoint (capture to write) or a switch is under way
        )
        self._step: asyncio.Future[Any] | None = None  # the capture or switch running in the executor
        self._step_error: BaseException | None = None  # of a capture whose caller was cancelled
        self._background_error: BaseException | None = None  # of the last periodic checkpoint's write

    async def open(self) -> AsyncHybridStream:
        """Open the hybrid stream (in the executor)."""
        if self._stream is None:
            self._stream = await asyncio.to_thread(self._opener)
            fetch_in_threads(self._stream)
            self._last_checkpoint = time.monotonic()
        return self

    def __await__(self) -> Generator[Any, None, AsyncHybridStream]:
        return self.open().__await__()

    async def __aenter__(self) -> AsyncHybridStream:
        return await self.open()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def stream(self) -> HybridStream:
        """The synchronous stream underneath (its blocking methods must not be called from the loop)."""
        if self._stream is None:
            raise RuntimeError("the stream is not open: `async with hybrid.open_async(...)` or `await` it")
        return self._stream

    async def poll(self, timeout: float = 1.0, max_records: int = 10_000) -> list[SourceRecord]:
        """Records that are ready (at most ``max_records``), ``[]`` after ``timeout`` seconds."""
        return await self._take(lambda s: ready_records(s, max_records), timeout)

    async def poll_batches(self, timeout: float = 1.0, max_records: int = 10_000) -> list[MessageBatch]:
        """Batches that are ready (at most ``max_records`` messages), ``[]`` after ``timeout`` seconds."""
        return await self._take(lambda s: ready_batches(s, max_records), timeout)

    async def poll_columns(
        self, timeout: float = 1.0, max_records: int = 100_000, *, headers: bool = False
    ) -> list[Any]:
        """Columns that are ready (at most ``max_records`` rows), ``[]`` after ``timeout`` seconds: an
        archive stage's ``ArchivedColumns`` parts or a Kafka stage's Arrow record batches (see
        :meth:`HybridStream.poll_columns`)."""
        return await self._take(lambda s: ready_columns(s, max_records, headers), timeout)

    async def _take(self, take: Callable[[HybridStream], list[T]], timeout: float) -> list[T]:
        stream = self.stream
        await self._checkpoint_if_due()
        deadline = time.monotonic() + timeout
        sleep = _FIRST_SLEEP_S
        while True:
            await self._idle()  # another task's capture or switch may have begun while this one slept
            out = take(stream)
            if out or self._closed or stream.finished:
                return out
            if stream.switch_due():
                await self._switch(stream)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return out
            await asyncio.sleep(min(sleep, remaining))
            sleep = min(sleep * 2, _MAX_SLEEP_S)

    async def _switch(self, stream: HybridStream) -> None:
        """The switch in the executor, once the checkpoint under way is written (the state files stay in
        order); polls wait for it, also when this call is cancelled."""
        await self._acquire()
        if not stream.switch_due():
            self._release()
            return

        def switch() -> None:
            stream.switch()
            fetch_in_threads(stream)

        step = self._step = asyncio.ensure_future(asyncio.to_thread(switch))
        step.add_done_callback(lambda _: self._release())
        await self._await_step(step)

    def __aiter__(self) -> AsyncHybridStream:
        return self

    async def __anext__(self) -> SourceRecord:
        """The next record; ends when the last stage is bounded and finished, or the stream was closed."""
        while not self._closed:
            got = await self.poll(0.5, 1)
            if got:
                return got[0]
            if self.stream.finished:
                break
        raise StopAsyncIteration

    @property
    def finished(self) -> bool:
        """The last stage is bounded and finished."""
        return self.stream.finished

    @property
    def watermark(self) -> int | None:
        """The watermark in ms (never going back, also across a switch), or None."""
        return self.stream.watermark

    def status(self) -> dict[str, Any]:
        """The hybrid stream's status (see :meth:`HybridStream.status`)."""
        return self.stream.status()

    # ----------------------------------------------------------------------------------- checkpoints

    async def checkpoint(self) -> int:
        """A checkpoint covering every record returned (after the one under way): captured in the executor,
        then written; its id once it is durable (a Kafka stage's offsets committed)."""
        stream = self.stream
        await self._acquire()
        step, task = self._begin(stream, background=False)
        try:
            return await asyncio.shield(task)  # a cancelled call must not stop the checkpoint
        except asyncio.CancelledError:
            step.add_done_callback(self._keep_step_error)
            task.add_done_callback(_retrieved)
            raise

    async def _checkpoint_if_due(self) -> None:
        """Before a poll takes records: wait for a step another call began (raise what a capture whose caller
        was cancelled raised); when a periodic checkpoint is due and none is under way, raise what the last
        one's write raised, or capture one in the executor and go on while it is written."""
        await self._idle()
        if self._interval is None or self._closed or self._busy is not None:
            return
        stream = self.stream
        if time.monotonic() - self._last_checkpoint < self._interval or stage_busy(stage_reader(stream)):
            return
        error, self._background_error = self._background_error, None
        if error is not None:
            self._last_checkpoint = time.monotonic()
            raise error
        await self._acquire()  # free: nothing is under way
        step, _task = self._begin(stream, background=True)
        await self._await_step(step)

    def _begin(
        self, stream: HybridStream, *, background: bool
    ) -> tuple[asyncio.Future[Captured], asyncio.Task[int]]:
        """Under :meth:`_acquire`: start the capture in the executor, and the task that writes it and
        releases at its end."""
        self._last_checkpoint = time.monotonic()
        step: asyncio.Future[Captured] = asyncio.ensure_future(asyncio.to_thread(stream.capture_checkpoint))
        self._step = step
        step.add_done_callback(_retrieved)
        task = asyncio.ensure_future(self._finish(step, stream.name, background))
        if background:
            task.add_done_callback(_retrieved)  # what it raised is kept for the next due poll
        return step, task

    async def _finish(self, step: asyncio.Future[Captured], name: str, background: bool) -> int:
        """Write a captured checkpoint in the executor, then tell the stage on the loop's thread (no other
        step runs: this one is under way). A failed write is logged; ``background`` (no caller awaits it):
        what it raised is kept for the next due poll."""
        try:
            checkpoint_id, write, commit = await step  # a failed capture: its caller raises it
            try:
                await asyncio.to_thread(write)
                commit()
            except Exception as exc:
                _log.error("source=%s: checkpoint %d failed: %s", name, checkpoint_id, exc)
                if background:
                    self._background_error = exc
                raise
            return checkpoint_id
        finally:
            self._release()

    async def _acquire(self) -> None:
        """Wait until no checkpoint is under way and no switch runs; then this call's one is."""
        while self._busy is not None:
            await asyncio.wait({self._busy})
        self._busy = asyncio.get_running_loop().create_future()

    def _release(self) -> None:
        busy, self._busy = self._busy, None
        if busy is not None and not busy.done():
            busy.set_result(None)

    async def _await_step(self, step: asyncio.Future[Any]) -> None:
        """Wait for ``step`` (raising what it raised); a cancelled caller leaves it running, and what it
        raises is raised by the next ``poll``."""
        try:
            await asyncio.shield(step)
        except asyncio.CancelledError:
            step.add_done_callback(self._keep_step_error)
            raise

    async def _idle(self) -> None:
        """Wait for the step in the executor another call began; raise what a step whose caller was
        cancelled raised."""
        step = self._step
        if step is not None and not step.done():
            await asyncio.wait({step})
        error, self._step_error = self._step_error, None
        if error is not None:
            raise error

    def _keep_step_error(self, step: asyncio.Future[Any]) -> None:
        """Its caller was cancelled: what the step raised is raised by the next ``poll``."""
        if not step.cancelled() and step.exception() is not None:
            self._step_error = step.exception()

    # --------------------------------------------------------------------------------------- closing

    async def close(self) -> None:
        """Close the stream (in the executor) once the checkpoint under way is written. Idempotent; runs to
        its end even when the awaiting task is cancelled."""
        if self._closed:
            return
        self._closed = True
        if self._stream is not None:
            await asyncio.shield(asyncio.ensure_future(self._close(self._stream)))

    async def _close(self, stream: HybridStream) -> None:
        await self._acquire()  # the checkpoint under way is written first (what it raised was logged)
        try:
            await asyncio.to_thread(stream.close)
        finally:
            self._release()  # a checkpoint() after close() raises StreamClosedError from its capture
