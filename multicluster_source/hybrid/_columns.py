"""Columnar reads through a hybrid stream: :meth:`HybridStream.poll_columns` hands out the archive and
Iceberg stages' :class:`ArchivedColumns` parts (offset lists and Arrow batch slices, no object per record),
so a backfill that works on Arrow data reads the archive at Arrow's speed and then goes on with records from
the live clusters, with one checkpoint and one exact handover throughout.

A stage that offers ``poll_columns`` is *columnar* (:attr:`HybridStream.columnar`): it hands out
:class:`ArchivedColumns` parts. A Kafka stage offers ``poll_arrow`` instead: Arrow record batches of the
stream's columns (``cluster, topic, partition, offset, timestamp, key, value``), as
:meth:`SourceStream.poll_columns` returns them; a call that switches from one kind of stage to the other
returns ``[]`` there, so a caller never gets both kinds from one call. After a restore from a checkpoint
taken inside a ``for`` loop's batch, the parts and batches are cut like records are (the loop's skip filter,
see :mod:`._held`). Caller's thread only.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from multicluster_source.hybrid._stage import StageReader
from multicluster_source.hybrid.archive._archive_pieces import ArchivedColumns

__all__ = ["arrow_batches", "columnar", "kept_columns", "take_columns"]


def columnar(reader: StageReader | None) -> bool:
    """Whether ``reader`` (the open stage) offers ``poll_columns`` (:class:`ArchivedColumns` parts)."""
    return reader is not None and callable(getattr(reader, "poll_columns", None))


def arrow_batches(reader: StageReader | None) -> bool:
    """Whether ``reader`` (the open stage) offers ``poll_arrow`` (Arrow record batches: a Kafka stage)."""
    return reader is not None and callable(getattr(reader, "poll_arrow", None))


def take_columns(reader: StageReader, timeout: float, max_records: int, headers: bool) -> list[Any]:
    """The stage's ``poll_columns`` parts, or its ``poll_arrow`` batches; ``[]`` from a finished stage with
    neither (the caller switches), ``TypeError`` naming the stage's kind from an unfinished one."""
    take = getattr(reader, "poll_columns", None)
    if callable(take):
        parts: list[ArchivedColumns] = take(timeout, max_records)
        return parts
    arrow = getattr(reader, "poll_arrow", None)
    if callable(arrow):
        batches: list[Any] = arrow(timeout, max_records, headers)
        return batches
    if reader.finished:  # a stage of records that has ended: the call switches to the next one
        return []
    raise TypeError(
        f"poll_columns(): the stage being read ({type(reader).__name__}) has no columnar read; "
        "use poll() or poll_batches()"
    )


def kept_columns(parts: list[Any], skip: dict[str, int]) -> list[Any]:
    """``parts`` (:class:`ArchivedColumns`, or Arrow batches of a Kafka stage) without the rows below their
    split's skip offset (:func:`skip_columns`, :func:`skip_rows`)."""
    if not skip or not parts:
        return parts
    if isinstance(parts[0], ArchivedColumns):
        return skip_columns(parts, skip)
    return [kept for batch in parts if (kept := skip_rows(batch, skip)).num_rows]


def skip_rows(batch: Any, skip: dict[str, int]) -> Any:
    """An Arrow batch of the stream's columns without the rows below their split's skip offset; a split's
    entry goes once a row at or past it came (rare: only after a restore inside a ``for`` loop's batch)."""
    rows = batch.to_pylist()
    keep = []
    for i, row in enumerate(rows):
        split_id = f"{row['cluster']}/{row['topic']}/{row['partition']}"
        bound = skip.get(split_id)
        if bound is None or row["offset"] >= bound:
            skip.pop(split_id, None)
            keep.append(i)
    return batch if len(keep) == len(rows) else batch.take(keep)


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
