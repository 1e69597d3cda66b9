"""The push API, ``source.run(handler, parallelism, runtime=...)``: how does a run drive readers that hand
their batches to a handler in workers (threads, processes, Ray actors), and what does its caller hold?

Public here (``__all__``): :class:`RunControl` (also importable from :mod:`multicluster_source`) and
:class:`RunResult`; everything else is implementation.

- ``_push``: ``run_source``, the entry point: options checked, the transport chosen, the driver run; the
  shape of every runtime is described there.
- ``_driver``: the driver loop in the calling process: the enumerator on a coordinator thread,
  checkpoints, failover and shutdown.
- ``_coordinator``: the driver's coordinator (``LinkedCoordinator``): assignments, events and fences
  become messages to the workers; a fence takes each split's position from the worker that reads it.
- ``_host``: the worker side: one reader and the handler thread, in a thread, process or actor; the handler
  thread takes batches through the same delivery as the pull stream
  (:mod:`multicluster_source.runtime.core`'s ``_delivery``).
- ``_control``: what the caller holds of a run: ``RunControl`` steers it from other threads, ``RunResult``
  tells what it did.
- ``_run_checkpoints``: the run's checkpoints, taken on the driver's thread and written off it (through
  :mod:`multicluster_source.runtime.core`'s checkpointer).
- ``_worker_sink``: a worker's exactly-once sink: what the handler returns is produced into its
  transactions, and what it handled counts once they committed.
- ``_run_sink``: the driver's side of the sink: where the run starts, and fencing a worker given up before
  its splits move.
- ``_push_watermarks``: event time on the push API: what a worker reports of a handled batch, and the
  driver's watermark.
- ``transports/``: how workers are started and messages carried, one module per ``runtime=``.

The messages the driver and its workers exchange, and the transport protocol, are in
:mod:`multicluster_source.runtime.core` (``_messages``): the pull stream's reader runners take the same
values.

May import: :mod:`multicluster_source.runtime.core`, :mod:`multicluster_source.runtime.eventtime`, and
what the runtime may import (see :mod:`multicluster_source.runtime`); never
:mod:`multicluster_source.runtime.pull`.
"""

from __future__ import annotations

from multicluster_source.runtime.push._control import RunControl, RunResult

__all__ = ["RunControl", "RunResult"]
