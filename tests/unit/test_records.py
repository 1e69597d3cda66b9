"""Records and batches: lazy views over the client's messages that behave as the frozen records they replace,
and the delivery of records and batches with exactly the positions of what was returned."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
from confluent_kafka import Message

from multicluster_source import DeserializationError, MessageBatch, RawRecord, SourceRecord
from multicluster_source.framework._interfaces import RecordBatch
from multicluster_source.framework._records import records_of
from multicluster_source.reader._records import RecordMaker
from multicluster_source.runtime.core._delivery import Delivery, part_positions
from multicluster_source.runtime.core._handoff import Handoff


def _msg(partition: int, offset: int, value: bytes | None = b"v", *, topic: str = "t", ts: int = 1000) -> Any:
    return Message(
        topic=topic,
        partition=partition,
        offset=offset,
        key=b"k",
        value=value,
        headers=[("h", b"1")],
        timestamp=(1, ts),
    )


def test_a_record_over_a_message_reads_every_field_from_it() -> None:
    [record] = records_of("east", [_msg(3, 42, b"hello")])
    assert (record.cluster_id, record.topic, record.partition, record.offset) == ("east", "t", 3, 42)
    assert (record.timestamp, record.key, record.value, record.headers) == (
        1000,
        b"k",
        b"hello",
        [("h", b"1")],
    )
    assert record.split_id == "east/t/3"
    assert tuple(record) == ("east", "t", 3, 42, 1000, b"k", b"hello", [("h", b"1")])
    assert len(record) == 8 and record[2] == 3 and record[-2] == b"hello"


def test_records_made_by_hand_compare_hash_and_print_by_their_fields() -> None:
    by_hand = SourceRecord("east", "t", 3, 42, 1000, b"k", {"n": 1}, None)
    same = SourceRecord("east", "t", 3, 42, 1000, b"k", {"n": 1}, None)
    assert by_hand == same
    assert (by_hand != same) is False
    assert by_hand == ("east", "t", 3, 42, 1000, b"k", {"n": 1}, None)
    assert by_hand != SourceRecord("east", "t", 3, 43, 1000, b"k", {"n": 1}, None)
    assert repr(by_hand) == (
        "SourceRecord(cluster_id='east', topic='t', partition=3, offset=42, timestamp=1000, key=b'k', "
        "value={'n': 1}, headers=None)"
    )
    assert SourceRecord("c", "t", 0, 0, None, None, b"x", None).timestamp is None
    assert hash(SourceRecord("c", "t", 0, 0, 5, None, b"x", None)) == hash(
        ("c", "t", 0, 0, 5, None, b"x", None)
    )
    assert by_hand._asdict()["value"] == {"n": 1}


def test_records_are_immutable() -> None:
    [record] = records_of("east", [_msg(0, 1)])
    with pytest.raises(AttributeError):
        record.value = b"other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        record.extra = 1  # type: ignore[attr-defined]
    batch = MessageBatch("east", [_msg(0, 1)])
    with pytest.raises(AttributeError):
        batch.cluster_id = "west"


def test_records_and_batches_pickle_and_copy_with_their_fields() -> None:
    [record] = records_of("east", [_msg(1, 7, b"payload")])
    back = pickle.loads(pickle.dumps(record))
    assert type(back) is SourceRecord and back == record and back.value == b"payload"
    assert copy.copy(record) == record
    raw = RawRecord("east", "t", 1, 7, None, None, b"x", None)
    assert pickle.loads(pickle.dumps(raw)) == raw and type(pickle.loads(pickle.dumps(raw))) is RawRecord
    batch = pickle.loads(pickle.dumps(MessageBatch("east", [_msg(0, 1, b"a"), _msg(0, 2, b"b")])))
    assert (
        batch.cluster_id == "east" and [m.value() for m in batch.messages] == [b"a", b"b"] and len(batch) == 2
    )


def test_the_deserializer_gets_a_raw_record_and_its_result_becomes_the_value() -> None:
    seen: list[RawRecord] = []

    def upper(raw: RawRecord) -> str:
        seen.append(raw)
        assert raw.value is not None
        return raw.value.decode().upper()

    [record] = RecordMaker(upper)("east", [_msg(2, 9, b"abc")])
    assert record.value == "ABC" and record.offset == 9 and record.cluster_id == "east"
    assert isinstance(seen[0], RawRecord) and seen[0].split_id == "east/t/2" and seen[0].value == b"abc"


class _Metrics:
    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []

    def deserialization_error(self, cluster: str, topic: str) -> None:
        self.errors.append((cluster, topic))


def _broken(raw: RawRecord) -> bytes:
    if raw.value == b"bad":
        raise ValueError("not json")
    assert raw.value is not None
    return raw.value


def test_a_failing_deserializer_fails_naming_the_record_or_skips_and_counts() -> None:
    messages = [_msg(0, 1, b"ok"), _msg(0, 2, b"bad"), _msg(0, 3, b"ok2")]
    with pytest.raises(DeserializationError) as info:
        RecordMaker(_broken, "fail")("east", messages)
    assert "east" in str(info.value) and "t" in str(info.value) and "2" in str(info.value)
    metrics = _Metrics()
    records = RecordMaker(_broken, "skip", metrics)("east", messages)
    assert [r.value for r in records] == [b"ok", b"ok2"] and metrics.errors == [("east", "t")]


def _delivery(
    batches: list[RecordBatch], maker: Any = None, gather: int | None = None
) -> tuple[Delivery, dict[str, int]]:
    handoff = Handoff(len(batches) + 1)
    for b in batches:
        assert handoff.put(b, lambda: False)
    delivered: dict[str, int] = {}
    return Delivery(handoff, maker or RecordMaker(None), delivered.update, gather=gather), delivered


def _batch(cluster: str, part_offsets: list[tuple[int, int]]) -> RecordBatch:
    messages = [_msg(p, o, f"{p}@{o}".encode()) for p, o in part_offsets]
    return RecordBatch(cluster, messages, part_positions(cluster, messages))


def test_a_cut_batch_delivers_the_positions_of_what_was_returned_only() -> None:
    batch = _batch("east", [(0, 10), (0, 11), (1, 5), (1, 6), (1, 7)])
    delivery, delivered = _delivery([batch])
    first = delivery.records(0.0, 3, lambda: False)
    assert [(r.partition, r.offset) for r in first] == [(0, 10), (0, 11), (1, 5)]
    assert delivered == {"east/t/0": 12, "east/t/1": 6} and delivery.holding
    rest = delivery.batches(0.0, 100, lambda: False)
    assert [(m.partition(), m.offset()) for b in rest for m in b.messages] == [(1, 6), (1, 7)]
    assert delivered == {"east/t/0": 12, "east/t/1": 8} and not delivery.holding


def test_records_stop_taking_further_batches_once_a_fetch_batchs_worth_is_in_hand() -> None:
    batches = [_batch("east", [(0, 1), (0, 2)]), _batch("west", [(1, 1)]), _batch("east", [(0, 3), (0, 4)])]
    delivery, delivered = _delivery(batches, gather=3)
    first = delivery.records(0.0, 100, lambda: False)
    assert _offsets(first) == [(0, 1), (0, 2), (1, 1)]  # 2 < 3: one more batch, then enough
    assert delivered == {"east/t/0": 3, "west/t/1": 2}
    assert _offsets(delivery.records(0.0, 100, lambda: False)) == [(0, 3), (0, 4)]
    assert delivered["east/t/0"] == 5
    assert delivery.records(0.0, 100, lambda: False) == []


def test_batches_hand_over_the_clients_own_message_objects_without_a_copy() -> None:
    batch = _batch("west", [(0, 1), (0, 2)])
    delivery, delivered = _delivery([batch, _batch("east", [(3, 4)])])
    got = delivery.batches(0.0, 10, lambda: False)
    assert [b.cluster_id for b in got] == ["west", "east"]
    assert got[0].messages is batch.messages
    assert delivered == {"west/t/0": 3, "east/t/3": 5}


def test_a_record_batch_that_fails_to_deserialize_is_not_counted_as_delivered() -> None:
    batch = RecordBatch("east", [_msg(0, 1, b"ok"), _msg(0, 2, b"bad")], {"east/t/0": 3})
    delivery, delivered = _delivery([batch], RecordMaker(_broken, "fail"))
    with pytest.raises(DeserializationError):
        delivery.records(0.0, 10, lambda: False)
    assert delivered == {} and delivery.holding


def test_positions_without_messages_are_delivered_on_the_way() -> None:
    delivery, delivered = _delivery([RecordBatch("east", [], {"east/t/0": 100}), _batch("east", [(1, 0)])])
    records = delivery.records(0.0, 10, lambda: False)
    assert len(records) == 1 and delivered == {"east/t/0": 100, "east/t/1": 1}


def _offsets(records: Any) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in records]


def test_iteration_counts_as_delivered_only_the_records_taken_so_far() -> None:
    batch = _batch("east", [(0, 10), (0, 11), (1, 5), (1, 6), (1, 7)])
    delivery, delivered = _delivery([batch, _batch("east", [(0, 12)])])
    records = delivery.iterate(0.0, lambda: False)
    assert records is not None
    assert _offsets([next(records), next(records), next(records)]) == [(0, 10), (0, 11), (1, 5)]
    assert delivered == {} and delivery.holding
    delivery.settle()  # a checkpoint in the loop
    assert delivered == {"east/t/0": 12, "east/t/1": 6}
    assert _offsets(records) == [(1, 6), (1, 7)]
    delivery.settle()  # the end of the batch: its own positions
    assert delivered == {"east/t/0": 12, "east/t/1": 8} and not delivery.holding
    nxt = delivery.iterate(0.0, lambda: False)
    assert nxt is not None and _offsets(nxt) == [(0, 12)]


def test_poll_after_leaving_a_loop_goes_on_after_its_last_record_and_ends_the_loops_iterator() -> None:
    batch = _batch("east", [(0, 1), (0, 2), (0, 3), (0, 4)])
    delivery, delivered = _delivery([batch])
    records = delivery.iterate(0.0, lambda: False)
    assert records is not None and next(records).offset == 1
    rest = delivery.records(0.0, 10, lambda: False)
    assert _offsets(rest) == [(0, 2), (0, 3), (0, 4)]
    assert list(records) == [], "the old iterator handed out what poll already returned"
    assert delivered == {"east/t/0": 5} and not delivery.holding


def test_a_new_iterator_takes_over_where_the_last_one_stopped() -> None:
    delivery, delivered = _delivery([_batch("east", [(0, 1), (0, 2), (0, 3)])])
    first = delivery.iterate(0.0, lambda: False)
    assert first is not None and next(first).offset == 1
    second = delivery.iterate(0.0, lambda: False)
    assert second is not None and [r.offset for r in second] == [2, 3] and list(first) == []
    delivery.settle()
    assert delivered == {"east/t/0": 4}


def test_iteration_with_a_deserializer_stops_before_the_record_that_fails() -> None:
    messages = [_msg(0, 1, b"ok"), _msg(0, 2, b"bad"), _msg(0, 3, b"ok2")]
    delivery, delivered = _delivery([RecordBatch("east", messages, {"east/t/0": 4})], RecordMaker(_broken))
    records = delivery.iterate(0.0, lambda: False)
    assert records is not None and next(records).value == b"ok"
    with pytest.raises(DeserializationError):
        next(records)
    delivery.settle()
    assert delivered == {"east/t/0": 2} and delivery.holding


def test_iteration_with_policy_skip_leaves_out_the_failing_record_but_counts_it_delivered() -> None:
    messages = [_msg(0, 1, b"ok"), _msg(0, 2, b"bad")]
    metrics = _Metrics()
    maker = RecordMaker(_broken, "skip", metrics)
    delivery, delivered = _delivery([RecordBatch("east", messages, {"east/t/0": 3})], maker)
    records = delivery.iterate(0.0, lambda: False)
    assert records is not None and [r.value for r in records] == [b"ok"]
    delivery.settle()
    assert delivered == {"east/t/0": 3} and metrics.errors == [("east", "t")] and not delivery.holding


def test_next_ready_hands_out_one_record_at_a_time_and_none_when_nothing_is_ready() -> None:
    delivery, delivered = _delivery([_batch("east", [(0, 1), (0, 2)]), _batch("east", [(1, 7)])])
    first = delivery.next_ready(lambda: False)
    assert first is not None and first.offset == 1
    assert delivered == {}  # counted as delivered on a checkpoint or at the end of the batch
    delivery.settle()
    assert delivered == {"east/t/0": 2}
    assert _offsets(delivery.records(0.0, 1, lambda: False)) == [(0, 2)]  # poll goes on after it
    third = delivery.next_ready(lambda: False)
    assert third is not None and (third.partition, third.offset) == (1, 7)
    assert delivery.next_ready(lambda: False) is None
    assert delivered == {"east/t/0": 3, "east/t/1": 8} and not delivery.holding
