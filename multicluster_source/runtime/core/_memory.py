"""Giving the memory a closed source freed back to the system.

A source's clients allocate on their own threads (librdkafka's fetch buffers, one queue per partition), so
glibc serves them from per-thread arenas. Closing frees all of it, but glibc keeps freed pages of those
arenas mapped for reuse: measured with 100 clusters (``benchmarks/bench_clusters.py``), the process's
resident memory after ``close()`` stayed 180 MiB above what it was before ``open()`` until
``malloc_trim(0)`` handed the pages back, while the memory Python itself held did not grow. So once the
last client of a source is closed, :func:`release_freed_memory` asks glibc to give freed pages back. It
frees nothing that is in use, and where the C library is not glibc it does nothing.

Threads: called by whichever thread closes a source (after every client of it is closed).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
import threading
from collections.abc import Callable

_log = logging.getLogger("multicluster_source.runtime")
_lock = threading.Lock()
_trim: Callable[[int], int] | bool | None = None  # glibc's malloc_trim, False without it; found on first use


def release_freed_memory() -> bool:
    """Ask the C allocator to return freed memory to the system; True when it did (glibc only)."""
    global _trim
    with _lock:
        if _trim is None:
            _trim = False
            if sys.platform.startswith("linux"):
                try:
                    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                    found = libc.malloc_trim
                    found.argtypes = [ctypes.c_size_t]
                    found.restype = ctypes.c_int
                    _trim = found
                except (OSError, AttributeError):  # not glibc (musl, ...): nothing to do
                    _trim = False
        trim = _trim
    if not callable(trim):
        return False
    try:
        return bool(trim(0))
    except Exception as exc:  # never let giving memory back fail a close
        _log.debug("malloc_trim failed: %s", exc)
        return False
