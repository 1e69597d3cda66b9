"""``KafkaArchiveSource``: a bounded hybrid stage over Kafka records archived by Kafka Connect's storage
sinks (API.md section 9, "Hybrid sources"; the user guide is docs/guides/hybrid-archives.md).

Splits are partitions (``cluster/topic/partition``), each a list of files in offset order
(:mod:`._archive_layout`); a reader thread reads a split's files one after the other
(:mod:`._archive_formats`) and hands pieces of records to the caller thread (:mod:`._archive_reader`).

Offsets: from ``offset_field`` where the archive carries it (``exact``); else from the file name and the
record's place in the file (``estimated``: start offset + position; where the log had gaps, from compaction
or transaction markers, that is lower than the real offset, so the handover may repeat records and never
skips one). The HDFS layout names each file's last offset too: that record's offset is exact.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from multicluster_source.exceptions import CheckpointError, ConfigurationError
from multicluster_source.hybrid._stage import StageHandover, StageReader
from multicluster_source.hybrid.archive._archive_formats import (
    FieldNames,
    read_chunks,
    read_headers,
    read_keys,
)
from multicluster_source.hybrid.archive._archive_layout import (
    FORMATS,
    ArchiveError,
    ArchiveFile,
    ArchiveFormat,
    Root,
    discover,
    open_root,
)
from multicluster_source.hybrid.archive._archive_pieces import Piece, SplitPosition, starting_state
from multicluster_source.hybrid.archive._archive_reader import ArchiveStageReader
from multicluster_source.hybrid.archive._archive_rows import rows_of

log = logging.getLogger("multicluster_source.hybrid.archive")

ON_ERROR = ("fail", "skip")
_INTS = {int, type(None)}


class KafkaArchiveSource:
    """A bounded stage over Kafka records archived in the Kafka Connect storage sinks' layout.

    ``roots``: cluster id -> the sink's topics directory for that cluster (a local path or a URL pyarrow or
    fsspec opens: ``s3://bucket/topics``, ``gs://...``, ``memory://...``). ``format``: ``"jsonl"``,
    ``"avro"`` or ``"parquet"`` (the sinks' ``JsonFormat``, ``AvroFormat``, ``ParquetFormat``).
    ``offset_field`` / ``timestamp_field``: the value fields holding the Kafka offset and timestamp (as
    Connect's ``InsertField`` transform adds them). ``topics``: the topics to read (default: every topic
    directory under a root). ``deserializer``: applied to each archived value (a JSON value, an Avro datum,
    or a Parquet row mapping). ``on_error``: ``"fail"`` (default) raises :class:`ArchiveError` naming the
    file; ``"skip"`` logs a malformed file or a missing partition directory, lists it in ``status()`` and
    goes on.

    Example::

        archive = KafkaArchiveSource({"east": "s3://bucket/topics"}, format="parquet",
                                     offset_field="__offset", timestamp_field="__ts")
        hybrid = HybridSource.builder(archive).add_source(live_source).build()
    """

    def __init__(
        self,
        roots: Mapping[str, str],
        format: str = "jsonl",  # the contract's name
        *,
        offset_field: str | None = None,
        timestamp_field: str | None = None,
        topics: Collection[str] | None = None,
        deserializer: Callable[[Any], Any] | None = None,
        on_error: str = "fail",
        name: str = "archive",
    ) -> None:
        """Check the arguments; nothing is read before :meth:`open_stage`."""
        if not roots:
            raise ConfigurationError("KafkaArchiveSource needs at least one root (cluster id -> directory)")
        if format not in FORMATS:
            raise ConfigurationError(f"archive format {format!r} is not one of {', '.join(FORMATS)}")
        if on_error not in ON_ERROR:
            raise ConfigurationError(f"on_error={on_error!r} is not one of {', '.join(ON_ERROR)}")
        self._roots = dict(roots)
        self._format: ArchiveFormat = format
        self._fields = FieldNames(offset_field, timestamp_field)
        self._topics = None if topics is None else frozenset(topics)
        self._deserializer = deserializer
        self._on_error = on_error
        self._name = name

    @property
    def bounded(self) -> bool:
        """An archive ends: always True."""
        return True

    @property
    def name(self) -> str:
        """``archive`` unless given."""
        return self._name

    def open_stage(
        self,
        *,
        parallelism: int,
        start: StageHandover | None,
        restored: Mapping[str, Any] | None,
        registry: CollectorRegistry | None,
        work_dir: str | None,
    ) -> StageReader:
        """List every root (errors about the layout are raised here) and start the reader threads."""
        positions, skip_before = starting_state(self._name, restored, start)
        producers: dict[str, _FileSplit] = {}
        skipped: list[str] = []
        ignored: list[str] = []
        gone: list[str] = []
        files = 0
        for cluster_id, url in sorted(self._roots.items()):
            root = open_root(cluster_id, url)
            splits, left_out, missing = discover(root, self._format, self._topics, on_error=self._on_error)
            ignored.extend(left_out)
            gone.extend(missing)
            for split_id, split_files in splits.items():
                files += len(split_files)
                producers[split_id] = _FileSplit(
                    root, split_files, self._format, self._fields, self._deserializer, self._on_error, skipped
                )
            log.info(
                "cluster=%s: archive %s holds %d files of %d partitions",
                cluster_id,
                url,
                sum(len(f) for f in splits.values()),
                len(splits),
            )
        for split_id, position in positions.items():
            if split_id not in producers and position.file is not None and not position.done:
                raise CheckpointError(
                    f"{self._name} stage: checkpointed split {split_id} is not in the archive any more"
                )
        details = {
            "format": self._format,
            "files": files,
            "left_out": ignored,
            "missing_partitions": gone,
            "skipped": skipped,
        }
        return ArchiveStageReader(
            self._name,
            producers,
            parallelism=parallelism,
            positions=positions,
            skip_before=skip_before,
            details=details,
        )


def _ms(value: Any) -> int | None:
    if value is None or type(value) is int:
        return value
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return int(value.timestamp() * 1000)
    return int(value)


class _FileSplit:
    """One partition's files, read in order (called from one reader thread)."""

    def __init__(
        self,
        root: Root,
        files: list[ArchiveFile],
        fmt: ArchiveFormat,
        fields: FieldNames,
        deserializer: Callable[[Any], Any] | None,
        on_error: str,
        skipped: list[str],
    ) -> None:
        self._root = root
        self._files = files
        self._format: ArchiveFormat = fmt
        self._fields = fields
        self._deserializer = deserializer
        self._on_error = on_error
        self._skipped = skipped

    def pieces(
        self, start: SplitPosition | None, skip_before: int | None, stop: threading.Event
    ) -> Iterator[Piece]:
        first, skip = 0, 0
        names = [f.name for f in self._files]
        if start is not None and start.file is not None:
            if start.file not in names:
                raise CheckpointError(
                    f"checkpointed archive file {start.file} of split {self._files[0].split_id} is not in "
                    f"{self._root.url} any more"
                )
            first, skip = names.index(start.file), start.record
            skip_before = None
        last_offset = -1
        if start is not None and start.file is not None and start.next_offset is not None:
            last_offset = start.next_offset - 1
        for i in range(first, len(self._files)):
            file = self._files[i]
            following = self._files[i + 1].start if i + 1 < len(self._files) else None
            if skip_before is not None and following is not None and following <= skip_before:
                continue  # every record of this file is before the position to go on from
            try:
                for piece in self._file_pieces(file, following, skip, last_offset, skip_before, stop):
                    last_offset = piece.offsets[-1]
                    yield piece
            except ArchiveError as e:
                if self._on_error == "fail":
                    raise
                log.warning(
                    "cluster=%s: %s (on_error=skip): the rest of this file is not read", file.cluster_id, e
                )
                self._skipped.append(str(e))
            if stop.is_set():
                return
            skip = 0
        yield Piece(self._files[0].split_id, None, 0, 0, done=True)

    def _file_pieces(
        self,
        file: ArchiveFile,
        following: int | None,
        skip: int,
        last_offset: int,
        skip_before: int | None,
        stop: threading.Event,
    ) -> Iterator[Piece]:
        fs = self._root.fs
        keys = read_keys(fs, file.keys_path) if file.keys_path else None
        headers = read_headers(fs, file.headers_path) if file.headers_path else None
        exact_field = self._fields.offset is not None
        count = skip
        held: tuple[Any, ...] | None = None  # one chunk held back, to know which chunk is the file's last
        for chunk in read_chunks(fs, file.path, self._format, self._fields, skip):
            if stop.is_set():
                return
            if held is not None and (piece := self._piece(file, *held, last=False)) is not None:
                yield piece
            n = len(chunk)
            if exact_field:
                offsets: list[int] = chunk.offsets  # type: ignore[assignment]
                self._check_offsets(file, offsets, chunk.position, last_offset, following, chunk.increasing)
            else:
                offsets = list(range(file.start + chunk.position, file.start + chunk.position + n))
            last_offset = offsets[-1]
            held = (chunk, offsets, keys, headers, skip_before)
            count = chunk.position + n
        self._check_count(file, count, keys, headers, following, exact_field)
        if held is not None and (piece := self._piece(file, *held, last=True)) is not None:
            yield piece

    def _piece(
        self,
        file: ArchiveFile,
        chunk: Any,
        offsets: list[int],
        keys: list[bytes | None] | None,
        headers: list[Any] | None,
        skip_before: int | None,
        *,
        last: bool,
    ) -> Piece | None:
        n = len(chunk)
        exact_from = 0 if self._fields.offset is not None else n
        if last and file.end is not None and self._fields.offset is None:
            offsets[-1] = file.end  # the HDFS name gives the last record's offset
            exact_from = n - 1 if file.end - file.start + 1 != chunk.position + n else 0
        values, rows = chunk.values, chunk.rows
        if self._deserializer is not None:
            values, rows = list(map(self._deserializer, values if rows is None else rows_of(rows))), None
        timestamps = chunk.timestamps
        if timestamps is not None and not chunk.int_timestamps and not set(map(type, timestamps)) <= _INTS:
            timestamps = list(map(_ms, timestamps))
        lo, cut = chunk.position, 0
        if skip_before is not None and exact_from == 0 and offsets[0] < skip_before:
            cut = sum(1 for o in offsets if o < skip_before)
            if cut == n:
                return None
            offsets, timestamps = offsets[cut:], None if timestamps is None else timestamps[cut:]
            values = None if values is None else values[cut:]
        return Piece(
            file.split_id,
            file.name,
            lo + cut,
            max(0, exact_from - cut),
            file.cluster_id,
            file.topic,
            file.partition,
            offsets,
            timestamps,
            None if keys is None else keys[lo + cut : lo + n],
            None if headers is None else headers[lo + cut : lo + n],
            values,
            rows,
            cut,
        )

    def _check_offsets(
        self,
        file: ArchiveFile,
        offsets: list[int],
        position: int,
        last_offset: int,
        following: int | None,
        increasing: bool | None,
    ) -> None:
        if increasing is None:
            increasing = all(map(int.__lt__, offsets, itertools.islice(offsets, 1, None)))
        bad = not increasing or offsets[0] <= last_offset
        high = file.end if file.end is not None else (None if following is None else following - 1)
        if not bad and offsets[0] >= file.start and (high is None or offsets[-1] <= high):
            return
        previous = last_offset
        for i, offset in enumerate(offsets):
            if offset <= previous:
                raise ArchiveError(
                    f"offset {offset} does not follow offset {previous}: records out of order",
                    path=file.path,
                    line=position + i + 1,
                )
            if offset < file.start or (high is not None and offset > high):
                raise ArchiveError(
                    f"offset {offset} is outside the file's range {file.start}..{high}",
                    path=file.path,
                    line=position + i + 1,
                )
            previous = offset

    def _check_count(
        self,
        file: ArchiveFile,
        count: int,
        keys: list[Any] | None,
        headers: list[Any] | None,
        following: int | None,
        exact_field: bool,
    ) -> None:
        for path, views in ((file.keys_path, keys), (file.headers_path, headers)):
            if views is not None and len(views) != count:
                raise ArchiveError(
                    f"holds {len(views)} entries for the {count} records of {file.path}", path=str(path)
                )
        if file.end is not None and count > file.end - file.start + 1:
            raise ArchiveError(
                f"holds {count} records, more than its offsets {file.start}..{file.end}", path=file.path
            )
        if not exact_field and following is not None and file.start + count > following:
            raise ArchiveError(
                f"holds {count} records from offset {file.start}, so it overlaps the next file, which "
                f"starts at offset {following}",
                path=file.path,
            )
