"""Throughput: the source's batch path and record path against a raw confluent-kafka drain, in one run.

Produces N records (100-byte values, 4 partitions per topic, batching producer) on one cluster (or half on
each of two with ``--clusters 2``), then measures, alternating in this order and repeating:

``raw-1``
    raw, 1 reader: one ``Consumer`` assigned to every partition from the beginning, ``consume(2000, 0.5)``
    touching ``msg.value()`` until N records (with two clusters: one consumer per cluster, drained one after
    the other on the same thread);
``batches-1``
    the source's batch path, parallelism 1: ``stream.poll_batches(max_records=10000)`` until N records
    (unbounded, earliest), touching ``msg.value()`` of every message of every ``MessageBatch``;
``records-1``
    the source's record path, parallelism 1: ``stream.poll(max_records=10000)`` touching ``record.value``;
``iterate-1``
    the record path by iteration, parallelism 1: ``for record in stream`` touching ``record.value``;
``batches-2``, ``records-2``, ``iterate-2``
    the same with parallelism 2 (the enumerator spreads the partitions over two readers);
``raw-2``
    raw, 2 readers: two threads over disjoint partitions (partitions 0-1 and 2-3 of every topic).

Each figure is records / second from creating the client (or opening the source) to the N-th record, so it
includes start-up (connecting, metadata, the first fetch); a second figure counts from the first record on.
The ratios are batches / raw, records / raw and iterate / raw, for 1 and for 2 readers.

Every kind runs under each selected *client variant* (``--variants``): ``fast-refetch`` (the default:
``fetch.queue.backoff.ms=10`` on the raw consumers, which the source sets itself) and ``defaults``
(librdkafka's defaults on the raw consumers, the source's own defaults on the source). librdkafka 2.x
postpones a partition's next fetch by ``fetch.queue.backoff.ms`` (default 1000 ms) whenever its local queue
is over ``queued.min.messages`` / ``queued.max.messages.kbytes``; a reader slower than the network hits
that on every drain, so a raw loop on the defaults measures those pauses as much as the reading.

``--pin`` pins the brokers to the last CPU and the benchmark (source, raw loops and their clients) to the
others (``_brokers.pin_brokers``); the result file says so. On a machine of 2 vCPUs that leaves the client
one core for all its threads (the raw loop ran at 1.0-1.3M rows/s pinned against 1.8M unpinned), and a
pinned long run was no steadier than unpinned ones: a probe, not the reference.

``--profile`` also runs one record-path drain and one batch-path drain (parallelism 1, last variant) under
cProfile and writes ``results/profile-record-path.txt`` and ``results/profile-batch-path.txt``.

Nothing here asserts on speed. Run: ``python benchmarks/bench_throughput.py [--brokers kafka|tansu]
[--records N | --quick] [--clusters 2] [--variants fast-refetch,defaults] [--repeats 5] [--pin] [--profile]``
(``--long``: see :mod:`benchmarks._long_run`).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from prometheus_client import CollectorRegistry

from benchmarks import _long_run
from benchmarks._brokers import (
    RESULTS_DIR,
    Cluster,
    add_broker_argument,
    machine_info,
    pin_brokers,
    started_clusters,
)
from multicluster_source import (
    ClusterMetadata,
    KafkaStream,
    MultiClusterKafkaSource,
    OffsetsInitializer,
    SourceRecord,
    SourceStream,
    StaticMetadataService,
)

DEFAULT_RECORDS = 2_000_000  # 500k drained in about 0.3 s: too short a window for this shared machine
QUICK_RECORDS = 100_000
PARTITIONS = 4
VALUE_SIZE = 100
STALL_TIMEOUT_S = 120.0
KINDS = ("raw-1", "batches-1", "records-1", "iterate-1", "batches-2", "records-2", "iterate-2", "raw-2")
LABELS = {
    "raw-1": "raw confluent-kafka, 1 consumer",
    "batches-1": "source batch path (poll_batches), parallelism=1",
    "records-1": "source record path (poll), parallelism=1",
    "iterate-1": "source record path (for record in stream), parallelism=1",
    "batches-2": "source batch path (poll_batches), parallelism=2",
    "records-2": "source record path (poll), parallelism=2",
    "iterate-2": "source record path (for record in stream), parallelism=2",
    "raw-2": "raw confluent-kafka, 2 consumers in 2 threads",
}
#: The source's ways of handing over what it read, by the name used in KINDS.
PATHS = ("batches", "records", "iterate")
#: Client properties given to the raw consumers and to the source alike, by variant name. The source sets
#: ``fetch.queue.backoff.ms=10`` itself, so ``fast-refetch`` gives the raw consumers what the source has.
VARIANTS: dict[str, dict[str, str]] = {
    "defaults": {},
    "fast-refetch": {"fetch.queue.backoff.ms": "10"},
}
DEFAULT_VARIANTS = ("fast-refetch",)


@dataclass(frozen=True)
class TopicData:
    """One topic holding benchmark records on one cluster."""

    cluster_id: str
    bootstrap_servers: str
    topic: str
    counts: dict[int, int]  # partition -> records in it

    def share(self, partitions: Sequence[int]) -> int:
        return sum(self.counts.get(p, 0) for p in partitions)


@dataclass(frozen=True)
class Dataset:
    parts: list[TopicData]

    @property
    def total(self) -> int:
        return sum(sum(t.counts.values()) for t in self.parts)


@dataclass(frozen=True)
class Measurement:
    kind: str
    records: int
    seconds: float  # from client creation / open() to the last record
    first_record_s: float | None
    close_s: float
    cpu_s: float = 0.0  # process CPU time (every thread: Python, librdkafka) from start to the N-th record
    first_records: int = 0  # what the first call returned (made before first_record_s: not in steady_rate)

    @property
    def cpu_ns_per_record(self) -> float:
        """Process CPU nanoseconds per record: what the client side costs, less disturbed than wall-clock
        rates by other work on a shared machine (the brokers' CPU is not in it, the same for every kind)."""
        return self.cpu_s * 1e9 / self.records if self.records else 0.0

    @property
    def rate(self) -> float:
        """Records per second from client creation / ``open()`` to the last record."""
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def steady_rate(self) -> float:
        """Records per second from the first record to the last (start-up left out). The records of the
        first call are left out too: they were made before its time was taken (a ``poll_columns`` call
        gathers up to 100,000 rows, the raw loops' first ``consume()`` 2,000)."""
        if self.first_record_s is None or self.seconds <= self.first_record_s:
            return self.rate
        return (self.records - self.first_records) / (self.seconds - self.first_record_s)


# ----------------------------------------------------------------------------------------------- producing


def produce_records(
    cluster: Cluster, n: int, *, partitions: int = PARTITIONS, value_size: int = VALUE_SIZE
) -> TopicData:
    """Create a topic and fill it with ``n`` records round-robin over its partitions (batching producer)."""
    topic = cluster.create_topic("bench-throughput", partitions)
    value = (b"0123456789abcdefghijklmnopqrstuvwxyz" * (value_size // 36 + 1))[:value_size]
    producer = cluster.producer(**{"linger.ms": 50, "queue.buffering.max.messages": 500_000})
    failed: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    for i in range(n):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(120.0)
    if remaining or failed:
        raise RuntimeError(
            f"{topic} on {cluster.cluster_id}: {remaining} records not delivered, {len(failed)} failed "
            f"({failed[:1]})"
        )
    # Counted from what was delivered, not from watermarks: tansu's ListOffsets answers do not count records.
    counts = {p: len(range(p, n, partitions)) for p in range(partitions)}
    return TopicData(cluster.cluster_id, cluster.bootstrap_servers, topic, counts)


def prepare(clusters: Sequence[Cluster], records: int) -> Dataset:
    """Spread ``records`` evenly over one topic on each cluster."""
    per_cluster = [records // len(clusters)] * len(clusters)
    per_cluster[0] += records - sum(per_cluster)
    return Dataset([produce_records(c, n) for c, n in zip(clusters, per_cluster, strict=True)])


# ----------------------------------------------------------------------------------------------- raw drains


@dataclass
class _Drained:
    records: int = 0
    first: float | None = None  # perf_counter() of the first record
    first_records: int = 0  # how many the first consume() returned
    last: float = 0.0  # perf_counter() of the last record
    cpu_last: float = 0.0  # process_time() at the last record


def _raw_drain_one(
    part: TopicData,
    partitions: Sequence[int],
    props: Mapping[str, str],
    out: _Drained,
    clock: Callable[[], float] = time.perf_counter,
) -> None:
    """Drain ``partitions`` of ``part`` with one consumer; record counts and ``clock()`` times in ``out``.

    "From the beginning" is the low watermark, looked up inside the timed window (the source resolves its
    starting offsets inside its window too): assigning ``OFFSET_BEGINNING`` instead makes librdkafka 2.x
    wait ~0.5 s before its first fetch, which would dwarf everything else at these sizes.
    """
    expected = part.share(partitions)
    consumer = Consumer(
        {
            **props,
            "bootstrap.servers": part.bootstrap_servers,
            "group.id": f"bench-raw-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    got = 0
    try:
        starts = []
        for p in partitions:
            low, _high = consumer.get_watermark_offsets(TopicPartition(part.topic, p), timeout=10.0)
            starts.append(TopicPartition(part.topic, p, low if low >= 0 else OFFSET_BEGINNING))
        consumer.assign(starts)
        last_progress = time.monotonic()
        while got < expected:
            # never ask for more than are left: consume() would wait out its timeout for them
            messages = consumer.consume(min(2000, expected - got), 0.5)
            before = got
            for msg in messages:
                if msg.error() is None:
                    msg.value()
                    got += 1
            if messages:
                if out.first is None:
                    out.first = clock()
                    out.first_records = got - before
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > STALL_TIMEOUT_S:
                raise RuntimeError(f"raw drain stalled at {got}/{expected} on {part.topic}")
        out.last = clock()
        out.cpu_last = time.process_time()
        out.records += got
    finally:
        consumer.close()  # not timed, as the source's close is not


def raw_drain(dataset: Dataset, readers: int, props: Mapping[str, str]) -> Measurement:
    """``readers`` threads (the caller's own thread for 1), each over a disjoint share of the partitions;
    a thread drains the clusters one after the other."""
    shares = [[p for p in range(PARTITIONS) if p * readers // PARTITIONS == r] for r in range(readers)]
    drained = [_Drained() for _ in range(readers)]
    errors: list[BaseException] = []

    def work(r: int) -> None:
        try:
            for part in dataset.parts:
                _raw_drain_one(part, shares[r], props, drained[r])
        except BaseException as exc:
            errors.append(exc)

    start = time.perf_counter()
    cpu_start = time.process_time()
    if readers == 1:
        work(0)
    else:
        threads = [threading.Thread(target=work, args=(r,), name=f"raw-{r}") for r in range(readers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    # the first record of any thread, and what that thread's first consume() returned (as raw_loop's)
    firsts = [(d.first - start, d.first_records) for d in drained if d.first is not None]
    first, first_records = min(firsts) if firsts else (None, 0)
    elapsed = max(d.last for d in drained) - start
    cpu = max(d.cpu_last for d in drained) - cpu_start  # to the last record, as the source's
    got = sum(d.records for d in drained)
    return Measurement(f"raw-{readers}", got, elapsed, first, 0.0, cpu, first_records)


# ----------------------------------------------------------------------------------------------- the source


def build_source(dataset: Dataset, props: Mapping[str, str]) -> MultiClusterKafkaSource:
    clusters = {
        t.cluster_id: ClusterMetadata(t.cluster_id, t.bootstrap_servers, frozenset([t.topic]))
        for t in dataset.parts
    }
    return (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([KafkaStream("bench", clusters)]))
        .set_stream_ids(["bench"])
        .set_group_id(f"bench-source-{uuid.uuid4().hex[:8]}")
        .set_starting_offsets(OffsetsInitializer.earliest())
        .set_properties(props)
        .build()
    )


def _take_batches(stream: SourceStream) -> int:
    """The batch path: ``poll_batches``, touching ``msg.value()`` of every message; how many came."""
    got = 0
    for batch in stream.poll_batches(timeout=0.5, max_records=10_000):
        for msg in batch.messages:
            msg.value()
        got += len(batch)
    return got


def _take_records(stream: SourceStream) -> int:
    """The record path: ``poll``, touching ``record.value`` of every record; how many came."""
    records = stream.poll(timeout=0.5, max_records=10_000)
    for record in records:
        record.value  # noqa: B018 - touch every value, as the raw drains do
    return len(records)


_ITERATORS: weakref.WeakKeyDictionary[SourceStream, Iterator[SourceRecord]] = weakref.WeakKeyDictionary()


def _take_iterated(stream: SourceStream) -> int:
    """The record path by iteration: ``for record in stream`` (one iterator per stream), touching
    ``record.value``; returns after 10,000 records, as ``poll`` would."""
    records = _ITERATORS.get(stream)
    if records is None:
        records = _ITERATORS[stream] = iter(stream)
    n = 0
    for record in records:
        record.value  # noqa: B018 - touch every value, as the raw drains do
        n += 1
        if n == 10_000:
            break
    return n


TAKERS: dict[str, Callable[[SourceStream], int]] = {
    "batches": _take_batches,
    "records": _take_records,
    "iterate": _take_iterated,
    "columns": _long_run.take_columns,
}


def source_drain(dataset: Dataset, path: str, parallelism: int, props: Mapping[str, str]) -> Measurement:
    """Open the source with ``parallelism`` readers and take from it along ``path`` (``"batches"`` or
    ``"records"``) until every record came."""
    take = TAKERS[path]
    expected = dataset.total
    source = build_source(dataset, props)
    got = 0
    first: float | None = None
    first_records = 0
    start = time.perf_counter()
    cpu_start = time.process_time()
    stream = source.open(parallelism=parallelism, registry=CollectorRegistry())
    try:
        last_progress = time.monotonic()
        while got < expected:
            n = take(stream)
            if n:
                if first is None:
                    first = time.perf_counter() - start
                    first_records = n
                got += n
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > STALL_TIMEOUT_S:
                raise RuntimeError(f"source drain ({path}) stalled at {got}/{expected}")
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
    finally:
        closing = time.perf_counter()
        stream.close()
        close_s = time.perf_counter() - closing
    return Measurement(f"{path}-{parallelism}", got, elapsed, first, close_s, cpu, first_records)


def run_kind(kind: str, dataset: Dataset, props: Mapping[str, str]) -> Measurement:
    """One measurement of ``kind`` (one of KINDS, or of the long run's ``_long_run.LONG_KINDS``)."""
    name, readers = kind.rsplit("-", 1)
    if name == "raw":
        return raw_drain(dataset, int(readers), props)
    if name in ("floor", "listfloor", "rawcolumns"):
        n = int(readers)
        shares = [[p for p in range(PARTITIONS) if p * n // PARTITIONS == r] for r in range(n)]
        got, steady_s, cpu, first, first_records = _long_run.raw_loop(name, dataset.parts, shares, props)
        return Measurement(kind, got, first + steady_s, first, 0.0, cpu, first_records)
    return source_drain(dataset, name, int(readers), props)


def run_long(
    clusters: Sequence[Cluster],
    *,
    sizes: Sequence[int] = _long_run.LONG_RECORDS,
    repeats: int = _long_run.LONG_REPEATS,
    kinds: Sequence[str] = _long_run.LONG_KINDS,
    brokers: str = "kafka",
    log: Callable[[str], None] = print,
    pinning: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The long-run mode (see :mod:`benchmarks._long_run`): per size, every kind ``repeats`` times,
    alternating; steady rates, CPU per record, paired ratios (``pinning``: what ``--pin`` pinned)."""
    props = VARIANTS["fast-refetch"]
    result: dict[str, Any] = {
        "benchmark": "throughput-long",
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {**machine_info(brokers), "pinning": dict(pinning or {"pinned": False})},
        "config": {
            "clusters": len(clusters),
            "partitions_per_topic": PARTITIONS,
            "value_bytes": VALUE_SIZE,
            "repeats": repeats,
            "order": list(kinds),
            "client_properties": props,
            "timed_from": "the first record to the N-th (steady); CPU from client creation / open()",
        },
        "sizes": {},
    }
    for size in sizes:
        log(f"throughput --long: producing {size:,} records on {len(clusters)} cluster(s)...")
        dataset = prepare(clusters, size)
        runs: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
        for rep, kind in _long_run.iterate_runs(kinds, repeats):
            m = run_kind(kind, dataset, props)
            if m.records != dataset.total:
                log(f"  note: {kind} returned {m.records} records for {dataset.total} produced")
            runs[kind].append({"steady": m.steady_rate, "cpu_ns": m.cpu_ns_per_record, "seconds": m.seconds})
            log(
                f"  {size:,} run {rep + 1}/{repeats} {kind:<13} {m.steady_rate:>11,.0f} records/s from the "
                f"first record, CPU {m.cpu_ns_per_record:.0f} ns/record"
            )
        result["sizes"][str(size)] = {
            **_long_run.summarize(runs, sorted({int(k.rsplit("-", 1)[1]) for k in kinds})),
            "runs": runs,
        }
    return result


# ----------------------------------------------------------------------------------------------- profiling


def profile_source(
    dataset: Dataset, props: Mapping[str, str], path: str = "records", parallelism: int = 1, top: int = 25
) -> str:
    """One source drain along ``path`` (``"records"``: ``poll``; ``"batches"``: ``poll_batches``) under
    cProfile on every Python thread; the report as text."""
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    def start_thread_profile(_frame: Any, _event: str, _arg: Any) -> None:
        profile = cProfile.Profile()
        with lock:
            profiles.append(profile)
        profile.enable()  # replaces this hook for the rest of the thread's life

    main = cProfile.Profile()
    threading.setprofile(start_thread_profile)
    main.enable()
    try:
        measurement = source_drain(dataset, path, parallelism, props)
    finally:
        main.disable()
        threading.setprofile(None)
    out = io.StringIO()
    stats = pstats.Stats(main, stream=out)
    for profile in profiles:
        stats.add(profile)
    out.write(
        f"cProfile of one source drain on the {PATH_NAMES[path]}, parallelism={parallelism}, client "
        f"properties {dict(props)}: "
        f"{measurement.records} records in {measurement.seconds:.2f} s under the profiler "
        f"({measurement.rate:,.0f} records/s; the profiler slows Python code several times: read the shares, "
        f"not the absolute times).\nEvery Python thread is profiled (caller, fetch threads, coordinator, "
        f"reader); the threads' times add up, so waits (queue.get, consume) show as large cumulative "
        f"entries.\n\n=== top {top} by cumulative time, the source's own code (multicluster_source) ===\n"
    )
    stats.sort_stats("cumulative").print_stats(r"multicluster_source", top)
    out.write(f"\n=== top {top} by own (total) time, everything ===\n")
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


# ----------------------------------------------------------------------------------------------- running


PATH_NAMES = {
    "batches": "batch path (poll_batches)",
    "records": "record path (poll)",
    "iterate": "record path (iteration)",
}
PROFILE_FILES = {"records": "profile-record-path.txt", "batches": "profile-batch-path.txt"}


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _variant_result(props: Mapping[str, str], runs: dict[str, list[Measurement]]) -> dict[str, Any]:
    summary = {kind: _summary([m.rate for m in runs[kind]]) for kind in KINDS}
    steady = {kind: _summary([m.steady_rate for m in runs[kind]]) for kind in KINDS}
    firsts = {kind: _summary([m.first_record_s or 0.0 for m in runs[kind]]) for kind in KINDS}
    cpu = {kind: _summary([m.cpu_ns_per_record for m in runs[kind]]) for kind in KINDS}
    return {
        "client_properties": dict(props),
        "records_per_second": summary,
        "records_per_second_from_first_record": steady,
        "first_record_seconds": firsts,
        "cpu_ns_per_record": cpu,
        "cpu_ratios": {
            f"raw_over_{path}_{suffix}": cpu[f"raw-{readers}"]["median"] / cpu[f"{path}-{readers}"]["median"]
            for readers, suffix in ((1, "1_reader"), (2, "2_readers"))
            for path in PATHS
        },
        "ratios": {
            f"{prefix}{path}_over_raw_{suffix}": rates[f"{path}-{readers}"]["median"]
            / rates[f"raw-{readers}"]["median"]
            for prefix, rates in (("", summary), ("steady_", steady))
            for readers, suffix in ((1, "1_reader"), (2, "2_readers"))
            for path in PATHS
        },
        # each repeat runs every kind back to back: the ratio within a repeat is less swayed by the machine's
        # slower and faster stretches than the ratio of the medians
        "paired_ratios": {
            f"{path}_over_raw_{suffix}": statistics.median(
                m.rate / raw.rate
                for m, raw in zip(runs[f"{path}-{readers}"], runs[f"raw-{readers}"], strict=True)
            )
            for readers, suffix in ((1, "1_reader"), (2, "2_readers"))
            for path in PATHS
        },
        "runs": {
            kind: [
                {
                    "records": m.records,
                    "seconds": m.seconds,
                    "records_per_second": m.rate,
                    "records_per_second_from_first_record": m.steady_rate,
                    "first_record_s": m.first_record_s,
                    "close_s": m.close_s,
                    "cpu_ns_per_record": m.cpu_ns_per_record,
                }
                for m in runs[kind]
            ]
            for kind in KINDS
        },
    }


def run(
    clusters: Sequence[Cluster],
    *,
    records: int = DEFAULT_RECORDS,
    repeats: int = 5,
    variants: Sequence[str] = DEFAULT_VARIANTS,
    brokers: str = "kafka",
    profile: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Produce, then measure every kind under each variant, ``repeats`` times alternating; the JSON
    result."""
    started = time.perf_counter()
    log(f"throughput: producing {records:,} records on {len(clusters)} cluster(s)...")
    t0 = time.perf_counter()
    dataset = prepare(clusters, records)
    produce_s = time.perf_counter() - t0
    log(f"throughput: produced in {produce_s:.1f} s ({records / produce_s:,.0f} records/s)")
    runs: dict[str, dict[str, list[Measurement]]] = {v: {k: [] for k in KINDS} for v in variants}
    for rep in range(repeats):
        for variant in variants:
            for kind in KINDS:
                m = run_kind(kind, dataset, VARIANTS[variant])
                if m.records != dataset.total:
                    log(f"  note: {kind} returned {m.records} records for {dataset.total} produced")
                runs[variant][kind].append(m)
                log(
                    f"  run {rep + 1}/{repeats} {variant:<12} {kind:<9} {m.rate:>11,.0f} records/s "
                    f"({m.seconds:.2f} s; first record after {m.first_record_s or 0.0:.3f} s, "
                    f"{m.steady_rate:,.0f}/s from then)"
                )
    result: dict[str, Any] = {
        "benchmark": "throughput",
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info(brokers),
        "config": {
            "records": dataset.total,
            "clusters": len(clusters),
            "partitions_per_topic": PARTITIONS,
            "value_bytes": VALUE_SIZE,
            "repeats": repeats,
            "order": [f"{v}/{k}" for v in variants for k in KINDS],
            "raw_consume": "consume(2000, 0.5) (never more than are left), msg.value() on each; "
            "assigned at the low watermark",
            "batch_path": "poll_batches(timeout=0.5, max_records=10000), msg.value() on each message of "
            "each batch",
            "record_path": "poll(timeout=0.5, max_records=10000), record.value on each record",
            "iterate_path": "for record in stream, record.value on each record",
            "timed_from": "client creation / source.open() to the N-th record",
            "labels": LABELS,
        },
        "produce_seconds": produce_s,
        "variants": {v: _variant_result(VARIANTS[v], runs[v]) for v in variants},
    }
    if profile:
        variant = variants[-1]
        result["profile"] = {"variant": variant}
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        for path_kind in ("records", "batches"):
            log(f"throughput: profiling the {PATH_NAMES[path_kind]}, parallelism=1, {variant}...")
            text = profile_source(dataset, VARIANTS[variant], path_kind)
            out = RESULTS_DIR / PROFILE_FILES[path_kind]
            out.write_text(text)
            result["profile"][f"{path_kind}_path"] = str(out.relative_to(RESULTS_DIR.parent.parent))
    result["benchmark_seconds"] = time.perf_counter() - started
    return result


def _k(value: float) -> str:
    return f"{value / 1000:,.0f}k"


def _cell(stats: dict[str, float]) -> str:
    return f"{_k(stats['median'])} [{_k(stats['min'])}-{_k(stats['max'])}]"


def table_rows(
    result: dict[str, Any],
) -> list[tuple[str, int, str, str, dict[str, str], dict[str, float]]]:
    """(variant, readers, timed, raw cell, path -> cell, path -> ratio over raw) for every line of the table;
    the paths are those the result has (results before iteration was measured lack ``iterate``)."""
    rows = []
    for variant, vr in result["variants"].items():
        for timed, key, prefix in (
            ("open -> N-th", "records_per_second", ""),
            ("1st -> N-th", "records_per_second_from_first_record", "steady_"),
        ):
            for readers, suffix in ((1, "1_reader"), (2, "2_readers")):
                s, ratios = vr[key], vr["ratios"]
                paths = [p for p in PATHS if f"{p}-{readers}" in s]
                rows.append(
                    (
                        variant,
                        readers,
                        timed,
                        _cell(s[f"raw-{readers}"]),
                        {p: _cell(s[f"{p}-{readers}"]) for p in paths},
                        {p: ratios[f"{prefix}{p}_over_raw_{suffix}"] for p in paths},
                    )
                )
    return rows


def cpu_rows(result: dict[str, Any]) -> list[tuple[str, int, float, list[tuple[str, float, float]]]]:
    """(variant, readers, raw CPU ns per record, [(path, its CPU ns per record, raw / path)]) for every
    variant and reader count the result has CPU times of (results written before lack them)."""
    rows = []
    for variant, vr in result["variants"].items():
        cpu, ratios = vr.get("cpu_ns_per_record"), vr.get("cpu_ratios")
        if not cpu or not ratios:
            continue
        for readers, suffix in ((1, "1_reader"), (2, "2_readers")):
            paths = [
                (p, cpu[f"{p}-{readers}"]["median"], ratios[f"raw_over_{p}_{suffix}"])
                for p in PATHS
                if f"{p}-{readers}" in cpu
            ]
            rows.append((variant, readers, cpu[f"raw-{readers}"]["median"], paths))
    return rows


def paired_rows(result: dict[str, Any]) -> list[tuple[str, int, list[tuple[str, float]]]]:
    """(variant, readers, [(path, median over the repeats of path / raw within a repeat)]) for every variant
    and reader count the result has them of (results written before lack them)."""
    rows = []
    for variant, vr in result["variants"].items():
        paired = vr.get("paired_ratios")
        if not paired:
            continue
        for readers, suffix in ((1, "1_reader"), (2, "2_readers")):
            paths = [
                (p, paired[f"{p}_over_raw_{suffix}"]) for p in PATHS if f"{p}_over_raw_{suffix}" in paired
            ]
            rows.append((variant, readers, paths))
    return rows


def format_table(result: dict[str, Any]) -> str:
    """The result as a plain-text table (records/s: median [min-max])."""
    cfg = result["config"]
    lines = [
        f"Throughput: {cfg['records']:,} records x {cfg['value_bytes']} B, {cfg['clusters']} cluster(s), "
        f"{cfg['partitions_per_topic']} partitions per topic, {cfg['repeats']} runs each "
        f"(records/s, median [min-max])",
        f"{'variant':<13} {'readers':<7} {'timed':<13} {'raw confluent-kafka':>22} "
        + " ".join(f"{p:>22}" for p in PATHS)
        + " "
        + " ".join(f"{p + '/raw':>11}" for p in PATHS),
    ]
    for variant, readers, timed, raw, cells, ratios in table_rows(result):
        lines.append(
            f"{variant:<13} {readers:<7} {timed:<13} {raw:>22} "
            + " ".join(f"{cells.get(p, '-'):>22}" for p in PATHS)
            + " "
            + " ".join(f"{ratios[p]:>11.2f}" if p in ratios else f"{'-':>11}" for p in PATHS)
        )
    for variant, readers, raw_ns, paths in cpu_rows(result):
        lines.append(
            f"process CPU ns per record, {variant}, {readers} reader(s) (median): raw {raw_ns:.0f}, "
            + ", ".join(f"{p} {ns:.0f}" for p, ns, _ratio in paths)
            + "; "
            + ", ".join(f"raw/{p} {ratio:.2f}" for p, _ns, ratio in paths)
        )
    for variant, readers, pairs in paired_rows(result):
        lines.append(
            f"paired (median of each run's ratio, open -> N-th), {variant}, {readers} reader(s): "
            + ", ".join(f"{p}/raw {ratio:.2f}" for p, ratio in pairs)
        )
    for variant, vr in result["variants"].items():
        f = vr["first_record_seconds"]
        lines.append(
            f"first record after (median s), {variant}: "
            + ", ".join(f"{kind} {f[kind]['median']:.3f}" for kind in KINDS if kind in f)
        )
    return "\n".join(lines)


def write_result(result: dict[str, Any], name: str) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / name
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def result_name(clusters: int) -> str:
    return "throughput.json" if clusters == 1 else f"throughput-{clusters}clusters.json"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Throughput: the source's batch and record paths against raw confluent-kafka."
    )
    add_broker_argument(parser)
    parser.add_argument("--records", type=int, default=None, help=f"default {DEFAULT_RECORDS:,}")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_RECORDS:,} records")
    parser.add_argument("--clusters", type=int, choices=(1, 2), default=1)
    parser.add_argument("--repeats", type=int, default=5, help="5 (--long: use 3 for 20M records)")
    parser.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help=f"comma-separated client variants out of {', '.join(VARIANTS)} "
        f"(default: {','.join(DEFAULT_VARIANTS)})",
    )
    parser.add_argument(
        "--long",
        action="store_true",
        help="long-run mode: steady rates, paired ratios and CPU per record at --long-records sizes, for "
        "records, batches and columns (writes throughput-long*.json)",
    )
    parser.add_argument(
        "--long-records",
        default=",".join(str(n) for n in _long_run.LONG_RECORDS),
        help="comma-separated sizes for --long (default: %(default)s)",
    )
    parser.add_argument(
        "--long-kinds",
        default=",".join(_long_run.LONG_KINDS),
        help="comma-separated kinds for --long, in the order they alternate (default: all, 1 then 2 readers)",
    )
    parser.add_argument(
        "--judge",
        metavar="FILE",
        help="print a long-run result written before (a path, or a name in results/) with #36's goals judged",
    )
    parser.add_argument(
        "--out", help="result file name in results/ (default: throughput.json, throughput-long.json, ...)"
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="pin the brokers to the last CPU and the benchmark to the others (steadier on small machines)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also profile one record-path and one batch-path drain (parallelism 1, last variant)",
    )
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        parser.error(f"--variants: unknown {unknown}; choose from {list(VARIANTS)}")
    if args.judge:
        path = Path(args.judge)
        if not path.exists():
            path = RESULTS_DIR / args.judge
        print(_long_run.format_long(_long_run.judge(json.loads(path.read_text()))))
        return 0
    if args.long:
        sizes = [int(n) for n in args.long_records.split(",") if n.strip()]
        kinds = [k.strip() for k in args.long_kinds.split(",") if k.strip()]
        unknown = [k for k in kinds if k not in _long_run.LONG_KINDS]
        if unknown or not kinds:
            parser.error(f"--long-kinds: unknown {unknown}; choose from {list(_long_run.LONG_KINDS)}")
        with started_clusters(args.brokers, args.clusters) as clusters:
            long_result = run_long(
                clusters,
                sizes=sizes,
                repeats=args.repeats,
                kinds=kinds,
                brokers=args.brokers,
                pinning=pin_brokers() if args.pin else {"pinned": False},
            )
        print(_long_run.format_long(long_result))
        name = args.out or (
            "throughput-long.json" if args.clusters == 1 else f"throughput-long-{args.clusters}clusters.json"
        )
        print(f"written: {write_result(long_result, name)}")
        return 0
    records = args.records or (QUICK_RECORDS if args.quick else DEFAULT_RECORDS)
    with started_clusters(args.brokers, args.clusters) as clusters:
        pinning = pin_brokers() if args.pin else {"pinned": False}
        result = run(
            clusters,
            records=records,
            repeats=args.repeats,
            variants=variants,
            brokers=args.brokers,
            profile=args.profile,
        )
        result["machine"]["pinning"] = pinning
    print(format_table(result))
    print(f"written: {write_result(result, args.out or result_name(args.clusters))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
