"""The offset-sync history and MirrorMaker 2's rule over it (exact at a sync, conservative after one, the
repeat bound), the history's thinning, and MM2 copying again from an older position."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multicluster_source.replicas._codec import OffsetSync
from multicluster_source.replicas._store import MAX_SYNCS, RECENT, SyncStore


def _store(*pairs: tuple[int, int], topic: str = "orders", partition: int = 0) -> SyncStore:
    store = SyncStore()
    store.add_all(OffsetSync(topic, partition, up, down) for up, down in pairs)
    return store


def test_a_sync_at_the_position_is_exact() -> None:
    found = _store((10, 15), (40, 45)).lookup("orders", 0, 40)
    assert (found.to_offset, found.max_repeats, found.exact) == (45, 0, True)


def test_a_sync_for_the_record_before_the_position_is_exact_too() -> None:
    found = _store((10, 15), (39, 44)).lookup("orders", 0, 40)
    assert (found.to_offset, found.max_repeats, found.exact) == (45, 0, True)


def test_between_syncs_the_answer_is_conservative_and_bounded() -> None:
    store = _store((10, 15), (40, 45))
    found = store.lookup("orders", 0, 25)
    assert found.to_offset == 16 and not found.exact
    assert found.max_repeats == 14  # copies of origin offsets 11..24 at most
    # with few replica offsets between the syncs (compacted origin), the replica bound is the smaller
    tight = _store((10, 15), (40, 20)).lookup("orders", 0, 25)
    assert tight.max_repeats == 4


def test_after_the_last_sync_only_the_origin_bound_holds() -> None:
    found = _store((10, 15)).lookup("orders", 0, 13)
    assert (found.to_offset, found.max_repeats, found.after) == (16, 2, None)


def test_below_every_sync_and_without_syncs_there_is_no_answer() -> None:
    store = _store((10, 15))
    assert store.lookup("orders", 0, 5).to_offset is None
    assert store.lookup("orders", 0, 5).after == OffsetSync("orders", 0, 10, 15)
    assert store.lookup("orders", 1, 5).before is None and store.lookup("other", 0, 5).after is None


def test_mm2_copying_again_from_an_older_position_supersedes_the_later_syncs() -> None:
    store = _store((10, 15), (20, 25), (30, 35))
    store.add(OffsetSync("orders", 0, 20, 40))  # MM2 restarted from 20: records 20.. copied again from 40
    assert [(s.upstream, s.downstream) for s in store.syncs("orders", 0)] == [(10, 15), (20, 40)]
    assert store.lookup("orders", 0, 30).to_offset == 41
    store.add(OffsetSync("orders", 0, 20, 40))  # the same sync again changes nothing
    assert len(store.syncs("orders", 0)) == 2


def test_the_history_is_bounded_and_keeps_older_positions_translatable() -> None:
    store = SyncStore()
    for up in range(0, 100_000, 3):
        store.add(OffsetSync("orders", 0, up, up + 7))
    kept = store.syncs("orders", 0)
    assert len(kept) <= MAX_SYNCS
    assert kept[0].upstream == 0  # the oldest stays
    assert [s.upstream for s in kept[-RECENT:]] == list(range(99_999 - 3 * (RECENT - 1), 100_000, 3))
    old = store.lookup("orders", 0, 1_000)
    assert old.before is not None and old.to_offset is not None and old.to_offset <= 1_000 + 7
    assert old.max_repeats is not None and old.max_repeats < 1_000


@given(st.lists(st.integers(1, 50), min_size=1, max_size=300), st.integers(0, 20_000))
def test_the_answer_never_skips_a_record(steps, position) -> None:
    """Against a replica that copies every origin record once (downstream = upstream + 3), the answer is at
    or before the copy of the record at the position, and repeats at most the bound."""
    rng = random.Random(len(steps))
    store = SyncStore()
    up = 0
    for step in steps:
        up += step
        if rng.random() < 0.5:
            store.add(OffsetSync("t", 0, up, up + 3))
    found = store.lookup("t", 0, position)
    if found.to_offset is None:
        return
    right = position + 3
    assert found.to_offset <= right
    assert found.max_repeats is not None and right - found.to_offset <= found.max_repeats


@pytest.mark.parametrize("every", [1, 3, 50])
def test_a_position_far_behind_the_newest_sync_keeps_a_sync_within_a_fraction_of_its_lag(every) -> None:
    """A busy partition (a sync per record or few, as MM2 with ``offset.lag.max=0`` writes them) and a reader
    from a hundred to a hundred thousand records behind it: the sync below each position is close to it, so
    a handover repeats little, and a scan for the copy of the last record stays short."""
    store = SyncStore()
    newest = 0
    for newest in range(0, 400_000, every):
        store.add(OffsetSync("orders", 0, newest, newest + 7))
    assert len(store.syncs("orders", 0)) <= MAX_SYNCS
    for lag in (300, 1_000, 3_000, 10_000, 30_000, 100_000, 300_000):
        found = store.lookup("orders", 0, newest - lag)
        assert found.before is not None and found.max_repeats is not None
        assert found.max_repeats <= max(every, lag // 2), f"{lag} behind: {found.before}"
