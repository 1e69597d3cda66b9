"""Leak checks for long tests: what a user would look at in a process that opened a stream and closed it.

:class:`ProcessFacts` is one look at the current process (``/proc/self``): resident memory, open file
descriptors, live librdkafka clients (one OS thread ``rdk:main`` each; their other threads are ``rdk:...``
too) and the source's Python threads (named ``mcs-...``). :func:`leaks_after_close` compares a look taken
before the stream was built with one taken after it was closed; :func:`memory_growth` judges resident memory
sampled over a run (bounded, or still climbing at the end). Both are plain functions of their inputs, so
they are unit-tested without brokers; :func:`settle_after_close` waits briefly for threads that end
asynchronously before taking the closing look. :class:`RunHealth` and :func:`leak_report` judge what the
chaos soak's job reported about itself, run by run (``harness.chaos``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FD_SLACK = 2
"""Descriptors a closed stream may leave open beyond the start count (logging, a lazily opened file)."""


@dataclass(frozen=True)
class ProcessFacts:
    """One look at a process: RSS in MiB, open descriptors, librdkafka clients and threads, ``mcs-`` threads."""

    rss_mb: float
    fds: int
    rdk_clients: int
    rdk_threads: int
    mcs_threads: tuple[str, ...]

    @classmethod
    def now(cls) -> ProcessFacts:
        """The current process's facts."""
        rdk_clients = rdk_threads = 0
        for task in Path("/proc/self/task").iterdir():
            try:
                name = (task / "comm").read_text().strip()
            except OSError:  # the thread ended while we looked
                continue
            rdk_threads += name.startswith("rdk:")
            rdk_clients += name == "rdk:main"
        return cls(
            rss_mb=_rss_mb(),
            fds=len(os.listdir("/proc/self/fd")),
            rdk_clients=rdk_clients,
            rdk_threads=rdk_threads,
            mcs_threads=tuple(sorted(t.name for t in threading.enumerate() if t.name.startswith("mcs-"))),
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain data (JSON)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProcessFacts:
        """The inverse of :meth:`as_dict`."""
        return cls(
            rss_mb=float(data["rss_mb"]),
            fds=int(data["fds"]),
            rdk_clients=int(data["rdk_clients"]),
            rdk_threads=int(data["rdk_threads"]),
            mcs_threads=tuple(data["mcs_threads"]),
        )


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def leaks_after_close(before: ProcessFacts, after: ProcessFacts, *, fd_slack: int = FD_SLACK) -> list[str]:
    """What the closed stream left behind, compared with the look before it was built (empty: nothing)."""
    problems = []
    new_threads = sorted(set(after.mcs_threads) - set(before.mcs_threads))
    if new_threads:
        problems.append(f"{len(new_threads)} mcs- thread(s) still alive after close: {new_threads}")
    if after.rdk_clients > before.rdk_clients:
        problems.append(
            f"{after.rdk_clients - before.rdk_clients} librdkafka client(s) not closed "
            f"(rdk:main threads {before.rdk_clients} -> {after.rdk_clients})"
        )
    elif after.rdk_threads > before.rdk_threads:
        problems.append(f"librdkafka threads {before.rdk_threads} -> {after.rdk_threads} after close")
    if after.fds > before.fds + fd_slack:
        problems.append(f"file descriptors {before.fds} -> {after.fds} after close (slack {fd_slack})")
    return problems


def settle_after_close(before: ProcessFacts, timeout: float = 15.0) -> ProcessFacts:
    """The process's facts once nothing of :func:`leaks_after_close` is left, or after ``timeout`` seconds
    (threads a close asked to stop may take a moment to end)."""
    deadline = time.monotonic() + timeout
    while True:
        facts = ProcessFacts.now()
        if not leaks_after_close(before, facts) or time.monotonic() >= deadline:
            return facts
        time.sleep(0.2)


@dataclass(frozen=True)
class MemoryVerdict:
    """Resident memory over one run (after its warm-up): the peaks of its first, middle and last thirds, and
    whether it levelled off."""

    seconds: float
    first_peak_mb: float
    middle_peak_mb: float
    last_peak_mb: float
    bounded: bool

    def describe(self) -> str:
        """One line."""
        verdict = "levelled off" if self.bounded else "GROWING in every third"
        return (
            f"RSS over {self.seconds:.0f}s peaked at {self.first_peak_mb:.0f} / {self.middle_peak_mb:.0f} / "
            f"{self.last_peak_mb:.0f} MB by thirds: {verdict}"
        )


def memory_growth(
    samples: Sequence[tuple[float, float]],
    *,
    warmup: float = 10.0,
    min_seconds: float = 45.0,
    step_mb: float = 16.0,
) -> MemoryVerdict | None:
    """Judge ``(seconds since the run's start, rss_mb)`` samples of one run, split in thirds after
    ``warmup`` seconds: growing without bound when each third's peak is more than ``step_mb`` above the
    previous one's (a leak climbs all along; a source's buffers fill, then its memory stays level, and one
    late backlog raises only the last third). None when the run is shorter than ``min_seconds`` after the
    warm-up, or a third has no sample (too little to tell)."""
    kept = sorted((t, rss) for t, rss in samples if t >= warmup)
    if len(kept) < 3 or kept[-1][0] - kept[0][0] < min_seconds:
        return None
    start, end = kept[0][0], kept[-1][0]
    third = (end - start) / 3
    parts = [
        [rss for t, rss in kept if t <= start + third],
        [rss for t, rss in kept if start + third < t < end - third],
        [rss for t, rss in kept if t >= end - third],
    ]
    if not all(parts):
        return None
    first, middle, last = (max(part) for part in parts)
    growing = middle - first > step_mb and last - middle > step_mb
    return MemoryVerdict(end - start, first, middle, last, not growing)


def live_clients() -> list[str]:
    """The confluent-kafka clients (Consumer, Producer, AdminClient) this process still holds, each with the
    classes of the objects that refer to it (to name the owner of a client left open)."""
    import gc

    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    found = []
    for obj in gc.get_objects():
        if not isinstance(obj, (Consumer, Producer, AdminClient)):
            continue
        owners = set()
        for ref in gc.get_referrers(obj):
            if isinstance(ref, dict):  # an instance's __dict__: name its instance
                owners |= {
                    type(o).__qualname__ for o in gc.get_referrers(ref) if getattr(o, "__dict__", None) is ref
                }
            elif not isinstance(ref, list):  # a list: gc.get_objects()'s own
                owners.add(type(ref).__qualname__)
        found.append(f"{type(obj).__name__} held by {sorted(owners) or 'nothing'}")
    return sorted(found)


# ------------------------------------------------------------------- the chaos soak's job, run by run


@dataclass
class RunHealth:
    """What one run of the job reported about its own process (``harness.leaks``)."""

    run: int
    baseline: ProcessFacts | None = None
    samples: list[tuple[float, ProcessFacts]] = field(default_factory=list)  # (wall time, facts)
    closed: ProcessFacts | None = None  # None: the run did not end by a SIGTERM (a kill -9, a crash)
    leaks: list[str] = field(default_factory=list)


@dataclass
class LeakReport:
    """The leak checks of a soak: the last run (ended by SIGTERM, its stream closed) against its own start,
    and the job's resident memory per fault window and per run."""

    last_run: RunHealth
    windows: list[tuple[float, float]]  # (window start in seconds since the soak's start, peak RSS in MB)
    memory: list[tuple[int, MemoryVerdict]]  # (run, verdict) for the runs long enough to judge

    @property
    def problems(self) -> list[str]:
        """What a user would call a leak (empty: none)."""
        found = list(self.last_run.leaks)
        if self.last_run.closed is None:
            found.append(f"run {self.last_run.run} did not report its process after closing its stream")
        found += [f"run {run}: {verdict.describe()}" for run, verdict in self.memory if not verdict.bounded]
        return found

    def summary(self) -> str:
        """One line: after close, then memory."""
        base, closed = self.last_run.baseline, self.last_run.closed
        if base is None or closed is None:
            after = "no report after close"
        else:
            after = (
                f"mcs- threads {len(closed.mcs_threads)}, librdkafka clients {base.rdk_clients} -> "
                f"{closed.rdk_clients} (threads {base.rdk_threads} -> {closed.rdk_threads}), descriptors "
                f"{base.fds} -> {closed.fds}"
            )
        windows = ", ".join(f"{peak:.0f}" for _start, peak in self.windows) or "-"
        memory = "; ".join(f"run {run}: {v.describe()}" for run, v in self.memory) or "no run long enough"
        verdict = "OK" if not self.problems else "FAILED: " + "; ".join(self.problems)
        return (
            f"leaks after the last run's close: {after}; job RSS peak per fault window (MB): {windows}; "
            f"{memory}: {verdict}"
        )


def leak_report(healths: Sequence[RunHealth], fault_starts: Sequence[float], wall0: float) -> LeakReport:
    """The :class:`LeakReport` of a soak's runs (the last one is judged after close), with fault windows
    starting at 0 and at each of ``fault_starts`` (seconds since the soak's start, at wall time ``wall0``)."""
    starts = [0.0, *fault_starts]
    samples = sorted((t - wall0, facts.rss_mb) for h in healths for t, facts in h.samples)
    windows = []
    for start, end in zip(starts, [*starts[1:], float("inf")], strict=True):
        inside = [rss for t, rss in samples if start <= t < end]
        if inside:
            windows.append((start, max(inside)))
    memory = []
    for health in healths:
        if not health.samples:
            continue
        began = health.samples[0][0]  # a run's warm-up is judged from its own start
        verdict = memory_growth([(t - began, f.rss_mb) for t, f in health.samples])
        if verdict is not None:
            memory.append((health.run, verdict))
    return LeakReport(healths[-1] if healths else RunHealth(-1), windows, memory)
