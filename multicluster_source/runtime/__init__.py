"""Runtimes: what runs the enumerator and the readers, and hands records to the caller (implementation).

One folder per question, each described in its own ``__init__``:

- :mod:`~multicluster_source.runtime.eventtime`: what is the stream's watermark, and which splits run too
  far ahead of it? (``_watermarks``, ``_alignment``)
- :mod:`~multicluster_source.runtime.core`: what every runtime shares: the coordinator thread and the reader
  runners (``_local``), the hand-off and delivered positions (``_handoff``), taking records with their
  positions (``_delivery``), checkpoints (``_checkpointer``), stopping (``_enumeration``, ``_memory``), what
  a runtime needs of a source (``_factory``) and the messages a reader's inbox and the push transports
  carry (``_messages``).
- :mod:`~multicluster_source.runtime.pull`: the pull API: :class:`SourceStream` returned by
  ``source.open()`` (``_stream``), :class:`AsyncSourceStream` returned by ``source.open_async()``
  (``_async``), their health and status documents (``_status``).
- :mod:`~multicluster_source.runtime.push`: the push API, ``source.run(handler, ...)``: the entry point
  (``_push``), the driver (``_driver``), the worker side (``_host``), ``RunControl``/``RunResult``
  (``_control``), the run's checkpoints (``_run_checkpoints``), event time on the push API
  (``_push_watermarks``); and ``push/transports/``, one module per transport: ``_threads``,
  ``_processes``, ``_ray``.

Within the runtime, imports point one way: ``eventtime`` imports nothing of the runtime, ``core`` only
``eventtime``, ``pull`` and ``push`` build on both and never import each other.

May import: :mod:`multicluster_source.enumerator`, :mod:`multicluster_source.reader`,
:mod:`multicluster_source.ops`, :mod:`multicluster_source.framework`, :mod:`multicluster_source.metadata`,
:mod:`multicluster_source.exceptions`. It never imports the root modules (the source and its builder): what
it needs of a source is the :class:`~multicluster_source.runtime.core._factory.SourceFactory` protocol.
"""
