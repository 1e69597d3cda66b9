"""An executor's read of one split's range, against a consumer that stands for one partition's log."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, TopicPartition

from multicluster_source.spark import _read
from multicluster_source.spark._driver import DataLossError
from multicluster_source.spark._read import SplitRange, arrow_schema
from multicluster_source.spark._read import _read as read_with


def _message(offset: int, error: KafkaError | None = None, headers: Any = None) -> Message:
    """A client message of partition ``orders/0`` (a real one: the column builder calls the client's
    methods), or an error event."""
    if error is not None:
        return Message(topic="orders", partition=0, error=error)
    return Message(
        topic="orders",
        partition=0,
        offset=offset,
        key=None if offset % 2 else f"k{offset}".encode(),
        value=f"v{offset}".encode(),
        headers=headers,
        timestamp=(1, 1_700_000_000_000 + offset),
    )


class _PartitionLog:
    """One partition: records at ``offsets`` (gaps are transaction markers), readable up to ``stable``."""

    def __init__(self, offsets: list[int], low: int, stable: int, *, deleted_to: int | None = None) -> None:
        self.offsets, self.low, self.stable = offsets, low, stable
        self.deleted_to = deleted_to  # the records below it go away once the first consume is served
        self.at = -1
        self.consumes = 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        return self.low, self.stable

    def assign(self, tps: list[TopicPartition]) -> None:
        self.at = tps[0].offset

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        self.consumes += 1
        assert self.consumes < 100, "the read did not end"
        if self.at < self.low:
            return [_message(-1, KafkaError(KafkaError._AUTO_OFFSET_RESET))]
        taken = [o for o in self.offsets if self.at <= o < self.stable][:num_messages]
        out = [_message(o, headers=[("h", b"x")] if o == 0 else None) for o in taken]
        if out:
            self.at = taken[-1] + 1
        else:
            self.at = self.stable
            out = [_message(-1, KafkaError(KafkaError._PARTITION_EOF))]
        if self.deleted_to is not None:
            self.low, self.deleted_to = self.deleted_to, None
        return out

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tps[0].topic, tps[0].partition, self.at)]


def _task(start: int, end: int, *, fail: bool = True, headers: bool = False) -> SplitRange:
    return SplitRange("east", "e:9092", {}, {}, "orders", 0, start, end, headers, fail, "p", 1000)


def _offsets(batches: list[Any]) -> list[int]:
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_a_range_that_ends_on_transaction_markers_ends() -> None:
    log = _PartitionLog([0, 1, 2, 4, 5], low=0, stable=7)  # 3 and 6: markers
    assert _offsets(list(read_with(_task(1, 7), log))) == [1, 2, 4, 5]


def test_batches_have_the_sources_schema_and_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_read, "ROWS_PER_BATCH", 2)
    batches = list(read_with(_task(0, 5, headers=True), _PartitionLog(list(range(5)), low=0, stable=5)))
    assert [b.num_rows for b in batches] == [2, 2, 1]
    assert all(b.schema == arrow_schema(True) for b in batches)
    rows = [row for b in batches for row in b.to_pylist()]
    assert rows[0]["headers"] == [{"key": "h", "value": b"x"}]
    assert rows[1]["headers"] is None
    assert [r["key"] for r in rows[:2]] == [b"k0", None]
    assert {(r["cluster"], r["topic"], r["partition"], r["timestampType"]) for r in rows} == {
        ("east", "orders", 0, 0)
    }
    assert rows[3]["timestamp"].timestamp() == pytest.approx(1_700_000_000.003)


def test_records_deleted_before_the_read_fail_naming_the_split_or_are_skipped() -> None:
    with pytest.raises(DataLossError, match="east/orders/0"):
        list(read_with(_task(0, 8), _PartitionLog(list(range(8)), low=3, stable=8)))
    batches = read_with(_task(0, 8, fail=False), _PartitionLog(list(range(8)), low=3, stable=8))
    assert _offsets(list(batches)) == [3, 4, 5, 6, 7]


def test_records_deleted_while_they_are_read_are_skipped_with_fail_on_data_loss_false(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_read, "ROWS_PER_BATCH", 2)
    log = _PartitionLog(list(range(10)), low=0, stable=10, deleted_to=6)
    assert _offsets(list(read_with(_task(0, 10, fail=False), log))) == [0, 1, 6, 7, 8, 9]
    log = _PartitionLog(list(range(10)), low=0, stable=10, deleted_to=6)
    with pytest.raises(DataLossError, match=r"east/orders/0: offsets 2\.\.5"):
        list(read_with(_task(0, 10), log))


def test_the_collector_is_held_off_from_a_batchs_first_consume_to_its_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_read, "ROWS_PER_BATCH", 3)
    log = _PartitionLog(list(range(7)), low=0, stable=7)
    consuming: list[bool] = []
    one_at_a_time = log.consume

    def consume(num_messages: int, timeout: float) -> list[Any]:  # a batch gathered over several calls
        consuming.append(gc.isenabled())
        return one_at_a_time(1, timeout)

    monkeypatch.setattr(log, "consume", consume)
    handed: list[bool] = []
    batches = []
    for batch in read_with(_task(0, 7), log):
        handed.append(gc.isenabled())
        batches.append(batch)
    assert _offsets(batches) == list(range(7)) and [b.num_rows for b in batches] == [3, 3, 1]
    assert consuming == [False] * 7  # the messages of a batch set off no pass while they are gathered
    assert handed == [True] * 3 and gc.isenabled()  # on while Spark has the batch


def test_a_read_that_fails_while_it_gathers_a_batch_leaves_the_collector_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_read, "ROWS_PER_BATCH", 3)
    log = _PartitionLog(list(range(8)), low=0, stable=8, deleted_to=5)
    two_at_a_time = log.consume
    monkeypatch.setattr(log, "consume", lambda num_messages, timeout: two_at_a_time(2, timeout))
    with pytest.raises(DataLossError, match=r"offsets 2\.\.4"):  # 0 and 1 gathered, the batch not made
        list(read_with(_task(0, 8), log))
    assert gc.isenabled()
