"""The running hybrid source for asyncio code: :class:`AsyncHybridStream` (``hybrid.open_async()``).

It wraps a :class:`HybridStream`. Taking records is non-blocking (the stage's ``poll`` with ``timeout=0``,
on the loop's thread, never switching there); between tries it sleeps on the loop (5 ms, growing to 50 ms
while nothing comes). Blocking work runs in the loop's default executor: opening, the switch to the next
stage (which opens its clients), checkpoints and closing. A ``poll`` cancelled while it sleeps has taken
nothing; ``async for`` takes one record per step, so a checkpoint covers exactly the records handed out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from multicluster_source.framework._records import MessageBatch, SourceRecord
from multicluster_source.hybrid._held import as_batches

if TYPE_CHECKING:
    from multicluster_source.hybrid._stream import HybridStream

__all__ = ["AsyncHybridStream"]

T = TypeVar("T")
_FIRST_SLEEP_S = 0.005
_MAX_SLEEP_S = 0.05


def _ready_records(stream: HybridStream, max_records: int) -> list[SourceRecord]:
    """Records ready now, without waiting and without switching (a step of :meth:`AsyncHybridStream.poll`)."""
    reader = stream._current("poll()")
    out = stream._held.take(max_records) or stream._held.filter(reader.poll(0.0, max_records))
    if out:
        stream._delivered()
    return out


def _ready_batches(stream: HybridStream, max_records: int) -> list[MessageBatch]:
    """Batches ready now, without waiting and without switching (a step of ``poll_batches``)."""
    reader = stream._current("poll_batches()")
    held = stream._held.take(max_records)
    out = as_batches(held) if held else stream._held.filter_batches(reader.poll_batches(0.0, max_records))
    if out:
        stream._delivered()
    return out


def _fetch_in_threads(stream: HybridStream) -> None:
    """A Kafka stage's fetch threads fetch themselves: no client call on the loop's thread (as
    :class:`AsyncSourceStream` sets its stream)."""
    inner = getattr(stream._reader, "stream", None)
    handoff = getattr(inner, "_handoff", None)
    if handoff is not None:
        handoff.inline = False


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
        self._lock: asyncio.Lock | None = None

    async def open(self) -> AsyncHybridStream:
        """Open the hybrid stream (in the executor)."""
        if self._stream is None:
            self._lock = asyncio.Lock()
            self._stream = await asyncio.to_thread(self._opener)
            _fetch_in_threads(self._stream)
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
        return await self._take(lambda s: _ready_records(s, max_records), timeout)

    async def poll_batches(self, timeout: float = 1.0, max_records: int = 10_000) -> list[MessageBatch]:
        """Batches that are ready (at most ``max_records`` messages), ``[]`` after ``timeout`` seconds."""
        return await self._take(lambda s: _ready_batches(s, max_records), timeout)

    async def _take(self, take: Callable[[HybridStream], list[T]], timeout: float) -> list[T]:
        stream = self.stream
        await self._checkpoint_if_due()
        deadline = time.monotonic() + timeout
        sleep = _FIRST_SLEEP_S
        while True:
            out = take(stream)
            if out or self._closed or stream.finished:
                return out
            if stream.switch_due():
                await asyncio.to_thread(stream.switch)
                _fetch_in_threads(stream)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return out
            await asyncio.sleep(min(sleep, remaining))
            sleep = min(sleep * 2, _MAX_SLEEP_S)

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

    async def checkpoint(self) -> int:
        """A checkpoint covering every record returned (in the executor); its id once durable."""
        stream = self.stream
        assert self._lock is not None
        async with self._lock:
            checkpoint_id = await asyncio.shield(asyncio.to_thread(stream.checkpoint))
            self._last_checkpoint = time.monotonic()
            return checkpoint_id

    async def _checkpoint_if_due(self) -> None:
        if self._interval is None or self._closed or self._lock is None or self._lock.locked():
            return
        if time.monotonic() - self._last_checkpoint >= self._interval:
            await self.checkpoint()

    async def close(self) -> None:
        """Close the stream (in the executor). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._stream is not None:
            await asyncio.shield(asyncio.to_thread(self._stream.close))
