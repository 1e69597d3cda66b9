"""Metadata from a Kubernetes ConfigMap: a mounted volume (following the ``..data`` swap) or a manifest.

The kubelet writes a ConfigMap volume atomically (facts from Kubernetes' atomic writer):

1. the payload goes into a new generation directory ``dir/..2024_01_01_00_00_00.123456789/``;
2. a symlink ``dir/..data_tmp -> ..2024_...`` is created and renamed onto ``dir/..data`` (atomic);
3. user-visible symlinks ``dir/<key> -> ..data/<key>`` are created or removed;
4. the previous generation directory is deleted.

So a reader resolves ``..data`` once and reads every key from that one generation, and a watcher reacts to
the rename onto ``..data``. A ``subPath`` mount is a plain file that Kubernetes never updates.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode

from multicluster_source.exceptions import MetadataError
from multicluster_source.metadata._compose import SAFE_LOADER, STR_TAG, node_line
from multicluster_source.metadata._file import (
    Loaded,
    WatchedMetadataService,
    decode_metadata,
    digest,
    read_metadata_bytes,
)
from multicluster_source.metadata._model import KafkaStream
from multicluster_source.metadata._parser import parse_streams

__all__ = ["DEFAULT_KEY", "ConfigMapMetadataService"]

_log = logging.getLogger("multicluster_source.metadata")

DEFAULT_KEY = "stream-metadata.yaml"
DATA_LINK = "..data"
DATA_TMP = "..data_tmp"
_RETRIES = 5


def _visible_keys(directory: Path) -> list[str]:
    try:
        return sorted(name for name in os.listdir(directory) if not name.startswith(".."))
    except OSError:
        return []


def _mapping_entries(node: MappingNode) -> dict[str, tuple[ScalarNode, Node]]:
    out: dict[str, tuple[ScalarNode, Node]] = {}
    for key_node, value_node in node.value:
        if isinstance(key_node, ScalarNode):
            out.setdefault(str(key_node.value), (key_node, value_node))
    return out


class ConfigMapMetadataService(WatchedMetadataService):
    """Stream metadata stored under ``key`` in a Kubernetes ConfigMap.

    ``path`` is either

    - the directory where the ConfigMap is mounted as a volume: ``..data`` is resolved once per read and
      ``<generation>/<key>`` read from it, and the atomic rename onto ``..data`` is noticed ~13 ms after it
      (measured median);
    - a ConfigMap manifest (``kind: ConfigMap``, possibly among other documents): the metadata is the text
      under ``data[key]``; errors name the manifest, ``data["<key>"]`` and the manifest line (for a ``|``
      block; otherwise the line inside the embedded document, labelled as such);
    - a plain metadata file (a ``subPath`` mount) or a directory without ``..data``: it works, but a warning
      is logged once, because Kubernetes never updates ``subPath`` mounts.

    Options as for :class:`~multicluster_source.metadata.FileMetadataService`. A missing key is a
    :class:`MetadataError` naming the key and the keys present.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        key: str = DEFAULT_KEY,
        *,
        poll_interval: float = 1.0,
        watch: bool = True,
    ) -> None:
        self._path = Path(path)
        self._source = os.fspath(path)
        self._key = key
        self._warned: set[str] = set()
        super().__init__(description=f"{self._source}#{key}", poll_interval=poll_interval, watch=watch)

    @property
    def path(self) -> Path:
        """The volume directory or manifest file."""
        return self._path

    @property
    def key(self) -> str:
        """The ConfigMap key holding the metadata."""
        return self._key

    def __repr__(self) -> str:
        return f"ConfigMapMetadataService({self._source!r}, key={self._key!r})"

    # ----------------------------------------------------------------------------------- hooks

    def _watch_target(self) -> tuple[Path, frozenset[str]]:
        absolute = Path(os.path.abspath(self._path))
        if absolute.is_dir():
            return absolute, frozenset({self._key, DATA_LINK, DATA_TMP})
        return absolute.parent, frozenset({absolute.name, DATA_LINK, DATA_TMP})

    def _load(self) -> Loaded:
        if self._path.is_dir():
            return self._load_volume()
        return self._load_file()

    # ----------------------------------------------------------------------------------- volumes

    def _warn_once(self, kind: str, message: str, *args: object) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            _log.warning(message, *args)

    def _load_volume(self) -> Loaded:
        source = os.fspath(self._path / self._key)
        data_link = self._path / DATA_LINK
        if not os.path.lexists(data_link):
            self._warn_once(
                "no-data-link",
                "%s has no ..data entry, so it is not a ConfigMap volume as the kubelet writes it (a subPath "
                "mount or a plain directory?): Kubernetes will not propagate ConfigMap updates to it; "
                "mount the ConfigMap as a volume without subPath",
                self._source,
            )
            if not (self._path / self._key).exists():
                raise self._missing_key(self._path, source)
            return self._loaded(read_metadata_bytes(self._path / self._key, source=source), source)
        for _ in range(_RETRIES):
            try:
                generation = self._path / os.readlink(data_link)
            except OSError:  # ..data is not a symlink (copied volume): read through it
                generation = data_link
            try:
                with open(generation / self._key, "rb") as fh:
                    data = fh.read()
            except FileNotFoundError:
                if generation.is_dir():
                    raise self._missing_key(generation, source) from None
                continue  # the generation was swapped out between readlink and open: resolve again
            except OSError as exc:
                raise MetadataError(
                    f"cannot read: {exc.strerror or type(exc).__name__}", source=source
                ) from None
            return self._loaded(data, source)
        raise MetadataError("the ConfigMap volume kept changing while being read; will retry", source=source)

    def _missing_key(self, directory: Path, source: str) -> MetadataError:
        present = _visible_keys(directory)
        return MetadataError(
            f"key {self._key!r} is not in the ConfigMap (keys present: {', '.join(present) or 'none'})",
            source=os.fspath(self._path),
            key=self._key,
        )

    def _loaded(self, data: bytes, source: str) -> Loaded:
        def parse() -> set[KafkaStream]:
            return parse_streams(decode_metadata(data, source=source), source=source)

        return digest(data), parse

    # ----------------------------------------------------------------------------------- files

    def _load_file(self) -> Loaded:
        data = read_metadata_bytes(self._path, source=self._source)
        text = decode_metadata(data, source=self._source)
        try:
            documents = list(yaml.compose_all(text, Loader=SAFE_LOADER))
        except (yaml.YAMLError, RecursionError):
            documents = None  # not YAML: parse_streams reports the problem with its line
        manifests = [
            d for d in documents or [] if isinstance(d, MappingNode) and "kind" in _mapping_entries(d)
        ]
        if manifests:
            return self._load_manifest(manifests)
        if documents is not None:
            data_link = self._path.parent / DATA_LINK
            if os.path.lexists(data_link):
                pass  # a key symlink inside a real ConfigMap volume: it is updated and we watch ..data
            else:
                self._warn_once(
                    "subpath",
                    "%s is a plain file, not a ConfigMap volume directory or manifest: if it is a subPath "
                    "mount, Kubernetes will never update it; mount the ConfigMap as a volume and pass the "
                    "directory",
                    self._source,
                )
        return self._loaded(data, self._source)

    def _load_manifest(self, manifests: list[MappingNode]) -> Loaded:
        source = self._source
        configmaps = []
        kinds = []
        for document in manifests:
            _, kind_node = _mapping_entries(document)["kind"]
            kind = kind_node.value if isinstance(kind_node, ScalarNode) else "?"
            kinds.append(str(kind))
            if kind == "ConfigMap":
                configmaps.append(document)
        if not configmaps:
            raise MetadataError(
                f"no ConfigMap in the manifest (kinds found: {', '.join(kinds)})",
                source=source,
                line=node_line(manifests[0]),
                key="kind",
            )
        present: list[str] = []
        for configmap in configmaps:
            entries = _mapping_entries(configmap)
            if "data" not in entries:
                continue
            data_key, data_node = entries["data"]
            if isinstance(data_node, ScalarNode) and data_node.tag.endswith(":null"):
                continue
            if not isinstance(data_node, MappingNode):
                raise MetadataError(
                    "data must be a mapping of keys to text",
                    source=source,
                    line=node_line(data_key),
                    key="data",
                )
            data_entries = _mapping_entries(data_node)
            if self._key not in data_entries:
                present.extend(data_entries)
                continue
            key_node, value_node = data_entries[self._key]
            if not isinstance(value_node, ScalarNode) or value_node.tag != STR_TAG:
                raise MetadataError(
                    "the value must be text (a YAML string, e.g. a `|` block)",
                    source=source,
                    line=node_line(key_node),
                    key=f'data["{self._key}"]',
                )
            return self._embedded(str(value_node.value), value_node)
        listed = ", ".join(sorted(present)) or "none"
        raise MetadataError(
            f"key {self._key!r} is not in the ConfigMap's data (keys present: {listed})",
            source=source,
            line=node_line(configmaps[0]),
            key=f'data["{self._key}"]',
        )

    def _embedded(self, text: str, value_node: ScalarNode) -> Loaded:
        source = self._source
        prefix = f'data["{self._key}"]'
        # In a literal block (|) line k of the embedded text is manifest line (block indicator line + k).
        offset = value_node.start_mark.line + 1 if value_node.style == "|" and value_node.start_mark else None

        def in_manifest(exc: MetadataError) -> MetadataError:
            key = prefix if not exc.key else prefix + (exc.key if exc.key.startswith("[") else f".{exc.key}")
            if exc.line is None:
                line, reason = None, exc.reason
            elif offset is not None:
                line, reason = exc.line + offset, exc.reason
            else:
                line, reason = None, f"line {exc.line} of the embedded document: {exc.reason}"
            return type(exc)(reason, source=source, line=line, key=key)

        def parse() -> set[KafkaStream]:
            try:
                return parse_streams(text, source=source)
            except MetadataError as exc:
                error = in_manifest(exc)
                error.problems = [error, *(in_manifest(p) for p in exc.problems[1:])]
                raise error from exc

        return digest(text), parse
