"""Fakes and helpers for testing jobs and metadata services without Kafka or Kubernetes.

- :class:`InMemoryMetadataService`: a thread-safe metadata service whose streams a test sets, which notifies
  subscribers, counts reads and can be told to fail the next reads.
- :class:`InMemoryArchiveStage`: a bounded hybrid stage over records given as a list per split, to test a
  job's :class:`~multicluster_source.HybridSource` without an archive (see docs/guides/hybrid-backfill.md).
- :func:`write_metadata_file`: write a metadata file atomically (as an editor or a deploy tool should).
- :func:`make_configmap_volume` and :func:`update_configmap_volume`: lay out a directory exactly as the
  kubelet writes a ConfigMap volume, including the atomic ``..data`` symlink swap on update.

Example::

    service = InMemoryMetadataService([stream])
    source = MultiClusterKafkaSource.builder().set_kafka_metadata_service(service)...build()
    service.set_streams([stream, other])   # the source reconciles at once
    service.fail_next(3)                   # the next three reads raise MetadataError
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path

from multicluster_source.exceptions import MetadataError
from multicluster_source.hybrid._memory import InMemoryArchiveStage
from multicluster_source.metadata._model import KafkaStream, MetadataListener
from multicluster_source.metadata._parser import dump_streams
from multicluster_source.metadata._validate import validate_streams

__all__ = [
    "InMemoryArchiveStage",
    "InMemoryMetadataService",
    "make_configmap_volume",
    "update_configmap_volume",
    "write_metadata_file",
]


class InMemoryMetadataService:
    """A metadata service held in memory; satisfies ``KafkaMetadataService`` and ``NotifyingMetadataService``.

    Thread-safe. ``set_streams`` replaces the streams and notifies subscribers (on the calling thread);
    ``fail_next`` makes the next reads raise :class:`MetadataError`; ``reads`` counts every call of
    ``get_all_streams``, ``describe_streams`` and ``is_cluster_active``, failed ones included.
    """

    def __init__(self, streams: Iterable[KafkaStream] = (), *, validate: bool = True) -> None:
        self._validate = validate
        self._lock = threading.Lock()
        self._streams = self._checked(streams)
        self._listeners: list[MetadataListener] = []
        self._failures: list[MetadataError | None] = []
        self._reads = 0
        self._closed = False

    def _checked(self, streams: Iterable[KafkaStream]) -> frozenset[KafkaStream]:
        materialized = list(streams)
        if self._validate:
            validate_streams(materialized, source="in-memory")
        return frozenset(materialized)

    # ----------------------------------------------------------------------------------- test controls

    def set_streams(self, streams: Iterable[KafkaStream]) -> None:
        """Replace every stream and notify the subscribers (even when nothing changed)."""
        checked = self._checked(streams)
        with self._lock:
            self._streams = checked
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    def fail_next(self, n: int = 1, error: MetadataError | None = None) -> None:
        """Make the next ``n`` reads raise ``error`` (default: a :class:`MetadataError`)."""
        if n < 0:
            raise ValueError("n must be >= 0")
        with self._lock:
            self._failures.extend([error] * n)

    def notify(self) -> None:
        """Call every subscriber, as if the metadata may have changed."""
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    @property
    def reads(self) -> int:
        """How many reads were made, failed ones included."""
        with self._lock:
            return self._reads

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        with self._lock:
            return self._closed

    @property
    def subscriber_count(self) -> int:
        """How many listeners are subscribed."""
        with self._lock:
            return len(self._listeners)

    # ----------------------------------------------------------------------------------- the protocol

    def _read(self) -> frozenset[KafkaStream]:
        with self._lock:
            self._reads += 1
            if self._failures:
                error = self._failures.pop(0)
                failure = (
                    error if error is not None else MetadataError("injected failure", source="in-memory")
                )
            else:
                return self._streams
        raise failure

    def get_all_streams(self) -> set[KafkaStream]:
        """Every stream set last."""
        return set(self._read())

    def describe_streams(self, stream_ids: Collection[str]) -> dict[str, KafkaStream]:
        """Return the named streams that exist; unknown ids are left out."""
        wanted = set(stream_ids)
        return {s.stream_id: s for s in self._read() if s.stream_id in wanted}

    def is_cluster_active(self, cluster_id: str) -> bool:
        """Whether any stream uses ``cluster_id``."""
        return any(cluster_id in s.clusters for s in self._read())

    def subscribe(self, listener: MetadataListener) -> Callable[[], None]:
        """Register ``listener``; returns a function that unregisters it (idempotent)."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def close(self) -> None:
        """Drop the listeners and remember that the service was closed."""
        with self._lock:
            self._closed = True
            self._listeners.clear()


def _atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_metadata_file(path: str | os.PathLike[str], streams: Iterable[KafkaStream] | str) -> Path:
    """Write metadata atomically (temporary file in the same directory, fsync, rename onto ``path``).

    ``streams`` are written with :func:`~multicluster_source.metadata.dump_streams`; a ``str`` is written as
    is (handy for invalid content in tests). Returns the path.
    """
    target = Path(path)
    text = streams if isinstance(streams, str) else dump_streams(streams)
    _atomic_write(target, text.encode("utf-8"))
    return target


_CONFIGMAP_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")
_DATA_LINK = "..data"
_DATA_TMP = "..data_tmp"


def _check_keys(files: Mapping[str, str | bytes]) -> None:
    for key in files:
        if not _CONFIGMAP_KEY_RE.match(key) or key.startswith("..") or key in (".",):
            raise ValueError(f"invalid ConfigMap key {key!r}: use letters, digits, '-', '_' and '.'")


def _generation_contents(generation: Path) -> dict[str, bytes] | None:
    try:
        return {p.name: p.read_bytes() for p in generation.iterdir() if p.is_file()}
    except OSError:
        return None


def _write_volume(directory: Path, files: Mapping[str, str | bytes]) -> Path | None:
    _check_keys(files)
    payload = {k: v.encode("utf-8") if isinstance(v, str) else bytes(v) for k, v in files.items()}
    directory.mkdir(parents=True, exist_ok=True)
    data_link = directory / _DATA_LINK
    old_generation: Path | None = None
    if os.path.islink(data_link):
        old_generation = directory / os.readlink(data_link)
        # The kubelet writes nothing when the payload is unchanged.
        if _generation_contents(old_generation) == payload:
            return None
    # A new timestamped generation directory holds the payload.
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    generation = Path(tempfile.mkdtemp(prefix=stamp, dir=directory))
    os.chmod(generation, 0o755)
    for key, data in payload.items():
        with open(generation / key, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(generation / key, 0o644)
    # ..data_tmp -> new generation, renamed atomically onto ..data.
    tmp_link = directory / _DATA_TMP
    if os.path.lexists(tmp_link):
        os.unlink(tmp_link)
    os.symlink(generation.name, tmp_link)
    os.rename(tmp_link, data_link)
    # User-visible symlinks for new keys; old keys removed.
    for key in payload:
        if not os.path.lexists(directory / key):
            os.symlink(f"{_DATA_LINK}/{key}", directory / key)
    for entry in os.listdir(directory):
        visible = directory / entry
        if entry.startswith("..") or entry in payload or not os.path.islink(visible):
            continue
        if os.readlink(visible).startswith(f"{_DATA_LINK}/"):
            os.unlink(visible)
    # Finally the previous generation goes away.
    if old_generation is not None and old_generation != generation:
        shutil.rmtree(old_generation, ignore_errors=True)
    return generation


def make_configmap_volume(directory: str | os.PathLike[str], files: Mapping[str, str | bytes]) -> Path:
    """Lay out ``directory`` as the kubelet mounts a ConfigMap volume holding ``files`` (key -> content).

    Creates ``..<timestamp>/`` with the files, ``..data -> ..<timestamp>`` and ``<key> -> ..data/<key>``.
    Returns the generation directory. On an existing volume this is :func:`update_configmap_volume`.
    """
    generation = _write_volume(Path(directory), files)
    if generation is None:  # unchanged existing volume
        return Path(directory) / os.readlink(Path(directory) / _DATA_LINK)
    return generation


def update_configmap_volume(
    directory: str | os.PathLike[str], files: Mapping[str, str | bytes]
) -> Path | None:
    """Replace the volume's content as the kubelet does: new generation, ``..data`` swap, cleanup.

    The steps, in the kubelet's order: write the payload into a new ``..<timestamp>`` directory; create
    ``..data_tmp`` pointing to it and rename it onto ``..data`` (the atomic switch); add symlinks for new keys
    and remove those of keys no longer present; delete the previous generation. Returns the new generation
    directory, or None when the content is unchanged (the kubelet then writes nothing).
    """
    return _write_volume(Path(directory), files)
