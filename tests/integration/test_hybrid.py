"""The hybrid source on real Kafka: an in-memory archive (or a bounded Kafka source) then live clusters.

- the handover is exact on two clusters while producers keep writing; a split the archive never saw starts
  at the live source's own starting offsets (explicit offsets here, to tell them from earliest);
- a bounded Kafka stage hands over to the live source of the same cluster;
- an archive that ends before the cluster's retention start fails naming the split, or with
  ``gap_policy="warn"`` goes on from the earliest offset;
- ``run()`` delegates the live stage to the source's own run;
- ``kill -9`` of a job process at each step of the switch, then a restart: nothing lost;
- ``open_async`` and ``open``: a periodic checkpoint in the live stage, captured by the due ``poll``,
  restores exactly.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from harness.archive import LogRecord, write_archive
from harness.cluster import Cluster
from harness.runtimes import FileSink, positions, sink_rows
from harness.scenario import wait_for
from multicluster_source import (
    ClusterMetadata,
    HybridSource,
    KafkaArchiveSource,
    KafkaStream,
    MultiClusterKafkaSource,
    OffsetsInitializer,
    SourceRecord,
    StaticMetadataService,
)
from multicluster_source.exceptions import HandoverGapError
from multicluster_source.hybrid._periodic import stage_busy
from multicluster_source.hybrid._state import HybridStateStore
from multicluster_source.testing import InMemoryArchiveStage

pytestmark = pytest.mark.integration

JOB = Path(__file__).parent / "jobs" / "hybrid_job.py"
ROOT = Path(__file__).resolve().parents[2]


def _source(
    clusters: dict[str, tuple[Cluster, str]],
    starting: OffsetsInitializer | None = None,
    bounded: OffsetsInitializer | None = None,
    name: str = "live",
) -> MultiClusterKafkaSource:
    metadata = {
        cid: ClusterMetadata(cid, c.bootstrap_servers, frozenset({t})) for cid, (c, t) in clusters.items()
    }
    builder = (
        MultiClusterKafkaSource.builder()
        .set_name(name)
        .set_kafka_metadata_service(StaticMetadataService([KafkaStream("s", metadata)]))
        .set_stream_ids(["s"])
        .set_starting_offsets(starting or OffsetsInitializer.earliest())
    )
    if bounded is not None:
        builder = builder.set_bounded(bounded)
    return builder.build()


def _values(n: int, start: int = 0) -> list[bytes]:
    return [f"v{i}".encode() for i in range(start, start + n)]


def _until(stream: Any, got: list[SourceRecord], done: Callable[[], bool], timeout: float = 60) -> bool:
    """Poll ``stream`` into ``got`` until ``done()``; False after ``timeout`` seconds."""

    def step() -> bool:
        got.extend(stream.poll(0.1))
        return done()

    return wait_for(step, timeout)


def _key(r: SourceRecord) -> tuple[str, int, int]:
    return (r.cluster_id, r.partition, r.offset)


def test_exact_handover_on_two_clusters_while_producing(kafka_clusters, tmp_path: Path) -> None:
    east, west = kafka_clusters(2)
    te, tw = east.create_topic("hy", partitions=2), west.create_topic("hy", partitions=2)
    for cluster, topic in ((east, te), (west, tw)):
        for p in (0, 1):
            cluster.produce(topic, _values(200), partition=p)
    # archived: the first 120 records of east/0, east/1, west/0; west/1 is not in the archive
    archive = InMemoryArchiveStage(
        {f"east/{te}/0": _values(120), f"east/{te}/1": _values(120), f"west/{tw}/0": _values(120)}
    )
    live = _source(
        {"east": (east, te), "west": (west, tw)},
        starting=OffsetsInitializer.offsets({f"west/{tw}/1": 30}, reset="earliest"),
    )
    hybrid = HybridSource.builder(archive).add_source(live).build()
    stop = threading.Event()
    produced = {"n": 200}

    def produce() -> None:
        while not stop.is_set() and produced["n"] < 1000:
            for cluster, topic in ((east, te), (west, tw)):
                for p in (0, 1):
                    cluster.produce(topic, _values(20, produced["n"]), partition=p)
            produced["n"] += 20

    producer = threading.Thread(target=produce, name="mcs-test-producer")
    got: list[SourceRecord] = []
    with hybrid.open(parallelism=2, checkpoint_dir=str(tmp_path / "ckpt")) as stream:
        producer.start()
        try:
            assert _until(stream, got, lambda: stream.stage == 1)
            assert _until(stream, got, lambda: produced["n"] >= 400)
        finally:
            stop.set()
            producer.join(60)
        total = produced["n"]
        expected = {(cid, p, o) for cid in ("east", "west") for p in (0, 1) for o in range(total)}
        expected -= {("west", 1, o) for o in range(30)}
        assert _until(stream, got, lambda: expected <= {_key(r) for r in got}, 90)
        status = stream.status()
    counts = Counter(_key(r) for r in got)
    assert {k for k, n in counts.items() if n > 1} == set(), "a record came twice"
    assert set(counts) == expected
    assert all(r.value == f"v{r.offset}".encode() for r in got)
    h = status["hybrid"]
    assert h["stage"] == 1 and h["handover"]["positions"] == {
        f"east/{te}/0": 120,
        f"east/{te}/1": 120,
        f"west/{tw}/0": 120,
    }
    assert h["splits"][f"west/{tw}/1"] == {"phase": "live", "start": "start"}
    assert h["splits"][f"east/{te}/0"] == {"phase": "live", "start": "exact"}
    assert status["clusters"].keys() == {"east", "west"}


def test_bounded_kafka_stage_then_live(kafka_cluster: Cluster) -> None:
    topic = kafka_cluster.create_topic("hyb", partitions=1)
    kafka_cluster.produce(topic, _values(100), partition=0)
    old = _source(
        {"c": (kafka_cluster, topic)}, bounded=OffsetsInitializer.offsets({f"{topic}/0": 40}), name="old"
    )
    live = _source({"c": (kafka_cluster, topic)})
    got: list[SourceRecord] = []
    stages: list[int] = []
    with HybridSource.builder(old).add_source(live).build().open() as stream:

        def more() -> bool:
            records = stream.poll(0.2)
            got.extend(records)
            stages.extend(stream.stage for _ in records)
            return len(got) >= 100

        assert wait_for(more, 60)
        assert stream.status()["hybrid"]["handover"]["positions"] == {f"c/{topic}/0": 40}
    assert [r.offset for r in got] == list(range(100))
    assert stages == [0] * 40 + [1] * 60


def test_archive_ending_before_retention_is_a_gap(kafka_cluster: Cluster) -> None:
    if kafka_cluster.kind == "tansu":
        pytest.skip("tansu does not delete records below an offset")
    topic = kafka_cluster.create_topic("gap", partitions=1)
    kafka_cluster.produce(topic, _values(100), partition=0)
    futures = kafka_cluster.admin().delete_records([TopicPartition(topic, 0, 50)])
    for future in futures.values():
        future.result(30)
    archive = InMemoryArchiveStage({f"c/{topic}/0": _values(30)})
    live = _source({"c": (kafka_cluster, topic)})
    gap = rf"split c/{topic}/0: .* ends at offset 30 .* earliest offset is 50"
    hybrid = HybridSource.builder(archive).add_source(live).build()
    with hybrid.open() as stream, pytest.raises(HandoverGapError, match=gap):
        _until(stream, [], lambda: False)
    got: list[SourceRecord] = []
    warned = HybridSource.builder(archive).add_source(live).set_gap_policy("warn").build()
    with warned.open() as stream:
        assert _until(stream, got, lambda: len(got) >= 80)
    assert [r.offset for r in got] == list(range(30)) + list(range(50, 100))


def test_run_hands_the_live_stage_to_the_sources_run(kafka_cluster: Cluster, tmp_path: Path) -> None:
    topic = kafka_cluster.create_topic("hyr", partitions=2)
    for p in (0, 1):
        kafka_cluster.produce(topic, _values(60), partition=p)
    archive = InMemoryArchiveStage({f"c/{topic}/0": _values(25)})
    live = _source({"c": (kafka_cluster, topic)}, bounded=OffsetsInitializer.latest())
    got: list[SourceRecord] = []
    lock = threading.Lock()

    def handler(records: list[SourceRecord]) -> None:
        with lock:
            got.extend(records)

    hybrid = HybridSource.builder(archive).add_source(live).build()
    result = hybrid.run(handler, 2, checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_interval=0.2)
    assert result.finished and result.records == 120
    assert sorted(_key(r) for r in got) == sorted(("c", p, o) for p in (0, 1) for o in range(60))


def _lines(path: Path) -> list[tuple[int, int, int]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        stage, rest = line.split(" ")
        p, o = rest.split(":")
        out.append((int(stage), int(p), int(o)))
    return out


def _start(
    cluster: Cluster, topic: str, ckpt: Path, out: Path, pause: str | None, loop: str = "poll"
) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), LOOP=loop)
    env.pop("PAUSE_AT", None)
    if pause is not None:
        env["PAUSE_AT"] = pause
    with open(out.with_suffix(".log"), "ab") as log:
        return subprocess.Popen(
            [sys.executable, str(JOB), cluster.bootstrap_servers, topic, "2", "300", str(ckpt), str(out)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


@pytest.mark.parametrize("step", ["finished", "written", "closed", "opened"])
def test_kill_9_at_each_step_of_the_switch(kafka_cluster: Cluster, tmp_path: Path, step: str) -> None:
    topic = kafka_cluster.create_topic("hyk", partitions=2)
    for p in (0, 1):
        kafka_cluster.produce(topic, _values(500), partition=p)
    produced = {(p, o) for p in (0, 1) for o in range(500)}
    ckpt, out1, out2 = tmp_path / "ckpt", tmp_path / "run1.txt", tmp_path / "run2.txt"
    paused = Path(str(out1) + ".paused")
    job = _start(kafka_cluster, topic, ckpt, out1, step)
    try:
        assert wait_for(paused.exists, 60), out1.with_suffix(".log").read_text()[-3000:]
    finally:
        os.kill(job.pid, signal.SIGKILL)
        job.wait(30)
    first = _lines(out1)
    assert {s for s, _, _ in first} <= {0, 1}
    job = _start(kafka_cluster, topic, ckpt, out2, None)
    try:
        assert wait_for(lambda: produced <= {(p, o) for _, p, o in first + _lines(out2)}, 60), (
            "records were lost: " + out2.with_suffix(".log").read_text()[-3000:]
        )
    finally:
        job.terminate()
        job.wait(30)
    second = _lines(out2)
    # the switch was durable from "written" on: the restart goes on in the live stage, archive not re-read
    if step != "finished":
        assert all(stage == 1 for stage, _, _ in second)
        assert all(o >= 300 for _, _, o in second), "the live stage did not start at the handover"
    live = Counter((p, o) for s, p, o in first + second if s == 1)
    assert not [k for k, n in live.items() if n > 1], "a live record came twice"
    assert all(o >= 300 for p, o in live), "the live stage re-read archived offsets"


def test_for_loop_checkpoint_across_the_switch_then_restore(kafka_cluster: Cluster, tmp_path: Path) -> None:
    """The ``for`` loop uses the Kafka stage's own iterator: a checkpoint in the loop covers exactly the
    records the loop got, in the archive and in the live stage; a restore goes on right after them."""
    topic = kafka_cluster.create_topic("hyi", partitions=2)
    for p in (0, 1):
        kafka_cluster.produce(topic, _values(150), partition=p)
    archive = InMemoryArchiveStage({f"c/{topic}/{p}": _values(50) for p in (0, 1)})
    live = _source({"c": (kafka_cluster, topic)}, bounded=OffsetsInitializer.latest())
    hybrid = HybridSource.builder(archive).add_source(live).build()
    ckpt = str(tmp_path / "ckpt")
    first: list[SourceRecord] = []
    with hybrid.open(parallelism=2, checkpoint_dir=ckpt) as stream:
        for record in stream:
            first.append(record)
            if len(first) in (60, 170):
                stream.checkpoint()  # once in the archive, once in the live stage
            if len(first) == 190:
                break
    with hybrid.open(parallelism=2, checkpoint_dir=ckpt) as stream:
        second = list(stream)
    covered = {_key(r) for r in first[:170]}
    assert {_key(r) for r in first} | {_key(r) for r in second} == {
        ("c", p, o) for p in (0, 1) for o in range(150)
    }
    assert not covered & {_key(r) for r in second}
    assert len(second) == 300 - 170


@pytest.mark.parametrize("runtime", ["threads", "processes"])
def test_run_on_a_runtime_with_a_restart(kafka_cluster: Cluster, tmp_path: Path, runtime: str) -> None:
    """The archive on the calling thread, then the live stage on ``runtime``; a second run on the same
    checkpoint directory goes straight to the live stage and reads nothing again."""
    topic = kafka_cluster.create_topic("hyp", partitions=2)
    for p in (0, 1):
        kafka_cluster.produce(topic, _values(80), partition=p)
    archive = InMemoryArchiveStage({f"c/{topic}/{p}": _values(30) for p in (0, 1)})
    live = _source({"c": (kafka_cluster, topic)}, bounded=OffsetsInitializer.latest())
    hybrid = HybridSource.builder(archive).add_source(live).build()
    ckpt = str(tmp_path / "ckpt")
    result = hybrid.run(FileSink(tmp_path / "out"), 2, runtime=runtime, checkpoint_dir=ckpt)
    assert result.finished and result.records == 160 and result.runtime == runtime
    assert positions(sink_rows(tmp_path / "out")) == Counter(
        ("c", topic, p, o) for p in (0, 1) for o in range(80)
    )
    again = hybrid.run(FileSink(tmp_path / "again"), 2, runtime=runtime, checkpoint_dir=ckpt)
    assert again.finished and again.records == 0 and again.restored_from is not None
    assert archive.opened == 1


def test_open_async_archive_then_kafka(kafka_cluster: Cluster, tmp_path: Path) -> None:
    topic = kafka_cluster.create_topic("hya", partitions=1)
    kafka_cluster.produce(topic, _values(60), partition=0)
    archive = InMemoryArchiveStage({f"c/{topic}/0": _values(20)})
    live = _source({"c": (kafka_cluster, topic)}, bounded=OffsetsInitializer.latest())
    hybrid = HybridSource.builder(archive).add_source(live).build()

    async def main() -> list[int]:
        out = []
        async with hybrid.open_async(
            checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_interval=0.05
        ) as stream:
            async for record in stream:
                out.append(record.offset)
            assert stream.status()["hybrid"]["stage"] == 1
        return out

    assert asyncio.run(main()) == list(range(60))


def _archive_then_live(kafka_cluster: Cluster, prefix: str) -> HybridSource:
    """Offsets 0-49 of two partitions in an in-memory archive, then a Kafka stage up to the end of a new
    topic holding 150 records in each (the first 50 of which the archive has)."""
    topic = kafka_cluster.create_topic(prefix, partitions=2)
    for p in (0, 1):
        kafka_cluster.produce(topic, _values(150), partition=p)
    archive = InMemoryArchiveStage({f"c/{topic}/{p}": _values(50) for p in (0, 1)})
    live = _source({"c": (kafka_cluster, topic)}, bounded=OffsetsInitializer.latest())
    hybrid = HybridSource.builder(archive).add_source(live).build()
    return hybrid


def test_open_async_periodic_checkpoint_in_the_live_stage_is_exact(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    """A ``poll`` due for a checkpoint in the Kafka stage only captures it (the source's checkpoint goes to its
    checkpoint thread, the hybrid state is written in the background); the restore goes on right after the
    records returned before that ``poll``, also those returned while it was written come again."""
    hybrid = _archive_then_live(kafka_cluster, "hyp")
    ckpt = tmp_path / "ckpt"

    async def main() -> tuple[list[SourceRecord], list[SourceRecord]]:
        before: list[SourceRecord] = []
        async with hybrid.open_async(2, checkpoint_dir=str(ckpt), checkpoint_interval=3600.0) as stream:
            while len(before) < 170 or stream.stream.stage == 0:
                before += await stream.poll(1.0, 10)
            while stage_busy(stream.stream._reader):  # the enumerator in a change would defer it
                await asyncio.sleep(0.05)
            stream._last_checkpoint = float("-inf")  # due now
            after: list[SourceRecord] = []
            while not after:
                after += await stream.poll(1.0, 10)  # captured the checkpoint of `before`
            after += await stream.poll(1.0, 10)
        return before, after

    before, after = asyncio.run(main())
    _restores_right_after(hybrid, ckpt, before, after)


def test_periodic_checkpoint_in_the_live_stage_is_exact(
    kafka_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``hybrid.open()``: a ``poll`` due for a checkpoint in the Kafka stage only captures it (the source's
    checkpoint goes to its checkpoint thread, the hybrid state to ``mcs-hybrid-checkpoint-<source>``) and
    returns while the hybrid state's write is held; the restore goes on right after the records returned
    before that ``poll``, also those returned while it was written come again."""
    hybrid = _archive_then_live(kafka_cluster, "hys")
    ckpt = tmp_path / "ckpt"
    entered, release, real = threading.Event(), threading.Event(), HybridStateStore.write

    def held_write(store: HybridStateStore, state: Any) -> Path:
        entered.set()
        assert release.wait(60)
        return real(store, state)

    before: list[SourceRecord] = []
    after: list[SourceRecord] = []
    with hybrid.open(2, checkpoint_dir=str(ckpt), checkpoint_interval=3600.0) as stream:
        while len(before) < 170 or stream.stage == 0:
            before += stream.poll(1.0, 10)
        while stage_busy(stream._reader):  # the enumerator in a change would defer it to a later poll
            time.sleep(0.05)
        monkeypatch.setattr(HybridStateStore, "write", held_write)
        stream._last_checkpoint = float("-inf")  # due now
        while not after:
            after += stream.poll(1.0, 10)  # captured the checkpoint of `before`
        assert entered.wait(60) and not release.is_set()  # the poll returned; the write waits
        after += stream.poll(1.0, 10)
        release.set()
    _restores_right_after(hybrid, ckpt, before, after)


def _restores_right_after(
    hybrid: HybridSource, ckpt: Path, before: list[SourceRecord], after: list[SourceRecord]
) -> None:
    """The last hybrid state is the Kafka stage's, and a stream restored from it returns exactly what came
    after ``before`` (150 records in each of 2 partitions of cluster ``c``), ``after`` included."""
    found = HybridStateStore(ckpt).latest()
    assert found is not None and found[0].stage == 1 and found[0].snapshot is not None
    assert found[0].snapshot["kind"] == "kafka"
    with hybrid.open(parallelism=2, checkpoint_dir=str(ckpt)) as again:
        second = list(again)
    assert not {_key(r) for r in before} & {_key(r) for r in second}
    assert {_key(r) for r in after} <= {_key(r) for r in second}
    assert {_key(r) for r in before} | {_key(r) for r in second} == {
        ("c", p, o) for p in (0, 1) for o in range(150)
    }
    assert len(second) == 300 - len(before)


def test_worked_example_from_the_guide_runs(kafka_clusters) -> None:
    """docs/guides/hybrid-backfill.md's worked example: a Kafka Connect archive on disk, then two clusters."""
    east, west = kafka_clusters(2)
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "hybrid_backfill.py"),
            "--bootstrap",
            f"east={east.bootstrap_servers},west={west.bootstrap_servers}",
        ],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "handover: {'exact': 4}" in done.stdout
    assert "missing 0, twice 0, wrong values 0" in done.stdout


def test_parquet_archive_of_a_transactional_topic_hands_over_low_never_skips(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    """A Parquet archive (pyarrow) without an offset field, of a transactional topic: each commit marker
    takes an offset no record has, so offsets estimated from the file name run low; the handover then
    repeats records and skips none."""
    topic = kafka_cluster.create_topic("hytx", partitions=1)
    producer = kafka_cluster.producer(**{"transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    for t in range(4):
        producer.begin_transaction()
        for i in range(t * 10, t * 10 + 10):
            value = {"id": i, "name": f"n{i}", "amount": i * 0.5}
            producer.produce(topic, json.dumps(value).encode(), partition=0)
        producer.commit_transaction(30)
    consumer = kafka_cluster.consumer(**{"group.id": f"g-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    logged: list[LogRecord] = []
    while len(logged) < 40:
        message = consumer.poll(5)
        assert message is not None and message.error() is None
        value = json.loads(message.value() or b"null")
        logged.append(LogRecord(message.offset() or 0, message.timestamp()[1], "k", value))
    consumer.close()
    assert logged[19].offset > 19, "the commit markers must leave gaps"
    write_archive(tmp_path / "topics", topic, 0, logged[:20], fmt="parquet", flush_size=20)
    archive = KafkaArchiveSource({"c": str(tmp_path / "topics")}, format="parquet")
    live = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(
            StaticMetadataService(
                [
                    KafkaStream(
                        "s", {"c": ClusterMetadata("c", kafka_cluster.bootstrap_servers, frozenset({topic}))}
                    )
                ]
            )
        )
        .set_stream_ids(["s"])
        .set_deserializer(lambda raw: json.loads(raw.value or b"null"))
        .set_bounded(OffsetsInitializer.latest())
        .build()
    )
    with (
        HybridSource.builder(archive)
        .add_source(live)
        .build()
        .open(checkpoint_dir=str(tmp_path / "ckpt")) as stream
    ):
        ids = [r.value["id"] for r in stream]
        h = stream.status()["hybrid"]
    assert h["handover"]["modes"] == {"estimated": 1} and h["handover"]["positions"] == {f"c/{topic}/0": 20}
    assert set(ids) == set(range(40)), "a record was skipped"
    assert ids[:20] == list(range(20))
    repeated = [i for i, n in Counter(ids).items() if n > 1]
    assert repeated and all(i < 20 for i in repeated), "only archived records may come again"


def test_timestamp_handover_from_an_archive_without_offsets(kafka_cluster: Cluster) -> None:
    """An archive that knows only times hands over its largest timestamp: the live split starts at the first
    record at or after it (that record comes again), and the split's start shows ``timestamp``."""
    topic = kafka_cluster.create_topic("hyts", partitions=1)
    base = int(time.time() * 1000) - 60_000  # recent: far older records would be up for time retention
    producer = kafka_cluster.producer()
    for i in range(100):
        producer.produce(topic, f"v{i}".encode(), partition=0, timestamp=base + i * 10)
    assert producer.flush(30) == 0
    del producer
    archived = [
        SourceRecord("c", topic, 0, i, base + i * 10, None, f"v{i}".encode(), None) for i in range(50)
    ]
    archive = InMemoryArchiveStage({f"c/{topic}/0": archived}, with_offsets=False)
    live = _source({"c": (kafka_cluster, topic)}, bounded=OffsetsInitializer.latest())
    with HybridSource.builder(archive).add_source(live).build().open() as stream:
        offsets = [r.offset for r in stream]
        h = stream.status()["hybrid"]
    assert offsets == list(range(50)) + list(range(49, 100))
    assert h["handover"]["timestamp_ms"] == base + 490
    assert h["splits"][f"c/{topic}/0"]["start"] == "timestamp"


def test_kill_9_mid_archive_in_the_for_loop(kafka_cluster: Cluster, tmp_path: Path) -> None:
    """The for loop takes the archive in batches and checkpoints inside them: after kill -9 the restart
    re-reads nothing the last checkpoint covered (its snapshot and skip offsets) and loses nothing."""
    topic = kafka_cluster.create_topic("hykf", partitions=2)
    for p in (0, 1):
        kafka_cluster.produce(topic, _values(500), partition=p)
    produced = {(p, o) for p in (0, 1) for o in range(500)}
    ckpt, out1, out2 = tmp_path / "ckpt", tmp_path / "run1.txt", tmp_path / "run2.txt"
    job = _start(kafka_cluster, topic, ckpt, out1, None, loop="for")
    try:
        assert wait_for(lambda: len(_lines(out1)) >= 250 and any(ckpt.glob("hybrid-*.json")), 60), (
            out1.with_suffix(".log").read_text()[-3000:]
        )
    finally:
        os.kill(job.pid, signal.SIGKILL)
        job.wait(30)
    first = _lines(out1)
    newest = json.loads(sorted(ckpt.glob("hybrid-*.json"))[-1].read_text())
    assert newest["stage"] == 0 and len(first) < 600, "the job must be killed in the archive"
    covered = {}
    for split, index in (newest["snapshot"] or {"next": {}})["next"].items():
        covered[int(split.rsplit("/", 1)[1])] = max(index, newest["skip"].get(split, 0))
    assert {(p, o) for _, p, o in first} >= {(p, o) for p, n in covered.items() for o in range(n)}
    job = _start(kafka_cluster, topic, ckpt, out2, None, loop="for")
    try:
        assert wait_for(lambda: produced <= {(p, o) for _, p, o in first + _lines(out2)}, 60), (
            "records were lost: " + out2.with_suffix(".log").read_text()[-3000:]
        )
    finally:
        job.terminate()
        job.wait(30)
    second = _lines(out2)
    again = [(p, o) for _, p, o in second if o < covered.get(p, 0)]
    assert not again, f"records the checkpoint covered came again: {again[:5]}"
    assert len(second) == len({(p, o) for _, p, o in second})
