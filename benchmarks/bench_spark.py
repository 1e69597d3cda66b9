"""The Spark source against Spark's own Kafka source, side by side on the same clusters and records (#35).

Two Apache Kafka clusters (``east``, ``west``), ``--records`` 100-byte records in all (half on each, in
``--partitions`` partitions a cluster), one local Spark session (``local[2]``) holding both sources:

- ``built-in``: Spark's Kafka source (``spark-sql-kafka-0-10``, fetched from Maven Central and cached like the
  broker jars, see ``tests/harness/spark-kafka-pom.xml``) as a union of one source per cluster, with a
  ``cluster`` column added, what a job over several clusters does today;
- ``ours``: ``format("multicluster-kafka")`` over a metadata file naming both clusters.

Measured, each side the same way:

1. rows a second of ``trigger(availableNow=True)`` into the ``noop`` sink (a count) and into parquet, from
   ``start()`` to the end of the query (median of ``--repeats``, the side that goes first alternating);
2. the cap: a raw confluent-kafka loop reading the same records into Arrow batches of the same schema, no
   Spark, on as many processes as Spark has task slots (2), the splits dealt round-robin, timed from a
   barrier; beside it ``ours w/o Spark``, the source's own executor code (``read_range``) in the same
   processes: the rest of the gap to ``ours`` is Spark's Python worker and the Arrow hand-over to the JVM;
3. micro-batch latency at a fixed input rate (``--rate`` records a second over both clusters, a producer
   process of its own): each micro-batch's rows aggregated in ``foreachBatch``; a record's latency is
   from its CreateTime to the end of its micro-batch (p50 of the batch's records, max the batch's oldest);
4. an added cluster under a steady input (``--add-rate``): ours writes the metadata file with ``west`` added
   under the running query; the built-in source is stopped and started as a new union over both clusters
   with a new checkpoint, its ``startingOffsets`` as users choose them (``earliest``, ``latest``, or the
   stopped query's end offsets for ``east`` and earliest for ``west``). Time from the write (or the stop)
   to the first ``west`` row, the micro-batches started in between, and, against every offset the two
   topics hold at the end, rows read twice and rows never read.

Prints the tables and writes ``benchmarks/results/spark.json`` (``--no-save``: not).

    python benchmarks/bench_spark.py [--records 2000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import itertools
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._brokers import REPO, RESULTS_DIR, Cluster, machine_info, started_clusters

SLOTS = 2
"""Spark's task slots (``local[2]``), and the processes of the caps."""
VALUE = b"v" * 100
ROWS_PER_BATCH = 10_000
COLUMNS = ("cluster", "key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
SIDES = ("built-in", "ours")

# one split's range as the caps get it: (cluster id, bootstrap servers, topic, partition, start, end)
Split = tuple[str, str, str, int, int, int]


# ------------------------------------------------------------------------------------------ records


def _fill(cluster: Cluster, topic: str, n: int, partitions: int) -> None:
    producer = cluster.producer(**{"linger.ms": 50, "batch.num.messages": 10000})
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value=VALUE, key=str(i).encode(), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def _produce_at_rate(targets: list[tuple[str, str, int]], rate: float, stop: Any, ready: Any) -> None:
    """A producer process: ``rate`` records a second spread over ``targets`` (bootstrap, topic,
    partitions) in 10 ms steps, each record's CreateTime the moment it is produced, until ``stop``."""
    from confluent_kafka import Producer

    producers = [(Producer({"bootstrap.servers": b, "linger.ms": 2}), t, p) for b, t, p in targets]
    ready.set()
    sent, started = 0, time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        while sent < due:
            producer, topic, partitions = producers[sent % len(producers)]
            slot = sent // len(producers)
            try:
                producer.produce(topic, value=VALUE, key=str(sent).encode(), partition=slot % partitions)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        for producer, _t, _p in producers:
            producer.poll(0)
        time.sleep(0.01)
    for producer, _t, _p in producers:
        producer.flush(30)


class RateProducer:
    """:func:`_produce_at_rate` in a process of its own, so that it takes no time from the query."""

    def __init__(self, targets: list[tuple[str, str, int]], rate: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        ready = ctx.Event()
        self._proc = ctx.Process(
            target=_produce_at_rate, args=(targets, rate, self._stop, ready), name="bench-spark-producer"
        )
        self._proc.start()
        ready.wait(60)

    def stop(self) -> None:
        """Stop producing (what was produced is flushed first)."""
        self._stop.set()
        self._proc.join(60)


def _high(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-spark-watermarks"})
    try:
        return {
            p: int(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1])
            for p in range(partitions)
        }
    finally:
        consumer.close()


# ------------------------------------------------------------------------------------------ the caps


def _arrow_schema() -> Any:
    """The source's Arrow schema (Spark's Kafka columns plus ``cluster``): the raw loops make the same
    batches, so both sides hand Spark the same data; only the schema is the library's."""
    from multicluster_source.spark._read import arrow_schema

    return arrow_schema(False)


def _raw_read(split: Split, consumers: dict[str, Any]) -> int:
    """The raw loop over one split's range: ``consume``, and every 10,000 records an Arrow batch of the
    source's schema made the fastest way Python has (one ``list(map(...))`` of the client's methods per
    column, no Python frame per record)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from confluent_kafka import Consumer, Message, TopicPartition

    cid, bootstrap, topic, partition, start, end = split
    consumer = consumers.get(cid)
    if consumer is None:
        consumer = consumers[cid] = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "bench-spark-raw",
                "enable.auto.commit": False,
                "fetch.queue.backoff.ms": 10,  # as the source's executors set it
            }
        )
    schema = _arrow_schema()
    stamp, millis = pa.timestamp("us", tz="UTC"), pa.timestamp("ms", tz="UTC")
    kind_of, ms_of = itemgetter(0), itemgetter(1)
    consumer.assign([TopicPartition(topic, partition, start)])
    rows, position = 0, start
    pending: list[Any] = []

    def flush() -> pa.RecordBatch:
        n = len(pending)
        stamps = list(map(Message.timestamp, pending))
        batch = pa.RecordBatch.from_arrays(
            [
                pa.repeat(pa.scalar(cid, pa.string()), n),
                pa.array(list(map(Message.key, pending)), pa.binary()),
                pa.array(list(map(Message.value, pending)), pa.binary()),
                pa.repeat(pa.scalar(topic, pa.string()), n),
                pa.repeat(pa.scalar(partition, pa.int32()), n),
                pa.array(list(map(Message.offset, pending)), pa.int64()),
                pa.array(list(map(ms_of, stamps)), pa.int64()).view(millis).cast(stamp),
                pc.subtract(pa.array(list(map(kind_of, stamps)), pa.int32()), 1),
            ],
            schema=schema,
        )
        pending.clear()
        return batch

    while position < end:
        records = consumer.consume(min(ROWS_PER_BATCH, end - position), timeout=1.0)
        if any(map(Message.error, records)):  # end-of-partition events
            records = [m for m in records if m.error() is None]
        if records:
            pending += records
            last = records[-1].offset()
            assert last is not None
            position = last + 1
        if len(pending) >= ROWS_PER_BATCH or (pending and position >= end):
            rows += flush().num_rows
    consumer.unassign()
    return rows


def _ours_read(split: Split) -> int:
    """The source's own executor code over one split's range (what a Spark task runs, without Spark)."""
    from multicluster_source.spark._read import SplitRange, read_range

    cid, bootstrap, topic, partition, start, end = split
    task = SplitRange(
        cluster_id=cid,
        bootstrap_servers=bootstrap,
        cluster_properties={},
        client_properties={},
        topic=topic,
        partition=partition,
        start=start,
        end=end,
        include_headers=False,
        fail_on_data_loss=True,
        group_id_prefix="bench-spark",
        poll_timeout_ms=120_000,
    )
    return sum(batch.num_rows for batch in read_range(task))


def _cap_worker(kind: str, splits: list[Split], barrier: Any, out: Any) -> None:
    consumers: dict[str, Any] = {}
    barrier.wait()
    started = time.monotonic()
    rows = sum(_raw_read(s, consumers) if kind == "raw" else _ours_read(s) for s in splits)
    out.put((started, time.monotonic(), rows))
    for consumer in consumers.values():
        consumer.close()


def run_cap(kind: str, splits: Sequence[Split]) -> dict[str, Any]:
    """``kind`` (``raw`` or ``ours w/o Spark``) over ``splits`` dealt round-robin to :data:`SLOTS`
    processes; rows a second from the first process's start to the last one's end."""
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(SLOTS), ctx.Queue()
    dealt = [list(splits[i::SLOTS]) for i in range(SLOTS)]
    procs = [ctx.Process(target=_cap_worker, args=(kind, d, barrier, out)) for d in dealt]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=900) for _ in procs]
    for proc in procs:
        proc.join(30)
    seconds = max(r[1] for r in results) - min(r[0] for r in results)
    rows = sum(r[2] for r in results)
    return {"rows": rows, "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds)}


# ------------------------------------------------------------------------------ a Python source's ceiling


def _replay_source(rows: int, tasks: int) -> Any:
    """A Python data source (no Kafka, none of the library) whose ``tasks`` partitions yield ``rows`` rows
    in all, as the same 10,000-row Arrow batches of the source's schema made once per task: what Spark's
    Python data source path (a Python worker per task, the Arrow hand-over to the JVM, the rows there) lets
    any Python source reach on these cores."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class ReplayReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(rows // tasks) for _ in range(tasks)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            import pyarrow as pa

            n, step = int(partition.value), ROWS_PER_BATCH
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.repeat(pa.scalar("east", pa.string()), step),
                    pa.array([str(i).encode() for i in range(step)], pa.binary()),
                    pa.array([VALUE] * step, pa.binary()),
                    pa.repeat(pa.scalar("spark-bench", pa.string()), step),
                    pa.repeat(pa.scalar(0, pa.int32()), step),
                    pa.array(range(step), pa.int64()),
                    pa.array([1_700_000_000_000_000] * step, pa.timestamp("us", tz="UTC")),
                    pa.repeat(pa.scalar(0, pa.int32()), step),
                ],
                schema=_arrow_schema(),
            )
            for first in range(0, n, step):
                yield batch.slice(0, min(step, n - first))

    class ReplaySource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench-arrow-replay"

        def schema(self) -> str:
            return (
                "cluster string, key binary, value binary, topic string, partition int, offset long, "
                "timestamp timestamp, timestampType int"
            )

        def reader(self, schema: Any) -> DataSourceReader:
            return ReplayReader()

    return ReplaySource


def spark_python_ceiling(spark: Any, rows: int, tasks: int) -> dict[str, Any]:
    """Rows a second of :func:`_replay_source` read by ``spark.read`` into the ``noop`` sink."""
    started = time.perf_counter()
    spark.read.format("bench-arrow-replay").load().write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - started
    return {"rows": rows, "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds)}


# ------------------------------------------------------------------------------------------ Spark


def spark_session(jars: Sequence[Path]) -> Any:
    """A local Spark session (``local[2]``) with Spark's Kafka source's jars and our format registered."""
    from pyspark.sql import SparkSession

    from multicluster_source.spark import register

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    session = (
        SparkSession.builder.master(f"local[{SLOTS}]")
        .appName("bench-spark")
        .config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(SLOTS))
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")  # where the executors fetch spark.jars from
        .config("spark.driver.memory", "3g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


class Sources:
    """The two sides' DataFrames over the same clusters, with the same columns in the same order."""

    def __init__(
        self,
        spark: Any,
        clusters: dict[str, tuple[str, str]],
        where: Path,
        partitions: int,
        fresh_topic: Callable[[str], str] | None = None,
    ) -> None:
        self.spark = spark
        self.clusters = clusters
        """cluster id -> (bootstrap servers, topic)"""
        self.where = where
        self.partitions = partitions
        self.fresh_topic = fresh_topic
        """A new topic of ``partitions`` partitions on a cluster, by id (for the added-cluster runs)."""

    def metadata(self, ids: Sequence[str]) -> Path:
        """A metadata file of stream ``bench`` over the clusters ``ids``, written atomically."""
        from multicluster_source import ClusterMetadata, KafkaStream
        from multicluster_source.testing import write_metadata_file

        parts = {
            cid: ClusterMetadata(cid, self.clusters[cid][0], frozenset({self.clusters[cid][1]}))
            for cid in ids
        }
        return write_metadata_file(self.where / "streams.yaml", [KafkaStream("bench", parts)])

    def ours(self, ids: Sequence[str], starting: str = "earliest", limit: int | None = None) -> Any:
        """``format("multicluster-kafka")`` over the clusters ``ids``."""
        reader = (
            self.spark.readStream.format("multicluster-kafka")
            .option("metadataFile", str(self.metadata(ids)))
            .option("streamIds", "bench")
            .option("startingOffsets", starting)
        )
        if limit is not None:
            reader = reader.option("maxOffsetsPerTrigger", str(limit))
        return reader.load().select(*COLUMNS)

    def builtin(
        self, ids: Sequence[str], starting: str | dict[str, str] = "earliest", limit: int | None = None
    ) -> Any:
        """A union of Spark's Kafka source, one per cluster of ``ids``, with a ``cluster`` column;
        ``starting`` one value for all or one per cluster."""
        from pyspark.sql import functions as F

        frames = []
        for cid in ids:
            bootstrap, topic = self.clusters[cid]
            start = starting if isinstance(starting, str) else starting[cid]
            reader = (
                self.spark.readStream.format("kafka")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .option("startingOffsets", start)
            )
            if limit is not None:
                reader = reader.option("maxOffsetsPerTrigger", str(max(1, limit // len(ids))))
            frames.append(reader.load().withColumn("cluster", F.lit(cid)).select(*COLUMNS))
        return functools.reduce(lambda a, b: a.union(b), frames)

    def side(self, name: str, ids: Sequence[str], **kwargs: Any) -> Any:
        """The DataFrame of side ``name``."""
        return self.ours(ids, **kwargs) if name == "ours" else self.builtin(ids, **kwargs)


def drain(df: Any, sink: str, where: Path) -> dict[str, Any]:
    """``df`` with ``trigger(availableNow=True)`` into ``sink`` (``noop`` or ``parquet``): rows a second
    from ``start()`` to the query's end."""
    writer = df.writeStream.trigger(availableNow=True).option("checkpointLocation", str(where / "ck"))
    writer = writer.format("noop") if sink == "noop" else writer.format("parquet").option("path", str(where))
    started, started_at = time.perf_counter(), time.time()
    query = writer.start()
    query.awaitTermination()
    seconds = time.perf_counter() - started
    progress = list(query.recentProgress)
    rows = sum(int(p["numInputRows"]) for p in progress)
    if sink == "parquet":
        rows = df.sparkSession.read.parquet(str(where)).count()
    batches = [p for p in progress if int(p["numInputRows"]) > 0]
    batch_ms = sum(int(p["durationMs"].get("triggerExecution", 0)) for p in batches)
    return {
        "rows": rows,
        "seconds": round(seconds, 3),
        "rows_per_s": round(rows / seconds),
        "micro_batches": len(batches),
        "batch_ms": batch_ms,
        "rows_per_s_in_batches": round(rows / (batch_ms / 1000)) if batch_ms else None,
        "before_first_batch_s": round(_epoch(progress[0]["timestamp"]) - started_at, 3) if progress else None,
    }


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(runs, key=lambda r: r["rows_per_s"])
    return {**ordered[len(ordered) // 2], "runs": [r["rows_per_s"] for r in runs]}


# ------------------------------------------------------------------------------------------ latency


class BatchLog:
    """What ``foreachBatch`` saw of each micro-batch (called on the driver, one batch at a time)."""

    def __init__(self, positions: bool = False) -> None:
        self.positions = positions
        self.batches: list[dict[str, Any]] = []
        self.seen: Counter[tuple[str, int, int]] = Counter()

    def __call__(self, frame: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        if self.positions:
            rows = frame.select("cluster", "partition", "offset").collect()
            ended = time.time()
            self.seen.update((r[0], int(r[1]), int(r[2])) for r in rows)
            clusters = sorted({r[0] for r in rows})
            self.batches.append({"id": batch_id, "end": ended, "rows": len(rows), "clusters": clusters})
            return
        (row,) = frame.agg(
            F.count("*").alias("n"),
            F.min(F.unix_millis("timestamp")).alias("oldest"),
            F.percentile_approx(F.unix_millis("timestamp"), 0.5).alias("middle"),
        ).collect()
        ended_ms = time.time() * 1000
        if row["n"]:
            self.batches.append(
                {
                    "id": batch_id,
                    "end": ended_ms / 1000,
                    "rows": int(row["n"]),
                    "p50_ms": ended_ms - row["middle"],
                    "max_ms": ended_ms - row["oldest"],
                }
            )


def latency(sources: Sources, side: str, rate: float, seconds: float, warmup: float) -> dict[str, Any]:
    """Micro-batch latency of ``side`` at ``rate`` records a second over both clusters."""
    targets = [(b, t, sources.partitions) for b, t in sources.clusters.values()]
    log = BatchLog()
    df = sources.side(side, sorted(sources.clusters), starting="latest")
    query = (
        df.writeStream.foreachBatch(log)
        .option("checkpointLocation", str(sources.where / f"lat-{side}-{uuid.uuid4().hex[:6]}"))
        .start()
    )
    producer = RateProducer(targets, rate)
    began = time.time()
    time.sleep(warmup + seconds)
    producer.stop()
    query.processAllAvailable()  # stopped idle: a stop inside a foreachBatch call makes Spark log errors
    query.stop()
    kept = [b for b in log.batches if b["end"] >= began + warmup]
    if not kept:
        return {"micro_batches": 0}
    p50s = sorted(b["p50_ms"] for b in kept)
    gaps = [b["end"] - a["end"] for a, b in itertools.pairwise(kept)]
    return {
        "rate": rate,
        "micro_batches": len(kept),
        "rows": sum(b["rows"] for b in kept),
        "latency_p50_ms": round(statistics.median(p50s), 1),
        "latency_p50_worst_batch_ms": round(p50s[-1], 1),
        "latency_max_ms": round(max(b["max_ms"] for b in kept), 1),
        "batch_interval_ms": round(statistics.median(gaps) * 1000, 1) if gaps else None,
    }


# ------------------------------------------------------------------------------------------ added cluster


def _audit(log: BatchLog, expected: dict[str, dict[int, int]]) -> dict[str, int]:
    """Rows read twice and offsets never read, against every offset the topics hold."""
    twice = sum(c - 1 for c in log.seen.values() if c > 1)
    skipped = sum(
        1
        for cid, highs in expected.items()
        for p, high in highs.items()
        for offset in range(high)
        if (cid, p, offset) not in log.seen
    )
    return {"rows": sum(log.seen.values()), "read_twice": twice, "skipped": skipped}


def added_cluster(
    sources: Sources, variant: str, rate: float, warmup: float, trigger: str, timeout: float = 120.0
) -> dict[str, Any]:
    """One cluster added under a steady input: ``variant`` ``ours`` (metadata file written, same query)
    or ``built-in <startingOffsets>`` (stop, a new union over both clusters, a new checkpoint)."""
    east, west = "east", "west"
    partitions, fresh = sources.partitions, sources.fresh_topic
    assert fresh is not None
    clusters = {cid: (sources.clusters[cid][0], fresh(cid)) for cid in (east, west)}
    local = Sources(sources.spark, clusters, sources.where / f"add-{uuid.uuid4().hex[:6]}", partitions)
    local.where.mkdir(parents=True)
    producer = RateProducer([(b, t, partitions) for b, t in clusters.values()], rate)
    log = BatchLog(positions=True)

    def start(df: Any, name: str) -> Any:
        return (
            df.writeStream.foreachBatch(log)
            .trigger(processingTime=trigger)
            .option("checkpointLocation", str(local.where / name))
            .start()
        )

    side = "ours" if variant == "ours" else "built-in"
    query = start(local.side(side, [east], starting="earliest"), "ck1")
    time.sleep(warmup)
    queries = [query]
    changed = time.time()
    if variant == "ours":
        local.metadata([east, west])
    else:
        query.stop()
        choice = variant.split(" ", 1)[1]
        starting: str | dict[str, str] = choice
        if choice == "handed over":
            ended = json.loads(query.lastProgress["sources"][0]["endOffset"])
            starting = {east: json.dumps(ended), west: "earliest"}
        query = start(local.builtin([east, west], starting=starting), "ck2")
        queries.append(query)
    first_west: dict[str, Any] | None = None
    deadline = time.time() + timeout
    while first_west is None and time.time() < deadline:
        first_west = next((b for b in log.batches if west in b["clusters"]), None)
        time.sleep(0.05)
    time.sleep(2)
    producer.stop()
    query.processAllAvailable()
    query.stop()
    expected = {cid: _high(b, t, partitions) for cid, (b, t) in clusters.items()}
    # micro-batches started after the change up to the one with the first west row (its query's progress)
    batches_to_west = None
    if first_west is not None:
        batches_to_west = len(
            {
                p["batchId"]
                for p in query.recentProgress
                if _epoch(p["timestamp"]) >= changed and p["batchId"] <= first_west["id"]
            }
        )
    return {
        "variant": variant,
        "first_west_row_s": round(first_west["end"] - changed, 2) if first_west else None,
        "micro_batches_to_first_west_row": batches_to_west,
        "restarted": variant != "ours",
        **_audit(log, expected),
    }


def _epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# ------------------------------------------------------------------------------------------ main


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else 0.0


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Everything, on brokers started here; the result document."""
    harness: Any = importlib.import_module("harness.maven")
    jars = harness.ensure_spark_kafka_libs()
    per_cluster = args.records // 2
    result: dict[str, Any] = {
        "records": per_cluster * 2,
        "partitions_per_cluster": args.partitions,
        "repeats": args.repeats,
        "max_offsets_per_trigger": args.max_per_trigger,
        "spark_kafka_connector": harness.SPARK_KAFKA_VERSION,
    }
    with started_clusters("kafka", 2) as (east, west), tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        clusters = {}
        for cid, cluster in (("east", east), ("west", west)):
            topic = cluster.create_topic("spark-bench", partitions=args.partitions)
            _fill(cluster, topic, per_cluster, args.partitions)
            clusters[cid] = (cluster.bootstrap_servers, topic)
        splits: list[Split] = [
            (cid, b, t, p, 0, high)
            for cid, (b, t) in sorted(clusters.items())
            for p, high in sorted(_high(b, t, args.partitions).items())
        ]
        assert sum(s[5] for s in splits) == per_cluster * 2

        print(f"caps: {SLOTS} processes over {len(splits)} splits", flush=True)
        caps: dict[str, list[dict[str, Any]]] = {"raw": [], "ours w/o Spark": []}
        for _ in range(args.repeats):
            for kind in caps:
                caps[kind].append(run_cap(kind, splits))
        result["caps"] = {k: _median_run(v) for k, v in caps.items()}

        import pyspark

        spark = spark_session(jars)
        result["pyspark"] = pyspark.__version__
        by_cluster = {"east": east, "west": west}
        sources = Sources(
            spark,
            clusters,
            where,
            args.partitions,
            lambda cid: by_cluster[cid].create_topic("spark-add", partitions=args.partitions),
        )
        spark.dataSource.register(_replay_source(per_cluster * 2, len(splits)))
        spark_python_ceiling(spark, per_cluster * 2, len(splits))  # warm-up
        result["spark_python_ceiling"] = _median_run(
            [spark_python_ceiling(spark, per_cluster * 2, len(splits)) for _ in range(args.repeats)]
        )
        ceiling = result["spark_python_ceiling"]["rows_per_s"]
        print(f"a Python source in Spark (no Kafka) {ceiling:,} rows/s", flush=True)
        ids = sorted(clusters)
        # one untimed run a side first: the JVM's and the Python workers' warm-up
        for side in SIDES:
            drain(sources.side(side, ids, limit=args.max_per_trigger), "noop", where / f"warm-{side}")
        for sink in ("noop", "parquet"):
            runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SIDES}
            for repeat in range(args.repeats):
                order = SIDES if repeat % 2 == 0 else SIDES[::-1]
                for side in order:
                    df = sources.side(side, ids, limit=args.max_per_trigger)
                    out = drain(df, sink, where / f"{sink}-{side}-{repeat}")
                    assert out["rows"] == per_cluster * 2, (side, sink, out)
                    runs[side].append(out)
                    print(f"{sink:8} {side:9} {out['rows_per_s']:>10,} rows/s", flush=True)
            result[sink] = {s: _median_run(r) for s, r in runs.items()}

        result["latency"] = {
            side: latency(sources, side, args.rate, args.latency_seconds, warmup=5.0) for side in SIDES
        }
        variants = ["ours", "built-in earliest", "built-in latest", "built-in handed over"]
        result["added_cluster"] = [
            added_cluster(sources, v, args.add_rate, args.add_warmup, args.add_trigger) for v in variants
        ]
        spark.stop()
    summarize(result)
    return result


def summarize(result: dict[str, Any]) -> None:
    """Ratios the goals are stated in, added to ``result``."""
    cap = result["caps"]["raw"]["rows_per_s"]
    ratios: dict[str, Any] = {"cap_raw_rows_per_s": cap}
    for sink in ("noop", "parquet"):
        ours, builtin = result[sink]["ours"]["rows_per_s"], result[sink]["built-in"]["rows_per_s"]
        ratios[f"{sink}_ours_over_builtin"] = _ratio(ours, builtin)
        ratios[f"{sink}_ours_over_cap"] = _ratio(ours, cap)
    for sink in ("noop", "parquet"):
        ours, builtin = (result[sink][s]["rows_per_s_in_batches"] for s in ("ours", "built-in"))
        ratios[f"{sink}_ours_over_builtin_in_batches"] = _ratio(ours, builtin)
    ceiling = result["spark_python_ceiling"]["rows_per_s"]
    ratios["spark_python_ceiling_rows_per_s"] = ceiling
    ratios["noop_ours_over_spark_python_ceiling"] = _ratio(result["noop"]["ours"]["rows_per_s"], ceiling)
    ratios["reader_wo_spark_over_cap"] = _ratio(result["caps"]["ours w/o Spark"]["rows_per_s"], cap)
    result["ratios"] = ratios


def report(result: dict[str, Any]) -> None:
    """The tables."""
    print(f"\n{result['records']:,} records, {result['partitions_per_cluster']} partitions a cluster")
    print(f"{'rows/s':28} {'count (noop)':>14} {'parquet':>14}")
    for side in SIDES:
        noop, parquet = result["noop"][side]["rows_per_s"], result["parquet"][side]["rows_per_s"]
        print(f"{side:28} {noop:>14,} {parquet:>14,}")
    for kind, cap in result["caps"].items():
        print(f"{'cap: ' + kind:28} {cap['rows_per_s']:>14,}")
    print(f"{'ceiling: Python in Spark':28} {result['spark_python_ceiling']['rows_per_s']:>14,}")
    print("ratios:", json.dumps(result["ratios"]))
    print("\nlatency:")
    for side, lat in result["latency"].items():
        print(f"  {side:10} {json.dumps(lat)}")
    print("\nadded cluster:")
    for row in result["added_cluster"]:
        print("  " + json.dumps(row))


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run, print, save."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000, help="records in all (half a cluster)")
    parser.add_argument("--partitions", type=int, default=2, help="partitions a cluster (default 2)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-per-trigger", type=int, default=1_000_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--rate", type=float, default=20_000, help="records/s of the latency runs")
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument("--add-rate", type=float, default=2_000, help="records/s of the added-cluster runs")
    parser.add_argument("--add-warmup", type=float, default=10.0, help="seconds before the cluster is added")
    parser.add_argument("--add-trigger", default="1 second", help="processingTime of the added-cluster runs")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--out", default="spark.json", help="result file in benchmarks/results/")
    args = parser.parse_args(argv)
    result = run(args)
    result["machine"] = machine_info("kafka")
    report(result)
    if not args.no_save:
        path = RESULTS_DIR / args.out
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
