"""A split that leaves the metadata is fenced, and guarded once it comes back (issue 33, finding 1).

Batches fetched before the removal may still wait in the hand-off (or in a fetch thread's hands) when the
split is re-added and resumes at the position the caller reached: they must come out neither while the split
is removed nor twice after the re-add, whichever of the old and the new batches comes first.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Message

from multicluster_source.framework._interfaces import RecordBatch
from multicluster_source.reader._records import RecordMaker
from multicluster_source.runtime.core._delivery import Delivery, part_positions
from multicluster_source.runtime.core._handoff import Handoff, PositionTracker

B = "east/b/0"


def _msgs(topic: str, offsets: range) -> list[Any]:
    return [Message(topic=topic, partition=0, offset=o, value=b"v", timestamp=(1, o)) for o in offsets]


def _put(handoff: Handoff, messages: list[Any]) -> None:
    assert handoff.put(RecordBatch("east", messages, part_positions("east", messages)), lambda: False)


def _offsets(records: list[Any], topic: str = "b") -> list[int]:
    return [r.offset for r in records if r.topic == topic]


def test_nothing_fetched_before_a_removal_is_returned_while_the_split_is_removed() -> None:
    tracker = PositionTracker()
    handoff = Handoff(8)
    for lo in (0, 5, 10):
        _put(handoff, _msgs("b", range(lo, lo + 5)))
    _put(handoff, _msgs("a", range(3)))
    delivery = Delivery(handoff, RecordMaker(None), tracker)
    assert _offsets(delivery.records(0.1, 5, lambda: True)) == [0, 1, 2, 3, 4]
    assert tracker.fence([B]) == {B: (5, None)}  # the topic left the metadata
    rest = delivery.records(0.1, 100, lambda: True)
    assert _offsets(rest) == [] and _offsets(rest, "a") == [0, 1, 2]
    assert tracker.get([B]) == {B: 5}, "the position kept for a re-add is the one the caller reached"


def test_a_re_added_split_returns_each_record_once_when_old_batches_come_first() -> None:
    tracker = PositionTracker({B: 5})
    handoff = Handoff(8)
    tracker.fence([B])
    _put(handoff, _msgs("b", range(5, 10)))  # fetched before the removal, still waiting
    tracker.unfence([B])  # re-added: resumes at 5, and the new fetch starts there too
    _put(handoff, _msgs("b", range(5, 12)))
    delivery = Delivery(handoff, RecordMaker(None), tracker)
    got = delivery.records(0.1, 100, lambda: True)
    assert _offsets(got) == [5, 6, 7, 8, 9, 10, 11]
    assert tracker.get([B]) == {B: 12}


def test_a_re_added_split_returns_each_record_once_when_new_batches_come_first() -> None:
    tracker = PositionTracker({B: 5})
    handoff = Handoff(8)
    tracker.fence([B])
    tracker.unfence([B])
    _put(handoff, _msgs("b", range(5, 9)))  # the new fetch first (another reader, say)
    _put(handoff, _msgs("b", range(5, 12)))  # then a batch fetched before the removal
    delivery = Delivery(handoff, RecordMaker(None), tracker)
    first = delivery.records(0.1, 100, lambda: True)
    assert _offsets(first) == [5, 6, 7, 8, 9, 10, 11]
    _put(handoff, _msgs("b", range(6, 8)))  # entirely behind: dropped, and the position stays
    assert delivery.batches(0.1, 100, lambda: True) == []
    assert tracker.get([B]) == {B: 12}


def test_the_for_loop_skips_repeats_of_a_guarded_split() -> None:
    tracker = PositionTracker({B: 5})
    handoff = Handoff(8)
    tracker.fence([B])
    tracker.unfence([B])
    _put(handoff, _msgs("b", range(5, 8)))
    _put(handoff, _msgs("b", range(5, 10)))
    delivery = Delivery(handoff, RecordMaker(None), tracker)
    seen: list[int] = []
    for _ in range(2):
        records = delivery.iterate(0.1, lambda: True)
        assert records is not None
        seen += [r.offset for r in records]
        delivery.settle()
    assert seen == [5, 6, 7, 8, 9]
    assert tracker.get([B]) == {B: 10}


def test_an_offset_reset_may_move_a_guarded_split_back() -> None:
    """A re-added topic that was deleted and created again starts over at offset 0: its reset is not a
    repeat, and what follows it is delivered."""
    tracker = PositionTracker({B: 50})
    handoff = Handoff(8)
    tracker.fence([B])
    tracker.unfence([B])
    assert handoff.put(RecordBatch("east", [], {B: 0}, reset=True), lambda: False)
    _put(handoff, _msgs("b", range(3)))
    got = Delivery(handoff, RecordMaker(None), tracker).records(0.1, 100, lambda: True)
    assert _offsets(got) == [0, 1, 2]
    assert tracker.get([B]) == {B: 3}


def test_delivered_positions_of_a_guarded_split_never_move_back() -> None:
    """The push runtime reports positions of handled batches: a late one of a batch fetched before the
    fence does not move a guarded split back."""
    tracker = PositionTracker({B: 5})
    tracker.fence([B])
    tracker.unfence([B])
    tracker.advance({B: 20})
    tracker.advance({B: 10})
    assert tracker.get([B]) == {B: 20}
    tracker.fence([B])  # fenced again: no longer guarded, and refused
    assert tracker.advance({B: 30}) == frozenset({B})
    assert tracker.guarded == frozenset()
