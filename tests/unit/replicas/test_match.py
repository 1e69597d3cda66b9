"""Recognising the copy of the last received record on the replica, and narrowing by its timestamp, over an
in-memory replica partition (no broker): the start never passes the copy, and is exact where it can be."""

from __future__ import annotations

from multicluster_source.replicas._lookup import RecordCopy
from multicluster_source.replicas._match import find_copy, last_record_before, narrow_by_time


class _Partition:
    """A ClusterLookup over one in-memory partition of ``records`` starting at ``low``."""

    def __init__(self, records: list[RecordCopy]) -> None:
        self.records = records

    def watermarks(self, topic, partition, **_):
        return (self.records[0].offset, self.records[-1].offset + 1) if self.records else (0, 0)

    def read(self, topic, partition, start, end, *, limit, timeout_s=None):
        return [r for r in self.records if start <= r.offset < end][:limit]


def _rec(offset: int, value: str, ts: int) -> RecordCopy:
    return RecordCopy(offset, b"k", value.encode(), (("h", b"1"),), ts)


ORIGIN = [_rec(i, f"v{i}", 1000 + i // 3) for i in range(30)]
# the replica: 5 records of its own, then the copies (offset + 5)
REPLICA = _Partition(
    [_rec(i, "own", 1) for i in range(5)] + [_rec(i + 5, f"v{i}", 1000 + i // 3) for i in range(30)]
)


def test_the_copy_of_the_last_received_record_is_found_and_the_start_is_right_after_it() -> None:
    last = last_record_before(_Partition(ORIGIN), "t", 0, 17)  # type: ignore[arg-type]
    assert last is not None and last.offset == 16
    match = find_copy(REPLICA, "t", 0, last, start=8, end=None, count=None, timeout_s=1)  # type: ignore[arg-type]
    assert match is not None and (match.to_offset, match.max_repeats) == (22, 0)


def test_identical_records_in_the_window_leave_a_bound_instead_of_skipping() -> None:
    twins = _Partition([_rec(i, "same", 7) for i in range(10)])
    match = find_copy(twins, "t", 0, _rec(99, "same", 7), start=2, end=None, count=None, timeout_s=1)  # type: ignore[arg-type]
    assert match is not None and (match.to_offset, match.max_repeats) == (3, 7)


def test_a_missing_copy_gives_no_match() -> None:
    assert find_copy(REPLICA, "t", 0, _rec(3, "gone", 5), start=5, end=None, count=None, timeout_s=1) is None  # type: ignore[arg-type]


def test_a_timestamp_narrows_without_passing_the_copy() -> None:
    # position 17 after a sync at origin 4 (replica 9): the window is replica 10..21 (origin 5..16); the last
    # received record, origin 16, has time 1005, as origin 15 and 17 have
    match = narrow_by_time(REPLICA, "t", 0, 1005, start=10, end=None, count=12, timeout_s=1)  # type: ignore[arg-type]
    assert match is not None
    assert (match.to_offset, match.max_repeats) == (20, 2)  # origin 15's copy: 15 and 16 repeat, 17 is next


def test_a_time_only_one_record_has_in_a_complete_window_is_exact() -> None:
    distinct = _Partition([_rec(i, f"v{i}", 2000 + i) for i in range(40)])
    match = narrow_by_time(distinct, "t", 0, 2017, start=10, end=30, count=None, timeout_s=1)  # type: ignore[arg-type]
    assert match is not None and (match.to_offset, match.max_repeats) == (18, 0)
    assert narrow_by_time(distinct, "t", 0, 5000, start=10, end=30, count=None, timeout_s=1) is None  # type: ignore[arg-type]
