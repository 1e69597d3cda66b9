"""The stoppable context a per-cluster enumerator works through.

Each per-cluster enumerator gets its own proxy. The proxy owns every piece of work the enumerator scheduled;
``stop()`` cancels all of it, and results that arrive after a stop are dropped, so a stopped cluster can never
assign a split or touch the multi-cluster enumerator's state again. Coordinator thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

from multicluster_source.framework._interfaces import Cancellable, SplitEnumeratorContext
from multicluster_source.framework._split import KafkaPartitionSplit

T = TypeVar("T")
_log = logging.getLogger("multicluster_source.enumerator")

SplitsHandler = Callable[[str, Sequence[KafkaPartitionSplit], bool], None]
"""``(cluster_id, splits, initial)``: splits a per-cluster enumerator discovered."""


class StoppableContextProxy:
    """Gives one per-cluster enumerator scheduling and split hand-off, and takes both away on ``stop()``."""

    def __init__(
        self,
        cluster_id: str,
        context: SplitEnumeratorContext,
        on_splits: SplitsHandler,
        on_discovery_done: Callable[[str], None],
        on_leaders: Callable[[str, dict[tuple[str, int], str | None]], None] | None = None,
    ) -> None:
        self.cluster_id = cluster_id
        self._context = context
        self._on_splits = on_splits
        self._on_discovery_done = on_discovery_done
        self._on_leaders = on_leaders
        self._handles: list[Cancellable] = []
        self._stopped = False

    @property
    def stopped(self) -> bool:
        """True once ``stop()`` was called."""
        return self._stopped

    def call_async(
        self,
        call: Callable[[], T],
        handler: Callable[[T | None, BaseException | None], None],
        *,
        initial_delay: float = 0.0,
        period: float | None = None,
    ) -> Cancellable:
        """Like the runtime's ``call_async``; the handler is skipped once the proxy is stopped."""

        def guarded(result: T | None, error: BaseException | None) -> None:
            if not self._stopped:
                handler(result, error)

        handle = self._context.call_async(call, guarded, initial_delay=initial_delay, period=period)
        self._handles.append(handle)
        return handle

    def splits_discovered(self, splits: Sequence[KafkaPartitionSplit], initial: bool) -> None:
        """Hand discovered splits on, checking they belong to this proxy's cluster."""
        if self._stopped:
            return
        for split in splits:
            if split.cluster_id != self.cluster_id:
                raise ValueError(f"split {split.split_id} does not belong to cluster {self.cluster_id}")
        self._on_splits(self.cluster_id, splits, initial)

    def leaders_discovered(self, racks: dict[tuple[str, int], str | None]) -> None:
        """The rack of each partition's leader, as of the latest discovery round."""
        if not self._stopped and self._on_leaders is not None:
            self._on_leaders(self.cluster_id, racks)

    def discovery_done(self) -> None:
        """The enumerator finished a discovery round (used to know when a bounded source has every split)."""
        if not self._stopped:
            self._on_discovery_done(self.cluster_id)

    def fail(self, error: BaseException) -> None:
        """Fail the source with ``error`` (an error no retry can mend, e.g. a hybrid handover gap)."""
        if not self._stopped:
            self._context.fail(error)

    def stop(self) -> None:
        """Cancel all scheduled work; later results are dropped."""
        self._stopped = True
        for handle in self._handles:
            handle.cancel()
        self._handles.clear()
        _log.debug("cluster=%s: enumerator context stopped", self.cluster_id)
