"""Where the record path's time goes, without brokers: per-message and per-batch costs by ``timeit``.

The long runs (``bench_throughput.py --long``) compare the ``for`` loop and ``poll`` with the *floor*, the
smallest loop on the raw client that makes the same records and keeps positions once per batch. This
splits what is left into its parts, on ``confluent_kafka.Message`` objects made in memory (100-byte values,
as the throughput benchmark's):

- per message (ns), the C-level passes over a batch: the scan for error events (the floor makes it too),
  the value bytes the fetcher counts for ``multicluster_source_bytes_consumed_total`` (the floor does not),
  a record made and its value read (the ``for`` loop's and the floor's), a list of records (``poll``'s);
- per batch (us): the source's whole path for one batch (the inline fetch step on a stand-in consumer that
  hands out the same messages, the hand-off, ``Delivery``, the records taken, the positions settled)
  against the floor's loop on the same stand-in, with and without the bytes count;
- per batch (us), the column path: ``poll_columns``' whole way for one batch (the inline step, the hand-off,
  the Arrow batch, its value bytes counted off the value column) against the raw column loop of
  ``bench_throughput --long`` (``rawcolumns``: the error scan, one pass to see whether the batch is of one
  partition, the same ``ColumnBuilder``) on the same stand-in.

The garbage collector is off while timing: its share (a young collection every 700 objects allocated and
kept, full ones as they are promoted) is the same for the source and the floor, except for ``poll``'s list,
which keeps a batch of records alive. Run: ``python benchmarks/bench_record_costs.py [--batch 1000]``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import timeit
from collections.abc import Callable, Sequence
from itertools import chain
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Message, TopicPartition
from prometheus_client import CollectorRegistry

from multicluster_source.framework._records import record_iterator, records_of
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.ops._metrics import SourceMetrics
from multicluster_source.reader._batches import SplitProgress
from multicluster_source.reader._fetcher import ClusterFetcher
from multicluster_source.reader._records import RecordMaker
from multicluster_source.reader._settings import FetchSettings
from multicluster_source.runtime.core._delivery import Delivery
from multicluster_source.runtime.core._handoff import Handoff, PositionTracker

_error_of = Message.error
_partition_of = Message.partition


class _StandIn:
    """A consumer of partition ``t/0`` that hands out the same messages on every ``consume``."""

    def __init__(self, messages: list[Any]) -> None:
        self.messages = messages
        self.offset = 0

    def consume(self, n: int, timeout: float) -> list[Any]:
        self.offset += len(self.messages)
        return list(self.messages)

    def position(self, tps: list[Any]) -> list[Any]:
        return [TopicPartition(tp.topic, tp.partition, self.offset) for tp in tps]


class _Context:
    """What the fetcher needs of its reader runner: steps lent to the hand-off, batches put at once."""

    index = 0
    rack = None

    def __init__(self, handoff: Handoff) -> None:
        self.handoff = handoff

    def offer_inline(self, step: Any, release: Callable[[], None]) -> Callable[[], None]:
        withdraw: Callable[[], None] = self.handoff.lend(lambda: step(self.emit_now), release)
        return withdraw

    def emit_now(self, batch: Any) -> bool:
        self.handoff.put_now(batch)
        return True


def messages(n: int) -> list[Any]:
    value = (b"0123456789abcdefghijklmnopqrstuvwxyz" * 3)[:100]
    return [
        Message(topic="t", partition=0, offset=i, key=None, value=value, timestamp=(1, i)) for i in range(n)
    ]


def _best_us(fn: Callable[[], object], number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def per_message(batch: list[Any], number: int) -> dict[str, float]:
    """ns per message of each C-level pass over ``batch``."""

    def records_taken() -> None:
        for record in chain.from_iterable([record_iterator("east", batch, 0)[0]]):
            record.value  # noqa: B018 - as the benchmarks' loops

    def records_listed() -> None:
        for record in records_of("east", batch):
            record.value  # noqa: B018

    passes: dict[str, Callable[[], object]] = {
        "error scan": lambda: [m for m in batch if _error_of(m) is not None],
        "value bytes (sum(map(len)))": lambda: sum(map(len, batch)),
        "record made, value read": records_taken,
        "records as a list, then read": records_listed,
    }
    return {name: _best_us(fn, number) * 1000 / len(batch) for name, fn in passes.items()}


def _alternating(
    mine: Callable[[], object], theirs: Callable[[], object], number: int
) -> tuple[float, float]:
    """Medians of 5 alternating best-of-5 measurements of each, in us a call."""
    ours: list[float] = []
    other: list[float] = []
    for _ in range(5):
        ours.append(_best_us(mine, number))
        other.append(_best_us(theirs, number))
    return statistics.median(ours), statistics.median(other)


def _source_on(batch: list[Any], *, count_bytes: bool = True) -> tuple[_StandIn, Delivery]:
    """A fetcher on a stand-in consumer of ``batch`` whose steps the taker runs inline, and its delivery."""
    stand_in = _StandIn(batch)
    handoff = Handoff(16)
    context = _Context(handoff)
    settings = FetchSettings("bench", 0, len(batch), SourceMetrics(CollectorRegistry(), "bench"))
    fetcher = ClusterFetcher("east", {}, settings, context, lambda ids: None)  # type: ignore[arg-type]
    split = KafkaPartitionSplit("east", "t", 0, 0)
    fetcher._consumer = stand_in
    fetcher._progress[split.topic_partition] = SplitProgress(split)
    fetcher._progress_changed()
    if not count_bytes:

        def uncounted(messages: list[Any], *, with_bytes: bool = True) -> None:
            return None

        fetcher._count = uncounted  # type: ignore[method-assign]
    handoff.lend(lambda: fetcher._inline(context.emit_now), lambda: None)
    return stand_in, Delivery(handoff, RecordMaker(None), PositionTracker(), None, len(batch))


def per_batch(batch: list[Any], number: int, *, count_bytes: bool = True) -> tuple[float, float]:
    """(source's path, the floor's loop) in us per batch, on the stand-in consumer."""
    stand_in, delivery = _source_on(batch, count_bytes=count_bytes)

    def source() -> None:
        records = delivery.iterate(0.5, lambda: False)
        for record in chain.from_iterable([records or ()]):
            record.value  # noqa: B018
        delivery.settle()

    tps = [TopicPartition("t", 0)]
    positions: dict[str, int] = {}

    def floor() -> None:
        good = [m for m in stand_in.consume(len(batch), 0) if m.error() is None]
        for record in chain.from_iterable([record_iterator("east", good, 0)[0]]):
            record.value  # noqa: B018
        for tp in stand_in.position(tps):
            if tp.offset >= 0:
                positions[f"east/{tp.topic}/{tp.partition}"] = tp.offset

    return _alternating(source, floor, number)


def per_batch_columns(batch: list[Any], number: int) -> tuple[float, float]:
    """(the column path, the raw column loop) in us per batch, on the stand-in consumer."""
    from multicluster_source.framework._columns import column_builder

    stand_in, delivery = _source_on(batch)
    build = column_builder()

    def source() -> None:
        made = delivery.columns(0.5, len(batch), lambda: False, build)
        assert sum(b.num_rows for b in made) == len(batch)

    def raw() -> None:
        good = [m for m in stand_in.consume(len(batch), 0) if m.error() is None]
        one = len(set(map(_partition_of, good))) == 1
        build("east", good, (good[0].topic(), good[0].partition()) if one else None).num_rows  # noqa: B018

    return _alternating(source, raw, number)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The record path's per-message and per-batch costs.")
    parser.add_argument("--batch", type=int, default=1000, help="messages a batch (reader.batch.max.records)")
    parser.add_argument("--number", type=int, default=300, help="timeit loops a measurement")
    args = parser.parse_args(argv)
    batch = messages(args.batch)
    gc.disable()
    try:
        print(f"per message (ns), {args.batch} messages of 100 B, best of 5:")
        for name, ns in per_message(batch, args.number).items():
            print(f"  {name:<32} {ns:7.1f}")
        print(f"per batch of {args.batch} (us), median of 5 alternating, best of 5 each:")
        for label, count_bytes in (("with the bytes count", True), ("without it", False)):
            source, floor = per_batch(batch, args.number, count_bytes=count_bytes)
            print(
                f"  {label:<21} source {source:7.1f}  floor {floor:7.1f}  source - floor "
                f"{source - floor:6.1f} ({(source - floor) * 1000 / args.batch:.1f} ns a record)"
            )
        try:
            columns, raw = per_batch_columns(batch, args.number)
        except ImportError:
            print("column path: not measured (pyarrow is not installed)")
        else:
            print(
                f"column path, per batch of {args.batch} (us): source {columns:7.1f}  raw column loop "
                f"{raw:7.1f}  raw / source {raw / columns:.3f}"
            )
    finally:
        gc.enable()
    return 0


if __name__ == "__main__":
    sys.exit(main())
