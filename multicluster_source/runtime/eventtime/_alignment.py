"""Watermark alignment (FLIP-182/217, across clusters and readers): hold the splits that run ahead.

:class:`Aligner` runs on the coordinator thread (the enumerator's mailbox) every ``update_interval``
seconds: it asks the watermark tracker which splits' watermarks are more than ``max_drift`` ahead of the
group's (the minimum over the active, non-idle splits with a watermark) and, when that set changed, sends it
to every reader as a :class:`~multicluster_source.framework._events.SplitsPausedEvent`, with the limit (the
group's watermark plus the drift). Readers pause those splits at the client (``Consumer.pause``: neither
fetching nor memory grows) and resume the others; between two checks a fetcher also pauses a split as soon
as a batch it fetched takes the split past the limit, so a split overshoots by one fetch batch at most. One
source is one alignment group: its splits on every cluster and reader. Idle splits do not hold the group
back, so a held split is let go when the splits behind it stop receiving records.
"""

from __future__ import annotations

import logging
from typing import Any

from multicluster_source.framework._events import SplitsPausedEvent
from multicluster_source.framework._watermarks import WatermarkAlignment

_log = logging.getLogger("multicluster_source")


class Aligner:
    """The alignment loop of one source; ``coordinator`` is its ``SplitEnumeratorContext``."""

    def __init__(
        self, tracker: Any, coordinator: Any, alignment: WatermarkAlignment, source_name: str
    ) -> None:
        self._tracker = tracker
        self._coordinator = coordinator
        self._drift_ms = round(alignment.max_drift_s * 1000)
        self._interval = alignment.update_interval_s
        self._group = alignment.group
        self._name = source_name
        self._held: frozenset[str] = frozenset()
        self._limit: int | None = None
        self._sent = False  # the first check always tells the readers (they start holding every split)

    def start(self) -> None:
        """Schedule the first check (from any thread; it runs once the coordinator runs)."""
        self._coordinator.run_in_coordinator(self._tick, delay=self._interval)

    def _tick(self) -> None:
        held, limit = self._tracker.hold_ahead(self._drift_ms)
        if not self._sent or held != self._held or limit != self._limit:
            self._sent = True
            if held != self._held:
                _log.info(
                    "source=%s group=%s: watermark alignment holds %d splits (%d released)",
                    self._name,
                    self._group,
                    len(held),
                    len(self._held - held),
                )
            self._held, self._limit = held, limit
            event = SplitsPausedEvent(held, limit)
            for reader in range(self._coordinator.parallelism):
                self._coordinator.send_event_to_reader(reader, event)
        self._coordinator.run_in_coordinator(self._tick, delay=self._interval)
