"""``runtime="ray"``: readers as Ray actors, across the nodes of a Ray cluster; the enumerator in the driver.

Ray is an optional extra: ``pip install 'multicluster-kafka-source[ray]'``.

* The driver (the process calling ``run``) connects to Ray (``ray.init(address=ray_address, **ray_init)``
  unless Ray is initialized already; a Ray it started is shut down at the end) and keeps the coordinator,
  the enumerator, checkpoints and topic tracking. With no ``ray_address`` Ray joins the cluster this
  machine last started, if any; ``ray_address="local"`` always starts a Ray of the run's own. Only the
  driver touches the checkpoint storage.
* Each reader is an actor ``mcs-worker-<source>-<i>-<run>`` (``num_cpus=1`` and
  ``scheduling_strategy="SPREAD"`` unless ``actor_options``/``scheduling_strategy`` say otherwise) running a
  :class:`~multicluster_source.runtime.push._host.WorkerHost` on a thread of its own. It gets a reader-only
  copy of the source and the handler (serialized by Ray, so closures work here too).
* Racks: ``reader_racks`` when given, else with ``rack_label="zone"`` each reader's rack is the value of
  that label on the node its actor landed on (``ray start --labels='{"zone": "az-1"}'``); the enumerator
  places splits by those racks and each consumer announces it as ``client.rack`` (fetch from the closest
  follower).
* Messages: driver -> actor with ``deliver(seq, message)`` (numbered, so a threaded actor applies them in
  order); actor -> driver by long polling ``poll(timeout)`` from one thread ``mcs-ray-links-<source>``.
  An actor that dies (node lost, ``kill -9``, out of memory) fails its pending poll with ``RayActorError``:
  that is handled as a reader failure (its splits move to live readers). Actors are not restarted.
* Metrics of the readers travel with the actor's heartbeats to the driver, which applies them to the
  registry given to ``run`` beside the enumerator's (see :mod:`multicluster_source.ops._metrics_relay`).
  Logs of actors reach the driver's console through Ray's own log forwarding.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import queue
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from multicluster_source.exceptions import ConfigurationError
from multicluster_source.ops._metrics import SourceMetrics
from multicluster_source.ops._metrics_relay import MetricsRecorder
from multicluster_source.runtime.core._factory import SourceFactory, reader_only_source
from multicluster_source.runtime.core._messages import (
    Deliver,
    Handler,
    LinkLost,
    WorkerLink,
    WorkerStopped,
    relay_metrics,
)
from multicluster_source.runtime.push._host import WorkerHost, record_maker
from multicluster_source.runtime.push._push_watermarks import worker_event_times
from multicluster_source.runtime.push._worker_sink import RunSink, worker_transactions

_log = logging.getLogger("multicluster_source.push")
POLL_TIMEOUT_S = 0.5
_JOINED_A_RUNNING_RAY = (
    "run(runtime='ray'): with no ray_address, ray.init() joins the Ray cluster this machine last started "
    "(RAY_ADDRESS, or the address `ray start` left in <ray temp dir>/ray_current_cluster, which outlives a "
    "Ray that was killed), and that cluster refuses ray_init's node settings: {exc} Pass "
    "ray_address='local' to start a Ray of this run's own, or drop those settings from ray_init to run on "
    "the running cluster"
)


def _ray() -> Any:
    """The ``ray`` module (typed as Any: the library type-checks without Ray installed)."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise ConfigurationError(
            "run(runtime='ray') needs Ray: pip install 'multicluster-kafka-source[ray]'"
        ) from exc


class ReaderActor:
    """The body of a reader actor (made a Ray actor class by :func:`_actor_class`)."""

    def __init__(
        self,
        index: int,
        source: SourceFactory,
        handler: Handler,
        rack: str | None,
        rack_label: str | None,
        batches: bool = False,
        sink: RunSink | None = None,
    ) -> None:
        ray = _ray()
        context = ray.get_runtime_context()
        self.node_id = str(context.get_node_id())
        if rack is None and rack_label:
            rack = dict(context.get_node_labels() or {}).get(rack_label)
        self._out: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._metrics = MetricsRecorder(source.name)  # relayed to the driver's registry
        metrics = self._metrics
        self._host = WorkerHost(
            index=index,
            source_name=source.name,
            handler=handler,
            make_reader=lambda ctx, on_read: source.create_reader(ctx, metrics, on_read),
            send=relay_metrics(self._out.put, metrics),
            buffer_max_batches=source.options.reader_buffer_max_batches,
            rack=rack,
            track_topics=source.options.topic_tracking_enable,
            host_name=f"{socket.gethostname()} (ray node {self.node_id[:12]})",
            make_records=record_maker(source, metrics, batches),
            event_times=worker_event_times(source, metrics),
            transactions=worker_transactions(sink, index, source.name, metrics),
        )
        self._next = 1
        self._held: dict[int, object] = {}
        self._seq_lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, name=f"mcs-worker-{source.name}-{index}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            self._host.run()
        finally:
            self._metrics.close()

    def deliver(self, seq: int, message: object) -> None:
        """A driver message, applied in ``seq`` order."""
        with self._seq_lock:
            self._held[seq] = message
            while self._next in self._held:
                self._host.deliver(self._held.pop(self._next))
                self._next += 1

    def poll(self, timeout: float) -> list[object]:
        """Messages for the driver: waits up to ``timeout`` for the first, then takes what is there."""
        out: list[object] = []
        try:
            out.append(self._out.get(timeout=timeout))
        except queue.Empty:
            return out
        while len(out) < 10_000:
            try:
                out.append(self._out.get_nowait())
            except queue.Empty:
                break
        return out

    def join(self, timeout: float) -> bool:
        """Wait for the worker thread to end (after ``StopWorker``); True when it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()


_ACTOR_CLASS: Any = None


def _actor_class() -> Any:
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        _ACTOR_CLASS = _ray().remote(ReaderActor)
    return _ACTOR_CLASS


class _RayLink:
    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self._seq = 0
        self._lock = threading.Lock()

    def send(self, message: object) -> None:
        try:
            with self._lock:
                self._seq += 1
                self.actor.deliver.remote(self._seq, message)
        except Exception as exc:  # the actor is gone; its poll reports it
            _log.debug("cannot send to a reader actor: %s", exc)

    def kill(self) -> None:
        try:
            _ray().kill(self.actor, no_restart=True)
        except Exception as exc:
            _log.debug("cannot kill a reader actor: %s", exc)


class RayTransport:
    """Reader actors and the polling thread that brings their messages to the driver."""

    name = "ray"

    def __init__(
        self,
        source: SourceFactory,
        handler: Handler,
        parallelism: int,
        racks: Mapping[int, str | None],
        options: dict[str, Any],
        batches: bool = False,
        sink: RunSink | None = None,
    ) -> None:
        self._batches = batches
        self._sink = sink
        self._ray = _ray()
        self._address: str | None = options.pop("ray_address", None)
        self._init_args = dict(options.pop("ray_init", None) or {})
        actor_options = options.pop("actor_options", None)
        if actor_options is not None and not (callable(actor_options) or isinstance(actor_options, Mapping)):
            raise ConfigurationError("run(actor_options=...): a dict, or callable(reader_index) -> dict")
        self._actor_options: Callable[[int], Mapping[str, Any]] | Mapping[str, Any] | None = actor_options
        self._strategy = options.pop("scheduling_strategy", "SPREAD")
        self._rack_label: str | None = options.pop("rack_label", None)
        if options:
            raise ConfigurationError(f"run(runtime='ray'): unknown options {sorted(options)}")
        self._source = reader_only_source(source)
        self._name = source.name
        self._handler = handler
        self._parallelism = parallelism
        self._racks = dict(racks)
        self._run_id = uuid.uuid4().hex[:8]
        self._links: list[_RayLink] = []
        self._owns_ray = False
        self._closed = threading.Event()
        self._poller: threading.Thread | None = None

    def _options_for(self, index: int) -> dict[str, Any]:
        opts: dict[str, Any] = {
            "name": f"mcs-worker-{self._name}-{index}-{self._run_id}",
            "max_concurrency": 4,
            "num_cpus": 1,
            "scheduling_strategy": self._strategy,
            "max_restarts": 0,
        }
        extra = self._actor_options
        if callable(extra):
            opts.update(extra(index))
        elif extra is not None:
            opts.update(extra)
        return opts

    def start(self, deliver: Deliver, metrics: SourceMetrics) -> list[WorkerLink]:
        ray = self._ray
        if not ray.is_initialized():
            try:
                ray.init(address=self._address, **self._init_args)
            except ValueError as exc:
                if self._address is not None or "existing cluster" not in str(exc):
                    raise
                raise ConfigurationError(_JOINED_A_RUNNING_RAY.format(exc=exc)) from exc
            self._owns_ray = True
        actor_class = _actor_class()
        try:
            for i in range(self._parallelism):
                actor = actor_class.options(**self._options_for(i)).remote(
                    i,
                    self._source,
                    self._handler,
                    self._racks.get(i),
                    self._rack_label,
                    self._batches,
                    self._sink,
                )
                self._links.append(_RayLink(actor))
        finally:
            self._poller = threading.Thread(
                target=self._poll, args=(deliver,), name=f"mcs-ray-links-{self._name}", daemon=True
            )
            self._poller.start()
        return list(self._links)

    def _poll(self, deliver: Deliver) -> None:
        ray = self._ray
        actor_error = importlib.import_module("ray.exceptions").RayActorError
        refs: dict[Any, int] = {
            link.actor.poll.remote(POLL_TIMEOUT_S): i for i, link in enumerate(self._links)
        }
        while refs and not self._closed.is_set():
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=0.2)
            for ref in ready:
                i = refs.pop(ref)
                try:
                    messages = ray.get(ref)
                except actor_error as exc:
                    deliver(i, LinkLost(f"the reader actor died: {type(exc).__name__}: {exc}"))
                    continue
                except Exception as exc:
                    deliver(i, LinkLost(f"polling the reader actor failed: {type(exc).__name__}: {exc}"))
                    continue
                stopped = False
                for message in messages:
                    deliver(i, message)
                    stopped = stopped or isinstance(message, WorkerStopped)
                if not stopped:
                    refs[self._links[i].actor.poll.remote(POLL_TIMEOUT_S)] = i

    def close(self, timeout: float) -> None:
        ray = self._ray
        for link in self._links:  # the actors have stopped their readers (or died): let them go
            with contextlib.suppress(Exception):
                ray.get(link.actor.join.remote(5.0), timeout=10.0)
            link.kill()
        self._closed.set()
        if self._poller is not None:
            self._poller.join(timeout)
        if self._owns_ray:
            ray.shutdown()
