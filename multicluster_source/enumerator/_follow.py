"""Following the metadata after the first read: periodic polls, change notifications, failure counting.

:class:`MetadataFollower` decides *when* the multi-cluster enumerator reads the metadata again and what a
failed read means; the enumerator supplies the read itself. Coordinator thread only, except
``on_service_changed``, which the metadata service calls from its watcher thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from multicluster_source.enumerator._settings import EnumeratorSettings
from multicluster_source.exceptions import MetadataError
from multicluster_source.framework._interfaces import Cancellable, SplitEnumeratorContext

_log = logging.getLogger("multicluster_source.enumerator")


class MetadataFollower:
    """Re-reads the metadata on a timer and on change notifications; a failed read keeps the last good
    metadata and fails the source after ``failure_threshold`` failures in a row."""

    def __init__(
        self,
        context: SplitEnumeratorContext,
        settings: EnumeratorSettings,
        read_and_apply: Callable[[], None],
        after_good_read: Callable[[], None],
    ) -> None:
        self._ctx = context
        self._s = settings
        self._read_and_apply = read_and_apply
        self._after_good_read = after_good_read
        self._failures = 0
        self._last_failure: str | None = None
        self._refresh_pending = False
        self._poll_handle: Cancellable | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._closed = False

    @property
    def failures(self) -> int:
        """Failed reads in a row (0 after a good one)."""
        return self._failures

    def follow(self) -> None:
        """Subscribe to the service's change notifications (when it has them) and schedule the polls."""
        subscribe = getattr(self._s.service, "subscribe", None)
        if callable(subscribe):
            self._unsubscribe = subscribe(self.on_service_changed)
        if self._s.metadata_interval_s is not None:
            self._poll_handle = self._ctx.run_in_coordinator(self._poll, delay=self._s.metadata_interval_s)

    def close(self) -> None:
        """Stop polling and unsubscribe; later notifications and scheduled reads do nothing."""
        self._closed = True
        if self._poll_handle is not None:
            self._poll_handle.cancel()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def on_service_changed(self) -> None:
        """The service's change notification (its watcher thread)."""
        # Hop onto the coordinator after the debounce delay, coalescing a burst of notifications into one
        # read.
        if self._refresh_pending or self._closed:
            return
        self._refresh_pending = True
        self._ctx.run_in_coordinator(self.refresh, delay=self._s.debounce_s)

    def _poll(self) -> None:
        self.refresh()
        if not self._closed and self._s.metadata_interval_s is not None:
            self._poll_handle = self._ctx.run_in_coordinator(self._poll, delay=self._s.metadata_interval_s)

    def refresh(self) -> None:
        """Read the metadata now and reconcile; a failure is counted, never raised."""
        self._refresh_pending = False
        if self._closed:
            return
        try:
            self._read_and_apply()
        except Exception as exc:  # a bad read never stops a running source
            self._failed(exc)
            return
        if self._failures:
            _log.info(
                "source=%s: metadata is good again after %d failures", self._s.source_name, self._failures
            )
        self._failures = 0
        self._last_failure = None
        self._after_good_read()

    def _failed(self, exc: Exception) -> None:
        self._failures += 1
        self._s.metrics.metadata_failure()
        message = str(exc)
        if message != self._last_failure:
            _log.warning(
                "source=%s: metadata read failed, keeping the last good metadata: %s",
                self._s.source_name,
                message,
            )
            self._last_failure = message
        threshold = self._s.failure_threshold
        if threshold > 0 and self._failures >= threshold:
            error = MetadataError(f"{self._failures} consecutive metadata failures; last: {message}")
            error.__cause__ = exc
            self._ctx.fail(error)
