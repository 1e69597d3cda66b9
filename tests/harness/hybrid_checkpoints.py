"""Shared by the hybrid checkpoint tests (sync and asyncio): an archive stage on disk, a hybrid state write
that can be held or failed, and what a restored stream returns."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from harness.archive import kafka_log, write_archive
from multicluster_source import HybridSource, KafkaArchiveSource, SourceRecord
from multicluster_source.exceptions import CheckpointError
from multicluster_source.hybrid._state import HybridStateStore

SPLITS = {"east/orders/0": 120, "east/orders/1": 90}
LIMIT = 30.0  # a safety net against a hang, never a measurement


class HeldWrites:
    """``HybridStateStore.write`` that, once armed, waits for :attr:`release` (and may fail once)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.armed = False
        self.waiting = False
        self.fail_once = False
        self.writes = 0
        self.threads: list[str] = []
        real = HybridStateStore.write

        def write(store: HybridStateStore, state: Any) -> Path:
            self.threads.append(threading.current_thread().name)
            if self.armed:
                self.waiting = True
                self.entered.set()
                released = self.release.wait(LIMIT)
                self.waiting = False
                assert released
            if self.fail_once:
                self.fail_once = False
                raise CheckpointError("cannot write hybrid checkpoint: disk full (test)")
            self.writes += 1
            return real(store, state)

        monkeypatch.setattr(HybridStateStore, "write", write)

    def wait_held(self) -> None:
        """The write has begun and still waits for :attr:`release`."""
        assert self.entered.wait(LIMIT)
        assert self.waiting


def archive_hybrid(root: Path, splits: dict[str, int] = SPLITS) -> HybridSource:
    """A hybrid source of one archive stage: ``splits`` (id -> records) as jsonl parts under ``root``."""
    for split, n in splits.items():
        write_archive(root / "archive", "orders", int(split[-1]), kafka_log(n, seed=n), flush_size=25)
    return HybridSource.builder(KafkaArchiveSource({"east": str(root / "archive")}, format="jsonl")).build()


def keys(records: list[SourceRecord]) -> list[tuple[str, int]]:
    """``(split id, offset)`` of each record, sorted."""
    return sorted((r.split_id, r.offset) for r in records)


def state_files(directory: Path) -> list[Path]:
    """The hybrid state files in ``directory``, oldest first."""
    return sorted(directory.glob("hybrid-*.json"))


def restored(hybrid: HybridSource, ckpt: Path) -> list[SourceRecord]:
    """Everything a stream restored from ``ckpt`` returns."""
    out: list[SourceRecord] = []
    with hybrid.open(checkpoint_dir=str(ckpt)) as stream:
        while not stream.finished:
            out.extend(stream.poll(1.0))
    return out
