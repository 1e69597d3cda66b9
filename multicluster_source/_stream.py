"""The running source as the caller sees it: :class:`SourceStream`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._checkpoint import CheckpointStore
from ._framework import RecordBatch
from ._metrics import SourceMetrics
from ._records import SourceRecord
from ._runtime import Coordinator, Handoff, PositionTracker, ReaderRunner
from .exceptions import MultiClusterSourceError, SourceFailedError

if TYPE_CHECKING:
    from ._source import MultiClusterKafkaSource

_log = logging.getLogger("multicluster_source")


class SourceStream:
    """A running source: iterate it, or ``poll()`` it; take checkpoints; close it.

    Created by :meth:`MultiClusterKafkaSource.open`. ``poll``, iteration and ``checkpoint`` are meant to be
    called from one thread (the caller's); with ``checkpoint_interval`` the periodic checkpoints are taken
    inside ``poll`` on that thread, so each covers exactly the records returned before it.
    """

    def __init__(
        self,
        source: MultiClusterKafkaSource,
        *,
        parallelism: int,
        checkpoint_dir: str | None,
        checkpoint_interval: float | None,
        registry: Any,
    ) -> None:
        self._source = source
        self._name = source.name
        self._parallelism = parallelism
        self._interval = checkpoint_interval
        self._store = CheckpointStore(checkpoint_dir) if checkpoint_dir is not None else None
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()
        self._closed = False
        self._pending: list[SourceRecord] = []
        self._pending_batch: RecordBatch | None = None
        self._checkpoint_id = 0
        self._last_checkpoint = time.monotonic()
        self.restored_from: str | None = None
        self._metrics = SourceMetrics(registry, self._name)
        restored = self._store.latest() if self._store is not None else None
        if restored is not None:
            self._checkpoint_id = restored.checkpoint_id
            self.restored_from = str(restored.path)
            _log.info("source=%s: restoring from checkpoint %s", self._name, restored.path)
        self._tracker = PositionTracker(restored.positions if restored else None)
        self._handoff = Handoff(source.options.reader_buffer_max_batches)
        self._coordinator = Coordinator(self._name, parallelism, self._tracker, self._fail)
        self._readers = [
            ReaderRunner(i, self._name, self._coordinator, self._handoff, self._fail)
            for i in range(parallelism)
        ]
        self._coordinator.readers = self._readers
        try:
            self._coordinator.start()
            enumerator = self._coordinator.call_sync(
                lambda: source.create_enumerator(
                    self._coordinator,
                    restored.enumerator if restored else None,
                    restored.positions if restored else None,
                    self._metrics,
                )
            )
            self._enumerator = enumerator
            self._coordinator.enumerator = enumerator
            self._coordinator.call_sync(enumerator.start)
            for runner in self._readers:
                runner.start(source.create_reader(runner, self._metrics))
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------------------------------- failures

    def _fail(self, error: BaseException) -> None:
        with self._error_lock:
            if self._error is not None:
                return
            self._error = error
        _log.error("source=%s: failed: %s", self._name, error)
        self._handoff.closed.set()

    def _raise_if_failed(self) -> None:
        error = self._error
        if error is None:
            return
        if isinstance(error, MultiClusterSourceError):
            raise error
        raise SourceFailedError(f"source {self._name} failed: {error}") from error

    # ------------------------------------------------------------------------------------------ reading

    def poll(self, timeout: float = 1.0, max_records: int = 10_000) -> list[SourceRecord]:
        """Records that are ready (at most ``max_records``), ``[]`` after ``timeout`` seconds.

        Raises the source's fatal error if it failed.
        """
        self._raise_if_failed()
        if self._closed:
            return []
        if self._interval is not None and time.monotonic() - self._last_checkpoint >= self._interval:
            self.checkpoint()
        out: list[SourceRecord] = []
        deadline = time.monotonic() + timeout
        while len(out) < max_records:
            if self._pending_batch is None:
                wait = 0.0 if out else deadline - time.monotonic()
                batch = self._handoff.get(min(wait, 0.1) if wait > 0 else 0.0)
                if batch is None:
                    if out or time.monotonic() >= deadline or self._error is not None or self.finished:
                        break
                    continue
                self._pending_batch = batch
                self._pending = list(batch.records)
            room = max_records - len(out)
            if len(self._pending) <= room:
                out.extend(self._pending)
                assert self._pending_batch is not None
                self._tracker.advance(self._pending_batch.positions)
                self._pending = []
                self._pending_batch = None
            else:
                part, self._pending = self._pending[:room], self._pending[room:]
                out.extend(part)
                self._tracker.advance({r.split_id: r.offset + 1 for r in part})
        if not out:
            self._raise_if_failed()
        return out

    def __iter__(self) -> Iterator[SourceRecord]:
        """Every record, blocking; ends when a bounded source finished or the stream was closed."""
        while True:
            records = self.poll(timeout=0.5)
            yield from records
            if not records and (self._closed or self.finished):
                return

    @property
    def finished(self) -> bool:
        """Bounded and every split reached its stopping offset, with every record returned."""
        if self._source.stopping is None:
            return False
        return (
            all(r.finished.is_set() for r in self._readers)
            and self._pending_batch is None
            and self._handoff.empty()
        )

    @property
    def name(self) -> str:
        """The source's name."""
        return self._name

    @property
    def admin_url(self) -> str | None:
        """Base URL of the admin HTTP server (none in this version)."""
        return None

    def assignments(self) -> dict[int, list[str]]:
        """Reader index -> split ids it reads now."""
        out: dict[int, list[str]] = {}
        for runner in self._readers:
            reader = runner.reader
            split_ids = getattr(reader, "split_ids", None)
            out[runner.index] = list(split_ids()) if callable(split_ids) else []
        return out

    def status(self) -> dict[str, Any]:
        """A JSON-ready view: enumerator state, readers, last reconciliation."""
        status = getattr(self._enumerator, "status", None)
        enum = self._coordinator.call_sync(status) if callable(status) else {}
        return {"source": self._name, "enumerator": enum, "readers": self.assignments()}

    # -------------------------------------------------------------------------------------- checkpoints

    def checkpoint(self) -> int:
        """Take a checkpoint covering every record already returned; returns its id once it is durable and,
        with a group id, once offsets were committed (or the commit timed out, which is logged)."""
        self._raise_if_failed()
        positions = self._tracker.snapshot()
        self._checkpoint_id += 1
        checkpoint_id = self._checkpoint_id
        enum_state = self._coordinator.call_sync(lambda: self._enumerator.snapshot_state(checkpoint_id))
        ids = {
            s["cluster"] + "/" + s["topic"] + "/" + str(s["partition"]) for s in enum_state.get("splits", [])
        }
        ids |= {
            r["split"]["cluster"] + "/" + r["split"]["topic"] + "/" + str(r["split"]["partition"])
            for r in enum_state.get("removed", [])
        }
        kept = {sid: pos for sid, pos in positions.items() if sid in ids}
        if self._store is not None:
            self._store.write(checkpoint_id, self._name, enum_state, kept)
        wait = self._coordinator.call_sync(
            lambda: self._enumerator.notify_checkpoint_complete(checkpoint_id, kept)
        )
        wait(30.0)
        self._last_checkpoint = time.monotonic()
        return checkpoint_id

    # ------------------------------------------------------------------------------------------- closing

    def close(self) -> None:
        """Stop readers and the enumerator, close every client, release metrics. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._handoff.closed.set()
        for runner in getattr(self, "_readers", []):
            if runner.reader is not None:
                runner.stop()
        enumerator = getattr(self, "_enumerator", None)
        if enumerator is not None:
            try:
                self._coordinator.call_sync(enumerator.close, timeout=30)
            except Exception:
                _log.exception("source=%s: enumerator close failed", self._name)
        self._coordinator.stop()
        try:
            self._source.metadata_service.close()
        except Exception:
            _log.exception("source=%s: metadata service close failed", self._name)
        self._metrics.close()

    def __enter__(self) -> SourceStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
