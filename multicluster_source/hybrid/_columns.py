"""Columnar reads through a hybrid stream: :meth:`HybridStream.poll_columns` hands out the archive and
Iceberg stages' :class:`ArchivedColumns` parts (offset lists and Arrow batch slices, no object per record),
so a backfill that works on Arrow data reads the archive at Arrow's speed and then goes on with records from
the live clusters, with one checkpoint and one exact handover throughout.

A stage that offers ``poll_columns`` is *columnar* (:attr:`HybridStream.columnar`); the live Kafka stage is
not, and asking it for columns is an error that says to use ``poll``. After a restore from a checkpoint taken
inside a ``for`` loop's batch, the parts are cut like records are (the loop's skip filter, see
:mod:`._held`). Caller's thread only.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from multicluster_source.hybrid._stage import StageReader
from multicluster_source.hybrid.archive._archive_pieces import ArchivedColumns

__all__ = ["columnar", "skip_columns", "take_columns"]


def columnar(reader: StageReader | None) -> bool:
    """Whether ``reader`` (the open stage) offers ``poll_columns``."""
    return reader is not None and callable(getattr(reader, "poll_columns", None))


def take_columns(reader: StageReader, timeout: float, max_records: int) -> list[ArchivedColumns]:
    """The stage's ``poll_columns``; raises ``TypeError`` naming the stage's kind when it has none."""
    take = getattr(reader, "poll_columns", None)
    if not callable(take):
        raise TypeError(
            f"poll_columns(): the stage being read ({type(reader).__name__}) has no columnar read; "
            "use poll() or poll_batches() (stream.columnar says which applies)"
        )
    parts: list[ArchivedColumns] = take(timeout, max_records)
    return parts


def _cut(values: Sequence[Any] | None, start: int) -> Sequence[Any] | None:
    return None if values is None else values[start:]


def skip_columns(parts: list[ArchivedColumns], skip: dict[str, int]) -> list[ArchivedColumns]:
    """``parts`` without the rows below their split's skip offset; a split's entry goes once a row at or
    past it came (offsets grow within a split, as :meth:`Held.filter` has it for records)."""
    if not skip:
        return parts
    out = []
    for part in parts:
        bound = skip.get(part.split_id)
        if bound is None:
            out.append(part)
            continue
        start = bisect_left(part.offsets, bound)
        if start >= len(part):
            continue
        skip.pop(part.split_id, None)
        if start:
            part = dataclasses.replace(
                part,
                offsets=part.offsets[start:],
                timestamps=_cut(part.timestamps, start),
                keys=_cut(part.keys, start),
                headers=_cut(part.headers, start),
                values=_cut(part.values, start),
                batch=None if part.batch is None else part.batch.slice(start),
            )
        out.append(part)
    return out
