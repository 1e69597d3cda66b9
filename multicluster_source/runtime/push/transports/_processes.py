"""``runtime="processes"``: one worker process per reader on this machine; the enumerator stays in the parent.

* Workers are ``multiprocessing`` processes of the ``spawn`` context (``start_method`` option), named
  ``mcs-worker-<source>-<i>``, daemonic (they die with the parent), ignoring SIGINT (the parent stops them).
* Each gets, pickled: a reader-only copy of the source
  (:func:`~multicluster_source.runtime.core._factory.reader_only_source`: no metadata service, subscriber,
  topic status store or standby assignor: what a reader needs and nothing that holds threads or clients), the
  handler, its index and rack. It builds its reader with ``source.create_reader`` and runs a
  :class:`~multicluster_source.runtime.push._host.WorkerHost`.
* One duplex pipe per worker carries the messages of :mod:`multicluster_source.runtime.core._messages` both
  ways (frozen dataclasses; splits and events are the framework's). Not a shared queue: a process killed while
  writing to a shared queue can leave its lock held and block every other worker; a pipe of its own breaks
  alone.
* The parent's receiver thread ``mcs-links-<source>`` waits on every pipe and every process sentinel
  (``multiprocessing.connection.wait``): a worker that exits, however (``kill -9`` included), is noticed at
  once, after what it sent before dying was read, and handled as a reader failure (its splits move).
* Log records of a worker (its reader's and the handler's) are sent to the parent and logged there.
* Metrics: each worker records its reader's metrics (records consumed, lag, ...) into a recorder whose
  changes travel with the heartbeats to the driver, which applies them to the registry given to ``run``
  beside the enumerator's metrics (see :mod:`multicluster_source.ops._metrics_relay`).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Mapping
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from multicluster_source.exceptions import ConfigurationError
from multicluster_source.ops._metrics import SourceMetrics
from multicluster_source.ops._metrics_relay import MetricsRecorder
from multicluster_source.runtime.core._factory import SourceFactory, check_picklable, reader_only_source
from multicluster_source.runtime.core._messages import (
    Deliver,
    Handler,
    LinkLost,
    StopWorker,
    WorkerLink,
    WorkerLog,
    relay_metrics,
)
from multicluster_source.runtime.push._host import WorkerHost, record_maker
from multicluster_source.runtime.push._push_watermarks import worker_event_times
from multicluster_source.runtime.push._worker_sink import RunSink, worker_transactions

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess


_log = logging.getLogger("multicluster_source.push")


class _ProcessLink:
    def __init__(self, process: BaseProcess, conn: Connection) -> None:
        self.process = process
        self.conn = conn
        self._lock = threading.Lock()
        self.ended = False
        """Set by the receiver thread once the process is gone (its sentinel fired and it was reaped)."""

    def send(self, message: object) -> None:
        try:
            with self._lock:
                self.conn.send(message)
        except (OSError, ValueError, EOFError):
            pass  # the worker is gone; the receiver reports it

    def kill(self) -> None:
        # Not process.kill(): that polls the Popen, which only the receiver thread may (waitpid races).
        if not self.ended and self.process.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)


class ProcessTransport:
    """Worker processes and the pipes to them."""

    name = "processes"

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
        self._start_method = str(options.pop("start_method", "spawn"))
        if self._start_method not in ("spawn", "forkserver", "fork"):
            raise ConfigurationError(
                f"run(start_method=...): spawn, forkserver or fork, got {self._start_method!r}"
            )
        if options:
            raise ConfigurationError(f"run(runtime='processes'): unknown options {sorted(options)}")
        self._reader_source = reader_only_source(source)
        check_picklable("processes", self._reader_source, handler)
        self._name = source.name
        self._handler = handler
        self._parallelism = parallelism
        self._racks = dict(racks)
        self._links: list[_ProcessLink] = []
        self._receiver: threading.Thread | None = None
        self._closed = threading.Event()

    def start(self, deliver: Deliver, metrics: SourceMetrics) -> list[WorkerLink]:
        ctx: Any = multiprocessing.get_context(self._start_method)
        levels = {
            "": logging.getLogger().getEffectiveLevel(),
            "multicluster_source": logging.getLogger("multicluster_source").getEffectiveLevel(),
        }
        source = self._reader_source
        try:
            for i in range(self._parallelism):
                parent_end, child_end = ctx.Pipe(duplex=True)
                process = ctx.Process(
                    target=worker_main,
                    name=f"mcs-worker-{self._name}-{i}",
                    args=(
                        i,
                        source,
                        self._handler,
                        child_end,
                        self._racks.get(i),
                        levels,
                        self._batches,
                        self._sink,
                    ),
                    daemon=True,
                )
                process.start()
                child_end.close()
                self._links.append(_ProcessLink(process, parent_end))
        finally:
            self._receiver = threading.Thread(
                target=self._receive, args=(deliver,), name=f"mcs-links-{self._name}", daemon=True
            )
            self._receiver.start()
        return list(self._links)

    def _receive(self, deliver: Deliver) -> None:
        conns: dict[Connection, int] = {link.conn: i for i, link in enumerate(self._links)}
        sentinels: dict[int, int] = {link.process.sentinel: i for i, link in enumerate(self._links)}
        while sentinels and not self._closed.is_set():
            ready = wait([*conns, *sentinels], timeout=0.2)
            for obj in ready:
                if isinstance(obj, Connection):
                    if obj in conns and not self._recv(obj, conns[obj], deliver):
                        del conns[obj]
                elif isinstance(obj, int) and obj in sentinels:
                    i = sentinels.pop(obj)
                    conn = self._links[i].conn
                    if conn in conns:  # read what it sent before it ended
                        while conn in conns and _poll(conn):
                            if not self._recv(conn, i, deliver):
                                del conns[conn]
                        conns.pop(conn, None)
                    link = self._links[i]
                    link.process.join()  # the sentinel fired: reaps at once (only this thread reaps)
                    link.ended = True
                    deliver(i, LinkLost(f"worker process exited with code {link.process.exitcode}"))

    @staticmethod
    def _recv(conn: Connection, index: int, deliver: Deliver) -> bool:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return False
        except Exception as exc:  # a message that cannot be unpickled here: report, carry on
            _log.error("worker %d sent a message that cannot be read: %s", index, exc)
            return True
        deliver(index, message)
        return True

    def close(self, timeout: float) -> None:
        # The receiver thread reaps each process as its sentinel fires and ends when all have; only after it
        # ended does this thread touch the processes (two threads calling waitpid on one child race).
        if self._receiver is not None:
            self._receiver.join(timeout)
            if self._receiver.is_alive():
                stuck = [link.process.name for link in self._links if not link.ended]
                _log.error("worker processes %s did not end within %.0f s; killing them", stuck, timeout)
                for link in self._links:
                    link.kill()
                self._receiver.join(10)
            self._closed.set()
            self._receiver.join(5)
        for link in self._links:
            link.process.join(5)
            if link.process.is_alive():
                link.process.kill()
                link.process.join(5)
            link.conn.close()
            if not link.process.is_alive():
                link.process.close()


def _poll(conn: Connection) -> bool:
    try:
        return conn.poll()
    except (OSError, EOFError):
        return False


# ------------------------------------------------------------------------------------ the worker process


class _ForwardLogs(logging.Handler):
    """Sends the worker's log records to the parent (which logs them), message formatted, args dropped."""

    def __init__(self, send: Any) -> None:
        super().__init__()
        self._send = send
        self._local = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(self._local, "busy", False):
            return
        self._local.busy = True
        try:
            out = copy.copy(record)
            out.msg = record.getMessage()
            out.args = None
            if record.exc_info:
                out.exc_text = logging.Formatter().formatException(record.exc_info)
            out.exc_info = None
            self._send(WorkerLog(out))
        except Exception:
            pass
        finally:
            self._local.busy = False


def worker_main(
    index: int,
    source: SourceFactory,
    handler: Handler,
    conn: Connection,
    rack: str | None,
    levels: dict[str, int],
    batches: bool = False,
    sink: RunSink | None = None,
) -> None:
    """The body of worker process ``index``: run its reader until the parent says stop or goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.current_thread().name = f"mcs-worker-{source.name}-{index}"
    lock = threading.RLock()

    def send(message: object) -> None:
        with lock:
            conn.send(message)

    root = logging.getLogger()
    forward = _ForwardLogs(send)
    root.addHandler(forward)
    for name, level in levels.items():
        logging.getLogger(name or None).setLevel(level)
    metrics = MetricsRecorder(source.name)  # relayed to the driver's registry (see _metrics_relay)
    host = WorkerHost(
        index=index,
        source_name=source.name,
        handler=handler,
        make_reader=lambda ctx, on_read: source.create_reader(ctx, metrics, on_read),
        send=relay_metrics(send, metrics),
        buffer_max_batches=source.options.reader_buffer_max_batches,
        rack=rack,
        track_topics=source.options.topic_tracking_enable,
        make_records=record_maker(source, metrics, batches),
        event_times=worker_event_times(source, metrics),
        transactions=worker_transactions(sink, index, source.name, metrics),
    )
    done = threading.Event()

    def commands() -> None:
        while not done.is_set():
            try:
                if not conn.poll(0.1):
                    continue
                message = conn.recv()
                host.deliver(message)
                if isinstance(message, StopWorker):
                    return  # the driver's last word: the process is ending, no need to wait 0.1 s more
            except (EOFError, OSError):  # the parent is gone
                host.deliver(StopWorker())
                return

    receiver = threading.Thread(target=commands, name=f"mcs-commands-{source.name}-{index}", daemon=True)
    receiver.start()
    try:
        host.run()
    finally:
        done.set()
        receiver.join(5)
        root.removeHandler(forward)
        metrics.close()
        conn.close()
