"""The Spark source's offset JSON and admission control (no Spark, no broker)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multicluster_source.exceptions import CheckpointError
from multicluster_source.spark._offsets import (
    Range,
    backlog,
    decode_offset,
    encode_offset,
    plan_ranges,
    split_ranges,
    spread_limit,
)


def test_offsets_are_written_with_sorted_keys_whatever_the_order_they_were_made_in() -> None:
    made = {"west/b/0": 4, "east/a/1": 2, "east/a/0": 9}
    assert json.dumps(encode_offset(made)) == '{"east/a/0": 9, "east/a/1": 2, "west/b/0": 4}'
    assert json.dumps(encode_offset(made)) == json.dumps(encode_offset(dict(reversed(made.items()))))


def test_an_offset_read_back_is_checked_and_sorted() -> None:
    assert list(decode_offset({"w/t/0": 1, "e/t/0": 0})) == ["e/t/0", "w/t/0"]
    with pytest.raises(CheckpointError, match="not-a-split"):
        decode_offset({"not-a-split": 1})
    with pytest.raises(CheckpointError, match="e/t/0"):
        decode_offset({"e/t/0": -3})
    with pytest.raises(CheckpointError, match="e/t/0"):
        decode_offset({"e/t/0": "7"})


def test_ranges_are_the_splits_that_moved_and_new_or_removed_splits_have_none() -> None:
    start = {"e/a/0": 5, "e/a/1": 3, "gone/x/0": 8}
    end = {"e/a/0": 9, "e/a/1": 3, "gone/x/0": 8, "new/y/0": 0}
    assert plan_ranges(start, end) == [Range("e/a/0", 5, 9)]
    assert plan_ranges(start, end)[0].size == 4


def test_under_the_limit_every_split_goes_to_its_latest_offset() -> None:
    start = {"e/a/0": 0, "e/a/1": 10}
    assert spread_limit(start, {"e/a/0": 5, "e/a/1": 12}, 100) == {"e/a/0": 5, "e/a/1": 12}
    assert spread_limit(start, {"e/a/0": 5, "e/a/1": 12}, None) == {"e/a/0": 5, "e/a/1": 12}


def test_over_the_limit_the_records_are_shared_by_backlog() -> None:
    start = {"e/a/0": 0, "e/a/1": 0, "w/b/0": 100}
    latest = {"e/a/0": 600, "e/a/1": 300, "w/b/0": 200}
    # backlogs 600, 300, 100 of 1000; 100 records: 60, 30, 10
    assert spread_limit(start, latest, 100) == {"e/a/0": 60, "e/a/1": 30, "w/b/0": 110}


def test_the_remainder_goes_to_the_largest_fractions_then_by_split_id() -> None:
    start = dict.fromkeys(("a/t/0", "b/t/0", "c/t/0"), 0)
    latest = dict.fromkeys(("a/t/0", "b/t/0", "c/t/0"), 10)
    assert spread_limit(start, latest, 4) == {"a/t/0": 2, "b/t/0": 1, "c/t/0": 1}


def test_a_split_behind_its_position_does_not_go_back() -> None:
    assert spread_limit({"e/a/0": 50}, {"e/a/0": 10}, 5) == {"e/a/0": 50}


offsets = st.dictionaries(
    st.sampled_from([f"c{c}/t/{p}" for c in range(3) for p in range(4)]),
    st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)),
    min_size=1,
)


@given(offsets, st.integers(1, 5_000))
def test_shares_never_pass_the_limit_nor_a_latest_offset_and_always_make_progress(
    pairs: dict[str, tuple[int, int]], limit: int
) -> None:
    start = {k: a for k, (a, _b) in pairs.items()}
    latest = {k: a + b for k, (a, b) in pairs.items()}
    ends = spread_limit(start, latest, limit)
    moved = sum(ends[k] - start[k] for k in start)
    backlog = sum(latest[k] - start[k] for k in start)
    assert moved == min(limit, backlog)
    assert all(start[k] <= ends[k] <= latest[k] for k in start)
    assert list(ends) == sorted(ends)


def test_the_backlog_counts_the_splits_of_both_offsets() -> None:
    assert backlog({"e/a/0": 5, "e/a/1": 9, "gone/x/0": 3}, {"e/a/0": 8, "e/a/1": 9, "new/y/0": 40}) == 3


def test_min_partitions_halves_the_longest_ranges_until_there_are_enough() -> None:
    ranges = [Range("e/a/0", 0, 100), Range("e/b/0", 10, 20)]
    assert split_ranges(ranges, None) == ranges
    assert split_ranges(ranges, 2) == ranges
    assert split_ranges(ranges, 3) == [Range("e/a/0", 0, 50), Range("e/a/0", 50, 100), Range("e/b/0", 10, 20)]
    assert len(split_ranges(ranges, 8)) == 8
    assert split_ranges([Range("e/a/0", 0, 2)], 5) == [Range("e/a/0", 0, 1), Range("e/a/0", 1, 2)]


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(1, 500)), min_size=1, max_size=6), st.integers(1, 40)
)
def test_split_ranges_cover_every_offset_once(pieces: list[tuple[int, int]], wanted: int) -> None:
    ranges = [Range(f"c/t/{i}", start, start + size) for i, (start, size) in enumerate(pieces)]
    out = split_ranges(ranges, wanted)
    covered = Counter((r.split_id, o) for r in out for o in range(r.start, r.end))
    assert covered == Counter((r.split_id, o) for r in ranges for o in range(r.start, r.end))
    assert len(out) >= min(wanted, sum(r.size for r in ranges))
