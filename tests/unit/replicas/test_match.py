"""Recognising the copy of the last received record on the replica, and narrowing by its timestamp, over an
in-memory replica partition (no broker): the start never passes the copy, and is exact where it can be."""

from __future__ import annotations

from multicluster_source.replicas._lookup import RecordCopy
from multicluster_source.replicas._match import SCAN_LIMIT, find_copy, last_record_before, narrow_by_time


class _Partition:
    """A ClusterLookup over one in-memory partition of ``records`` starting at ``low``."""

    def __init__(self, records: list[RecordCopy]) -> None:
        self.records = records
        self.reads: list[tuple[int, int, int]] = []

    def watermarks(self, topic, partition, **_):
        return (self.records[0].offset, self.records[-1].offset + 1) if self.records else (0, 0)

    def read(self, topic, partition, start, end, *, limit, timeout_s=None):
        self.reads.append((start, end, limit))
        return [r for r in self.records if start <= r.offset < end][:limit]

    def offset_for_time(self, topic, partition, timestamp_ms):
        return next((r.offset for r in self.records if r.timestamp_ms >= timestamp_ms), None)


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


# a one-to-one copy longer than the scan limit, three records a millisecond, as a busy writer leaves it
LONG = _Partition([_rec(i, f"v{i}", 5000 + i // 3) for i in range(SCAN_LIMIT * 3)])


def test_a_copy_further_above_the_sync_than_the_scan_limit_is_found_by_its_time() -> None:
    # position 45,002 and the only sync below it the first (0 -> 0): the window is 1..45,001, past the limit
    last = LONG.records[45_001]
    match = find_copy(LONG, "t", 0, last, start=1, end=None, count=45_001, timeout_s=1)  # type: ignore[arg-type]
    assert match is not None and (match.to_offset, match.max_repeats) == (45_002, 0)
    assert LONG.reads[-1][0] == 45_000  # read from the first record of that millisecond, not from 1


def test_a_time_narrows_a_window_longer_than_the_scan_limit_without_passing_the_copy() -> None:
    # the same position without the origin: replica 45,000 and 45,001 have the last returned record's time
    match = narrow_by_time(LONG, "t", 0, 5000 + 15_000, start=1, end=None, count=45_001, timeout_s=1)  # type: ignore[arg-type]
    assert match is not None and (match.to_offset, match.max_repeats) == (45_000, 2)


def test_no_replica_record_at_that_time_or_later_means_no_copy_yet() -> None:
    missing = _rec(70_000, "v70000", 999_999)
    assert find_copy(LONG, "t", 0, missing, start=1, end=None, count=70_000, timeout_s=1) is None  # type: ignore[arg-type]
