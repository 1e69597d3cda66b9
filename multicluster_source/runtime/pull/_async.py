"""The running source for asyncio code: :class:`AsyncSourceStream`, returned by ``source.open_async()``.

It wraps a :class:`~._stream.SourceStream`: the readers keep their own threads and fill the same hand-off;
nothing here waits on a thread from the event loop.

- **Hand-off**: a fetch thread that puts a batch into the hand-off while a coroutine waits calls
  ``loop.call_soon_threadsafe`` to set an :class:`asyncio.Event` (only then: an armed flag keeps a busy
  stream from flooding the loop with callbacks). The waiting coroutine wakes and takes what is ready with
  the stream's non-blocking ``poll(timeout=0)`` / ``poll_batches(timeout=0)``. Without any put it wakes at
  most every :data:`_IDLE_WAKE_S` to see a failure, a close or a bounded end.
- **Cancellation**: records are only taken out of the hand-off after the last ``await`` of a call, and then
  returned at once; a ``poll`` cancelled while it waits has taken nothing, so what it did not return is
  returned by the next call. ``async for`` takes one record per step for the same reason (a checkpoint
  covers exactly the records handed to the loop body; each record is made as it is taken, as in the
  synchronous ``for`` loop), and lets other tasks run every :data:`_YIELD_AFTER_S` when records are
  always ready.
- **Blocking work** (open, checkpoint, close, the enumerator's part of ``status()``) runs in the loop's
  default executor (``asyncio.to_thread``). Periodic checkpoints (``checkpoint_interval``) are taken by
  this wrapper before a poll takes records, so each covers what was returned before it: captured in the
  executor (what changed since the last one), then written and committed on the stream's checkpoint thread
  while polls go on, as the synchronous ``poll`` does (none is taken while the last one is under way).
  ``checkpoint()`` captures one the same way and then awaits it until it is durable and committed. Captures
  run one at a time; one whose caller was cancelled goes on, and the next poll waits for it before it takes
  records (what it raised is raised there).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from multicluster_source.framework._columns import column_builder
from multicluster_source.framework._records import MessageBatch, SourceRecord
from multicluster_source.runtime.pull._stream import (
    SourceStream,
    capture_checkpoint,
    checkpoint_busy,
    checkpoint_in_background,
    commit_sink,
    handoff_of,
    next_ready,
)

if TYPE_CHECKING:
    import pyarrow as pa

_log = logging.getLogger("multicluster_source")

_IDLE_WAKE_S = 0.5
"""Longest wait without a put before a waiting poll looks at failure, close and bounded end again."""
_YIELD_AFTER_S = 0.002
"""``async for`` lets other tasks run when it went this long without a suspension (records always ready)."""
_STATUS_MAX_AGE_S = 1.0

T = TypeVar("T")


class AsyncSourceStream:
    """A running source for asyncio code: ``async with``/``async for``, and coroutines for the rest.

    Made by :meth:`MultiClusterKafkaSource.open_async`, opened by ``async with`` or ``await``::

        async with source.open_async(parallelism=2, checkpoint_dir="ckpt/") as stream:
            async for record in stream:
                await handle(record)
                await stream.checkpoint()

    ``poll``, ``poll_batches``, ``poll_columns``, ``checkpoint`` and ``close`` are coroutines; none blocks
    the event loop. A ``poll`` cancelled while it waits loses no record. Use one stream from one event loop.
    """

    def __init__(
        self,
        opener: Callable[[], SourceStream],
        checkpoint_interval: float | None = None,
        *,
        sink: bool = False,
    ) -> None:
        self._opener = opener
        self._interval = checkpoint_interval
        self._sink = sink  # opened with an exactly-once sink: a periodic checkpoint commits its transaction
        self._stream: SourceStream | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._armed = False
        self._closed = False
        self._capturing: asyncio.Task[Any] | None = None  # the checkpoint being captured in the executor
        self._checkpoint_error: BaseException | None = None  # of a capture whose caller was cancelled
        self._last_checkpoint = time.monotonic()
        self._yielded_at = time.monotonic()
        self._status: dict[str, Any] = {"state": "opening"}
        self._status_at = 0.0
        self._status_task: asyncio.Future[dict[str, Any]] | None = None

    # ----------------------------------------------------------------------------------------- opening

    async def open(self) -> AsyncSourceStream:
        """Start the source (in the executor: starting clients blocks); idempotent. Returns ``self``."""
        if self._stream is not None:
            return self
        if self._closed:
            raise RuntimeError("this AsyncSourceStream was closed; call open_async() again")
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(None, self._opener)
        try:
            stream = await asyncio.shield(future)
        except asyncio.CancelledError:
            # the open goes on in its thread: close what it opens instead of leaking its threads and clients
            future.add_done_callback(_close_when_opened)
            raise
        self._loop = loop
        self._wake = asyncio.Event()
        self._last_checkpoint = time.monotonic()
        self._stream = stream
        handoff_of(stream).on_put = self._on_put
        handoff_of(stream).inline = False  # fetch threads fetch: no client call on the loop's thread
        # the first status document is made in the executor; status() shows it once it is there
        self._status = {"source": stream.name, "state": "starting"}
        self._status_task = loop.run_in_executor(None, stream.status)
        return self

    def __await__(self) -> Generator[Any, None, AsyncSourceStream]:
        return self.open().__await__()

    async def __aenter__(self) -> AsyncSourceStream:
        return await self.open()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _opened(self) -> SourceStream:
        if self._stream is None:
            raise RuntimeError("the stream is not open: `async with source.open_async(...)` or `await` it")
        return self._stream

    def _on_put(self) -> None:
        """Fetch thread: a batch was put; wake the waiting coroutine, if one waits."""
        if not self._armed:
            return
        self._armed = False
        loop, wake = self._loop, self._wake
        if loop is None or wake is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop was closed under a stream never closed
            loop.call_soon_threadsafe(wake.set)

    # ----------------------------------------------------------------------------------------- reading

    async def poll(self, timeout: float = 1.0, max_records: int = 10_000) -> list[SourceRecord]:
        """Records that are ready (at most ``max_records``), ``[]`` after ``timeout`` seconds.

        Raises the source's fatal error if it failed. Cancelling it loses no record.
        """
        return await self._take(lambda s: s.poll(timeout=0, max_records=max_records), timeout)

    async def poll_batches(self, timeout: float = 1.0, max_records: int = 10_000) -> list[MessageBatch]:
        """Batches of the client's own messages that are ready (at most ``max_records`` messages in all),
        ``[]`` after ``timeout`` seconds (see :meth:`SourceStream.poll_batches`). Cancelling it loses no
        message."""
        return await self._take(lambda s: s.poll_batches(timeout=0, max_records=max_records), timeout)

    async def poll_columns(
        self, timeout: float = 1.0, max_records: int = 100_000, *, headers: bool = False
    ) -> list[pa.RecordBatch]:
        """Arrow record batches of what is ready (at most ``max_records`` rows in all), ``[]`` after
        ``timeout`` seconds (see :meth:`SourceStream.poll_columns`). Cancelling it loses no row."""
        column_builder(headers)  # pyarrow missing: the error names the extra before anything is awaited
        return await self._take(
            lambda s: s.poll_columns(timeout=0, max_records=max_records, headers=headers), timeout
        )

    async def _take(self, take: Callable[[SourceStream], list[T]], timeout: float) -> list[T]:
        stream = self._opened()
        wake = self._wake
        assert wake is not None
        await self._checkpoint_if_due()
        deadline = time.monotonic() + timeout
        while True:
            wake.clear()
            self._armed = True
            out = take(stream)  # non-blocking; nothing is awaited from here to the return
            if out or self._closed or stream.finished:
                self._armed = False
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._armed = False
                return out
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, _IDLE_WAKE_S)):
                    await wake.wait()
            self._yielded_at = time.monotonic()

    def __aiter__(self) -> AsyncSourceStream:
        return self

    async def __anext__(self) -> SourceRecord:
        """The next record; ends when a bounded source has finished or the stream was closed."""
        stream = self._opened()
        await self._checkpoint_if_due()
        if time.monotonic() - self._yielded_at >= _YIELD_AFTER_S:
            await asyncio.sleep(0)  # records are always ready: let the loop's other tasks run
            self._yielded_at = time.monotonic()
        while True:
            record = next_ready(stream) if not self._closed else None
            if record is not None:
                return record
            if self._closed or stream.finished:
                raise StopAsyncIteration
            got = await self._take(_one_ready, _IDLE_WAKE_S)
            if got:
                return got[0]

    @property
    def finished(self) -> bool:
        """Bounded and every split reached its stopping offset, with every record returned."""
        return self._opened().finished

    @property
    def watermark(self) -> int | None:
        """The stream's watermark in ms, or None until event time is known (see API.md section 8)."""
        value = getattr(self._stream, "watermark", None)
        return value if isinstance(value, int) else None

    @property
    def stream(self) -> SourceStream:
        """The synchronous stream underneath (its blocking methods must not be called from the loop)."""
        return self._opened()

    @property
    def admin_url(self) -> str | None:
        """Base URL of the admin HTTP server, when ``open_async(admin_address=...)``."""
        return self._opened().admin_url

    def assignments(self) -> dict[int, list[str]]:
        """Reader index -> split ids it reads now."""
        return self._opened().assignments()

    def status(self) -> dict[str, Any]:
        """The stream's status document (as :meth:`SourceStream.status`), without blocking: the enumerator
        is asked in the executor, so the answer is at most about a second old (a refresh is started
        when it is older)."""
        stream = self._opened()
        if self._closed:
            return stream.status()
        task = self._status_task
        if task is not None and task.done():
            self._status_task = None
            if not task.cancelled() and task.exception() is None:
                self._status, self._status_at = task.result(), time.monotonic()
        if self._status_task is None and time.monotonic() - self._status_at > _STATUS_MAX_AGE_S:
            loop = self._loop
            assert loop is not None
            self._status_task = loop.run_in_executor(None, stream.status)
        return dict(self._status)

    async def produce(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: Any = None,
    ) -> None:
        """Produce a result into the exactly-once sink's open transaction (``open_async(sink=...)``); see
        :meth:`SourceStream.produce`. Waits for a commit under way in the executor first."""
        stream = self._opened()
        capturing = self._capturing
        if capturing is not None and not capturing.done():
            await asyncio.wait({capturing})
        stream.produce(topic, value, key, partition, headers)

    # ----------------------------------------------------------------------------------- checkpoints

    async def checkpoint(self) -> int:
        """Take a checkpoint covering every record already returned (captured in the executor); returns its
        id once it is durable and, with a group id, committed (after the checkpoints taken before it)."""
        stream = self._opened()
        checkpoint_id, done = await self._capture(lambda: capture_checkpoint(stream))
        written = asyncio.wrap_future(done)
        written.add_done_callback(_retrieved)  # also when this call is cancelled meanwhile
        await asyncio.shield(written)  # a cancelled call must not cancel the checkpoint thread's future
        return checkpoint_id

    async def _checkpoint_if_due(self) -> None:
        """Before a poll or step takes records: wait for a checkpoint being captured (one whose caller was
        cancelled), raise what such a capture raised, and take a periodic checkpoint when one is due (not
        while the last one is being written): captured in the executor, written and committed on the
        stream's checkpoint thread while this goes on."""
        if self._closed:
            return
        capturing = self._capturing
        if capturing is not None and not capturing.done():
            await asyncio.wait({capturing})
        error, self._checkpoint_error = self._checkpoint_error, None
        if error is not None:
            raise error
        if self._interval is None:
            return
        stream = self._opened()
        due = time.monotonic() - self._last_checkpoint >= self._interval
        if due and self._sink:  # the transaction commits in the executor, before records are taken
            await self._capture(lambda: commit_sink(stream))
        elif due and not checkpoint_busy(stream):
            await self._capture(lambda: checkpoint_in_background(stream))

    async def _capture(self, capture: Callable[[], T]) -> T:
        """``capture()`` in the executor, one at a time (the stream's checkpoint calls are meant for one
        thread at a time). A cancelled caller stops waiting; the capture goes on, and the next poll waits
        for it before it takes records."""
        while self._capturing is not None and not self._capturing.done():
            await asyncio.wait({self._capturing})
        self._last_checkpoint = time.monotonic()
        task = self._capturing = asyncio.ensure_future(asyncio.to_thread(capture))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(self._keep_checkpoint_error)
            raise

    def _keep_checkpoint_error(self, task: asyncio.Task[Any]) -> None:
        """Its caller was cancelled: what the capture raised is raised by the next ``poll`` or step."""
        if not task.cancelled() and task.exception() is not None:
            self._checkpoint_error = task.exception()

    # --------------------------------------------------------------------------------------- closing

    async def close(self) -> None:
        """Stop readers and the enumerator, close every client, release metrics (in the executor).
        Idempotent; runs to its end even when the awaiting task is cancelled."""
        if self._closed:
            return
        self._closed = True
        stream = self._stream
        if stream is None:
            return
        handoff_of(stream).on_put = None
        if self._wake is not None:
            self._wake.set()
        task = self._status_task
        if task is not None and not task.cancel() and not task.cancelled():
            task.exception()  # retrieved, so that a failed status read is not reported at exit
        await asyncio.shield(asyncio.to_thread(stream.close))


def _close_when_opened(future: asyncio.Future[SourceStream]) -> None:
    if future.cancelled() or future.exception() is not None:
        return
    stream = future.result()
    _log.info("source=%s: open_async was cancelled while opening; closing", stream.name)
    # a thread of its own: the loop and its executor may be shutting down (asyncio.run's end)
    threading.Thread(target=stream.close, name=f"mcs-close-{stream.name}").start()


__all__ = ["AsyncSourceStream"]


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Mark a future's outcome as seen (a failed checkpoint is logged by the checkpoint thread)."""
    if not future.cancelled():
        future.exception()


def _one_ready(stream: SourceStream) -> list[SourceRecord]:
    """The next record ready now as a list of one, or ``[]`` (``async for`` waiting for records)."""
    record = next_ready(stream)
    return [] if record is None else [record]
