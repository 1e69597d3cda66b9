"""Replica handovers on real Kafka without MirrorMaker 2: two independent clusters, the same records written
to ``east/<topic>`` and ``west/east.<topic>`` (a byte-for-byte copy stand-in: same offsets, values, timestamps),
the stream switched from the origin to the copy mid-stream by a metadata file change.

- ``identical``: nothing lost, nothing repeated, even with records of the origin fetched but not yet
  returned when the switch comes (they are fenced); ``status()["handovers"]`` says where each split started.
- ``timestamp``: nothing lost; what repeats is the records of the last returned record's millisecond.
- kill -9 of the source while a handover waits for the copy to catch up (a checkpoint holds the pending
  handover): the restart translates the same positions; nothing lost, nothing repeated.
- the same two switchovers on ``run()``, on every runtime (threads, processes, Ray), with a slow handler so
  that batches of the origin wait in the workers when the switch comes, asserting the same bounds as
  ``poll`` (the driver fences at the worker that reads the split and translates the position and last
  timestamp that worker's handler was handed, not its own lagging copy).
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]
from prometheus_client import CollectorRegistry

from harness.cluster import Cluster, unique_name
from harness.runtimes import BackgroundRun, FileSink, Row, Runtime, sink_rows
from harness.scenario import wait_for
from multicluster_source import (
    ClusterMetadata,
    FileMetadataService,
    KafkaStream,
    MultiClusterKafkaSource,
    OffsetsInitializer,
    RunControl,
    SourceRecord,
)
from multicluster_source.metadata._replica import OffsetsMode, ReplicaOf
from multicluster_source.testing import write_metadata_file

pytestmark = pytest.mark.integration

JOB = Path(__file__).parent / "jobs" / "replica_job.py"
ROOT = Path(__file__).resolve().parents[2]
BASE_TS = int(time.time() * 1000) - 3_600_000  # recent: older records would age out of the log


def _topics(east: Cluster, west: Cluster, partitions: int) -> tuple[str, str]:
    """A new origin topic on east and its copy's topic ``east.<topic>`` on west (MM2's default name)."""
    topic = unique_name("orders")
    for cluster, name in ((east, topic), (west, f"{east.cluster_id}.{topic}")):
        new = NewTopic(name, num_partitions=partitions, replication_factor=1)
        cluster.admin().create_topics([new])[name].result(30.0)
    copy = f"{east.cluster_id}.{topic}"
    assert wait_for(
        lambda: (
            topic in east.admin().list_topics(timeout=5).topics
            and copy in west.admin().list_topics(timeout=5).topics
        ),
        30,
    )
    return topic, copy


def _write(cluster: Cluster, topic: str, partition: int, first: int, last: int, *, ts_step: int = 1) -> None:
    """Records ``first..last-1`` of a partition: value ``p-i``, key ``k-i``, timestamp BASE_TS + i*ts_step."""
    producer = cluster.producer()
    for i in range(first, last):
        producer.produce(
            topic,
            value=f"{partition}-{i}".encode(),
            key=f"k-{i}".encode(),
            partition=partition,
            timestamp=BASE_TS + i * ts_step,
        )
        producer.poll(0)
    assert producer.flush(30) == 0


def _copy(
    east: Cluster, west: Cluster, topic: str, copy: str, partitions: int, first: int, last: int
) -> None:
    for p in range(partitions):
        _write(east, topic, p, first, last)
        _write(west, copy, p, first, last)


def _streams(
    east: Cluster, west: Cluster, topic: str, copy: str, offsets: str, *, origin: bool
) -> list[KafkaStream]:
    replica_of = ReplicaOf(east.cluster_id, cast(OffsetsMode, offsets))
    clusters = {
        "west": ClusterMetadata(
            west.cluster_id, west.bootstrap_servers, frozenset({copy}), replica_of=replica_of
        )
    }
    if origin:
        clusters["east"] = ClusterMetadata(east.cluster_id, east.bootstrap_servers, frozenset({topic}))
    return [KafkaStream("orders", {c.cluster_id: c for c in clusters.values()})]


def _source(path: Path, **props: str) -> MultiClusterKafkaSource:
    b = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(FileMetadataService(path))
        .set_stream_ids(["orders"])
        .set_group_id(f"g-{uuid.uuid4().hex[:8]}")
        .set_starting_offsets(OffsetsInitializer.earliest())
        .set_property("reader.batch.max.records", "20")
        .set_property("reader.buffer.max.batches", "4")
        .set_property("partition.discovery.interval.ms", "500")
    )
    for k, v in props.items():
        b.set_property(k, v)
    return b.build()


def _switch_mid_stream(
    east: Cluster, west: Cluster, tmp_path: Path, offsets: str, partitions: int = 2, n: int = 400
) -> tuple[list[SourceRecord], dict[str, Any], str]:
    """Read about a third of the origin slowly (so fetched records wait in the buffer), switch the metadata
    file to the copy alone, read on until every value came; returns the records, the status and the topic."""
    topic, copy = _topics(east, west, partitions)
    _copy(east, west, topic, copy, partitions, 0, n)
    path = write_metadata_file(
        tmp_path / "streams.yaml", _streams(east, west, topic, copy, offsets, origin=True)
    )
    got: list[SourceRecord] = []
    with _source(path).open(parallelism=2) as stream:
        assert stream.status()["handovers"] == []
        deadline = time.monotonic() + 60
        while len(got) < partitions * n // 3 and time.monotonic() < deadline:
            got.extend(stream.poll(timeout=0.2, max_records=7))
        assert {r.cluster_id for r in got} == {east.cluster_id}, "the copy is not read while the origin is"
        write_metadata_file(path, _streams(east, west, topic, copy, offsets, origin=False))
        # not polling meanwhile: the origin's fetched records wait in the buffer, and are fenced
        assert wait_for(lambda: len(stream.status()["handovers"]) == partitions, 30), stream.status()
        wanted = {f"{p}-{i}".encode() for p in range(partitions) for i in range(n)}
        deadline = time.monotonic() + 90
        while not wanted <= {r.value for r in got} and time.monotonic() < deadline:
            got.extend(stream.poll(timeout=0.2, max_records=7))
        got.extend(stream.poll(timeout=1.0))  # nothing more may come
        status = stream.status()
    return got, status, topic


def test_identical_switchover_mid_stream_loses_and_repeats_nothing(
    kafka_clusters: Any, tmp_path: Path
) -> None:
    east, west = kafka_clusters(2)
    got, status, topic = _switch_mid_stream(east, west, tmp_path, "identical")
    counts = Counter(r.value for r in got)
    assert len(counts) == 800, "every record"
    assert [v for v, c in counts.items() if c > 1] == [], "no record twice"
    handovers = sorted(status["handovers"], key=lambda h: h["from"])
    assert [(h["from"], h["to"], h["mode"]) for h in handovers] == [
        (f"east/{topic}/{p}", f"west/east.{topic}/{p}", "identical") for p in range(2)
    ]
    for h in handovers:
        p = int(h["from"].rsplit("/", 1)[1])
        from_east = [r.offset for r in got if r.cluster_id == "east" and r.partition == p]
        assert h["from_offset"] == h["to_offset"] == (max(from_east) + 1 if from_east else 0)
        assert h["max_repeats"] == 0
        assert h["from_offset"] < 400, "switched mid-stream, with records of the origin still to come"
    # every record came once, in order per partition: the origin's up to the position, the copy's after
    for p in range(2):
        values = [int(r.value.split(b"-")[1]) for r in got if r.partition == p]
        assert values == list(range(400))


def test_timestamp_switchover_loses_nothing_and_repeats_only_the_last_millisecond(
    kafka_clusters: Any, tmp_path: Path
) -> None:
    east, west = kafka_clusters(2)
    got, status, _topic = _switch_mid_stream(east, west, tmp_path, "timestamp")
    counts = Counter(r.value for r in got)
    assert len(counts) == 800, "every record"
    repeated = sorted(v for v, c in counts.items() if c > 1)
    handovers = status["handovers"]
    assert {h["mode"] for h in handovers} <= {"timestamp", "start"} and len(handovers) == 2
    timed = [h for h in handovers if h["mode"] == "timestamp"]
    for h in timed:
        # distinct timestamps per record: the replica starts at the copy of the last returned record
        assert h["to_offset"] == h["from_offset"] - 1, h
    last_returned = sorted(f"{h['from'].rsplit('/', 1)[1]}-{h['from_offset'] - 1}".encode() for h in timed)
    assert repeated == last_returned, (repeated, handovers)
    assert all(c <= 2 for c in counts.values())


# ------------------------------------------------------------------------------------------ run()


def _switch_mid_run(
    east: Cluster,
    west: Cluster,
    tmp_path: Path,
    offsets: str,
    runtime: Runtime,
    partitions: int = 2,
    n: int = 400,
) -> tuple[list[Row], dict[str, float]]:
    """``_switch_mid_stream`` on ``run()``: a handler that takes 50 ms a batch (batches of the origin wait in
    the workers' hand-offs), the switch after about a third; returns what the handlers wrote and the
    handovers counted by mode (the run's registry)."""
    topic, copy = _topics(east, west, partitions)
    _copy(east, west, topic, copy, partitions, 0, n)
    path = write_metadata_file(
        tmp_path / "streams.yaml", _streams(east, west, topic, copy, offsets, origin=True)
    )
    out, registry, control = tmp_path / "out", CollectorRegistry(), RunControl()

    def handovers() -> dict[str, float]:
        samples = [
            (s.labels["mode"], s.value)
            for family in registry.collect()
            for s in family.samples
            if s.name == "multicluster_source_handovers_total"
        ]
        return {mode: value for mode, value in samples if value}

    run = BackgroundRun(
        _source(path),
        FileSink(out, delay_s=0.05),
        2,
        runtime=runtime.name,
        control=control,
        registry=registry,
        **runtime.options,
    )
    try:
        assert wait_for(lambda: len(sink_rows(out)) >= partitions * n // 3, 60), "the run did not start"
        assert {r[0] for r in sink_rows(out)} == {east.cluster_id}, "the copy is not read while the origin is"
        write_metadata_file(path, _streams(east, west, topic, copy, offsets, origin=False))
        assert wait_for(lambda: sum(handovers().values()) == partitions, 30), handovers()
        wanted = {f"{p}-{i}" for p in range(partitions) for i in range(n)}
        assert wait_for(lambda: wanted <= {r[4] for r in sink_rows(out)}, 90), "not every record came"
        time.sleep(1.0)  # nothing more may come
        counted = handovers()  # the run's metrics leave the registry when it ends
    finally:
        control.stop()
        run.join()
    return sink_rows(out), counted


def _last_from_origin(rows: list[Row], east: Cluster) -> dict[int, str]:
    """Partition -> the value of the last record of the origin a handler returned from."""
    last: dict[int, int] = {}
    for cluster, _topic, partition, offset, _value in rows:
        if cluster == east.cluster_id:
            last[partition] = max(offset, last.get(partition, -1))
    return {p: f"{p}-{offset}" for p, offset in last.items()}


def test_identical_switchover_on_run_loses_and_repeats_nothing(
    kafka_clusters: Any, runtime: Runtime, tmp_path: Path
) -> None:
    east, west = kafka_clusters(2)
    rows, handovers = _switch_mid_run(east, west, tmp_path, "identical", runtime)
    counts = Counter(r[4] for r in rows)
    assert len(counts) == 800, "every record"
    assert [v for v, c in counts.items() if c > 1] == [], "no record twice"
    assert handovers == {"identical": 2}
    for p in range(2):
        from_east = sorted(r[3] for r in rows if r[0] == east.cluster_id and r[2] == p)
        from_west = sorted(r[3] for r in rows if r[0] == west.cluster_id and r[2] == p)
        assert from_east + from_west == list(range(400)), "the origin's up to the position, the copy's after"
        assert from_east and len(from_east) < 400, (
            "switched mid-stream, with records of the origin still to come"
        )


def test_timestamp_switchover_on_run_repeats_only_the_last_millisecond(
    kafka_clusters: Any, runtime: Runtime, tmp_path: Path
) -> None:
    east, west = kafka_clusters(2)
    rows, handovers = _switch_mid_run(east, west, tmp_path, "timestamp", runtime)
    counts = Counter(r[4] for r in rows)
    assert len(counts) == 800, "every record"
    assert set(handovers) <= {"timestamp", "start"} and sum(handovers.values()) == 2, handovers
    # distinct timestamps per record: each replica split starts at the copy of the last returned record
    repeated = sorted(v for v, c in counts.items() if c > 1)
    assert repeated == sorted(_last_from_origin(rows, east).values()), (repeated, handovers)
    assert all(c <= 2 for c in counts.values())


# ---------------------------------------------------------------------------------------- kill -9


def _lines(path: Path) -> list[tuple[str, int, bytes]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        split, offset, value = line.split(" ", 2)
        out.append((split, int(offset), ast.literal_eval(value)))
    return out


def _start_job(metadata: Path, ckpt: Path, out: Path, group: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open(out.with_suffix(".log"), "ab") as log:
        return subprocess.Popen(
            [sys.executable, str(JOB), str(metadata), str(ckpt), str(out), group],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


def _pending_in_newest_checkpoint(ckpt: Path) -> bool:
    files = sorted(ckpt.glob("chk-*.json"))
    if not files:
        return False
    try:
        state = json.loads(files[-1].read_text())["enumerator"]
    except (ValueError, KeyError):
        return False
    return bool((state.get("replicas") or {}).get("pending"))


def test_kill_9_while_a_handover_waits_then_restart_loses_and_repeats_nothing(
    kafka_clusters: Any, tmp_path: Path
) -> None:
    east, west = kafka_clusters(2)
    topic, copy = _topics(east, west, 2)
    for p in range(2):  # the origin has 300 records a partition, the copy only the first 100 so far
        _write(east, topic, p, 0, 300)
        _write(west, copy, p, 0, 100)
    metadata = write_metadata_file(
        tmp_path / "streams.yaml", _streams(east, west, topic, copy, "identical", origin=True)
    )
    ckpt, out1, out2 = tmp_path / "ckpt", tmp_path / "run1.txt", tmp_path / "run2.txt"
    group = f"g-{uuid.uuid4().hex[:8]}"
    job = _start_job(metadata, ckpt, out1, group)
    try:
        assert wait_for(lambda: len(_lines(out1)) >= 600, 60), out1.with_suffix(".log").read_text()[-3000:]
        write_metadata_file(metadata, _streams(east, west, topic, copy, "identical", origin=False))
        # position 300 > the copy's end 100: the translation waits for the copy; a checkpoint holds it
        assert wait_for(lambda: _pending_in_newest_checkpoint(ckpt), 30), out1.with_suffix(
            ".log"
        ).read_text()[-3000:]
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait(30)
    first = _lines(out1)
    assert {s.split("/")[0] for s, _o, _v in first} == {"east"}
    for p in range(2):  # the copy catches up, and more records come after the switch
        _write(west, copy, p, 100, 400)
    job = _start_job(metadata, ckpt, out2, group)
    try:
        assert wait_for(lambda: len(_lines(out2)) >= 200, 90), out2.with_suffix(".log").read_text()[-3000:]
        time.sleep(1.0)  # nothing more may come
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait(30)
    second = _lines(out2)
    assert {s.split("/")[0] for s, _o, _v in second} == {"west"}
    counts = Counter(v for _s, _o, v in first + second)
    assert set(counts) == {f"{p}-{i}".encode() for p in range(2) for i in range(400)}, "nothing lost"
    assert [v for v, c in counts.items() if c > 1] == [], "nothing repeated"
    assert sorted(o for s, o, _v in second if s.endswith("/0"))[0] == 300


# ---------------------------------------------------------------------------------------- describe


def test_describe_group_shows_what_a_handover_would_start_at(kafka_clusters: Any, tmp_path: Path) -> None:
    east, west = kafka_clusters(2)
    topic, copy = _topics(east, west, 2)
    _copy(east, west, topic, copy, 2, 0, 50)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = east.consumer(**{"group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, 0, 20), TopicPartition(topic, 1, 35)], asynchronous=False
        )
    finally:
        consumer.close()
    results = {}
    for offsets in ("identical", "timestamp"):
        path = write_metadata_file(
            tmp_path / f"{offsets}.yaml", _streams(east, west, topic, copy, offsets, origin=True)
        )
        args = ["describe", "--metadata", str(path), "--group", group, "--json"]
        done = subprocess.run(
            [sys.executable, "-m", "multicluster_source", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
        )
        assert done.returncode == 0, done.stderr
        results[offsets] = json.loads(done.stdout)["streams"]["orders"]["handovers"]
        text = subprocess.run(
            [sys.executable, "-m", "multicluster_source", *args[:-1]],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
        )
        assert f"handover east/{topic}/0@20 -> west/{copy}/0@" in text.stdout, text.stdout
    assert [
        (h["from"], h["to"], h["from_offset"], h["to_offset"], h["mode"]) for h in results["identical"]
    ] == [
        (f"east/{topic}/0", f"west/{copy}/0", 20, 20, "identical"),
        (f"east/{topic}/1", f"west/{copy}/1", 35, 35, "identical"),
    ]
    # the timestamp of the last received record (offset 19, 34) is found again on the copy
    assert [(h["to_offset"], h["mode"]) for h in results["timestamp"]] == [
        (19, "timestamp"),
        (34, "timestamp"),
    ]


# ---------------------------------------------------------------------------------------- failover


def test_unreachable_origin_fails_over_by_itself_without_loss(
    fresh_cluster: Any, kafka_cluster: Cluster, tmp_path: Path
) -> None:
    """``replica.failover.unreachable.ms``: kill -9 of the origin's broker mid-stream; the source fails over
    to the copy by itself and translates the positions it had delivered (identical: exactly)."""
    origin, replica = fresh_cluster("dr-origin"), kafka_cluster
    topic, copy = _topics(origin, replica, 2)
    _copy(origin, replica, topic, copy, 2, 0, 300)
    path = write_metadata_file(
        tmp_path / "streams.yaml", _streams(origin, replica, topic, copy, "identical", origin=True)
    )
    got: list[SourceRecord] = []
    small_fetches = {
        "queued.min.messages": "20",
        "max.partition.fetch.bytes": "2048",
    }  # mid-stream at the kill
    source = _source(path, **{"replica.failover.unreachable.ms": "2000"}, **small_fetches)
    with source.open(parallelism=1) as stream:
        deadline = time.monotonic() + 60
        while len(got) < 200 and time.monotonic() < deadline:
            got.extend(stream.poll(timeout=0.2, max_records=7))
        origin.stop_node(0, graceful=False)
        for p in range(2):  # what the copy had beyond what the origin could still hand out
            _write(replica, copy, p, 300, 400)
        wanted = {f"{p}-{i}".encode() for p in range(2) for i in range(400)}
        deadline = time.monotonic() + 120
        while not wanted <= {r.value for r in got} and time.monotonic() < deadline:
            got.extend(stream.poll(timeout=0.2, max_records=7))
        got.extend(stream.poll(timeout=1.0))
        status = stream.status()
    counts = Counter(r.value for r in got)
    assert set(counts) == wanted, "nothing lost"
    assert [v for v, c in counts.items() if c > 1] == [], "nothing twice"
    handovers = status["handovers"]
    assert {h["mode"] for h in handovers} == {"identical"} and len(handovers) == 2, handovers
    for h in handovers:  # from the positions delivered when it failed over
        p = int(h["from"].rsplit("/", 1)[1])
        from_origin = [r.offset for r in got if r.cluster_id == origin.cluster_id and r.partition == p]
        assert h["from_offset"] == h["to_offset"] == max(from_origin, default=-1) + 1
    assert min(h["from_offset"] for h in handovers) < 300, "failed over mid-stream"


# ------------------------------------------------------------------------------- exactly-once sink


def _sink_job(source: MultiClusterKafkaSource, sink: Any, out: str, stop_after: int | None) -> int:
    """Poll and write ``out:<value>`` through the sink until ``stop_after`` records (or 3 s without any)."""
    handled = 0
    with source.open(sink=sink, checkpoint_interval=0.2) as stream:
        last = time.monotonic()
        while time.monotonic() - last < 3.0 and (stop_after is None or handled < stop_after):
            wanted = 7 if stop_after is None else min(7, stop_after - handled)  # never past stop_after
            for record in stream.poll(timeout=0.2, max_records=wanted):
                stream.produce(out, value=b"out:" + (record.value or b""))
                handled += 1
                last = time.monotonic()
    return handled


@pytest.mark.parametrize("when", ["while-reading", "while-down"])
def test_a_replica_handover_under_an_exactly_once_sink_writes_each_result_once(
    kafka_clusters: Any, tmp_path: Path, when: str
) -> None:
    """An identical copy takes over from its origin, during a run or while the job is down (no checkpoint
    directory: the handover starts from the position the positions topic holds for the origin split): a
    read_committed reader of the output sees each record's result once."""
    from harness.eos import read_output
    from multicluster_source import ExactlyOnceKafkaSink

    east, west, central = kafka_clusters(3)
    topic, copy = _topics(east, west, 2)
    _copy(east, west, topic, copy, 2, 0, 300)
    path = write_metadata_file(
        tmp_path / "streams.yaml", _streams(east, west, topic, copy, "identical", origin=True)
    )
    source = _source(path)
    out = central.create_topic("replica-eos-out", partitions=1)
    name = f"replica-eos-{uuid.uuid4().hex[:6]}"
    sink = ExactlyOnceKafkaSink(
        {"bootstrap.servers": central.bootstrap_servers}, transactional_id=name, positions_topic=f"{name}.pos"
    )
    if when == "while-reading":
        with source.open(sink=sink, checkpoint_interval=0.2) as stream:
            handled = 0
            while handled < 200:
                for record in stream.poll(timeout=0.2, max_records=7):
                    stream.produce(out, value=b"out:" + (record.value or b""))
                    handled += 1
            write_metadata_file(path, _streams(east, west, topic, copy, "identical", origin=False))
            last = time.monotonic()
            while time.monotonic() - last < 3.0:
                for record in stream.poll(timeout=0.2, max_records=7):
                    stream.produce(out, value=b"out:" + (record.value or b""))
                    last = time.monotonic()
            handovers = stream.status()["handovers"]
    else:
        assert _sink_job(source, sink, out, 200) == 200
        write_metadata_file(path, _streams(east, west, topic, copy, "identical", origin=False))
        with source.open(sink=sink, checkpoint_interval=0.2) as stream:
            last = time.monotonic()
            while time.monotonic() - last < 3.0:
                for record in stream.poll(timeout=0.2, max_records=7):
                    stream.produce(out, value=b"out:" + (record.value or b""))
                    last = time.monotonic()
            handovers = stream.status()["handovers"]
    assert {h["mode"] for h in handovers} == {"identical"} and len(handovers) == 2, handovers
    results = Counter(v.decode() for v in read_output(central, out))
    assert results == Counter(f"out:{p}-{i}" for p in range(2) for i in range(300))


def test_a_replica_handover_under_a_push_run_with_a_sink_writes_each_result_once(
    kafka_clusters: Any, tmp_path: Path
) -> None:
    """``run(..., sink=...)`` with two workers: the origin's splits are fenced at their workers, whose answer
    waits for the commit of what their handlers returned; the copy starts there: each result once."""
    from harness.eos import EchoResults, read_output
    from multicluster_source import ExactlyOnceKafkaSink

    east, west, central = kafka_clusters(3)
    topic, copy = _topics(east, west, 2)
    _copy(east, west, topic, copy, 2, 0, 300)
    path = write_metadata_file(
        tmp_path / "streams.yaml", _streams(east, west, topic, copy, "identical", origin=True)
    )
    out = central.create_topic("replica-push-eos-out", partitions=1)
    name = f"replica-push-eos-{uuid.uuid4().hex[:6]}"
    sink = ExactlyOnceKafkaSink(
        {"bootstrap.servers": central.bootstrap_servers}, transactional_id=name, positions_topic=f"{name}.pos"
    )
    registry, control = CollectorRegistry(), RunControl()
    run = BackgroundRun(
        _source(path),
        EchoResults(out, delay_s=0.05),
        2,
        sink=sink,
        checkpoint_interval=0.3,
        control=control,
        registry=registry,
    )

    def handovers() -> float:
        return sum(
            s.value
            for family in registry.collect()
            for s in family.samples
            if s.name == "multicluster_source_handovers_total"
        )

    try:
        assert wait_for(lambda: control.records >= 150 or not run.alive, 60), "the run did not start"
        write_metadata_file(path, _streams(east, west, topic, copy, "identical", origin=False))
        assert wait_for(lambda: handovers() == 2 or not run.alive, 30), handovers()
        assert wait_for(lambda: control.records >= 600 or not run.alive, 60), control.records
        time.sleep(1.0)  # nothing more may come
    finally:
        control.stop()
        run.join()
    results = Counter(v.decode() for v in read_output(central, out))
    assert results == Counter(f"out:{p}-{i}" for p in range(2) for i in range(300))
    assert control.records == 600
