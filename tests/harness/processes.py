"""Ports and processes for brokers the tests start: free loopback ports, the ``java`` binary, log tails,
and stopping a process (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import threading
from pathlib import Path

HOST = "127.0.0.1"
"""Every broker the tests start listens on loopback."""

_ports_lock = threading.Lock()
_ports_handed_out: set[int] = set()


_random = random.SystemRandom()  # unaffected by tests that seed `random`


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A loopback port that was free a moment ago and was not handed out before by this process.

    It lies outside the kernel's ephemeral range, so no client connection takes it while a broker that
    listens on it is stopped for a restart.
    """
    low, high = _ephemeral_range()
    candidates = range(10000, low) if low > 12000 else range(high + 1, 65536)
    while True:
        port = _random.choice(candidates)
        with _ports_lock:
            if port in _ports_handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((HOST, port))
                except OSError:
                    continue
            _ports_handed_out.add(port)
            return port


def accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def tail_file(path: Path, lines: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 400 * lines - 4096))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def end_process(proc: subprocess.Popen[bytes], *, graceful: bool, timeout: float = 20.0) -> None:
    """Stop a process: SIGTERM and wait (graceful), SIGKILL otherwise or when it does not exit in time."""
    if proc.poll() is None and graceful:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home, "bin", "java"), os.X_OK):
        return str(Path(home, "bin", "java"))
    return shutil.which("java")
