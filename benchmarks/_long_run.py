"""The long-run mode of ``bench_throughput.py`` (``--long``): steady rates over millions of records.

For each size (``--long-records``, default 5M and 20M) one dataset is produced and every kind below runs
once per repeat, alternating, each from the first record on (start-up left out), with its process CPU per
record. Ratios are *paired*: each repeat's rate over the same repeat's raw loop, median and minimum over the
repeats.

``raw-N``
    the raw confluent-kafka loop of the classic mode (``consume(2000)``, ``msg.value()`` on each);
``floor-N``
    the smallest loop that does what the record path's contract requires, on the raw client: every message
    becomes an immutable :class:`SourceRecord` (the same C-level view the source makes, taken one at a time,
    touching ``record.value``) and the positions it reaches are kept once per batch (``position()``), so a
    checkpoint could cover exactly what was returned;
``listfloor-N``
    the floor of ``poll``, whose contract is a list: the floor's loop, but each batch's records made into a
    list first (as ``poll`` returns them), then taken from it; the list keeps a batch's records alive, which
    the garbage collector walks;
``iterate-N``, ``records-N``, ``batches-N``
    the source's ``for`` loop, ``poll`` and ``poll_batches`` (as in the classic mode);
``columns-N``
    the source's ``poll_columns()`` (Arrow record batches), counting rows;
``rawcolumns-N``
    the raw loop building the same Arrow batches with the same builder (``ColumnBuilder``) from each
    ``consume()`` result, told when a batch is of one partition (found by one C-level pass, as the source
    knows it from the positions it tracks).

Each size's result ends with #36's goals judged on its paired ratios (:func:`goals`): the ``for`` loop and
``poll`` at 0.9 of the raw loop with no repeat below 0.8, or else within 5 % of their floor (``floor``,
``listfloor``); ``poll_columns`` at least at the raw column loop. ``--judge FILE`` judges a result written
before.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import chain
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from multicluster_source import SourceStream

LONG_RECORDS = (5_000_000, 20_000_000)
LONG_REPEATS = 3
LONG_KINDS = (
    "raw-1",
    "floor-1",
    "listfloor-1",
    "iterate-1",
    "records-1",
    "batches-1",
    "rawcolumns-1",
    "columns-1",
    "raw-2",
    "floor-2",
    "listfloor-2",
    "iterate-2",
    "records-2",
    "batches-2",
    "rawcolumns-2",
    "columns-2",
)
#: what each kind is compared with: the raw loop, and for the record paths the floor as well
BASES = {
    "floor": ("raw",),
    "listfloor": ("raw", "floor"),
    "iterate": ("raw", "floor"),
    "records": ("raw", "floor", "listfloor"),
    "batches": ("raw",),
    "columns": ("rawcolumns", "raw"),
}
_partition_of: Any = Message.partition


def _records_step(cluster_id: str, consumer: Any, tps: list[Any], positions: dict[str, int]) -> Any:
    """The floor's per-batch work: records of the batch, then its positions (see the module doc)."""
    # imported here: bench_throughput (and this module) import against checkouts that predate them
    from multicluster_source.framework._records import record_iterator

    def take(messages: list[Any]) -> int:
        good = [m for m in messages if m.error() is None]
        n = 0
        for record in chain.from_iterable([record_iterator(cluster_id, good, 0)[0]]):
            record.value  # noqa: B018 - touch every value, as the raw drains do
            n += 1
        for tp in consumer.position(tps):
            if tp.offset >= 0:
                positions[f"{cluster_id}/{tp.topic}/{tp.partition}"] = tp.offset
        return n

    return take


def _list_step(cluster_id: str, consumer: Any, tps: list[Any], positions: dict[str, int]) -> Any:
    """``poll``'s floor per batch: the batch's records as a list, then taken from it; then its positions."""
    from multicluster_source.framework._records import records_of

    def take(messages: list[Any]) -> int:
        records = records_of(cluster_id, [m for m in messages if m.error() is None])
        for record in records:
            record.value  # noqa: B018 - touch every value, as the raw drains do
        for tp in consumer.position(tps):
            if tp.offset >= 0:
                positions[f"{cluster_id}/{tp.topic}/{tp.partition}"] = tp.offset
        return len(records)

    return take


def _columns_step(cluster_id: str) -> Callable[[list[Any]], int]:
    from multicluster_source.framework._columns import column_builder

    build = column_builder()

    def take(messages: list[Any]) -> int:
        good = [m for m in messages if m.error() is None]
        if not good:
            return 0
        one = len(set(map(_partition_of, good))) == 1  # one topic per cluster here
        batch = build(cluster_id, good, (good[0].topic(), good[0].partition()) if one else None)
        n: int = batch.num_rows
        return n

    return take


def raw_loop(
    kind: str, parts: Sequence[Any], shares: Sequence[Sequence[int]], props: Mapping[str, str]
) -> tuple[int, float, float, float, int]:
    """``floor``, ``listfloor`` or ``rawcolumns`` (``raw`` is the classic mode's ``raw_drain``) over
    ``len(shares)`` threads: (records, seconds from the first record to the last, process CPU seconds from the
    start to the last record, first record after s, records the first batch had)."""
    firsts: list[tuple[float, int]] = []
    lasts: list[float] = []
    counts: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(share: Sequence[int]) -> None:
        try:
            got = 0
            first = None
            first_n = 0
            for part in parts:
                expected = part.share(share)
                consumer = Consumer(
                    {
                        **props,
                        "bootstrap.servers": part.bootstrap_servers,
                        "group.id": f"bench-{kind}-{uuid.uuid4().hex[:8]}",
                        "enable.auto.commit": False,
                    }
                )
                try:
                    tps = []
                    for p in share:
                        low, _ = consumer.get_watermark_offsets(TopicPartition(part.topic, p), timeout=10.0)
                        tps.append(TopicPartition(part.topic, p, low if low >= 0 else OFFSET_BEGINNING))
                    consumer.assign(tps)
                    plain = [TopicPartition(part.topic, p) for p in share]
                    positions: dict[str, int] = {}
                    take = (
                        _records_step(part.cluster_id, consumer, plain, positions)
                        if kind == "floor"
                        else _list_step(part.cluster_id, consumer, plain, positions)
                        if kind == "listfloor"
                        else _columns_step(part.cluster_id)
                    )
                    done = 0
                    while done < expected:
                        messages = consumer.consume(min(2000, expected - done), 0.5)
                        n = take(messages)
                        if n and first is None:
                            first, first_n = time.perf_counter(), n
                        done += n
                finally:
                    got += done
                    consumer.close()
            with lock:
                firsts.append((first or time.perf_counter(), first_n))
                lasts.append(time.perf_counter())
                counts.append(got)
        except BaseException as exc:
            errors.append(exc)

    start = time.perf_counter()
    cpu_start = time.process_time()
    threads = [threading.Thread(target=work, args=(s,), name=f"{kind}-{i}") for i, s in enumerate(shares)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu = time.process_time() - cpu_start  # from the start, as the other kinds' (start-up is small here)
    if errors:
        raise errors[0]
    first, first_n = min(firsts)
    return sum(counts), max(lasts) - first, cpu, first - start, first_n


def take_columns(stream: SourceStream) -> int:
    """The column path: ``poll_columns``, counting rows."""
    return sum(b.num_rows for b in stream.poll_columns(timeout=0.5, max_records=100_000))


def summarize(runs: Mapping[str, list[dict[str, float]]], readers: Sequence[int]) -> dict[str, Any]:
    """Medians of the steady rates and CPU per record; paired ratios against each kind's bases; the goals
    judged on them (:func:`goals`)."""
    out: dict[str, Any] = {"steady_records_per_second": {}, "cpu_ns_per_record": {}, "paired": {}}
    for kind, ms in runs.items():
        if not ms:
            continue
        rates = [m["steady"] for m in ms]
        out["steady_records_per_second"][kind] = {
            "median": statistics.median(rates),
            "min": min(rates),
            "max": max(rates),
        }
        out["cpu_ns_per_record"][kind] = statistics.median(m["cpu_ns"] for m in ms)
    for r in readers:
        for path, bases in BASES.items():
            mine = runs.get(f"{path}-{r}") or []
            for base in bases:
                theirs = runs.get(f"{base}-{r}") or []
                if not mine or len(mine) != len(theirs):
                    continue
                ratios = [m["steady"] / b["steady"] for m, b in zip(mine, theirs, strict=True)]
                out["paired"][f"{path}_over_{base}_{r}"] = {
                    "median": statistics.median(ratios),
                    "min": min(ratios),
                    "all": ratios,
                }
    out["goals"] = goals(out["paired"], readers)
    return out


#: #36's goals, per size and reader count: ``(path, floor kind)``; the record paths are held to 0.9 of the raw
#: loop (no repeat below 0.8) or, failing that, to within 5 % of their floor; the column path to the raw
#: column loop
GOAL_PATHS = (("iterate", "floor"), ("records", "listfloor"), ("columns", None))
RAW_GOAL = 0.9
RAW_LOWEST = 0.8
FLOOR_GOAL = 0.95
COLUMNS_GOAL = 1.0


def goals(paired: Mapping[str, Mapping[str, Any]], readers: Sequence[int]) -> list[dict[str, Any]]:
    """#36's goals judged on one size's paired ratios (``summarize()["paired"]``): one verdict per path and
    reader count, naming the clause that decided it (``raw``, ``floor`` or ``columns``) and the ratio."""
    out: list[dict[str, Any]] = []
    for r in readers:
        for path, floor in GOAL_PATHS:
            if floor is None:
                p = paired.get(f"{path}_over_rawcolumns_{r}")
                if p is not None:
                    ok = p["median"] >= COLUMNS_GOAL
                    out.append(_verdict(path, r, "columns", p, ok))
                continue
            raw = paired.get(f"{path}_over_raw_{r}")
            if raw is None:
                continue
            if raw["median"] >= RAW_GOAL and raw["min"] >= RAW_LOWEST:
                out.append(_verdict(path, r, "raw", raw, True))
                continue
            near = paired.get(f"{path}_over_{floor}_{r}")
            if near is None:
                out.append(_verdict(path, r, "raw", raw, False))
            else:
                out.append(_verdict(path, r, "floor", near, near["median"] >= FLOOR_GOAL))
    return out


def _verdict(path: str, readers: int, clause: str, p: Mapping[str, Any], met: bool) -> dict[str, Any]:
    return {
        "path": path,
        "readers": readers,
        "clause": clause,
        "median": p["median"],
        "min": p["min"],
        "met": met,
    }


def judge(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` (a long run's, as written) with every size's goals judged again from its paired ratios."""
    for res in result["sizes"].values():
        readers = sorted({int(k.rsplit("_", 1)[1]) for k in res["paired"]})
        res["goals"] = goals(res["paired"], readers)
    return result


def format_long(result: Mapping[str, Any]) -> str:
    """The long-run result as text: per size, steady rates, CPU per record and paired ratios."""
    lines = []
    for size, res in result["sizes"].items():
        lines.append(f"== {int(size):,} records, {result['config']['clusters']} cluster(s), steady rates")
        for kind, s in res["steady_records_per_second"].items():
            cpu = res["cpu_ns_per_record"][kind]
            lines.append(
                f"  {kind:<13} {s['median'] / 1e3:>8,.0f}k/s [{s['min'] / 1e3:,.0f}-{s['max'] / 1e3:,.0f}k]"
                f"  CPU {cpu:>5.0f} ns/record"
            )
        for name, p in res["paired"].items():
            lines.append(f"  paired {name:<28} median {p['median']:.3f}  min {p['min']:.3f}")
        for g in res.get("goals", []):
            lines.append(
                f"  goal {g['path']}-{g['readers']} by {g['clause']:<7} median {g['median']:.3f}"
                f"  min {g['min']:.3f}  {'met' if g['met'] else 'MISSED'}"
            )
    return "\n".join(lines)


def iterate_runs(kinds: Sequence[str], repeats: int) -> Iterator[tuple[int, str]]:
    """(repeat, kind) in the alternating order."""
    for rep in range(repeats):
        for kind in kinds:
            yield rep, kind
