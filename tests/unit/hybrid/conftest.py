"""Fixtures of the hybrid checkpoint tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.hybrid_checkpoints import HeldWrites, archive_hybrid
from multicluster_source import HybridSource


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> HeldWrites:
    """Hybrid state writes that a test can hold or fail."""
    return HeldWrites(monkeypatch)


@pytest.fixture
def hybrid(tmp_path: Path) -> HybridSource:
    """A hybrid source of one archive stage of two splits (120 and 90 records)."""
    return archive_hybrid(tmp_path)
