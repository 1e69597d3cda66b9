"""A fake confluent-kafka consumer for unit tests of fetchers and readers: records the calls that matter.

The broker it stands for has ``partitions[topic]`` partitions per topic, partition ``p`` led by broker
``p % brokers``, and no records. ``gate`` (an event) holds every metadata request until it is set.
:class:`FakeReaderContext` stands in for a reader's runner.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any


class FakeConsumer:
    """Records ``metadata``, ``offsets`` (uncached watermark requests), ``assign``, ``unassign``, ``close``."""

    def __init__(self, partitions: dict[str, int], brokers: int = 1, gate: threading.Event | None = None):
        self.partitions = partitions
        self.brokers = brokers
        self.gate = gate
        self.calls: list[tuple[str, Any]] = []
        self.lock = threading.Lock()
        self.highs: dict[tuple[str, int], int] = {}
        """High watermark per (topic, partition) (0 when not given; -1001 stands for not known yet)."""
        self.cached_lookups = 0
        """Watermark lookups in the client's cache (lag reports), not kept in ``calls``."""

    def _record(self, call: str, arg: Any) -> None:
        with self.lock:
            self.calls.append((call, arg))

    def count(self, call: str) -> int:
        """How many calls of this kind were made."""
        with self.lock:
            return sum(1 for c, _ in self.calls if c == call)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        if self.gate is not None:
            self.gate.wait(5)
        self._record("metadata", topic)
        names = list(self.partitions) if topic is None else [topic]
        return SimpleNamespace(
            topics={
                name: SimpleNamespace(
                    error=None,
                    partitions={
                        p: SimpleNamespace(leader=p % self.brokers) for p in range(self.partitions[name])
                    },
                )
                for name in names
                if name in self.partitions
            }
        )

    def get_watermark_offsets(self, tp: Any, timeout: float = -1, cached: bool = False) -> tuple[int, int]:
        if not cached:  # a request to the partition's leader (lag reports read the client's cache)
            self._record("offsets", (tp.topic, tp.partition))
            return (0, 0)
        with self.lock:
            self.cached_lookups += 1
        return (0, self.highs.get((tp.topic, tp.partition), 0))

    def incremental_assign(self, tps: list[Any]) -> None:
        self._record("assign", sorted((tp.topic, tp.partition) for tp in tps))

    def incremental_unassign(self, tps: list[Any]) -> None:
        self._record("unassign", sorted((tp.topic, tp.partition) for tp in tps))

    def consume(self, n: int, timeout: float) -> list[Any]:
        time.sleep(timeout)
        return []

    def poll(self, timeout: float) -> None:
        time.sleep(min(timeout, 0.01))

    def position(self, tps: list[Any]) -> list[Any]:
        return tps

    def close(self) -> None:
        self._record("close", None)


class FakeReaderContext:
    """What fetchers and readers need of their runner. Without a hand-off, batches are taken and dropped;
    with one, they go into it, and fetch steps are lent to whoever takes from it (inline fetching), as a
    stream's reader runner does. Failures are kept in ``errors``."""

    index = 0
    rack = None

    def __init__(self, handoff: Any = None) -> None:
        self.handoff = handoff
        self.errors: list[BaseException] = []

    def emit(self, batch: Any, should_stop: Callable[[], bool]) -> bool:
        return True if self.handoff is None else bool(self.handoff.put(batch, should_stop))

    def offer_inline(
        self, step: Any, release: Callable[[], None], hold: Callable[[], None] | None = None
    ) -> Callable[[], None]:
        if self.handoff is None:
            return lambda: None
        withdraw: Callable[[], None] = self.handoff.lend(lambda: step(self._emit_now), release, hold)
        return withdraw

    def _emit_now(self, batch: Any) -> bool:
        self.handoff.put_now(batch)
        return True

    def send_event_to_enumerator(self, event: Any) -> None:
        pass

    def reader_failed(self, error: BaseException) -> None:
        self.errors.append(error)

    fail = reader_failed
