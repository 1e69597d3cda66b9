"""The source's offsets as Spark keeps them, and the arithmetic on them (no pyspark here: unit-testable).

An offset is a JSON object of split id (``cluster/topic/partition``) to the next offset to read. Spark
writes it to its offset log and tells "new data" from "none" by comparing the JSON text, so the keys are
always sorted. Splits whose topic or cluster left the metadata keep their last position in it: a topic
added back resumes there, in the same run or after a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from multicluster_source.exceptions import CheckpointError
from multicluster_source.framework._split import parse_split_id

__all__ = [
    "Range",
    "backlog",
    "decode_offset",
    "encode_offset",
    "plan_ranges",
    "split_ranges",
    "spread_limit",
]


@dataclass(frozen=True, slots=True)
class Range:
    """The records ``[start, end)`` of one split that one micro-batch reads."""

    split_id: str
    start: int
    end: int

    @property
    def size(self) -> int:
        """How many offsets the range spans (records, and control records of transactions)."""
        return self.end - self.start


def encode_offset(positions: Mapping[str, int]) -> dict[str, int]:
    """``positions`` as Spark should store them: keys sorted, values plain ints."""
    return {key: int(positions[key]) for key in sorted(positions)}


def decode_offset(offset: Mapping[str, object]) -> dict[str, int]:
    """An offset read back from Spark (its offset log or the previous micro-batch); raises
    :class:`CheckpointError` naming the entry that is not ``"cluster/topic/partition": offset``."""
    if not isinstance(offset, Mapping):
        raise CheckpointError(f"a multicluster-kafka offset must be a JSON object, got {offset!r}")
    out: dict[str, int] = {}
    for key, value in offset.items():
        try:
            parse_split_id(str(key))
        except ValueError:
            raise CheckpointError(
                f"offset entry {key!r} is not a split id 'cluster/topic/partition'"
            ) from None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CheckpointError(f"offset of split {key}: expected an offset >= 0, got {value!r}")
        out[str(key)] = value
    return encode_offset(out)


def backlog(start: Mapping[str, int], latest: Mapping[str, int]) -> int:
    """Records (offsets) between ``start`` and ``latest`` over the splits of both."""
    return sum(max(0, v - start[k]) for k, v in latest.items() if k in start)


def spread_limit(start: Mapping[str, int], latest: Mapping[str, int], limit: int | None) -> dict[str, int]:
    """Where each split of ``latest`` ends this micro-batch: at its latest offset, or, when the backlog over
    all splits is more than ``limit`` records, after a share of ``limit`` proportional to its backlog.

    Shares are whole records: the floors first, then one more record each to the splits with the largest
    remainders (ties by split id), so the shares add up to ``limit`` exactly and the result depends on the
    offsets only. A split not in ``start`` has no backlog here (it ends where ``latest`` says).
    """
    backlog = {k: max(0, v - start[k]) for k, v in latest.items() if k in start}
    total = sum(backlog.values())
    ends = {k: max(v, start.get(k, v)) for k, v in latest.items()}
    if limit is None or total <= limit:
        return encode_offset(ends)
    shares = {k: limit * b // total for k, b in backlog.items()}
    left = limit - sum(shares.values())
    by_remainder = sorted(backlog, key=lambda k: (-(limit * backlog[k] % total), k))
    for key in by_remainder:
        if left <= 0:
            break
        if shares[key] < backlog[key]:
            shares[key] += 1
            left -= 1
    for key, share in shares.items():
        ends[key] = start[key] + share
    return encode_offset(ends)


def plan_ranges(start: Mapping[str, int], end: Mapping[str, int]) -> list[Range]:
    """The non-empty ranges between two offsets, by split id. A split that is new in ``end`` has no range:
    it enters the offset at its first position, with nothing read yet; one that went backwards neither."""
    ranges = [
        Range(key, start[key], end[key]) for key in sorted(end) if key in start and end[key] > start[key]
    ]
    return ranges


def split_ranges(ranges: list[Range], min_partitions: int | None) -> list[Range]:
    """``ranges`` cut into at least ``min_partitions`` pieces where they are long enough: the longest range
    is halved until there are enough (ranges of one record stay whole). Sorted by split id, then start."""
    out = list(ranges)
    if min_partitions is None:
        return out
    while len(out) < min_partitions:
        longest = max(out, key=lambda r: (r.size, r.split_id), default=None)
        if longest is None or longest.size < 2:
            break
        middle = longest.start + longest.size // 2
        out.remove(longest)
        out += [Range(longest.split_id, longest.start, middle), Range(longest.split_id, middle, longest.end)]
    return sorted(out, key=lambda r: (r.split_id, r.start))
