"""Where checkpoints of a run go: the :class:`CheckpointStorage` seam.

Only the coordinator (the process that runs the enumerator: the caller of ``run``/``open``, the Ray driver)
reads and writes checkpoints; workers never touch the storage. A storage must be reachable wherever that
process may be restarted: a directory on a shared filesystem, or an object store.

* :class:`DirectoryCheckpointStorage`: files ``chk-<id>.json`` in a directory, written atomically (write,
  fsync, rename, fsync the directory); the last ``keep`` are kept. ``run()`` takes the directory's owner
  lock (:mod:`~multicluster_source.framework._dirlock`) for the whole run.
* :class:`ObjectStoreCheckpointStorage`: objects ``<prefix>chk-<id>.json`` in any :class:`ObjectStore`
  (S3, GCS, Azure Blob... through a short adapter, docs/guides/scale-out.md), relying on what every store
  gives: a ``put`` of a whole object is atomic, and listing a prefix shows the objects written before.
* :class:`InMemoryObjectStore`: an object store in memory, for tests.

Both write the same document (:func:`~multicluster_source.framework._checkpoint.encode_checkpoint`), so a
checkpoint can be copied from one to the other.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path, PurePosixPath
from typing import Any, Protocol, runtime_checkable

from multicluster_source.exceptions import CheckpointError
from multicluster_source.framework._checkpoint import (
    Checkpoint,
    CheckpointStore,
    decode_checkpoint,
    encode_checkpoint,
)
from multicluster_source.framework._dirlock import DirectoryLock

_log = logging.getLogger("multicluster_source.checkpoint")
_KEY = re.compile(r"chk-(\d{12})\.json$")

__all__ = [
    "CheckpointStorage",
    "DirectoryCheckpointStorage",
    "InMemoryObjectStore",
    "ObjectStore",
    "ObjectStoreCheckpointStorage",
]


@runtime_checkable
class CheckpointStorage(Protocol):
    """Durable checkpoints of one source: ``write`` one, read back the ``latest`` that reads cleanly."""

    def describe(self) -> str:
        """Where checkpoints go, for logs (never credentials)."""
        ...

    def write(
        self, checkpoint_id: int, source: str, enumerator: dict[str, Any], positions: dict[str, int]
    ) -> str:
        """Store a checkpoint durably (it is complete or absent, never partial); returns where it went.
        Raises :class:`~multicluster_source.CheckpointError` when it cannot."""
        ...

    def latest(self) -> Checkpoint | None:
        """The newest checkpoint that reads cleanly (damaged newer ones are skipped), or None."""
        ...


class DirectoryCheckpointStorage:
    """Checkpoints as files in a directory (local, or a shared filesystem such as NFS or EFS).

    A directory belongs to one running source at a time: ``run()`` calls :meth:`acquire` before it reads
    the latest checkpoint and :meth:`release` when it ends.
    """

    def __init__(self, directory: str | os.PathLike[str], *, keep: int = 3) -> None:
        """Use ``directory`` (created if absent); keep the newest ``keep`` checkpoints."""
        self._store = CheckpointStore(directory, keep=keep)
        self._lock = DirectoryLock(self._store.directory)

    def acquire(self, owner: str = "") -> None:
        """Become the directory's one owner (``owner``: a source name, written beside the pid).

        Raises :class:`~multicluster_source.CheckpointError` naming the directory and the holder's pid when a
        live source (in this or another process) holds it; a holder that died does not block.
        """
        lock = DirectoryLock(self._store.directory, owner)  # a new open file: held already means refused
        lock.acquire()
        self._lock = lock

    def release(self) -> None:
        """Give the directory up (idempotent)."""
        self._lock.release()

    def __repr__(self) -> str:
        return f"DirectoryCheckpointStorage({str(self._store.directory)!r})"

    @property
    def directory(self) -> Path:
        """The directory."""
        return self._store.directory

    def describe(self) -> str:
        """``directory <path>``."""
        return f"directory {self._store.directory}"

    def write(
        self, checkpoint_id: int, source: str, enumerator: dict[str, Any], positions: dict[str, int]
    ) -> str:
        """Write ``chk-<id>.json`` atomically; returns its path."""
        return str(self._store.write(checkpoint_id, source, enumerator, positions))

    def latest(self) -> Checkpoint | None:
        """The newest checkpoint file that reads cleanly."""
        return self._store.latest()


@runtime_checkable
class ObjectStore(Protocol):
    """The four calls :class:`ObjectStoreCheckpointStorage` needs from an object store (S3 and the like)."""

    def put(self, key: str, data: bytes) -> None:
        """Write a whole object atomically (readers see the old object, or none, or all of the new one)."""
        ...

    def get(self, key: str) -> bytes:
        """Read a whole object; raises ``KeyError`` (or the client's own error) when it does not exist."""
        ...

    def list(self, prefix: str) -> list[str]:
        """Keys of the objects whose key starts with ``prefix``."""
        ...

    def delete(self, key: str) -> None:
        """Delete an object (no error when it is absent)."""
        ...


class ObjectStoreCheckpointStorage:
    """Checkpoints as objects ``<prefix>chk-<id:012d>.json`` in an :class:`ObjectStore`."""

    def __init__(self, store: ObjectStore, prefix: str = "checkpoints/", *, keep: int = 3) -> None:
        """Store under ``prefix`` (give each source its own, e.g. ``"jobs/billing/"``); keep ``keep``."""
        if not isinstance(store, ObjectStore):
            raise TypeError("ObjectStoreCheckpointStorage needs an ObjectStore (put, get, list, delete)")
        self._store = store
        self._prefix = prefix
        self._keep = max(1, keep)

    def describe(self) -> str:
        """``object store <type> prefix <prefix>``."""
        return f"object store {type(self._store).__name__} prefix {self._prefix!r}"

    def _keys(self) -> list[tuple[int, str]]:
        found = []
        for key in self._store.list(self._prefix):
            rest = key[len(self._prefix) :]
            m = _KEY.fullmatch(rest)
            if m:
                found.append((int(m.group(1)), key))
        return sorted(found)

    def write(
        self, checkpoint_id: int, source: str, enumerator: dict[str, Any], positions: dict[str, int]
    ) -> str:
        """Put the checkpoint object; then delete those beyond ``keep``. Returns its key."""
        key = f"{self._prefix}chk-{checkpoint_id:012d}.json"
        try:
            self._store.put(key, encode_checkpoint(checkpoint_id, source, enumerator, positions))
        except Exception as exc:
            raise CheckpointError(f"cannot write checkpoint {key} to {self.describe()}: {exc}") from exc
        try:
            for _cid, old in self._keys()[: -self._keep]:
                self._store.delete(old)
        except Exception as exc:  # an old checkpoint left behind is harmless
            _log.warning("cannot delete old checkpoints in %s: %s", self.describe(), exc)
        return key

    def latest(self) -> Checkpoint | None:
        """The newest object that reads cleanly."""
        for _cid, key in reversed(self._keys()):
            try:
                data = self._store.get(key)
                return decode_checkpoint(data, Path(PurePosixPath(key)))
            except CheckpointError as exc:
                _log.warning("skipping damaged checkpoint: %s", exc)
            except Exception as exc:
                _log.warning("skipping unreadable checkpoint %s: %s", key, exc)
        return None


class InMemoryObjectStore:
    """An :class:`ObjectStore` in memory (thread-safe), for tests and examples."""

    def __init__(self) -> None:
        """An empty store."""
        self._lock = threading.Lock()
        self.objects: dict[str, bytes] = {}

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``."""
        with self._lock:
            self.objects[key] = bytes(data)

    def get(self, key: str) -> bytes:
        """The object under ``key``; ``KeyError`` when absent."""
        with self._lock:
            return self.objects[key]

    def list(self, prefix: str) -> list[str]:
        """Keys starting with ``prefix``, sorted."""
        with self._lock:
            return sorted(k for k in self.objects if k.startswith(prefix))

    def delete(self, key: str) -> None:
        """Drop ``key`` if present."""
        with self._lock:
            self.objects.pop(key, None)
