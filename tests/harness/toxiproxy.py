"""Toxiproxy for the chaos tests: the server binary built with ``go install`` into the same cache as Kafka's
jars (``$MCS_KAFKA_CACHE``/toxiproxy-<version>), and :class:`Toxiproxy`, one server on a loopback port driven
over its HTTP API with ``urllib``.

A proxy listens on a loopback port and forwards to one broker; toxics act on its ``downstream`` (broker to
client) or ``upstream`` (client to broker) direction: ``latency``, ``timeout`` (a blackhole with
``timeout=0``), ``reset_peer``, ``bandwidth``, ...
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from harness.maven import CACHE_ENV
from harness.processes import HOST, end_process, free_port, tail_file

TOXIPROXY_VERSION = "2.12.0"
TOXIPROXY_MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"

_build_lock = threading.Lock()


def toxiproxy_cache_dir() -> Path:
    """Where the server of :data:`TOXIPROXY_VERSION` is cached (beside the Kafka jars)."""
    base = os.environ.get(CACHE_ENV) or str(Path.home() / ".cache" / "multicluster-source")
    return Path(base).expanduser() / f"toxiproxy-{TOXIPROXY_VERSION}"


def ensure_toxiproxy(timeout: float = 900.0) -> Path:
    """Return the path of the Toxiproxy server binary, building it with ``go install`` first if the cache
    does not hold it (an exclusive file lock makes concurrent builds wait for one another)."""
    cache = toxiproxy_cache_dir()
    binary = cache / "server"
    if os.access(binary, os.X_OK):
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    with _build_lock, open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not os.access(binary, os.X_OK):
                _build(cache, timeout)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return binary


def _build(cache: Path, timeout: float) -> None:
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("Toxiproxy for the chaos tests is built with Go: install `go` (1.22+)")
    staging = cache / f"bin.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    command = [go, "install", f"{TOXIPROXY_MODULE}@v{TOXIPROXY_VERSION}"]
    result = subprocess.run(
        command,
        cwd=cache,
        env=dict(os.environ, GOBIN=str(staging), GOFLAGS="-buildvcs=false"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    built = staging / "server"
    if result.returncode != 0 or not built.is_file():
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"building Toxiproxy failed ({' '.join(command)}):\n{result.stderr[-4000:]}")
    built.rename(cache / "server")
    shutil.rmtree(staging, ignore_errors=True)


class ToxiproxyError(RuntimeError):
    """The Toxiproxy API answered with an error."""


class Toxiproxy:
    """One Toxiproxy server on ``127.0.0.1:<api_port>``; ``start()`` launches it, ``stop()`` ends it.

    Proxies are named by the caller; ``reset()`` removes every toxic and enables every proxy (the heal).
    """

    def __init__(self, workdir: Path) -> None:
        self._workdir = workdir
        self._proc: subprocess.Popen[bytes] | None = None
        self.api_port = 0

    @property
    def log_path(self) -> Path:
        """The server's output."""
        return self._workdir / "toxiproxy.log"

    def start(self, timeout: float = 30.0) -> Toxiproxy:
        """Start the server on a free loopback port and wait until its API answers."""
        binary = ensure_toxiproxy()
        self._workdir.mkdir(parents=True, exist_ok=True)
        self.api_port = free_port()
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [str(binary), "-host", HOST, "-port", str(self.api_port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"toxiproxy exited at start:\n{tail_file(self.log_path, 30)}")
            try:
                self._call("GET", "/version")
                return self
            except (OSError, ToxiproxyError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(f"toxiproxy API not up in {timeout}s") from None
                time.sleep(0.1)

    def stop(self) -> None:
        """End the server (its proxies close with it)."""
        if self._proc is not None:
            end_process(self._proc, graceful=True, timeout=5.0)
            self._proc = None

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://{HOST}:{self.api_port}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10.0) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            raise ToxiproxyError(
                f"{method} {path}: {exc.code} {exc.read().decode(errors='replace')}"
            ) from exc
        return json.loads(text) if text.strip() else None

    def create_proxy(self, name: str, listen_port: int, upstream_port: int) -> None:
        """Proxy ``127.0.0.1:listen_port`` to ``127.0.0.1:upstream_port`` (replacing a proxy of that name)."""
        proxies = self._call("GET", "/proxies")
        if name in proxies:
            self._call("DELETE", f"/proxies/{name}")
        self._call(
            "POST",
            "/proxies",
            {"name": name, "listen": f"{HOST}:{listen_port}", "upstream": f"{HOST}:{upstream_port}"},
        )

    def add_toxic(
        self,
        proxy: str,
        kind: str,
        attributes: dict[str, int],
        *,
        stream: str = "downstream",
        name: str | None = None,
    ) -> str:
        """Add a toxic of ``kind`` (``latency``, ``timeout``, ``reset_peer``, ``bandwidth``, ...) on one
        direction of ``proxy``; return its name."""
        toxic = name or f"{kind}-{stream}"
        body = {"name": toxic, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attributes}
        self._call("POST", f"/proxies/{proxy}/toxics", body)
        return toxic

    def set_enabled(self, proxy: str, enabled: bool) -> None:
        """Enable or disable a proxy (disabled: it refuses connections and drops the open ones)."""
        self._call("POST", f"/proxies/{proxy}", {"enabled": enabled})

    def toxics(self, proxy: str) -> list[dict[str, Any]]:
        """The toxics now on ``proxy``."""
        result: list[dict[str, Any]] = self._call("GET", f"/proxies/{proxy}/toxics")
        return result

    def reset(self) -> None:
        """Remove every toxic of every proxy and enable them all."""
        self._call("POST", "/reset")
