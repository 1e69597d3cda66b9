"""``HybridSource.run``: the push API over every stage.

Bounded stages are read on the calling thread through a :class:`HybridStream` (the handler is called there,
and a checkpoint taken after it returned covers exactly what it handled; a periodic one is only captured
there and written in the background, see :mod:`._periodic`). A last stage that is a Kafka
source runs as that source's own ``run()`` on the runtime asked for (threads, processes, Ray), started from
the handover and keeping its checkpoints in the stage's sub-directory; the switch to it is written first,
so a restart goes straight to it. A last stage of another kind is read on the calling thread too (runtime
``threads`` only).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from multicluster_source.exceptions import ConfigurationError
from multicluster_source.hybrid._kafka_stage import KafkaSourceStage
from multicluster_source.hybrid._stage import StageChain
from multicluster_source.hybrid._stream import HybridStream, live_start, periodic_checkpoint
from multicluster_source.runtime.push._control import RunControl, RunProgress, RunResult

__all__ = ["run_hybrid"]


def _stopper(options: Mapping[str, Any]) -> Callable[[], bool]:
    control = options.get("control")
    if control is not None and not isinstance(control, RunControl):
        raise ConfigurationError("run(control=...): needs a RunControl")
    stop_event = options.get("stop_event")
    if stop_event is not None and not callable(getattr(stop_event, "is_set", None)):
        raise ConfigurationError("run(stop_event=...): needs an object with is_set() (threading.Event)")
    return lambda: bool(
        (control is not None and control.stop_requested) or (stop_event is not None and stop_event.is_set())
    )


class _Hooks:
    """The handler's optional hooks for the stages read on the calling thread: ``open(0)`` first,
    ``on_watermark(ms)`` when the watermark moved, ``close()`` when those stages are done (a Kafka last stage
    then opens the handler again in each of its readers, as its own ``run()`` does)."""

    def __init__(self, handler: Callable[..., object]) -> None:
        self._handler = handler
        self._told: int | None = None
        self._closed = False
        opener = getattr(handler, "open", None)
        if callable(opener):
            opener(0)

    def watermark(self, ms: int | None) -> None:
        on_watermark = getattr(self._handler, "on_watermark", None)
        if ms != self._told and callable(on_watermark):
            self._told = ms
            on_watermark(ms)

    def close(self) -> None:
        closer = getattr(self._handler, "close", None)
        if not self._closed and callable(closer):
            self._closed = True
            closer()


class WatermarkFloor:
    """The handler of a live stage run after earlier stages: ``on_watermark`` never goes below the watermark
    the earlier stages reached (``floor``); everything else is the handler's own. Picklable when the handler
    is (the processes and Ray runtimes send it to their workers)."""

    def __init__(self, handler: Any, floor: int) -> None:
        self.handler = handler
        self.floor = floor

    def __call__(self, records: Any) -> object:
        return self.handler(records)

    def open(self, reader_index: int) -> None:
        """The handler's ``open``, if it has one."""
        opener = getattr(self.handler, "open", None)
        if callable(opener):
            opener(reader_index)

    def close(self) -> None:
        """The handler's ``close``, if it has one."""
        closer = getattr(self.handler, "close", None)
        if callable(closer):
            closer()

    def on_watermark(self, ms: int | None) -> None:
        """The handler's ``on_watermark`` with the largest of ``ms`` and every value told, when it moved."""
        value = self.floor if ms is None or ms < self.floor else ms
        if value > self.floor or not getattr(self, "_told_floor", False):
            self._told_floor = True
            self.floor = value
            self.handler.on_watermark(value)


def run_hybrid(
    hybrid: StageChain,
    handler: Callable[..., object],
    parallelism: int,
    *,
    runtime: str,
    checkpoint_dir: str | None,
    checkpoint_interval: float | None,
    registry: Any,
    batches: bool,
    options: dict[str, Any],
) -> RunResult:
    """See :meth:`HybridSource.run`."""
    if not callable(handler):
        raise ConfigurationError("run(handler, ...): the handler must be callable(records)")
    if not isinstance(batches, bool):
        raise ConfigurationError(f"run(batches=...): True or False, got {batches!r}")
    last = hybrid.stages[-1]
    delegate = isinstance(last, KafkaSourceStage)
    if not delegate:
        if runtime != "threads":
            raise ConfigurationError(
                f"run(runtime={runtime!r}): the last stage ({last.name}) is not a Kafka source; it is read "
                "on the calling thread (runtime='threads')"
            )
        unknown = sorted(set(options) - {"control", "stop_event"})
        if unknown:
            raise ConfigurationError(f"run(): unknown options {', '.join(unknown)} for a hybrid source")
    stopped = _stopper(options)
    control: RunControl | None = options.get("control")
    started = time.monotonic()
    records = checkpoints = 0
    stream = HybridStream(
        hybrid,
        parallelism=parallelism,
        checkpoint_dir=checkpoint_dir,
        checkpoint_interval=None,
        registry=registry,
        defer_kafka_last=delegate,
    )

    def result(finished: bool) -> RunResult:
        if control is not None:
            RunProgress(control).done()
        return RunResult(
            runtime=runtime,
            parallelism=parallelism,
            finished=finished,
            records=records,
            checkpoints=checkpoints,
            restored_from=stream.restored_from,
            seconds=time.monotonic() - started,
        )

    try:
        last_checkpoint = time.monotonic()
        last_index = len(hybrid.stages) - 1
        in_process = not delegate or stream.stage < last_index
        hooks = _Hooks(handler) if in_process else None
        while not delegate or stream.stage < last_index:
            assert hooks is not None
            if stopped() or stream.finished:
                if checkpoint_dir is not None:
                    stream.checkpoint()
                    checkpoints += 1
                hooks.close()
                return result(stream.finished)
            hooks.watermark(stream.watermark)
            if batches:
                for batch in stream.poll_batches(0.2):
                    handler(batch)
                    records += len(batch)
            else:
                got = stream.poll(0.2)
                if got:
                    handler(got)
                    records += len(got)
            due = (
                checkpoint_interval is not None and time.monotonic() - last_checkpoint >= checkpoint_interval
            )
            if due and stream.stage < last_index + int(not delegate) and periodic_checkpoint(stream):
                checkpoints += 1  # captured; written in the background (deferred while the last one is)
                last_checkpoint = time.monotonic()
        if hooks is not None:
            hooks.close()
        assert isinstance(last, KafkaSourceStage)
        handover, store = live_start(stream)
        source = last.with_start(handover)
        floor = stream.watermark
        live = source.run(
            handler
            if floor is None or not hasattr(handler, "on_watermark")
            else WatermarkFloor(handler, floor),
            parallelism,
            runtime=runtime,
            checkpoint_dir=None if store is None else store.stage_dir(last_index),
            checkpoint_interval=checkpoint_interval,
            registry=stream.metrics_registry,
            batches=batches,
            **options,
        )
        return replace(
            live,
            records=live.records + records,
            checkpoints=live.checkpoints + checkpoints,
            restored_from=stream.restored_from or live.restored_from,
            seconds=time.monotonic() - started,
        )
    finally:
        stream.close()
