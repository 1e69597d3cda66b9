"""One owner per checkpoint directory: :class:`DirectoryLock`, an OS-level lock on ``<dir>/.owner.lock``.

The lock is ``fcntl.flock`` (exclusive, non-blocking) on a file that stays in the directory. The kernel
drops it when the holder closes the file or its process ends in any way (``kill -9`` included), so a holder
that died never blocks the next owner, and there is nothing to clean up by hand. ``flock`` locks belong to
the open file, not to the process: a second lock on the same directory in the same process conflicts too.

While held, the file holds ``pid=<pid> source=<name>`` so the one refused can say who holds it. On network
filesystems ``flock`` is as good as the filesystem makes it (NFSv4 maps it to byte-range locks).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from pathlib import Path

from multicluster_source.exceptions import CheckpointError

LOCK_NAME = ".owner.lock"

__all__ = ["LOCK_NAME", "DirectoryLock"]


class DirectoryLock:
    """An exclusive lock on a checkpoint directory, held from :meth:`acquire` to :meth:`release`."""

    def __init__(self, directory: str | os.PathLike[str], owner: str = "") -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self._owner = owner
        self._fd: int | None = None
        self._mutex = threading.Lock()

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock (creating the directory and the lock file if absent).

        Raises :class:`~multicluster_source.CheckpointError` naming the directory and the holder's pid when
        another live owner (in this or another process) holds it, or when the file cannot be opened.
        """
        with self._mutex:
            if self._fd is not None:
                return
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise CheckpointError(
                    f"checkpoint directory {self.directory}: cannot open the lock file {self.path}: {exc}"
                ) from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise CheckpointError(
                    f"checkpoint directory {self.directory} is in use by another running source "
                    f"({holder}); a checkpoint directory belongs to one source at a time"
                ) from None
            except OSError as exc:
                os.close(fd)
                raise CheckpointError(
                    f"checkpoint directory {self.directory}: cannot lock {self.path}: {exc}"
                ) from exc
            with contextlib.suppress(OSError):  # the lock is what counts; the note helps the one refused
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"pid={os.getpid()} source={self._owner}\n".encode(), 0)
            self._fd = fd

    def release(self) -> None:
        """Drop the lock (idempotent). The file stays: removing it could race with the next owner."""
        with self._mutex:
            fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the file releases the flock

    def __repr__(self) -> str:
        return f"DirectoryLock({str(self.directory)!r}, held={self.held})"


def _read_holder(fd: int) -> str:
    """``held by pid <n>, source <name>`` from the holder's note (``pid unknown`` while it is written)."""
    try:
        text = os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    fields = dict(part.split("=", 1) for part in text.split() if "=" in part)
    pid = fields.get("pid", "unknown")
    source = fields.get("source")
    return f"held by pid {pid}" + (f", source {source}" if source else "")
