"""What a caller holds of a push run: ``RunControl`` steers it from other threads, ``RunResult`` tells
what it did."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

_log = logging.getLogger("multicluster_source.push")


@dataclass(frozen=True)
class WorkerInfo:
    """One reader's worker as the driver sees it."""

    index: int
    pid: int | None
    host: str | None
    rack: str | None
    alive: bool
    splits: tuple[str, ...] = ()


class RunControl:
    """Steers a run from other threads: ``source.run(handler, control=control)``.

    ``stop()`` makes ``run`` finish the batches the handlers are in, take a final checkpoint and return;
    ``workers()`` shows where each reader runs (pid, host, rack) and what it reads. One control per run.
    """

    def __init__(self) -> None:
        """A control for one run."""
        self._stop = threading.Event()
        self._running = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._workers: dict[int, WorkerInfo] = {}
        self._records = 0
        self._checkpoints = 0
        self._watermark: int | None = None

    def stop(self) -> None:
        """Ask the run to stop (from any thread; idempotent)."""
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        """Whether ``stop()`` was called."""
        return self._stop.is_set()

    def wait_running(self, timeout: float | None = None) -> bool:
        """Wait until every reader has started (True), or the run ended or ``timeout`` passed (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._running.is_set():
            if self._done.is_set():
                return False
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._running.wait(0.05 if left is None else min(0.05, left))
        return True

    def wait_done(self, timeout: float | None = None) -> bool:
        """Wait until ``run`` has returned or raised."""
        return self._done.wait(timeout)

    def workers(self) -> dict[int, WorkerInfo]:
        """Reader index -> its worker."""
        with self._lock:
            return dict(self._workers)

    @property
    def records(self) -> int:
        """Records the handlers returned from so far (as reported to the driver)."""
        return self._records

    @property
    def watermark(self) -> int | None:
        """The run's event-time watermark in ms, over the records the handlers returned from (None without
        a watermark strategy, and until every active split has one)."""
        return self._watermark

    @property
    def checkpoints(self) -> int:
        """Checkpoints taken so far."""
        return self._checkpoints


class RunProgress:
    """The run's side of a :class:`RunControl`: what the driver (and a hybrid run) reports into it. Made by
    the run for its control; used on the driver's thread."""

    def __init__(self, control: RunControl) -> None:
        self.control = control

    @property
    def used(self) -> bool:
        """Whether the control served a run already (a control serves one run)."""
        return self.control._running.is_set() or self.control._done.is_set()

    def running(self) -> None:
        """Every reader started."""
        self.control._running.set()

    def done(self) -> None:
        """The run returned or raised."""
        self.control._done.set()

    def handled(self, records: int) -> None:
        """The handlers returned from ``records`` more records."""
        self.control._records += records

    def watermark(self, ms: int) -> bool:
        """The run's watermark is ``ms``; whether it moved."""
        if ms == self.control._watermark:
            return False
        self.control._watermark = ms
        return True

    def checkpoints(self, written: int) -> None:
        """Checkpoints written so far."""
        self.control._checkpoints = written

    def worker(self, index: int, **changes: Any) -> None:
        """What changed of reader ``index``'s worker (:class:`WorkerInfo` fields)."""
        control = self.control
        with control._lock:
            old = control._workers.get(index) or WorkerInfo(index, None, None, None, True)
            control._workers[index] = WorkerInfo(**{**old.__dict__, **changes})


@dataclass(frozen=True)
class RunResult:
    """What a run did."""

    runtime: str
    parallelism: int
    finished: bool
    """True: a bounded source was read to its end; False: the run was stopped."""
    records: int
    """Records the handlers returned from."""
    records_per_reader: dict[int, int] = field(default_factory=dict)
    checkpoints: int = 0
    last_checkpoint: str | None = None
    """Where the last checkpoint went (a path or object key)."""
    restored_from: str | None = None
    lost_readers: dict[int, str] = field(default_factory=dict)
    """Reader index -> why its worker was lost (its splits moved to other readers)."""
    seconds: float = 0.0
