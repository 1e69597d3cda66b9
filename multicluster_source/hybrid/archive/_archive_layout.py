"""Where archived Kafka records are: the Kafka Connect storage sinks' file layout, on any filesystem.

The S3, GCS and Azure sinks (kafka-connect-storage-cloud) write, with the default partitioner,
``<root>/<topic>/partition=<p>/<topic>+<p>+<startOffset>.<ext>``; the HDFS sink writes
``<topic>+<p>+<startOffset>+<endOffset>.<ext>`` (end inclusive) in the same directories. Offsets are
zero-padded (10 digits by default) and parsed here as numbers. With ``store.kafka.keys=true`` and
``store.kafka.headers=true`` the sinks write ``<file name without ext>.keys<key ext>`` and
``.headers<header ext>`` beside each value file (Avro by default). Other partitioners (time or field based)
put the files in other directories below ``<root>/<topic>/``: every file below a topic's directory counts, its
partition taken from its name.

Roots are local paths or URLs: pyarrow's filesystems first (``s3://``, ``gs://``, ``hdfs://``, ``file://``),
then any fsspec protocol (``memory://``, ``az://``, ...) through pyarrow's fsspec handler. Called from the
thread that opens the stage (discovery) and from reader threads (``open_input``: pyarrow filesystems are
thread-safe).
"""

from __future__ import annotations

import itertools
import logging
import re
from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from multicluster_source.exceptions import ConfigurationError, MultiClusterSourceError

log = logging.getLogger("multicluster_source.hybrid.archive")

ArchiveFormat = Literal["jsonl", "avro", "parquet"]
FORMATS: tuple[ArchiveFormat, ...] = ("jsonl", "avro", "parquet")

_NAME = re.compile(
    r"^(?P<topic>[A-Za-z0-9._-]+)\+(?P<partition>\d+)\+(?P<start>\d+)(?:\+(?P<end>\d+))?(?P<rest>\..+)$"
)
_PARTITION_DIR = re.compile(r"^partition=(\d+)$")
_IGNORED_PREFIXES = ("+", "_", ".")  # HDFS's +tmp, _SUCCESS markers, .crc and hidden files


class ArchiveError(MultiClusterSourceError):
    """An archive could not be read: a malformed file or record, a missing partition directory, files that
    overlap or come out of order. ``path`` names the file (or directory); ``line`` the 1-based record in
    it where one is to blame."""

    def __init__(self, message: str, *, path: str, line: int | None = None) -> None:
        self.reason = message
        self.path = path
        self.line = line
        where = path if line is None else f"{path}, record {line}"
        super().__init__(f"{where}: {message}")


def missing_extra(package: str, extra: str = "archive") -> ConfigurationError:
    """The error for an optional dependency that is not installed."""
    return ConfigurationError(f"this stage needs {package}: pip install 'multicluster-kafka-source[{extra}]'")


def kind_of(rest: str, fmt: ArchiveFormat) -> str | None:
    """``"value"``, ``"keys"`` or ``"headers"`` for a file name's tail (``.keys.avro``), None when it is
    not a file of ``fmt`` (value files) or of any readable format (key and header files)."""
    for view in ("keys", "headers"):
        if rest.startswith(f".{view}."):
            return view if format_of(rest[len(view) + 1 :]) is not None else None
    return "value" if format_of(rest) == fmt else None


def format_of(ext: str) -> ArchiveFormat | None:
    """The format of an extension as the sinks write it (``.json``, ``.json.gz``, ``.avro``,
    ``.snappy.parquet``), or None."""
    if ext in (".json", ".json.gz", ".jsonl", ".jsonl.gz"):
        return "jsonl"
    if ext == ".avro":
        return "avro"
    if ext.endswith(".parquet"):
        return "parquet"
    return None


@dataclass(frozen=True)
class ArchiveFile:
    """One value file of one partition, with its key and header files when the sink wrote them."""

    cluster_id: str
    topic: str
    partition: int
    start: int
    end: int | None  # inclusive, HDFS layout only
    path: str
    keys_path: str | None = None
    headers_path: str | None = None

    @property
    def split_id(self) -> str:
        """``cluster/topic/partition``."""
        return f"{self.cluster_id}/{self.topic}/{self.partition}"

    @property
    def name(self) -> str:
        """The file name (no directory)."""
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Root:
    """An opened root: a pyarrow filesystem and the path on it."""

    cluster_id: str
    url: str
    fs: Any  # pyarrow.fs.FileSystem
    path: str


def open_root(cluster_id: str, url: str) -> Root:
    """The filesystem of ``url``: pyarrow's own where it has one, else fsspec's through pyarrow."""
    try:
        from pyarrow import fs as pafs
    except ImportError as e:  # pragma: no cover - the extra is installed in CI
        raise missing_extra("pyarrow") from e
    if "://" not in url:
        return Root(cluster_id, url, pafs.LocalFileSystem(), url.rstrip("/") or "/")
    try:
        fs, path = pafs.FileSystem.from_uri(url)
    except (ValueError, OSError) as pyarrow_error:  # ArrowInvalid is a ValueError
        try:
            import fsspec
        except ImportError as e:
            raise missing_extra("fsspec") from e
        try:
            spec_fs, path = fsspec.core.url_to_fs(url)
        except (ValueError, ImportError) as e:
            raise ConfigurationError(
                f"archive root {url!r} of cluster {cluster_id!r}: no filesystem for it "
                f"(pyarrow: {pyarrow_error}; fsspec: {e})"
            ) from e
        fs = pafs.PyFileSystem(pafs.FSSpecHandler(spec_fs))
    return Root(cluster_id, url, fs, path.rstrip("/") or "/")


def _listing(root: Root, path: str, *, recursive: bool = True) -> list[Any]:
    from pyarrow import fs as pafs

    try:
        return list(root.fs.get_file_info(pafs.FileSelector(path, recursive=recursive)))
    except FileNotFoundError as e:
        raise ArchiveError("does not exist", path=path if path != root.path else root.url) from e


def discover(
    root: Root, fmt: ArchiveFormat, topics: Collection[str] | None, *, on_error: str
) -> tuple[dict[str, list[ArchiveFile]], list[str], list[str]]:
    """Every value file below ``root``, by split, sorted by start offset and checked; the paths of files
    that were left out (of another format), each logged; and of missing partition directories (only with
    ``on_error="skip"``, each logged). Raises :class:`ArchiveError` on files
    that overlap, a file in the wrong partition directory, or a missing partition directory."""
    if topics is None:
        infos = _listing(root, root.path)
    else:  # only the topics asked for: on an object store, listing the whole root can be long
        _listing(root, root.path, recursive=False)
        infos = []
        for topic in sorted(topics):
            try:
                infos.extend(_listing(root, f"{root.path.rstrip('/')}/{topic}"))
            except ArchiveError:
                log.warning("cluster=%s: the archive %s holds no topic %s", root.cluster_id, root.url, topic)
    base = root.path.rstrip("/") + "/"
    values: dict[tuple[str, int], list[ArchiveFile]] = defaultdict(list)
    views: dict[str, str] = {}  # "<dir>/<stem>|keys" -> path
    partition_dirs: dict[str, set[int]] = defaultdict(set)
    ignored: list[str] = []
    for info in infos:
        rel = info.path[len(base) :] if info.path.startswith(base) else info.path
        parts = rel.split("/")
        if len(parts) < 2 or any(p.startswith(_IGNORED_PREFIXES) for p in parts):
            continue
        topic_dir = parts[0]
        if topics is not None and topic_dir not in topics:
            continue
        if info.type.name == "Directory":
            m = _PARTITION_DIR.match(parts[-1])
            if m and len(parts) == 2:
                partition_dirs[topic_dir].add(int(m.group(1)))
            continue
        m = _NAME.match(parts[-1])
        kind = kind_of(m.group("rest"), fmt) if m else None
        if m is None or kind is None:
            log.warning(
                "cluster=%s: archive file %s is not a %s file of the sinks' layout: left out",
                root.cluster_id,
                info.path,
                fmt,
            )
            ignored.append(info.path)
            continue
        stem = info.path[: len(info.path) - len(m.group("rest"))]
        if kind != "value":
            views[f"{stem}|{kind}"] = info.path
            continue
        topic, partition = m.group("topic"), int(m.group("partition"))
        dir_match = _PARTITION_DIR.match(parts[-2]) if len(parts) >= 3 else None
        if topic != topic_dir or (dir_match and int(dir_match.group(1)) != partition):
            raise ArchiveError(
                f"the file of {topic}/{partition} is in the directory of another topic or partition",
                path=info.path,
            )
        end = m.group("end")
        values[(topic, partition)].append(
            ArchiveFile(
                root.cluster_id,
                topic,
                partition,
                int(m.group("start")),
                None if end is None else int(end),
                info.path,
                views.get(f"{stem}|keys"),
                views.get(f"{stem}|headers"),
            )
        )
    missing = _check_partition_dirs(root, partition_dirs, on_error=on_error)
    splits: dict[str, list[ArchiveFile]] = {}
    for _, files in sorted(values.items()):
        files = [_with_views(f, views) for f in sorted(files, key=lambda f: f.start)]
        _check_order(files)
        splits[files[0].split_id] = files
    return splits, ignored, missing


def _with_views(file: ArchiveFile, views: Mapping[str, str]) -> ArchiveFile:
    # key and header files may be listed after their value file: look them up once all are known
    stem = file.path[: len(file.path) - len(_NAME.match(file.name).group("rest"))]  # type: ignore[union-attr]
    keys, headers = views.get(f"{stem}|keys"), views.get(f"{stem}|headers")
    if keys == file.keys_path and headers == file.headers_path:
        return file
    return ArchiveFile(
        file.cluster_id, file.topic, file.partition, file.start, file.end, file.path, keys, headers
    )


def _check_order(files: list[ArchiveFile]) -> None:
    for before, after in itertools.pairwise(files):
        if after.start == before.start:
            raise ArchiveError(
                f"two files of {after.topic}/{after.partition} start at offset {after.start} "
                f"(the other is {before.path})",
                path=after.path,
            )
        if before.end is not None and before.end >= after.start:
            raise ArchiveError(
                f"overlaps {before.path}, which ends at offset {before.end}, by starting at {after.start}",
                path=after.path,
            )
    for f in files:
        if f.end is not None and f.end < f.start:
            raise ArchiveError(f"its end offset {f.end} is before its start offset {f.start}", path=f.path)


def _check_partition_dirs(root: Root, found: Mapping[str, set[int]], *, on_error: str) -> list[str]:
    gone: list[str] = []
    for topic, partitions in sorted(found.items()):
        missing = sorted(set(range(max(partitions) + 1)) - partitions)
        for p in missing:
            path = f"{root.path.rstrip('/')}/{topic}/partition={p}"
            if on_error == "fail":
                raise ArchiveError(
                    f"missing partition directory: {topic} has partitions up to {max(partitions)} "
                    f"archived but not partition {p}",
                    path=path,
                )
            log.warning(
                "cluster=%s: missing partition directory %s (on_error=%s): that partition is not read",
                root.cluster_id,
                path,
                on_error,
            )
            gone.append(path)
    return gone
