"""How every client the source creates connects, and how its librdkafka log lines reach Python logging.

Connection defaults (:func:`with_connection_defaults`; a property of the user's own always wins):

* ``reconnect.backoff.ms=10`` (librdkafka: 100): the first connection of a new client (an added cluster's
  admin client and consumers) is not held back; librdkafka also derives the interval between two "connect to
  any broker" attempts from it (half of it, at least 11 ms), which is what a client's first request after
  bootstrapping waits for.
* ``metadata.recovery.strategy=none`` (librdkafka 2.10+: ``rebootstrap``): with ``rebootstrap``, a client
  whose known brokers are all down re-creates its bootstrap broker handles at once, after every failed
  attempt. Each new handle starts its reconnect backoff from ``reconnect.backoff.ms`` again, so the backoff
  never doubles: measured against a refusing port, 79 connection attempts a second per client with
  ``reconnect.backoff.ms=10``, 20 with librdkafka's 100 (one per "connect to any broker" interval). With
  ``none`` the handle stays and its backoff grows on every failed attempt (librdkafka doubles it when an
  attempt starts and again when it fails; -25 % to +50 % jitter) up to ``reconnect.backoff.max.ms`` (10 s).
  Measured against a port that accepts and closes: an admin client's attempts at 0.02, 0.05, 0.13, 0.40 and
  1.88 s, then one every 7.5-10 s; a consumer's likewise. So a cluster that is down sees a few quick
  attempts per client, at most 2 in any second after the first, and 6-8 a minute from then on. What
  ``none`` gives up: a client whose brokers were all replaced by brokers with other names does not return
  to ``bootstrap.servers`` (the source creates new clients when a cluster's servers change in its metadata).

:class:`ThrottledClientLog` is the ``logger`` of such a client: it passes each distinct librdkafka line on
at most once per interval, with the count of identical lines since, so a cluster that is down does not write
a line for every connection attempt.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["CONNECTION_DEFAULTS", "ThrottledClientLog", "with_connection_defaults"]

CONNECTION_DEFAULTS: Final[Mapping[str, str]] = {
    "reconnect.backoff.ms": "10",
    "metadata.recovery.strategy": "none",
}
"""librdkafka properties every client of the source gets unless the user sets them (see the module text)."""

# Parts of a librdkafka line that change from one attempt to the next without changing what it says.
_VARYING: Final = re.compile(r"\(after \d+ms in state [A-Z_]+[^)]*\)|\d+ identical error\(s\) suppressed")


def with_connection_defaults(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with :data:`CONNECTION_DEFAULTS` added where it does not set the key."""
    out = dict(conf)
    for key, value in CONNECTION_DEFAULTS.items():
        out.setdefault(key, value)
    return out


class ThrottledClientLog:
    """A librdkafka ``logger``: each distinct line at most once per ``quiet_s`` to ``target``, with a count.

    confluent-kafka calls :meth:`log` with ``(level, "%s [%s] %s", facility, client name, text)`` on the
    thread that serves the client (``poll``/``consume``, or the thread that closes it). Lines are told apart
    by level, facility and text without the parts that change on every attempt (``(after 0ms in state
    CONNECT)``); the first one is logged at once, repeats within ``quiet_s`` are counted, and the next one
    after ``quiet_s`` is logged with ``(N identical lines in the last S s)``.
    """

    def __init__(self, target: logging.Logger, quiet_s: float = 30.0) -> None:
        self.target = target
        self.quiet_s = quiet_s
        self._lock = threading.Lock()
        self._seen: dict[tuple[int, str], tuple[float, int]] = {}  # key -> (last logged at, repeats since)
        self.lines = 0
        """Lines received (logged or counted)."""

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        """Called by confluent-kafka for each librdkafka log line."""
        text = msg % args if args else msg
        key = (level, _VARYING.sub("", text))
        now = time.monotonic()
        with self._lock:
            self.lines += 1
            last = self._seen.get(key)
            if last is not None and now - last[0] < self.quiet_s:
                self._seen[key] = (last[0], last[1] + 1)
                return
            repeats = 0 if last is None else last[1]
            self._seen[key] = (now, 0)
            if len(self._seen) > 256:  # a client that logs ever new lines: keep the newest ones only
                for old in sorted(self._seen, key=lambda k: self._seen[k][0])[:128]:
                    del self._seen[old]
        if repeats and last is not None:
            since = now - last[0]
            self.target.log(level, "%s (%d identical lines in the last %.0f s)", text, repeats, since)
        else:
            self.target.log(level, "%s", text)
