"""The hybrid source's metrics: which stage runs, and how splits were handed over.

- ``multicluster_source_hybrid_stage`` (gauge, no labels): the index of the stage being read (0 first).
- ``multicluster_source_hybrid_handovers_total{mode}`` (counter): splits handed to a next stage, by how
  their start was chosen (``exact``, ``estimated``, ``timestamp``; ``start`` counts the handovers that named
  no split and so left every split at the next stage's own starting offsets).
- ``multicluster_source_hybrid_switch_seconds`` (gauge): the last switch's time from the last record of the
  finished stage to the first record of the next.

Several hybrid streams may share a registry: the collectors are then shared (created once per registry).
Called from the hybrid stream's caller thread.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["HybridMetrics"]

STAGE = "multicluster_source_hybrid_stage"
HANDOVERS = "multicluster_source_hybrid_handovers"
SWITCH = "multicluster_source_hybrid_switch_seconds"

_lock = threading.Lock()
_shared: weakref.WeakKeyDictionary[CollectorRegistry, tuple[Gauge, Counter, Gauge]] = (
    weakref.WeakKeyDictionary()
)


class HybridMetrics:
    """The hybrid collectors of one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        with _lock:
            found = _shared.get(registry)
            if found is None:
                found = (
                    Gauge(STAGE, "Index of the hybrid source stage being read (0 first)", registry=registry),
                    Counter(
                        HANDOVERS,
                        "Splits handed over to the next hybrid stage, by mode",
                        ["mode"],
                        registry=registry,
                    ),
                    Gauge(
                        SWITCH,
                        "Last hybrid switch: last record of a stage to first of the next",
                        registry=registry,
                    ),
                )
                _shared[registry] = found
        self._stage, self._handovers, self._switch = found

    def stage(self, index: int) -> None:
        """The stage being read now."""
        self._stage.set(index)

    def handed_over(self, modes: Mapping[str, str]) -> None:
        """One switch's split modes (an empty mapping counts one ``start``)."""
        if not modes:
            self._handovers.labels(mode="start").inc()
        for mode in modes.values():
            self._handovers.labels(mode=mode).inc()

    def switch_seconds(self, seconds: float) -> None:
        """The last switch's latency."""
        self._switch.set(seconds)
