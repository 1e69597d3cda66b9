"""Helpers for the push-API runtime tests: a handler that records what it handled in files (so that worker
processes and Ray actors can report to the test), a run in a background thread, and the runtimes a test is
parametrised over (the ``runtime`` fixture of ``tests/conftest.py``: threads, processes, Ray).

The sink is importable as ``harness.runtimes`` in worker processes (``spawn`` passes ``sys.path`` on) and in
Ray workers (the tests set ``PYTHONPATH`` in the Ray ``runtime_env``).
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multicluster_source import SourceRecord


@dataclass
class Runtime:
    """A ``runtime=`` of ``run()`` with the options a test passes along with it."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name


def ray_placement(nodes: dict[str, str]) -> Any:
    """``actor_options`` putting reader i on node a or b alternately (``nodes``: zone -> node id)."""
    strategies = importlib.import_module("ray.util.scheduling_strategies")

    order = [nodes["a"], nodes["b"]]

    def options(index: int) -> dict[str, Any]:
        strategy = strategies.NodeAffinitySchedulingStrategy(order[index % 2], soft=False)
        return {"num_cpus": 0.5, "scheduling_strategy": strategy}

    return options


class FileSink:
    """A handler appending ``cluster topic partition offset value`` lines to ``<dir>/<pid>-<thread>.txt``,
    flushed before it returns (so whatever it returned from is on disk even if its process is killed)."""

    def __init__(
        self, directory: str | os.PathLike[str], *, delay_s: float = 0.0, fail_on: bytes | None = None
    ):
        self.directory = str(directory)
        self.delay_s = delay_s
        self.fail_on = fail_on
        self.opened: list[int] = []

    def open(self, reader_index: int) -> None:
        os.makedirs(self.directory, exist_ok=True)
        Path(self.directory, f"open-{reader_index}-{os.getpid()}-{threading.get_ident()}").touch()

    def __call__(self, records: list[SourceRecord]) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)
        lines = []
        for r in records:
            if self.fail_on is not None and r.value == self.fail_on:
                raise ValueError(f"refusing {r.value!r}")
            value = r.value.decode() if isinstance(r.value, bytes) else str(r.value)
            lines.append(f"{r.cluster_id} {r.topic} {r.partition} {r.offset} {value}\n")
        os.makedirs(self.directory, exist_ok=True)
        path = Path(self.directory, f"{os.getpid()}-{threading.get_ident()}.txt")
        with open(path, "a", encoding="utf-8") as fh:
            fh.writelines(lines)
            fh.flush()


Row = tuple[str, str, int, int, str]


def sink_rows(directory: str | os.PathLike[str], pid: int | None = None) -> list[Row]:
    """Every line the sinks wrote (of one process when ``pid`` is given), complete lines only."""
    rows: list[Row] = []
    if not Path(directory).is_dir():
        return rows
    for path in sorted(Path(directory).glob("*.txt")):
        if pid is not None and not path.name.startswith(f"{pid}-"):
            continue
        for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
            if not line.endswith("\n"):
                continue
            cluster, topic, partition, offset, value = line.split(" ", 4)
            rows.append((cluster, topic, int(partition), int(offset), value.rstrip("\n")))
    return rows


def values(rows: list[Row]) -> Counter[str]:
    """Multiset of record values."""
    return Counter(r[4] for r in rows)


def positions(rows: list[Row]) -> Counter[tuple[str, str, int, int]]:
    """Multiset of (cluster, topic, partition, offset)."""
    return Counter(r[:4] for r in rows)


class BackgroundRun:
    """``source.run(...)`` on a thread of its own; ``join()`` returns its result or raises its error."""

    def __init__(self, source: Any, handler: Any, parallelism: int, **kwargs: Any) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(source, handler, parallelism, kwargs), name="test-run", daemon=True
        )
        self._thread.start()

    def _run(self, source: Any, handler: Any, parallelism: int, kwargs: dict[str, Any]) -> None:
        try:
            self.result = source.run(handler, parallelism, **kwargs)
        except BaseException as exc:
            self.error = exc

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float = 120.0) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "run() did not return"
        if self.error is not None:
            raise self.error
        return self.result
