"""The push API, ``MultiClusterKafkaSource.run(handler, parallelism, runtime=...)``, and its runtimes.

``handler(records)`` (or ``handler(batch)``, a :class:`MessageBatch`, with ``batches=True``) is called inside
each reader's worker with that reader's batches, one batch at a time;
a batch's positions count as delivered once the handler returned from it, and checkpoints cover exactly
what the handlers returned from.

Shape of every runtime (``threads`` in :mod:`.transports._threads`, ``processes`` in
:mod:`.transports._processes`, ``ray`` in :mod:`.transports._ray`):

* the **driver** (:class:`~._driver.Driver`, in the calling process) runs the enumerator on a coordinator
  mailbox thread (:class:`~multicluster_source.runtime.core._local.Coordinator`), tracks delivered positions,
  takes checkpoints into a :class:`~multicluster_source.framework._storage.CheckpointStorage` (captured on its
  thread, written and committed on the checkpoint thread: :mod:`._run_checkpoints`), records topic tracking,
  and detects lost workers (link lost: thread ended, process sentinel, Ray actor died; or no heartbeat);
* each **worker** (:class:`~._host.WorkerHost`: a thread, a process or a Ray actor) runs one reader (built
  with ``source.create_reader``) and a handler thread ``mcs-handler-<source>-<i>`` that takes the reader's
  batches from a bounded buffer and calls the handler;
* they talk only through the frozen dataclasses of :mod:`multicluster_source.runtime.core._messages` (splits
  and events are the framework's own frozen values), carried by a *transport*: queues for threads, one pipe
  per worker process, actor calls for Ray.

With an exactly-once sink (``sink=``, :mod:`._worker_sink`), each worker commits its handler's results and
its splits' positions in transactions of its own transactional id; the driver fences every slot's id and reads
the positions before the first split is assigned, and fences a worker's id again before its splits move.

A worker that dies is handled as a reader failure: the enumerator moves its splits to live readers, resuming
each at the position the handlers returned from (at-least-once); the run goes on with one reader less, and
fails when every reader is lost. A reader reports a split finished only after the handler returned from the
split's last batch, so a worker dying with batches still buffered never loses them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from multicluster_source.exceptions import ConfigurationError
from multicluster_source.framework._storage import CheckpointStorage, DirectoryCheckpointStorage
from multicluster_source.runtime.core._factory import SourceFactory, validate_reader_racks
from multicluster_source.runtime.core._messages import RUNTIMES, Handler, Transport
from multicluster_source.runtime.push._control import RunControl, RunProgress, RunResult
from multicluster_source.runtime.push._driver import Driver
from multicluster_source.runtime.push._worker_sink import RunSink
from multicluster_source.runtime.push.transports._threads import ThreadTransport
from multicluster_source.sink._sink import ExactlyOnceKafkaSink
from multicluster_source.sink._transactions import TransactionalSink
from multicluster_source.sink._workers import open_run_sink

DEFAULT_SINK_INTERVAL_S = 1.0
"""Seconds between two commits of each worker of a run with an exactly-once sink and no
``checkpoint_interval``."""

_log = logging.getLogger("multicluster_source.push")


# ------------------------------------------------------------------------------------------------- run


def _make_transport(
    runtime: str,
    source: SourceFactory,
    handler: Handler,
    parallelism: int,
    racks: Mapping[int, str | None],
    options: dict[str, Any],
    batches: bool,
    sink: RunSink | None,
) -> Transport:
    if runtime == "threads":
        return ThreadTransport(source, handler, parallelism, racks, options, batches, sink)
    if runtime == "processes":
        from multicluster_source.runtime.push.transports._processes import ProcessTransport

        return ProcessTransport(source, handler, parallelism, racks, options, batches, sink)
    if runtime == "ray":
        from multicluster_source.runtime.push.transports._ray import RayTransport

        return RayTransport(source, handler, parallelism, racks, options, batches, sink)
    raise ConfigurationError(f"run(runtime=...): one of {', '.join(RUNTIMES)}, got {runtime!r}")


def run_source(
    source: SourceFactory,
    handler: Handler,
    parallelism: int = 1,
    *,
    runtime: str = "threads",
    checkpoint_dir: str | None = None,
    checkpoint_interval: float | None = None,
    registry: Any = None,
    sink: ExactlyOnceKafkaSink | None = None,
    sink_positions: Callable[[TransactionalSink], SourceFactory] | None = None,
    **options: Any,
) -> RunResult:
    """``SourceFactory.run``: see its docstring and docs/guides/scale-out.md. ``sink_positions(session)``:
    the source that starts the splits a sink holds at their committed positions (with ``sink``)."""
    if not callable(handler):
        raise ConfigurationError("run(handler, ...): the handler must be callable(records)")
    if sink is not None:
        if not isinstance(sink, ExactlyOnceKafkaSink):
            raise ConfigurationError(f"run(sink=...): an ExactlyOnceKafkaSink, got {type(sink).__name__}")
        if sink_positions is None:
            raise ConfigurationError(f"run(sink=...): source {source.name} cannot write to a sink")
        if checkpoint_interval is None:
            checkpoint_interval = DEFAULT_SINK_INTERVAL_S
    if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
        raise ConfigurationError(f"run(parallelism=...): must be an int >= 1, got {parallelism!r}")
    storage: CheckpointStorage | None = options.pop("checkpoint_storage", None)
    if storage is not None:
        if checkpoint_dir is not None:
            raise ConfigurationError("run(): give checkpoint_dir or checkpoint_storage, not both")
        if not isinstance(storage, CheckpointStorage):
            raise ConfigurationError("run(checkpoint_storage=...): needs a CheckpointStorage")
    elif checkpoint_dir is not None:
        storage = DirectoryCheckpointStorage(checkpoint_dir)
    if checkpoint_interval is not None:
        if storage is None and sink is None:
            raise ConfigurationError(
                "run(checkpoint_interval=...) needs checkpoint_dir or checkpoint_storage"
            )
        if checkpoint_interval <= 0:
            raise ConfigurationError(
                f"run(checkpoint_interval=...): must be > 0 seconds, got {checkpoint_interval!r}"
            )
    control = options.pop("control", None)
    if control is None:
        control = RunControl()
    elif not isinstance(control, RunControl):
        raise ConfigurationError("run(control=...): needs a RunControl")
    elif RunProgress(control).used:
        raise ConfigurationError("run(control=...): a RunControl serves one run; make a new one")
    stop_event = options.pop("stop_event", None)
    if stop_event is not None and not callable(getattr(stop_event, "is_set", None)):
        raise ConfigurationError("run(stop_event=...): needs an object with is_set() (threading.Event)")
    startup_timeout = float(options.pop("startup_timeout", 120.0))
    stop_timeout = float(options.pop("stop_timeout", 60.0))
    racks = validate_reader_racks(options.pop("reader_racks", None), parallelism)
    batches = options.pop("batches", False)
    if not isinstance(batches, bool):
        raise ConfigurationError(f"run(batches=...): True or False, got {batches!r}")
    # One owner per checkpoint directory: taken before the latest checkpoint is read, held to the end.
    acquire = getattr(storage, "acquire", None)
    if callable(acquire):
        acquire(source.name)
    session: TransactionalSink | None = None
    run_sink: RunSink | None = None
    try:
        if sink is not None:
            assert sink_positions is not None and checkpoint_interval is not None
            sink.check_interval(checkpoint_interval)
            session = open_run_sink(sink, source.name, parallelism, checkpoint_interval)
            source = sink_positions(session)
            run_sink = RunSink(sink, checkpoint_interval)
        transport = _make_transport(runtime, source, handler, parallelism, racks, options, batches, run_sink)
        driver = Driver(
            source,
            parallelism,
            transport,
            storage=storage,
            checkpoint_dir=checkpoint_dir,
            interval=checkpoint_interval,
            registry=registry,
            control=control,
            stop_event=stop_event,
            startup_timeout=startup_timeout,
            stop_timeout=stop_timeout,
            sink=session,
        )
        return driver.run()
    finally:
        release = getattr(storage, "release", None)
        if callable(release):
            release()
