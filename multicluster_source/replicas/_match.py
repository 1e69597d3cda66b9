"""Recognising the copy of the last record the caller received (MirrorMaker 2 copies keys, values, headers
and timestamps unchanged, per partition and in order), to turn a conservative start into an exact one.

From the conservative start, the replica records up to the copy of the origin record at offset ``o`` are
copies of origin records after the sync used (at most ``o - sync upstream`` of them), so the scan is
bounded by that count, by the next sync's downstream offset and by :data:`SCAN_LIMIT`. The first record in
the window equal to the origin record is taken (an earlier identical one is impossible to tell apart: taking
the first never skips); the answer is exact when it is the only one. A window longer than the limit is
first moved up to the replica's first record at the origin record's time or later, where the copy is.
"""

from __future__ import annotations

from dataclasses import dataclass

from multicluster_source.replicas._lookup import ClusterLookup, RecordCopy, ReplicaLookupError

__all__ = ["SCAN_LIMIT", "Match", "find_copy", "last_record_before", "narrow_by_time"]

SCAN_LIMIT = 20_000
"""At most this many replica records are read to find a copy."""
_BACK = 16


@dataclass(frozen=True)
class Match:
    """Where the copy was found: start after it (``to_offset``), with ``max_repeats`` (0: exact)."""

    to_offset: int
    max_repeats: int
    detail: str


def last_record_before(lookup: ClusterLookup, topic: str, partition: int, position: int) -> RecordCopy | None:
    """The origin record with the highest offset below ``position`` (control records and compacted offsets
    are skipped: up to 16 offsets back); None when there is none in reach."""
    if position <= 0:
        return None
    low, _high = lookup.watermarks(topic, partition)
    start = max(low, position - _BACK)
    if start >= position:
        return None
    records = lookup.read(topic, partition, start, position, limit=_BACK)
    return records[-1] if records else None


def find_copy(
    lookup: ClusterLookup,
    topic: str,
    partition: int,
    record: RecordCopy,
    *,
    start: int,
    end: int | None,
    count: int | None,
    timeout_s: float,
) -> Match | None:
    """Looks for ``record``'s copy in replica offsets ``start`` up to ``end`` (exclusive; None: the
    partition's end), at most ``count`` records (None: :data:`SCAN_LIMIT`)."""
    _low, high = lookup.watermarks(topic, partition)
    stop = high if end is None else min(end, high)
    start, count = _skip_earlier_times(lookup, topic, partition, record.timestamp_ms, start, stop, count)
    limit = min(SCAN_LIMIT, count if count is not None else SCAN_LIMIT)
    if stop <= start or limit <= 0:
        return None
    scanned = lookup.read(topic, partition, start, stop, limit=limit, timeout_s=timeout_s)
    matches = [r.offset for r in scanned if r.same_record(record)]
    if not matches:
        return None
    first, last = matches[0], matches[-1]
    where = f"the copy of origin offset {record.offset} at replica offset {first}"
    if first == last:
        return Match(first + 1, 0, f"{where} (record matched in {len(scanned)} scanned)")
    return Match(
        first + 1,
        last - first,
        f"{where}; {len(matches)} identical records up to offset {last}: up to {last - first} may repeat",
    )


def narrow_by_time(
    lookup: ClusterLookup,
    topic: str,
    partition: int,
    timestamp_ms: int,
    *,
    start: int,
    end: int | None,
    count: int | None,
    timeout_s: float,
) -> Match | None:
    """Without the origin (a failover), the last returned record's timestamp narrows a conservative start.

    The window (as in :func:`find_copy`) holds the copy of the last record returned, with that timestamp
    (MM2 keeps timestamps). Starting at the window's first record at or after it never passes that copy;
    the repeats are at most the records from there to the last one with that timestamp. When the window is
    complete (it ends at a later sync, or the replica holds all of it) and one record alone has that
    timestamp, it is the copy: the start right after it is exact. None: no record with that timestamp.
    """
    if timestamp_ms < 0:
        return None
    _low, high = lookup.watermarks(topic, partition)
    stop = high if end is None else min(end, high)
    start, count = _skip_earlier_times(lookup, topic, partition, timestamp_ms, start, stop, count)
    limit = min(SCAN_LIMIT, count if count is not None else SCAN_LIMIT)
    if stop <= start or limit <= 0:
        return None
    complete = (end is not None and end <= high) or (count is not None and start + count <= high)
    scanned = lookup.read(topic, partition, start, stop, limit=limit, timeout_s=timeout_s)
    equal = [i for i, r in enumerate(scanned) if r.timestamp_ms == timestamp_ms]
    if not equal:
        return None
    if complete and len(equal) == 1 and len(scanned) == min(limit, stop - start):
        copy = scanned[equal[0]]
        return Match(
            copy.offset + 1,
            0,
            f"the only replica record at the last returned record's time ({timestamp_ms} ms) in offsets "
            f"{start}..{start + len(scanned) - 1}: its copy at replica offset {copy.offset}",
        )
    first = next(i for i, r in enumerate(scanned) if r.timestamp_ms >= timestamp_ms)
    repeats = equal[-1] - first + 1
    return Match(
        scanned[first].offset,
        repeats,
        f"narrowed by the last returned record's time ({timestamp_ms} ms): from replica offset "
        f"{scanned[first].offset}, up to {repeats} may repeat",
    )


def _skip_earlier_times(
    lookup: ClusterLookup,
    topic: str,
    partition: int,
    timestamp_ms: int,
    start: int,
    stop: int,
    count: int | None,
) -> tuple[int, int | None]:
    """``(start, count)`` of a window longer than :data:`SCAN_LIMIT`, moved up to the replica's first
    offset with a time at or after ``timestamp_ms`` (``offsets_for_times``): the copy has that time, so it
    lies at or after that offset whatever the order of times, and so does every record equal to it. Without
    this, a window starting at a sync far below the copy (MirrorMaker 2 keeps a sync per ``offset.lag.max``
    records at most, and fewer under load) was read from its start only and the copy never reached.
    Unchanged when the window is short, the time unknown, or the look-up fails (the scan then reads what
    it can from ``start``, as before); ``stop`` as start when no record has such a time (no copy)."""
    window_end = stop if count is None else min(stop, start + count)
    if window_end - start <= SCAN_LIMIT or timestamp_ms < 0:
        return start, count
    try:
        first = lookup.offset_for_time(topic, partition, timestamp_ms)
    except ReplicaLookupError:
        return start, count
    if first is None:
        return stop, count
    if first <= start:
        return start, count
    return first, None if count is None else count - (first - start)
