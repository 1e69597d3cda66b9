"""Metadata read from a YAML or JSON file, watched for changes."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Collection
from pathlib import Path
from types import TracebackType

from multicluster_source.exceptions import MetadataError
from multicluster_source.metadata._model import KafkaStream, MetadataListener
from multicluster_source.metadata._parser import parse_streams
from multicluster_source.metadata._watch import DirectoryWatcher

__all__ = [
    "FileMetadataService",
    "Loaded",
    "WatchedMetadataService",
    "decode_metadata",
    "digest",
    "read_metadata_bytes",
]

_log = logging.getLogger("multicluster_source.metadata")

Loaded = tuple[str, Callable[[], set[KafkaStream]]]
"""What a service's ``_load`` returns: a content digest and a function that parses that content."""


def digest(data: bytes | str) -> str:
    """The content hash used to tell changed metadata from an identical rewrite."""
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def read_metadata_bytes(path: str | os.PathLike[str], *, source: str | None = None) -> bytes:
    """Read a metadata file; every failure is a :class:`MetadataError` naming the file."""
    name = source if source is not None else os.fspath(path)
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        raise MetadataError("file not found", source=name) from None
    except IsADirectoryError:
        raise MetadataError("is a directory, expected a file", source=name) from None
    except OSError as exc:
        raise MetadataError(f"cannot read: {exc.strerror or type(exc).__name__}", source=name) from None


def decode_metadata(data: bytes, *, source: str) -> str:
    """Decode UTF-8 (a leading BOM is dropped); invalid bytes are a :class:`MetadataError` with the line."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise MetadataError(f"not valid UTF-8 (byte {exc.start})", source=source, line=line) from None


class WatchedMetadataService:
    """Shared machinery of the file-backed services: content-hash cache, listeners, lazy watcher.

    Subclasses implement ``_load()`` (read the current content: its digest and a parser for it; raise
    :class:`MetadataError` when it cannot be read) and ``_watch_target()`` (the directory and names to watch).
    """

    def __init__(self, *, description: str, poll_interval: float, watch: bool) -> None:
        self._description = description
        self._poll_interval = float(poll_interval)
        self._watch = bool(watch)
        self._lock = threading.RLock()
        self._listeners: list[MetadataListener] = []
        self._watcher: DirectoryWatcher | None = None
        self._closed = False
        self._good_digest: str | None = None
        self._good: frozenset[KafkaStream] = frozenset()
        self.reads = 0
        """How many times the content was parsed (an unchanged file is not parsed again)."""

    # ----------------------------------------------------------------------------------- subclass hooks

    def _load(self) -> Loaded:
        raise NotImplementedError

    def _watch_target(self) -> tuple[Path, frozenset[str]]:
        raise NotImplementedError

    # ----------------------------------------------------------------------------------- the protocol

    def get_all_streams(self) -> set[KafkaStream]:
        """The streams in the current content; re-parsed only when the content hash changed.

        Raises :class:`MetadataError` when the content cannot be read or is invalid; keeping the last
        good metadata is the caller's decision.
        """
        self._ensure_watcher()
        content_digest, parse = self._load()
        with self._lock:
            if content_digest == self._good_digest:
                return set(self._good)
        streams = parse()
        with self._lock:
            self.reads += 1
            self._good_digest, self._good = content_digest, frozenset(streams)
        return set(streams)

    def describe_streams(self, stream_ids: Collection[str]) -> dict[str, KafkaStream]:
        """The named streams that exist now; unknown ids are left out."""
        wanted = set(stream_ids)
        return {s.stream_id: s for s in self.get_all_streams() if s.stream_id in wanted}

    def is_cluster_active(self, cluster_id: str) -> bool:
        """Whether any stream in the current content uses ``cluster_id``."""
        return any(cluster_id in s.clusters for s in self.get_all_streams())

    def subscribe(self, listener: MetadataListener) -> Callable[[], None]:
        """Call ``listener`` (from the watcher thread) whenever the content hash changes.

        A change to bad content notifies too, so the caller can count the failure. Returns a function that
        unregisters the listener (idempotent).
        """
        with self._lock:
            self._listeners.append(listener)
            self._closed = False  # a new subscriber (a source opened again) means watching again
        self._ensure_watcher()

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def close(self) -> None:
        """Stop the watcher threads and drop the listeners; reads still work afterwards, without watching,
        and a later ``subscribe`` starts watching again (a source opened a second time)."""
        with self._lock:
            self._closed = True
            watcher, self._watcher = self._watcher, None
            self._listeners.clear()
        if watcher is not None:
            watcher.close()

    def __enter__(self) -> WatchedMetadataService:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def watching(self) -> bool:
        """Whether the watcher threads run."""
        watcher = self._watcher
        return watcher is not None and watcher.running

    # ----------------------------------------------------------------------------------- internals

    def _fingerprint(self) -> str:
        try:
            return self._load()[0]
        except MetadataError as exc:
            return "error:" + digest(str(exc))

    def _notify(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener()
            except Exception:
                _log.exception("metadata listener failed (%s)", self._description)

    def _ensure_watcher(self) -> None:
        with self._lock:
            if self._closed or self._watcher is not None:
                return
            if not self._watch and self._poll_interval <= 0:
                return
            directory, names = self._watch_target()
            watcher = DirectoryWatcher(
                directory,
                names,
                self._fingerprint,
                self._notify,
                poll_interval=self._poll_interval,
                use_events=self._watch,
                name=f"metadata-watch[{self._description}]",
            )
            self._watcher = watcher
            watcher.start()


class FileMetadataService(WatchedMetadataService):
    """Stream metadata from a YAML or JSON file (Flink's format, see ``_parser``), reloaded when it changes.

    ``watch=True`` reacts to file-system events: a write closed, a rename onto the file or a ConfigMap
    ``..data`` swap in the same directory is noticed 12-16 ms after it (measured median), a write not yet
    closed after 100 ms of quiet (see :mod:`multicluster_source.metadata._watch`); the polling fallback
    checks every ``poll_interval`` seconds (``<= 0`` disables it). ``watch=False`` polls only. The watcher
    starts on the first read or subscription and stops in :meth:`close`. Listeners run only when the content
    hash changed.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, poll_interval: float = 1.0, watch: bool = True
    ) -> None:
        self._path = Path(path)
        self._source = os.fspath(path)
        super().__init__(description=self._source, poll_interval=poll_interval, watch=watch)

    @property
    def path(self) -> Path:
        """The metadata file."""
        return self._path

    def __repr__(self) -> str:
        return f"FileMetadataService({self._source!r})"

    def _load(self) -> Loaded:
        data = read_metadata_bytes(self._path, source=self._source)
        source = self._source

        def parse() -> set[KafkaStream]:
            return parse_streams(decode_metadata(data, source=source), source=source)

        return digest(data), parse

    def _watch_target(self) -> tuple[Path, frozenset[str]]:
        absolute = Path(os.path.abspath(self._path))
        return absolute.parent, frozenset({absolute.name, "..data", "..data_tmp"})
