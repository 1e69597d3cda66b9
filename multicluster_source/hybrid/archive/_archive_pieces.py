"""What the archive stages' reader threads hand to the caller thread, and where a split is.

:class:`Piece`: a part of one split from one file, as columns (the caller makes records, or
:class:`ArchivedColumns`, of the part it returns). :class:`SplitPosition`: a split's place, as kept in the
stage's snapshots (version 2; version 1, offsets only, is still read: :func:`starting_state`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from multicluster_source.exceptions import CheckpointError
from multicluster_source.framework._records import Headers, SourceRecord
from multicluster_source.hybrid._stage import HandoverMode, StageHandover
from multicluster_source.hybrid.archive._archive_rows import RowColumns, archived_records

SNAPSHOT_VERSION = 2


@dataclass(frozen=True)
class ArchivedColumns:
    """Records of one split as columns, for jobs that read archives by the batch (no object per record):
    ``offsets`` (and ``timestamps``, ``keys``, ``headers`` when the archive has them) line up with
    ``batch`` (a ``pyarrow.RecordBatch`` of a Parquet or Iceberg archive) or ``values`` (JSON, Avro)."""

    cluster_id: str
    topic: str
    partition: int
    offsets: Sequence[int]
    timestamps: Sequence[int | None] | None
    keys: Sequence[bytes | None] | None
    headers: Sequence[Headers] | None
    values: Sequence[Any] | None
    batch: Any | None

    @property
    def split_id(self) -> str:
        """``cluster/topic/partition``."""
        return f"{self.cluster_id}/{self.topic}/{self.partition}"

    def __len__(self) -> int:
        return len(self.offsets)


@dataclass(frozen=True)
class SplitPosition:
    """Where a split is: ``record`` records of ``file`` returned, ``next_offset`` after the last one."""

    file: str | None = None
    record: int = 0
    next_offset: int | None = None
    mode: HandoverMode = "estimated"
    done: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (inside a versioned snapshot)."""
        return {
            "file": self.file,
            "record": self.record,
            "next_offset": self.next_offset,
            "mode": self.mode,
            "done": self.done,
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> SplitPosition:
        """The form :meth:`to_dict` wrote."""
        nxt = data.get("next_offset")
        return SplitPosition(
            data.get("file"),
            int(data.get("record", 0)),
            None if nxt is None else int(nxt),
            data.get("mode", "estimated"),
            bool(data.get("done", False)),
        )


@dataclass(frozen=True)
class Piece:
    """Records of one split, all from one file, from record ``position`` of that file on, as columns: the
    caller thread makes records of the part it returns (:meth:`records`), so only records a caller holds
    are alive. A piece with ``done`` set and no offsets ends its split."""

    split_id: str
    file: str | None
    position: int
    exact_from: int  # records i >= exact_from carry offsets known exactly
    cluster_id: str = ""
    topic: str = ""
    partition: int = 0
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int | None] | None = None
    keys: list[bytes | None] | None = None
    headers: list[Headers] | None = None
    values: list[Any] | None = None  # record i's value; None: row base + i of rows
    rows: RowColumns | None = None
    base: int = 0
    done: bool = False

    def __len__(self) -> int:
        return len(self.offsets)

    def records(self, lo: int, hi: int) -> list[SourceRecord]:
        """Records ``lo`` to ``hi`` of the piece."""
        return archived_records(
            self.cluster_id,
            self.topic,
            self.partition,
            self.offsets,
            self.timestamps,
            self.keys,
            self.values,
            self.headers,
            lo,
            hi,
            self.rows,
            self.base,
        )

    def columns(self, lo: int, hi: int) -> ArchivedColumns:
        """Records ``lo`` to ``hi`` of the piece as columns."""

        def part(values: list[Any] | None) -> list[Any] | None:
            return None if values is None else values[lo:hi]

        batch = None if self.rows is None else self.rows.batch.slice(self.base + lo, hi - lo)
        return ArchivedColumns(
            self.cluster_id,
            self.topic,
            self.partition,
            self.offsets[lo:hi],
            part(self.timestamps),
            part(self.keys),
            part(self.headers),
            part(self.values),
            batch,
        )


class SplitProducer(Protocol):
    """Reads one split (called from a reader thread)."""

    def pieces(
        self, start: SplitPosition | None, skip_before: int | None, stop: threading.Event
    ) -> Iterator[Piece]:
        """The split's pieces from ``start`` (a snapshot's position) or else from the first record that may
        have offset ``skip_before`` or later (None: from the beginning); ends with a ``done`` piece."""
        ...


def restored_positions(
    name: str, restored: Mapping[str, Any] | None
) -> tuple[dict[str, SplitPosition], dict[str, int]]:
    """Split positions (version 2) or bare next offsets (version 1) from a snapshot."""
    if restored is None:
        return {}, {}
    version = restored.get("v")
    if version == 1:
        return {}, {str(k): int(v) for k, v in restored.get("positions", {}).items()}
    if version == SNAPSHOT_VERSION:
        splits = restored.get("splits", {})
        return {str(k): SplitPosition.from_dict(v) for k, v in splits.items()}, {}
    raise CheckpointError(f"{name} stage snapshot has version {version!r}; this library reads 1 and 2")


def starting_state(
    name: str, restored: Mapping[str, Any] | None, start: StageHandover | None
) -> tuple[dict[str, SplitPosition], dict[str, int]]:
    """Split positions to go on from, and per split the offset before which records are not returned
    again. A position handed over by the previous stage is carried (a split this stage holds nothing more
    of hands the same position on)."""
    positions, offsets = restored_positions(name, restored)
    skip_before = dict(start.positions) if start is not None else {}
    skip_before.update(offsets)
    if restored is None and start is not None:
        for split, offset in start.positions.items():
            positions[split] = SplitPosition(None, 0, offset, start.modes.get(split, "exact"))
    for split, offset in offsets.items():
        positions.setdefault(split, SplitPosition(None, 0, offset, "estimated"))
    return positions, skip_before
