"""Arrow record batches of the client's messages (``poll_columns``): the columns, and exactly what counts as
delivered (no brokers: a hand-off filled by hand)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Message

from multicluster_source.framework import column_schema
from multicluster_source.framework._columns import ARROW_EXTRA, COLUMNS, ColumnBuilder, column_builder
from multicluster_source.framework._interfaces import RecordBatch
from multicluster_source.framework._records import records_of
from multicluster_source.reader._records import RecordMaker
from multicluster_source.runtime.core._delivery import Delivery, part_positions
from multicluster_source.runtime.core._handoff import Handoff, PositionTracker

pa = pytest.importorskip("pyarrow")


def _msg(
    partition: int,
    offset: int,
    *,
    topic: str = "t",
    key: bytes | None = b"k",
    stamp: tuple[int, int] = (1, 5),
) -> Any:
    headers: Any = [("h", b"1"), ("g", None)] if offset % 2 else None
    return Message(
        topic=topic,
        partition=partition,
        offset=offset,
        key=key,
        value=f"{partition}@{offset}".encode(),
        headers=headers,
        timestamp=stamp,
    )


def _rows(batches: list[Any]) -> list[tuple[str, str, int, int]]:
    return [(r["cluster"], r["topic"], r["partition"], r["offset"]) for b in batches for r in b.to_pylist()]


def test_a_batch_holds_every_field_a_record_of_the_same_message_reads() -> None:
    messages = [_msg(0, 7), _msg(3, 8, topic="u", key=None), _msg(0, 9, stamp=(0, -1))]
    batch = ColumnBuilder(headers=True)("east", messages)
    assert batch.schema == column_schema(headers=True)
    assert batch.schema.names == [*COLUMNS, "headers"]
    for row, record in zip(batch.to_pylist(), records_of("east", messages), strict=True):
        stamp = None if row["timestamp"] is None else int(row["timestamp"].timestamp() * 1000)
        headers = None if row["headers"] is None else [(h["key"], h["value"]) for h in row["headers"]]
        assert (row["cluster"], row["topic"], row["partition"], row["offset"]) == (
            record.cluster_id,
            record.topic,
            record.partition,
            record.offset,
        )
        assert (stamp, row["key"], row["value"], headers) == (
            record.timestamp,
            record.key,
            record.value,
            record.headers,
        )
    assert batch.column("timestamp")[0].as_py() == datetime.fromtimestamp(0.005, UTC)


def test_a_one_split_batch_repeats_its_topic_and_partition_and_keys_may_all_be_null() -> None:
    messages = [_msg(2, o, key=None) for o in range(5)]
    batch = column_builder()("west", messages, ("t", 2))
    assert batch.schema == column_schema()
    assert _rows([batch]) == [("west", "t", 2, o) for o in range(5)]
    assert batch.column("key").null_count == 5
    assert ColumnBuilder()("west", []).num_rows == 0


@pytest.mark.parametrize(
    "offsets",
    [
        [0, 1, 2, 3],  # no gap, from the log's start
        [2**40 + 5],  # one message, far into the log
        [10, 11, 13, 14],  # a compacted gap (or a transaction marker)
        [10, 12, 13],
        [3, 4, 5, 9, 10, 11],
    ],
)
def test_a_one_split_batch_has_exactly_its_messages_offsets_with_or_without_gaps(offsets: list[int]) -> None:
    batch = column_builder()("west", [_msg(1, o) for o in offsets], ("t", 1))
    assert batch.column("offset").to_pylist() == offsets
    assert batch.column("offset").type == pa.int64()


def test_timestamp_types_come_with_the_batch_and_a_missing_timestamp_is_null() -> None:
    stamps = [(1, 5), (0, -1), (2, 9)]
    messages = [_msg(0, o, stamp=s) for o, s in enumerate(stamps)]
    batch, kinds = column_builder().with_kinds("east", messages, ("t", 0))
    assert kinds == [1, 0, 2]
    assert batch.equals(column_builder()("east", messages, ("t", 0)))
    times = batch.column("timestamp").to_pylist()
    assert [None if t is None else int(t.timestamp() * 1000) for t in times] == [5, None, 9]
    assert column_builder().with_kinds("east", [])[1] == []


def test_without_pyarrow_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=ARROW_EXTRA.replace("[", r"\[").replace("]", r"\]")):
        ColumnBuilder()


def _delivery(batches: list[RecordBatch], tracker: PositionTracker | None = None) -> tuple[Delivery, Any]:
    handoff = Handoff(len(batches) + 1)
    for b in batches:
        assert handoff.put(b, lambda: False)
    delivered: dict[str, int] = {}
    target = tracker if tracker is not None else delivered.update
    return Delivery(handoff, RecordMaker(None), target), (tracker.snapshot if tracker else lambda: delivered)


def _batch(cluster: str, part_offsets: list[tuple[int, int]]) -> RecordBatch:
    messages = [_msg(p, o) for p, o in part_offsets]
    return RecordBatch(cluster, messages, part_positions(cluster, messages))


def _columns(delivery: Delivery, max_records: int = 100_000) -> list[Any]:
    return delivery.columns(0.0, max_records, lambda: False, column_builder())


def test_columns_deliver_exactly_the_rows_returned_and_the_rest_comes_next() -> None:
    delivery, delivered = _delivery([_batch("east", [(0, 10), (0, 11), (1, 5), (1, 6), (1, 7)])])
    first = _columns(delivery, 3)
    assert _rows(first) == [("east", "t", 0, 10), ("east", "t", 0, 11), ("east", "t", 1, 5)]
    assert delivered() == {"east/t/0": 12, "east/t/1": 6} and delivery.holding
    rest = delivery.records(0.0, 100, lambda: False)  # mixed with poll: it goes on after the last row
    assert [(r.partition, r.offset) for r in rest] == [(1, 6), (1, 7)]
    assert delivered() == {"east/t/0": 12, "east/t/1": 8}


def test_a_call_takes_batch_after_batch_each_made_at_once() -> None:
    batches = [_batch("east", [(0, 1), (0, 2)]), _batch("east", [(0, 3)]), _batch("west", [(1, 1)])]
    delivery, delivered = _delivery(batches)
    out = _columns(delivery)
    assert [b.num_rows for b in out] == [2, 1, 1]
    assert _rows(out) == [("east", "t", 0, 1), ("east", "t", 0, 2), ("east", "t", 0, 3), ("west", "t", 1, 1)]
    assert delivered() == {"east/t/0": 4, "west/t/1": 2}
    assert _columns(delivery) == []


def test_fenced_splits_rows_are_never_returned_nor_counted() -> None:
    tracker = PositionTracker()
    delivery, delivered = _delivery([_batch("east", [(0, 1), (1, 1), (0, 2)])], tracker)
    tracker.fence(["east/t/1"])
    assert _rows(_columns(delivery)) == [("east", "t", 0, 1), ("east", "t", 0, 2)]
    assert delivered() == {"east/t/0": 3}


def test_a_batch_that_cannot_be_made_is_not_counted_as_delivered() -> None:
    delivery, delivered = _delivery([_batch("east", [(0, 1)])])

    def broken(*_args: Any) -> Any:
        raise MemoryError("no memory")

    with pytest.raises(MemoryError):
        delivery.columns(0.0, 10, lambda: False, broken)
    assert delivered() == {} and delivery.holding
    assert _rows(_columns(delivery)) == [("east", "t", 0, 1)]
    assert delivered() == {"east/t/0": 2}


def _value_bytes(batch: RecordBatch) -> int:
    return sum(len(m.value() or b"") for m in batch.messages)


def _left_to_taker(batch: RecordBatch, counted: list[int]) -> RecordBatch:
    """``batch`` as a fetch made inline for a column taker hands it on: its value bytes left to the taker."""
    return RecordBatch(batch.cluster_id, batch.messages, batch.positions, count_bytes=counted.append)


def test_value_bytes_are_read_off_the_arrow_value_column_of_a_batch_or_a_slice_of_it() -> None:
    from multicluster_source.framework._columns import value_bytes

    messages = [_msg(0, o) for o in range(10, 14)]  # values "0@10" .. "0@13": 4 bytes each
    made = column_builder()("east", messages, ("t", 0))
    assert value_bytes(made) == 16
    assert value_bytes(made.slice(1, 2)) == 8 and value_bytes(made.slice(0, 0)) == 0
    tombstone = Message(topic="t", partition=0, offset=1, key=b"k", value=None, timestamp=(1, 5))
    assert value_bytes(column_builder()("east", [tombstone, *messages[:1]])) == 4 == len(messages[0])


def test_a_column_taker_counts_the_bytes_the_fetcher_left_to_it_once_per_row_taken() -> None:
    counted: list[int] = []
    batch = _batch("east", [(0, 10), (0, 11), (0, 12), (0, 13)])
    delivery, _delivered = _delivery([_left_to_taker(batch, counted)])
    assert sum(b.num_rows for b in _columns(delivery, 3)) == 3
    assert counted == [12]  # three 4-byte values, read off the Arrow batch
    delivery.records(0.0, 10, lambda: False)  # mixed with poll: the rest counted by its lengths
    assert counted == [12, 4] and sum(counted) == _value_bytes(batch)


def test_a_batch_that_cannot_be_made_counts_no_bytes_and_a_fenced_one_counts_all_it_fetched() -> None:
    counted: list[int] = []
    delivery, _delivered = _delivery([_left_to_taker(_batch("east", [(0, 1)]), counted)])

    def broken(*_args: Any) -> Any:
        raise MemoryError("no memory")

    with pytest.raises(MemoryError):
        delivery.columns(0.0, 10, lambda: False, broken)
    assert counted == []
    _columns(delivery)
    assert counted == [3]
    tracker = PositionTracker()
    fenced = _batch("east", [(0, 1), (1, 1), (0, 2)])
    delivery, _delivered = _delivery([_left_to_taker(fenced, counted := [])], tracker)
    tracker.fence(["east/t/1"])
    assert _rows(_columns(delivery)) == [("east", "t", 0, 1), ("east", "t", 0, 2)]
    assert counted == [_value_bytes(fenced)], "fetched is counted, as the fetcher counts it"


def test_only_a_thread_inside_a_column_take_is_marked_and_the_mark_is_put_back() -> None:
    from multicluster_source.framework._columns import mark_columns, taking_columns

    seen: list[bool] = []

    def build(cluster_id: str, messages: Any, split: Any) -> Any:
        seen.append(taking_columns())
        return column_builder()(cluster_id, messages, split)

    delivery, _delivered = _delivery([_batch("east", [(0, 1)])])
    assert not taking_columns()
    delivery.columns(0.0, 10, lambda: False, build)
    assert seen == [True] and not taking_columns()
    assert mark_columns(True) is False and mark_columns(False) is True


def test_the_collector_is_off_while_a_part_is_made_and_on_while_nothing_is_ready() -> None:
    import gc

    building: list[bool] = []
    waiting: list[bool] = []

    def build(cluster_id: str, messages: Any, split: Any) -> Any:
        building.append(gc.isenabled())
        return column_builder()(cluster_id, messages, split)

    def stopped() -> bool:  # asked only while the call waits for records
        waiting.append(gc.isenabled())
        return False

    delivery, delivered = _delivery([_batch("east", [(0, 1)]), _batch("east", [(0, 2)])])
    assert gc.isenabled()
    assert _rows(delivery.columns(0.0, 10, stopped, build)) == [("east", "t", 0, 1), ("east", "t", 0, 2)]
    assert building == [False, False] and gc.isenabled()
    assert delivery.columns(0.25, 10, stopped, build) == []
    assert waiting and all(waiting) and gc.isenabled() and delivered() == {"east/t/0": 3}
    gc.disable()  # an application's choice stays
    try:
        delivery.columns(0.0, 10, stopped, build)
        assert not gc.isenabled()
    finally:
        gc.enable()
