"""The Spark source (API.md section 10) on real local Spark with the suite's Apache Kafka clusters.

One Spark session for the module (``local[2]``; a session takes seconds to start). Queries use
``trigger(availableNow=True)`` or ``processAllAvailable()``: they end when Spark has read what there is, no
test waits for a time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.cluster import Cluster, unique_name
from harness.scenario import cluster_md, stream, wait_for
from harness.spark import SECRET, SECRET_ENV, spark_session
from multicluster_source import ClusterMetadata
from multicluster_source.metadata import KafkaTopicMetadataService, KafkaTopicMetadataWriter
from multicluster_source.testing import write_metadata_file

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")

pytestmark = pytest.mark.integration

SCHEMA = (
    "struct<cluster:string,key:binary,value:binary,topic:string,partition:int,offset:bigint,"
    "timestamp:timestamp,timestampType:int>"
)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local Spark session for the module, with the format registered."""
    with spark_session() as session:
        yield session


def _source(spark: Any, metadata: Path, **options: str) -> Any:
    reader = spark.readStream.format("multicluster-kafka").option("metadataFile", str(metadata))
    reader = reader.option("streamIds", options.pop("streamIds", "s"))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _available_now(df: Any, where: Path) -> tuple[Any, list[Any]]:
    """Run ``df`` to a parquet sink with ``trigger(availableNow=True)``; the query and the rows written."""
    query = (
        df.writeStream.format("parquet")
        .option("path", str(where / "out"))
        .option("checkpointLocation", str(where / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark = df.sparkSession
    rows = spark.read.parquet(str(where / "out")).collect() if (where / "out").exists() else []
    return query, rows


def _values(rows: list[Any]) -> Counter[bytes]:
    return Counter(bytes(r["value"]) for r in rows)


def _positions(rows: list[Any]) -> Counter[tuple[str, str, int, int]]:
    return Counter((r["cluster"], r["topic"], r["partition"], r["offset"]) for r in rows)


def _expected(sent: list[tuple[int, bytes]]) -> Counter[bytes]:
    return Counter(value for _p, value in sent)


def test_schema_and_every_record_of_two_clusters_once_into_parquet(
    spark: Any, kafka_clusters: Callable[[int], list[Cluster]], tmp_path: Path
) -> None:
    east, west = kafka_clusters(2)
    ta = east.create_topic("spark-a", partitions=2)
    tb = west.create_topic("spark-b", partitions=3)
    sent = east.produce_n(ta, 300, partitions=2, prefix="east") + west.produce_n(
        tb, 200, partitions=3, prefix="w"
    )
    metadata = write_metadata_file(
        tmp_path / "streams.yaml", [stream("s", cluster_md(east, ta), cluster_md(west, tb))]
    )
    df = _source(spark, metadata, startingOffsets="earliest")
    assert df.schema.simpleString() == SCHEMA
    _query, rows = _available_now(df, tmp_path)
    assert _values(rows) == _expected(sent)
    assert max(_positions(rows).values()) == 1
    assert {(r["cluster"], r["topic"]) for r in rows} == {(east.cluster_id, ta), (west.cluster_id, tb)}
    assert {r["timestampType"] for r in rows} == {0}
    assert all(r["timestamp"] is not None for r in rows)


def test_headers_column_with_include_headers(spark: Any, kafka_cluster: Cluster, tmp_path: Path) -> None:
    topic = kafka_cluster.create_topic("spark-h", partitions=1)
    kafka_cluster.produce(topic, [b"with"], key=b"k", headers=[("h1", b"v1"), ("h2", b"v2")])
    kafka_cluster.produce(topic, [b"without"])
    metadata = write_metadata_file(tmp_path / "streams.yaml", [stream("s", cluster_md(kafka_cluster, topic))])
    df = _source(spark, metadata, startingOffsets="earliest", includeHeaders="true")
    assert df.schema.simpleString() == SCHEMA[:-1] + ",headers:array<struct<key:string,value:binary>>>"
    _query, rows = _available_now(df, tmp_path)
    by_value = {bytes(r["value"]): r for r in rows}
    assert [(h["key"], bytes(h["value"])) for h in by_value[b"with"]["headers"]] == [
        ("h1", b"v1"),
        ("h2", b"v2"),
    ]
    assert bytes(by_value[b"with"]["key"]) == b"k"
    assert by_value[b"without"]["headers"] is None
    assert by_value[b"without"]["key"] is None


def _memory_rows(spark: Any, name: str) -> list[Any]:
    return list(spark.sql(f"SELECT * FROM {name}").collect())


def test_a_cluster_added_and_a_topic_removed_and_added_back_under_a_running_query(
    spark: Any, kafka_clusters: Callable[[int], list[Cluster]], tmp_path: Path
) -> None:
    east, west = kafka_clusters(2)
    ta = east.create_topic("spark-keep", partitions=2)
    tc = east.create_topic("spark-back", partitions=1)
    tb = west.create_topic("spark-new", partitions=2)
    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream("s", cluster_md(east, ta, tc))])
    sent = east.produce_n(ta, 20, partitions=2, prefix="a1") + east.produce_n(
        tc, 10, partitions=1, prefix="c1"
    )
    name = "moving_" + os.urandom(4).hex()
    df = _source(spark, path, startingOffsets="earliest")
    query = df.writeStream.format("memory").queryName(name).start()
    try:
        query.processAllAvailable()
        assert _values(_memory_rows(spark, name)) == _expected(sent)

        # west added, the topic "back" removed: its new records are not read while it is out
        write_metadata_file(path, [stream("s", cluster_md(east, ta), cluster_md(west, tb))])
        query.processAllAvailable()
        sent += east.produce_n(ta, 10, partitions=2, prefix="a2") + west.produce_n(
            tb, 10, partitions=2, prefix="b"
        )
        out_while_removed = east.produce_n(tc, 5, partitions=1, prefix="c2")
        query.processAllAvailable()
        assert _values(_memory_rows(spark, name)) == _expected(sent)

        # the topic added back: it resumes after the last record read of it, nothing read twice
        write_metadata_file(path, [stream("s", cluster_md(east, ta, tc), cluster_md(west, tb))])
        query.processAllAvailable()
        rows = _memory_rows(spark, name)
        assert _values(rows) == _expected(sent + out_while_removed)
        assert max(_positions(rows).values()) == 1
    finally:
        query.stop()


def test_max_offsets_per_trigger_bounds_each_micro_batch(
    spark: Any, kafka_clusters: Callable[[int], list[Cluster]], tmp_path: Path
) -> None:
    east, west = kafka_clusters(2)
    ta = east.create_topic("spark-max", partitions=2)
    tb = west.create_topic("spark-max", partitions=1)
    sent = east.produce_n(ta, 70, partitions=2, prefix="e") + west.produce_n(tb, 30, partitions=1, prefix="w")
    metadata = write_metadata_file(
        tmp_path / "streams.yaml", [stream("s", cluster_md(east, ta), cluster_md(west, tb))]
    )
    df = _source(spark, metadata, startingOffsets="earliest", maxOffsetsPerTrigger="30")
    query, rows = _available_now(df, tmp_path)
    batches = [p["numInputRows"] for p in query.recentProgress]
    assert batches and max(batches) <= 30
    assert sum(batches) == 100
    assert _values(rows) == _expected(sent)


def test_starting_offsets_latest_by_default(spark: Any, kafka_cluster: Cluster, tmp_path: Path) -> None:
    topic = kafka_cluster.create_topic("spark-latest", partitions=2)
    kafka_cluster.produce_n(topic, 10, partitions=2, prefix="before")
    metadata = write_metadata_file(tmp_path / "streams.yaml", [stream("s", cluster_md(kafka_cluster, topic))])
    name = "latest_" + os.urandom(4).hex()
    query = _source(spark, metadata).writeStream.format("memory").queryName(name).start()
    try:
        query.processAllAvailable()
        assert _memory_rows(spark, name) == []
        after = kafka_cluster.produce_n(topic, 6, partitions=2, prefix="after")
        query.processAllAvailable()
        assert _values(_memory_rows(spark, name)) == _expected(after)
    finally:
        query.stop()


def test_starting_offsets_as_json(spark: Any, kafka_cluster: Cluster, tmp_path: Path) -> None:
    t1 = kafka_cluster.create_topic("spark-json", partitions=2)
    t2 = kafka_cluster.create_topic("spark-json-other", partitions=1)
    kafka_cluster.produce(t1, [f"p0-{i}" for i in range(5)], partition=0)
    kafka_cluster.produce(t1, [f"p1-{i}" for i in range(5)], partition=1)
    kafka_cluster.produce(t2, [f"o-{i}" for i in range(3)], partition=0)
    metadata = write_metadata_file(
        tmp_path / "streams.yaml", [stream("s", cluster_md(kafka_cluster, t1, t2))]
    )
    cid = kafka_cluster.cluster_id
    starting = json.dumps({f"{cid}/{t1}/0": 3, f"{cid}/{t1}/1": -1})
    _query, rows = _available_now(_source(spark, metadata, startingOffsets=starting), tmp_path)
    # partition 0 from offset 3, partition 1 from its end, the topic left out of the map from its start
    assert _values(rows) == Counter([b"p0-3", b"p0-4", b"o-0", b"o-1", b"o-2"])


def test_a_batch_read_between_starting_and_ending_offsets_of_two_clusters(
    spark: Any, kafka_clusters: Callable[[int], list[Cluster]], tmp_path: Path
) -> None:
    east, west = kafka_clusters(2)
    ta = east.create_topic("spark-batch", partitions=2)
    tb = west.create_topic("spark-batch", partitions=1)
    sent = east.produce_n(ta, 20, partitions=2, prefix="e") + west.produce_n(tb, 6, partitions=1, prefix="w")
    metadata = write_metadata_file(
        tmp_path / "streams.yaml", [stream("s", cluster_md(east, ta), cluster_md(west, tb))]
    )

    def read(**options: str) -> list[Any]:
        reader = spark.read.format("multicluster-kafka").option("metadataFile", str(metadata))
        for key, value in {"streamIds": "s", **options}.items():
            reader = reader.option(key, value)
        return list(reader.load().collect())

    # by default from the earliest to the latest offsets
    rows = read()
    assert _values(rows) == _expected(sent)
    assert max(_positions(rows).values()) == 1
    # offsets 5..7 of one partition, the other from its start to its end, west's first 3
    e0, w0 = f"{east.cluster_id}/{ta}/0", f"{west.cluster_id}/{tb}/0"
    rows = read(startingOffsets=json.dumps({e0: 5, w0: -2}), endingOffsets=json.dumps({e0: 8, w0: 3}))
    east_0 = [value for part, value in sent if part == 0 and value.startswith(b"e")][5:8]
    east_1 = [value for part, value in sent if part == 1]
    assert _values(rows) == Counter([*east_0, *east_1, b"w-0", b"w-1", b"w-2"])
    with pytest.raises(Exception, match="startingOffsets: a batch read cannot start at latest"):
        read(startingOffsets="latest")


def test_bad_options_name_the_option(spark: Any, kafka_cluster: Cluster, tmp_path: Path) -> None:
    topic = kafka_cluster.create_topic("spark-bad", partitions=1)
    metadata = write_metadata_file(tmp_path / "streams.yaml", [stream("s", cluster_md(kafka_cluster, topic))])
    with pytest.raises(Exception, match="metadataFile"):
        spark.readStream.format("multicluster-kafka").option("streamIds", "s").load()
    with pytest.raises(Exception, match="startingOffsets"):
        _source(spark, metadata, startingOffsets="{not json")
    with pytest.raises(Exception, match="maxOffsetsPerTrigger"):
        _source(spark, metadata, maxOffsetsPerTrigger="many")
    for options, named in [({"streamIds": "nope"}, "streamIds"), ({}, "missing.yaml")]:
        where = metadata if options else tmp_path / "missing.yaml"
        query = (
            _source(spark, where, **options)
            .writeStream.format("memory")
            .queryName("bad_" + os.urandom(4).hex())
            .start()
        )
        with pytest.raises(Exception, match=named):
            query.awaitTermination()


def test_a_placeholder_in_a_client_property_stays_out_of_the_offsets(
    spark: Any, kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = kafka_cluster.create_topic("spark-secret", partitions=2)
    sent = kafka_cluster.produce_n(topic, 10, partitions=2)
    metadata = write_metadata_file(tmp_path / "streams.yaml", [stream("s", cluster_md(kafka_cluster, topic))])
    df = _source(spark, metadata, startingOffsets="earliest", **{"kafka.client.id": f"${{env:{SECRET_ENV}}}"})
    query, rows = _available_now(df, tmp_path)
    assert _values(rows) == _expected(sent)  # the executors resolved the placeholder to make their consumers
    offsets = [p.read_text() for p in (tmp_path / "checkpoint" / "offsets").iterdir() if p.name.isdigit()]
    assert offsets
    logged = [json.loads(text.splitlines()[-1]) for text in offsets]  # the source's offset: the last line
    assert {f"{kafka_cluster.cluster_id}/{topic}/{p}" for p in (0, 1)} <= set().union(*logged)
    for text in offsets:
        assert SECRET not in text
        assert "${env:" not in text
    assert all(SECRET not in progress.json for progress in query.recentProgress)


def _deleted_before(cluster: Cluster, topic: str, offset: int) -> None:
    """Delete the records of partition 0 before ``offset``, as retention would."""
    from confluent_kafka import TopicPartition

    futures = cluster.admin().delete_records([TopicPartition(topic, 0, offset)])
    for future in futures.values():
        future.result(30)


@pytest.mark.parametrize("fail", [True, False], ids=["fail", "warn"])
def test_records_deleted_before_they_are_read(
    spark: Any, kafka_cluster: Cluster, tmp_path: Path, fail: bool
) -> None:
    topic = kafka_cluster.create_topic("spark-loss", partitions=1)
    kafka_cluster.produce(topic, [f"r-{i}" for i in range(10)], partition=0)
    _deleted_before(kafka_cluster, topic, 4)
    metadata = write_metadata_file(tmp_path / "streams.yaml", [stream("s", cluster_md(kafka_cluster, topic))])
    split = f"{kafka_cluster.cluster_id}/{topic}/0"
    df = _source(spark, metadata, startingOffsets=json.dumps({split: 0}), failOnDataLoss=str(fail).lower())
    if fail:
        with pytest.raises(Exception, match=split):
            _available_now(df, tmp_path)
    else:
        _query, rows = _available_now(df, tmp_path)
        assert _values(rows) == Counter(f"r-{i}".encode() for i in range(4, 10))


def test_a_restart_goes_on_where_the_checkpoint_ends_and_a_removed_topic_keeps_its_position(
    spark: Any, kafka_cluster: Cluster, tmp_path: Path
) -> None:
    ta = kafka_cluster.create_topic("spark-restart", partitions=2)
    tc = kafka_cluster.create_topic("spark-restart-back", partitions=1)
    path = tmp_path / "streams.yaml"
    both = [stream("s", cluster_md(kafka_cluster, ta, tc))]
    write_metadata_file(path, both)
    sent = kafka_cluster.produce_n(ta, 10, partitions=2, prefix="a1") + kafka_cluster.produce_n(
        tc, 4, partitions=1, prefix="c1"
    )
    _available_now(_source(spark, path, startingOffsets="earliest"), tmp_path)

    # the next run without the topic "back": its new records wait, the other topic's are read
    write_metadata_file(path, [stream("s", cluster_md(kafka_cluster, ta))])
    sent += kafka_cluster.produce_n(ta, 6, partitions=2, prefix="a2")
    waiting = kafka_cluster.produce_n(tc, 3, partitions=1, prefix="c2")
    _query, rows = _available_now(_source(spark, path, startingOffsets="earliest"), tmp_path)
    assert _values(rows) == _expected(sent)

    # the topic back in the next run: it resumes where the first run left it
    write_metadata_file(path, both)
    _query, rows = _available_now(_source(spark, path, startingOffsets="earliest"), tmp_path)
    assert _values(rows) == _expected(sent + waiting)
    assert max(_positions(rows).values()) == 1


def test_transactions_committed_records_once_aborted_and_open_ones_never(
    spark: Any, kafka_cluster: Cluster, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    topic = kafka_cluster.create_topic("spark-tx", partitions=1)
    producer = Producer(
        kafka_cluster.client_config(
            **{"transactional.id": unique_name("tx"), "transaction.timeout.ms": "900000"}
        )
    )
    producer.init_transactions(30)
    for outcome, prefix in [("commit", "c1"), ("abort", "aborted"), ("commit", "c2")]:
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, value=f"{prefix}-{i}".encode(), partition=0)
        (producer.commit_transaction if outcome == "commit" else producer.abort_transaction)(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"open-0", partition=0)
    producer.flush(30)  # in the log, its transaction still open: past the last stable offset
    try:
        metadata = write_metadata_file(
            tmp_path / "streams.yaml", [stream("s", cluster_md(kafka_cluster, topic))]
        )
        # ranges end on transaction markers: a read that waited for a record there would not end
        _query, rows = _available_now(_source(spark, metadata, startingOffsets="earliest"), tmp_path)
        assert _values(rows) == Counter(f"{p}-{i}".encode() for p in ("c1", "c2") for i in range(3))
    finally:
        producer.abort_transaction(30)


def _job(metadata: Path, where: Path, mode: str) -> subprocess.Popen[bytes]:
    job = Path(__file__).parent / "jobs" / "spark_job.py"
    args = [sys.executable, str(job), str(metadata), str(where / "out"), str(where / "checkpoint"), mode]
    return subprocess.Popen(args, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _logged(where: Path, log: str) -> int:
    folder = where / "checkpoint" / log
    return sum(1 for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else 0


def test_a_driver_killed_mid_batch_is_replayed_into_parquet_exactly_once(
    spark: Any, kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = kafka_cluster.create_topic("spark-kill", partitions=2)
    sent = kafka_cluster.produce_n(topic, 300, partitions=2)
    metadata = write_metadata_file(tmp_path / "streams.yaml", [stream("s", cluster_md(kafka_cluster, topic))])
    job = _job(metadata, tmp_path, "follow")
    try:
        # killed once a micro-batch is in the offset log and not yet committed, after two that were
        def planned() -> bool:
            commits = _logged(tmp_path, "commits")
            return commits >= 2 and _logged(tmp_path, "offsets") > commits

        assert wait_for(lambda: planned() or job.poll() is not None, timeout=120, interval=0.02)
        assert job.poll() is None, job.stderr.read().decode() if job.stderr else ""
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the driver and the JVM it started
        job.wait()
        if job.stderr:
            job.stderr.close()
    assert _logged(tmp_path, "commits") < 6  # it was killed before the end
    again = _job(metadata, tmp_path, "available-now")
    _out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err.decode()[-3000:]
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert _values(rows) == _expected(sent)
    assert max(_positions(rows).values()) == 1


def test_min_offsets_per_trigger_waits_for_enough_records(
    spark: Any, kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = kafka_cluster.create_topic("spark-min", partitions=2)
    metadata = write_metadata_file(tmp_path / "streams.yaml", [stream("s", cluster_md(kafka_cluster, topic))])
    first = kafka_cluster.produce_n(topic, 6, partitions=2, prefix="first")
    name = "min_" + os.urandom(4).hex()
    df = _source(spark, metadata, startingOffsets="earliest", minOffsetsPerTrigger="10", maxTriggerDelay="1h")
    query = df.writeStream.format("memory").queryName(name).start()
    try:
        query.processAllAvailable()
        assert _memory_rows(spark, name) == []
        second = kafka_cluster.produce_n(topic, 6, partitions=2, prefix="second")
        query.processAllAvailable()
        assert _values(_memory_rows(spark, name)) == _expected(first + second)
    finally:
        query.stop()


def test_min_partitions_cuts_a_split_into_more_tasks(
    spark: Any, kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = kafka_cluster.create_topic("spark-minparts", partitions=1)
    sent = kafka_cluster.produce_n(topic, 100, partitions=1)
    metadata = write_metadata_file(tmp_path / "streams.yaml", [stream("s", cluster_md(kafka_cluster, topic))])
    seen: list[tuple[int, list[bytes]]] = []

    def batch(frame: Any, _batch_id: int) -> None:
        seen.append((frame.rdd.getNumPartitions(), [bytes(r["value"]) for r in frame.collect()]))

    df = _source(spark, metadata, startingOffsets="earliest", minPartitions="4")
    df.writeStream.foreachBatch(batch).trigger(availableNow=True).start().awaitTermination()
    assert max(n for n, _rows in seen) == 4
    assert Counter(v for _n, rows in seen for v in rows) == _expected(sent)


def test_commit_group_id_gets_the_offsets_of_committed_micro_batches(
    spark: Any, kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = kafka_cluster.create_topic("spark-lag", partitions=2)
    metadata = write_metadata_file(tmp_path / "streams.yaml", [stream("s", cluster_md(kafka_cluster, topic))])
    group = unique_name("spark-lag")
    name = "lag_" + os.urandom(4).hex()
    df = _source(spark, metadata, startingOffsets="earliest", commitGroupId=group)
    query = df.writeStream.format("memory").queryName(name).start()
    try:
        kafka_cluster.produce_n(topic, 10, partitions=2)
        query.processAllAvailable()
        kafka_cluster.produce_n(topic, 4, partitions=2)
        query.processAllAvailable()  # Spark tells the source a micro-batch is done when it plans the next
        ends = ({0: 5, 1: 5}, {0: 7, 1: 7})
        assert wait_for(lambda: kafka_cluster.committed_offsets(group, topic, 2) in ends, timeout=60)
    finally:
        query.stop()


def test_a_sasl_ssl_cluster_read_by_executors_with_a_password_from_a_file(
    spark: Any, secured_cluster: Callable[[str], Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sec = secured_cluster("sasl_ssl")
    user, password = unique_name("user"), f"pw-{uuid.uuid4().hex}"
    sec.add_scram_user(user, password)
    topic = sec.create_topic("spark-sasl", partitions=2)
    sent = sec.produce_n(topic, 20, partitions=2)
    secret = tmp_path / "password"
    secret.write_text(password + "\n")
    properties = {k: v for k, v in sec.sasl_properties(user, password).items() if k != "sasl.password"}
    properties["sasl.password"] = f"${{file:{secret}}}"  # resolved where each client is made
    secured = ClusterMetadata("sec", sec.secure_bootstrap_servers, frozenset({topic}), properties)
    metadata = write_metadata_file(tmp_path / "streams.yaml", [stream("s", secured)])
    df = _source(spark, metadata, startingOffsets="earliest")
    df.explain(True)
    query, rows = _available_now(df, tmp_path)
    assert _values(rows) == _expected(sent)
    assert {r["cluster"] for r in rows} == {"sec"}
    assert password not in capsys.readouterr().out
    written = [p.read_bytes() for p in (tmp_path / "checkpoint").rglob("*") if p.is_file()]
    assert written and not any(password.encode() in data for data in written)
    assert all(password not in progress.json for progress in query.recentProgress)


def test_metadata_in_a_compacted_topic_is_followed_under_a_running_query(
    spark: Any, kafka_clusters: Callable[[int], list[Cluster]]
) -> None:
    east, west = kafka_clusters(2)
    ta = east.create_topic("spark-topic-meta-a", partitions=1)
    tb = west.create_topic("spark-topic-meta-b", partitions=1)
    meta = east.create_topic("spark-metadata", partitions=1, config={"cleanup.policy": "compact"})
    service = KafkaTopicMetadataService(east.bootstrap_servers, meta, create_topic=False)

    def publish(*clusters: ClusterMetadata) -> None:
        service.describe_streams(["s"])  # started and caught up
        with KafkaTopicMetadataWriter(east.bootstrap_servers, meta) as writer:
            summary = writer.publish({stream("s", *clusters)}, current=service.snapshot())
        service.wait_for_offset(summary.next_offset or 0)

    def reader(topic: str) -> Any:
        return (
            spark.readStream.format("multicluster-kafka")
            .option("metadataTopic", topic)
            .option("metadataTopicBootstrapServers", east.bootstrap_servers)
            .option("streamIds", "s")
            .option("startingOffsets", "earliest")
            .load()
        )

    name = "topic_meta_" + os.urandom(4).hex()
    try:
        publish(cluster_md(east, ta))
        sent = east.produce_n(ta, 10, partitions=1, prefix="a")
        query = reader(meta).writeStream.format("memory").queryName(name).start()
        try:
            query.processAllAvailable()
            assert _values(_memory_rows(spark, name)) == _expected(sent)
            publish(cluster_md(east, ta), cluster_md(west, tb))  # a cluster added through the topic
            sent += west.produce_n(tb, 10, partitions=1, prefix="b")

            def all_read() -> bool:
                query.processAllAvailable()
                return _values(_memory_rows(spark, name)) == _expected(sent)

            assert wait_for(all_read, 60, interval=0.5)
        finally:
            query.stop()
    finally:
        service.close()
    absent = reader("no-such-metadata-topic").writeStream.format("memory").queryName(name + "_x").start()
    with pytest.raises(Exception, match=r"metadataTopic 'no-such-metadata-topic'"):
        absent.awaitTermination(60)
