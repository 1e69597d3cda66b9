"""``runtime="threads"``: each worker of a push run is a thread of this process."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from multicluster_source.exceptions import ConfigurationError
from multicluster_source.ops._metrics import SourceMetrics
from multicluster_source.runtime.core._factory import SourceFactory
from multicluster_source.runtime.core._messages import Deliver, Handler, LinkLost, WorkerLink
from multicluster_source.runtime.push._host import WorkerHost, record_maker
from multicluster_source.runtime.push._push_watermarks import worker_event_times
from multicluster_source.runtime.push._worker_sink import RunSink, worker_transactions

_log = logging.getLogger("multicluster_source.push")


class _ThreadLink:
    def __init__(self, host: WorkerHost) -> None:
        self._host = host

    def send(self, message: object) -> None:
        self._host.deliver(message)

    def kill(self) -> None:
        self._host.abort()


class ThreadTransport:
    """``runtime="threads"``: each worker is a thread ``mcs-worker-<source>-<i>`` of this process."""

    name = "threads"

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
        if options:
            raise ConfigurationError(f"run(runtime='threads'): unknown options {sorted(options)}")
        self._source = source
        self._handler = handler
        self._batches = batches
        self._sink = sink
        self._parallelism = parallelism
        self._racks = dict(racks)
        self._threads: list[threading.Thread] = []

    def start(self, deliver: Deliver, metrics: SourceMetrics) -> list[WorkerLink]:
        source = self._source
        links: list[WorkerLink] = []
        for i in range(self._parallelism):
            host = WorkerHost(
                index=i,
                source_name=source.name,
                handler=self._handler,
                make_reader=lambda ctx, on_read: source.create_reader(ctx, metrics, on_read),
                send=functools.partial(deliver, i),
                buffer_max_batches=source.options.reader_buffer_max_batches,
                rack=self._racks.get(i),
                track_topics=source.options.topic_tracking_enable,
                make_records=record_maker(source, metrics, self._batches),
                event_times=worker_event_times(source, metrics),
                transactions=worker_transactions(self._sink, i, source.name, metrics),
            )
            thread = threading.Thread(
                target=self._run_host,
                args=(i, host, deliver),
                name=f"mcs-worker-{source.name}-{i}",
                daemon=True,
            )
            self._threads.append(thread)
            links.append(_ThreadLink(host))
            thread.start()
        return links

    @staticmethod
    def _run_host(index: int, host: WorkerHost, deliver: Deliver) -> None:
        try:
            host.run()
        finally:
            deliver(index, LinkLost("the worker thread ended"))

    def close(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
            if thread.is_alive():
                _log.error("worker thread %s did not end within %.0f s", thread.name, timeout)
