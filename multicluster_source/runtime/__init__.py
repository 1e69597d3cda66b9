"""Runtimes: what runs the enumerator and the readers, and hands records to the caller (implementation).

What lives here:

- ``_local``: the coordinator thread (enumerator side) and the reader runners of the pull API.
- ``_handoff``: the bounded hand-off between fetch threads and their consumer, and the delivered-position
  tracker checkpoints are taken from; shared by every runtime.
- ``_stream``: the pull API, :class:`SourceStream` returned by ``source.open()``; ``_delivery`` takes records
  or batches out of the hand-off with the positions of what was taken; ``_status`` builds its health and
  status documents; ``_checkpointer``: checkpoints captured on the thread that owns the run, written and
  committed on the source's checkpoint thread (the stream's and the push driver's); ``_enumeration``:
  stopping the enumerator, the same for the stream and the push driver.
- ``_async``: :class:`AsyncSourceStream` returned by ``source.open_async()``: the pull API for asyncio, over a
  ``SourceStream`` whose hand-off wakes the waiting coroutine.
- ``_watermarks``: the stream's watermark: split watermarks of what was returned, combined (minimum over
  active, non-idle splits), late records counted; told of assignments and removals by the coordinator.
  ``_alignment``: watermark alignment, a coordinator timer that tells readers which splits to pause;
  ``_push_watermarks``: event time on the push API (what workers report, the driver's watermark).
- ``_factory``: the :class:`SourceFactory` protocol (what a runtime needs of a source) and the checks made
  before readers start.
- the push API, ``source.run(handler, ...)``: ``_messages`` (what driver and workers send each other),
  ``_host`` (the worker side: readers plus the handler loop), ``_control`` (``RunControl``, ``RunResult``),
  ``_driver`` (the driver loop: checkpoints, failover, shutdown), ``_run_checkpoints`` (the run's
  checkpoints, through the checkpointer) and one module per transport:
  ``_threads``, ``_processes``, ``_ray``.

May import: :mod:`multicluster_source.enumerator`, :mod:`multicluster_source.reader`,
:mod:`multicluster_source.ops`, :mod:`multicluster_source.framework`, :mod:`multicluster_source.metadata`,
:mod:`multicluster_source.exceptions`. It never imports the root modules (the source and its builder): what
it needs of a source is the :class:`~multicluster_source.runtime._factory.SourceFactory` protocol.
"""
