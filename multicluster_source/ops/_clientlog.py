"""librdkafka's logs and errors routed to Python logging, with the cluster id in every line.

Clients get a ``logger`` (librdkafka log lines go to ``multicluster_source.client.<cluster>``, each distinct
line at most once per 30 s with the count of identical ones since: :class:`ThrottledClientLog`) and an
``error_cb`` that logs each distinct client error once per ``quiet_s`` seconds as a warning naming the
cluster, with the number of times it came since it was last logged, so an outage is visible without a line
per connection attempt. Both are served on the thread that serves the client (``consume``/``poll``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from multicluster_source.metadata._connection import ThrottledClientLog

_log = logging.getLogger("multicluster_source.reader")


class ClientErrorReporter:
    """``error_cb`` for one client: logs a distinct error at most once per ``quiet_s`` seconds, and then
    with the number of times it came since it was last logged."""

    def __init__(self, cluster_id: str, role: str, quiet_s: float = 30.0) -> None:
        self.cluster_id = cluster_id
        self.role = role
        self.quiet_s = quiet_s
        self._last: dict[str, tuple[float, int]] = {}  # error name -> (last logged at, repeats since)
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
            if last is not None and now - last[0] < self.quiet_s:
                self._last[name] = (last[0], last[1] + 1)
                return
            self._last[name] = (now, 0)
        if last is not None and last[1]:
            _log.warning(
                "cluster=%s: %s client error %s: %s (%d more times in the last %.0f s)",
                self.cluster_id,
                self.role,
                name,
                text,
                last[1],
                now - last[0],
            )
            return
        _log.warning("cluster=%s: %s client error %s: %s", self.cluster_id, self.role, name, text)


def client_logging(
    cluster_id: str, role: str, reporter: Callable[[Any], None] | None = None
) -> dict[str, Any]:
    """Client configuration entries that route librdkafka logs and errors to Python logging (errors to
    ``reporter`` when given, e.g. a :class:`ClientErrorReporter` kept for status answers)."""
    reporter = reporter or ClientErrorReporter(cluster_id, role)
    return {
        "logger": ThrottledClientLog(logging.getLogger(f"multicluster_source.client.{cluster_id}")),
        "error_cb": reporter,
    }
