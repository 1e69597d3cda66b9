"""What the push API's driver and workers say to each other, and the transport seam that carries it.

Every message is a frozen dataclass (splits and events are the framework's own frozen values), so a transport
may pickle it: queues for threads, one pipe per worker process, actor calls for Ray. See
:mod:`multicluster_source.runtime.push._push` for the shape of a run.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from multicluster_source.framework._events import SourceEvent
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.ops._metrics import SourceMetrics
from multicluster_source.ops._metrics_relay import MetricsDelta, MetricsRecorder

_log = logging.getLogger("multicluster_source.push")


Handler = Callable[[Any], object]
"""``handler(records)`` (a ``list[SourceRecord]``), or ``handler(batch)`` (a ``MessageBatch``) with
``run(..., batches=True)``; its return value is ignored. Optional hooks: ``open(reader_index)`` and
``close()``, called on the worker's handler thread before the first batch and after the last."""
OnTopicRead = Callable[[str, str, int], None]
Deliver = Callable[[int, object], None]
"""How a transport hands the driver a message from worker ``i``: ``deliver(i, message)``."""

RUNTIMES = ("threads", "processes", "ray")
HEARTBEAT_S = 0.5

# ------------------------------------------------------------------------------------- driver -> worker


@dataclass(frozen=True)
class StartReader:
    """Create the reader and start it (sent once the enumerator runs)."""


@dataclass(frozen=True)
class AssignSplits:
    """Splits for the reader."""

    splits: tuple[KafkaPartitionSplit, ...]


@dataclass(frozen=True)
class EventToReader:
    """An enumerator event for the reader."""

    event: SourceEvent


@dataclass(frozen=True)
class NoMoreSplits:
    """No further splits will come (bounded)."""


@dataclass(frozen=True)
class WatermarkAdvanced:
    """The run's watermark moved (ms): the handler's ``on_watermark(ms)`` hook is called with it."""

    ms: int


@dataclass(frozen=True)
class FenceSplits:
    """Hand out no record of these splits from now on, also none fetched already (their positions went to a
    replica handover, or they left the metadata); a split assigned to the worker again is handed out anew,
    without what it handed out before
    (:class:`~multicluster_source.runtime.core._handoff.PositionTracker`)."""

    split_ids: tuple[str, ...]
    request: int = 0
    """Not 0: the driver waits for this worker's :class:`Fenced` of that number (it reads the splits now)."""


@dataclass(frozen=True)
class WatchSplits:
    """Keep the timestamp of the last record handed to the handler of exactly these splits (those a replica
    copies: a ``timestamp`` handover translates it); reported in ``Delivered`` and ``Fenced``."""

    split_ids: tuple[str, ...]


@dataclass(frozen=True)
class ClusterIds:
    """The Kafka ``cluster.id`` of each source cluster the enumerator identified so far (a run with an
    exactly-once sink: the worker writes it with each position of that cluster)."""

    ids: dict[str, str]


@dataclass(frozen=True)
class StopWorker:
    """Finish the batch the handler is in, report, close the reader, end."""


# ------------------------------------------------------------------------------------- worker -> driver


@dataclass(frozen=True)
class WorkerReady:
    """The worker runs (before its reader starts): where it is."""

    pid: int
    host: str
    rack: str | None


@dataclass(frozen=True)
class EventToEnumerator:
    """A reader event for the enumerator."""

    event: SourceEvent


@dataclass(frozen=True)
class Delivered:
    """The handler returned from a batch: its positions are delivered (with an exactly-once sink: the
    transaction holding its results committed)."""

    positions: dict[str, int]
    records: int
    event_times: dict[str, tuple[int, int]] | None = None
    """split -> (smallest, largest) event time of the batch, with a watermark strategy."""
    last_times: dict[str, int] | None = None
    """Watched split (:class:`WatchSplits`) -> timestamp of the last record of it handed to the handler."""


@dataclass(frozen=True)
class Fenced:
    """The answer to a ``FenceSplits`` with a ``request``: the worker fenced the splits (no record of them
    reaches the handler from then on, none of a batch fetched before either), and this is, under the same
    lock, how far it handed each out (the next offset), and the last handed-out record's timestamp of the
    watched ones. Splits it never handed out a record of are absent. With an exactly-once sink it answers
    once the transaction holding those records' results committed."""

    request: int
    positions: dict[str, int]
    last_times: dict[str, int]


@dataclass(frozen=True)
class Heartbeat:
    """Sent every ``HEARTBEAT_S`` and when ``finished`` changes."""

    finished: bool
    """The reader has no splits left and every batch it emitted was handled."""
    splits: tuple[str, ...] = ()


@dataclass(frozen=True)
class TopicRead:
    """The reader read its first record of (cluster, topic) (topic tracking)."""

    cluster: str
    topic: str


@dataclass(frozen=True)
class WorkerFailure:
    """``kind``: ``reader`` (fail this reader over), ``source`` or ``handler`` (fail the run)."""

    kind: str
    summary: str
    """``<ExceptionType>: <message>``."""
    description: str
    """With the traceback."""
    error: bytes | None = None
    """The exception pickled, when it survives a round trip."""

    def exception(self) -> BaseException | None:
        """The worker's exception, when it was sent along (see :func:`error_blob`)."""
        if self.error is not None:
            with contextlib.suppress(Exception):
                error: BaseException = pickle.loads(self.error)
                return error
        return None


@dataclass(frozen=True)
class WorkerLog:
    """A log record of a worker process, for the driver's logging."""

    record: logging.LogRecord


@dataclass(frozen=True)
class WorkerMetrics:
    """What the reader metrics of a worker in another process or actor did since the last one (applied to
    the driver's registry; see :mod:`multicluster_source.ops._metrics_relay`)."""

    delta: MetricsDelta


def relay_metrics(send: Callable[[object], None], recorder: MetricsRecorder) -> Callable[[object], None]:
    """``send`` that first sends the recorder's pending metrics before each heartbeat and the last message."""

    def sending(message: object) -> None:
        if isinstance(message, (Heartbeat, WorkerStopped)):
            delta = recorder.drain()
            if delta is not None:
                send(WorkerMetrics(delta))
        send(message)

    return sending


@dataclass(frozen=True)
class WorkerStopped:
    """The worker closed its reader; nothing follows."""

    records: int


@dataclass(frozen=True)
class LinkLost:
    """From the transport: the worker is gone (thread ended, process exited, actor died)."""

    reason: str


def error_blob(error: BaseException) -> bytes | None:
    """``error`` pickled, if it also unpickles (exceptions with their own ``__init__`` often do not)."""
    try:
        data = pickle.dumps(error)
        pickle.loads(data)
        return data
    except Exception:
        return None


def describe_error(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)).rstrip()


# ------------------------------------------------------------------------------------------- transports


class WorkerLink(Protocol):
    """The driver's end of one worker."""

    def send(self, message: object) -> None:
        """Send a message, in order; never raises (a lost worker is reported by the transport)."""
        ...

    def kill(self) -> None:
        """End the worker at once (it stopped answering)."""
        ...


class Transport(Protocol):
    """Starts the workers of one run and carries messages both ways."""

    name: str

    def start(self, deliver: Deliver, metrics: SourceMetrics) -> list[WorkerLink]:
        """Start ``parallelism`` workers; each sends ``WorkerReady`` first, and its transport sends
        ``LinkLost`` once it is gone. ``metrics`` is the driver's (in-process workers use it)."""
        ...

    def close(self, timeout: float) -> None:
        """Reap every worker (joined, terminated if need be) and release the transport's resources."""
        ...
