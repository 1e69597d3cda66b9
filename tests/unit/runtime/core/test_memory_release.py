"""A closed source gives the memory its clients freed back to the system (glibc), after its last client."""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import pytest

from multicluster_source.runtime.core import _enumeration, _memory


def test_stop_enumeration_releases_memory_after_everything_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []

    class Service:
        def close(self) -> None:
            order.append("metadata service closed")

    class Coordinator:
        def call_sync(self, fn: Any, timeout: float = 60.0) -> Any:
            return fn()

        def stop(self) -> None:
            order.append("coordinator stopped")

    class Enumerator:
        def close(self) -> None:
            order.append("enumerator closed")

    def release() -> bool:
        order.append("memory released")
        return True

    monkeypatch.setattr(_enumeration, "release_freed_memory", release)
    _enumeration.stop_enumeration("src", Coordinator(), Enumerator(), Service())  # type: ignore[arg-type]
    assert order == ["enumerator closed", "coordinator stopped", "metadata service closed", "memory released"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim is Linux only")
def test_glibc_gives_freed_memory_back() -> None:
    assert _memory.release_freed_memory() is True


def test_without_glibc_nothing_happens(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_libc(*_args: Any, **_kwargs: Any) -> Any:
        raise OSError("no such library")

    monkeypatch.setattr(_memory, "_trim", None)
    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    assert _memory.release_freed_memory() is False
