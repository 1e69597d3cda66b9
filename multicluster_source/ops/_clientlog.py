"""librdkafka's logs and errors routed to Python logging, with the cluster id in every line.

Consumers get a ``logger`` (librdkafka log lines go to ``multicluster_source.client.<cluster>``) and an
``error_cb`` that logs each distinct client error once per ``quiet_s`` seconds as a warning naming the
cluster, so an outage is visible without flooding the log. Both are served on the fetch thread that calls
``consume``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

_log = logging.getLogger("multicluster_source.reader")


class ClientErrorReporter:
    """``error_cb`` for one client: logs a distinct error at most once per ``quiet_s`` seconds."""

    def __init__(self, cluster_id: str, role: str, quiet_s: float = 30.0) -> None:
        self.cluster_id = cluster_id
        self.role = role
        self.quiet_s = quiet_s
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()
        self.count = 0
        #: ``"<error name>: <text>"`` of the latest error, until :meth:`clear` (for status answers)
        self.last: str | None = None

    def clear(self) -> None:
        """Forget the latest error (the client works again)."""
        self.last = None

    def __call__(self, error: Any) -> None:
        """Called by librdkafka (through confluent-kafka) with a KafkaError."""
        name = getattr(error, "name", lambda: "ERROR")()
        text = getattr(error, "str", lambda: str(error))()
        now = time.monotonic()
        with self._lock:
            self.count += 1
            self.last = f"{name}: {text}"
            last = self._last.get(name)
            if last is not None and now - last < self.quiet_s:
                return
            self._last[name] = now
        _log.warning("cluster=%s: %s client error %s: %s", self.cluster_id, self.role, name, text)


def client_logging(
    cluster_id: str, role: str, reporter: Callable[[Any], None] | None = None
) -> dict[str, Any]:
    """Client configuration entries that route librdkafka logs and errors to Python logging (errors to
    ``reporter`` when given, e.g. a :class:`ClientErrorReporter` kept for status answers)."""
    reporter = reporter or ClientErrorReporter(cluster_id, role)
    return {
        "logger": logging.getLogger(f"multicluster_source.client.{cluster_id}"),
        "error_cb": reporter,
    }
