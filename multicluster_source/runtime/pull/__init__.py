"""The pull API: how does the caller take records from a running source, synchronously or with asyncio, and
what does the running source say about its health?

- ``_stream``: :class:`SourceStream`, returned by ``source.open()``: the coordinator and one reader runner
  per reader (:mod:`multicluster_source.runtime.core`), records and batches taken on the caller's thread,
  checkpoints, the admin server.
- ``_async``: :class:`AsyncSourceStream`, returned by ``source.open_async()``: the pull API for asyncio,
  over a ``SourceStream`` whose hand-off wakes the waiting coroutine.
- ``_status``: the stream's health and status documents (for the admin server and callers).
- ``_sinking``: what a stream opened with an exactly-once sink commits (the positions of every split, read
  or not), where it starts (the sink's positions win over the checkpoint's) and rewinds to.

May import: :mod:`multicluster_source.runtime.core`, :mod:`multicluster_source.runtime.eventtime`,
:mod:`multicluster_source.sink`, and what the runtime may import (see :mod:`multicluster_source.runtime`);
never :mod:`multicluster_source.runtime.push`.
"""
