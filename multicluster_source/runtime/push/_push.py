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

A worker that dies is handled as a reader failure: the enumerator moves its splits to live readers, resuming
each at the position the handlers returned from (at-least-once); the run goes on with one reader less, and
fails when every reader is lost. A reader reports a split finished only after the handler returned from the
split's last batch, so a worker dying with batches still buffered never loses them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from multicluster_source.exceptions import ConfigurationError
from multicluster_source.framework._storage import CheckpointStorage, DirectoryCheckpointStorage
from multicluster_source.runtime.core._factory import SourceFactory, validate_reader_racks
from multicluster_source.runtime.core._messages import RUNTIMES, Handler, Transport
from multicluster_source.runtime.push._control import RunControl, RunProgress, RunResult
from multicluster_source.runtime.push._driver import Driver
from multicluster_source.runtime.push.transports._threads import ThreadTransport

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
) -> Transport:
    if runtime == "threads":
        return ThreadTransport(source, handler, parallelism, racks, options, batches)
    if runtime == "processes":
        from multicluster_source.runtime.push.transports._processes import ProcessTransport

        return ProcessTransport(source, handler, parallelism, racks, options, batches)
    if runtime == "ray":
        from multicluster_source.runtime.push.transports._ray import RayTransport

        return RayTransport(source, handler, parallelism, racks, options, batches)
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
    **options: Any,
) -> RunResult:
    """``SourceFactory.run``: see its docstring and docs/guides/scale-out.md."""
    if not callable(handler):
        raise ConfigurationError("run(handler, ...): the handler must be callable(records)")
    if "sink" in options:
        raise ConfigurationError(
            "run(sink=...): the push API does not take an exactly-once sink yet; open the source with "
            "source.open(sink=..., ...) and write with stream.produce(...) (docs/guides/exactly-once.md)"
        )
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
        if storage is None:
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
    try:
        transport = _make_transport(runtime, source, handler, parallelism, racks, options, batches)
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
        )
        return driver.run()
    finally:
        release = getattr(storage, "release", None)
        if callable(release):
            release()
