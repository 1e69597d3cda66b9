"""Push handlers for event-time tests (module level, so worker processes can unpickle them)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any


class WatermarkSink:
    """Counts records in ``<dir>/records-<pid>-<thread>.txt`` and writes every ``on_watermark(ms)`` it gets
    to ``<dir>/wm-<pid>-<thread>.txt`` (one line each)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = str(directory)

    def _path(self, kind: str) -> Path:
        os.makedirs(self.directory, exist_ok=True)
        return Path(self.directory, f"{kind}-{os.getpid()}-{threading.get_ident()}.txt")

    def __call__(self, records: Any) -> None:
        with open(self._path("records"), "a", encoding="utf-8") as fh:
            fh.write(f"{len(records)}\n")

    def on_watermark(self, ms: int) -> None:
        with open(self._path("wm"), "a", encoding="utf-8") as fh:
            fh.write(f"{ms}\n")


def watermarks_seen(directory: str | os.PathLike[str]) -> list[list[int]]:
    """Per handler thread, the watermarks its ``on_watermark`` got, in order."""
    return [[int(line) for line in p.read_text().split()] for p in sorted(Path(directory).glob("wm-*.txt"))]


def records_seen(directory: str | os.PathLike[str]) -> int:
    """Records the handlers returned from."""
    return sum(int(line) for p in Path(directory).glob("records-*.txt") for line in p.read_text().split())
