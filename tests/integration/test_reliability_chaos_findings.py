"""The three findings of the mixed-fault soak (issue 33), each on real Apache Kafka as a user would meet it.

1. A topic removed from the metadata and re-added within the retention time: records fetched before the
   removal and still waiting in the hand-off are not returned after it, and the re-added topic resumes where
   the caller stopped, so no record comes twice in one run.
2. A broker killed under an offset commit: the process does not abort inside the client (the commit path is
   one librdkafka's admin coordinator-request bug does not reach), and what the cluster is owed is committed
   once it is back.
3. ``checkpoint()`` while one cluster is down: it returns within the bounded commit wait, the healthy
   cluster's records keep flowing, and the down cluster gets its offsets when it answers again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import CollectorRegistry

from harness.cluster import Cluster
from harness.processes import end_process
from harness.scenario import builder, cluster_md, drain, settle, stream, wait_for
from multicluster_source import FileMetadataService, SourceRecord
from multicluster_source.testing import write_metadata_file

pytestmark = pytest.mark.integration


def _twice(records: list[SourceRecord], topic: str) -> list[int]:
    counts = Counter(r.offset for r in records if r.topic == topic)
    return sorted(o for o, n in counts.items() if n > 1)


def _two_topics(cluster: Cluster, tmp_path: Path, prefix: str) -> tuple[str, str, Path, Any]:
    """Topics ``a`` and ``b`` of 200 records each in a metadata file, and a source over it that fetches
    batches of 10 (so that several wait in the hand-off)."""
    a = cluster.create_topic(f"{prefix}-a", partitions=1)
    b = cluster.create_topic(f"{prefix}-b", partitions=1)
    cluster.produce(a, [f"a-{i}".encode() for i in range(200)])
    cluster.produce(b, [f"b-{i}".encode() for i in range(200)])
    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream("s", cluster_md(cluster, a, b))])
    source = (
        builder(FileMetadataService(path), stream_ids=["s"])
        .set_property("reader.batch.max.records", "10")
        .build()
    )
    return a, b, path, source


@pytest.mark.parametrize(
    "poll_while_removed", [True, False], ids=["polled-while-removed", "idle-while-removed"]
)
def test_a_topic_removed_and_re_added_returns_no_record_twice(
    kafka_cluster: Cluster, tmp_path: Path, poll_while_removed: bool
) -> None:
    """Issue 33, finding 1: records of ``b`` fetched before its removal wait in the hand-off (the caller is
    idle); none of them is returned while ``b`` is out of the metadata, and after the re-add every record of
    ``b`` comes exactly once (idle while removed: the stale batches are still there when ``b`` resumes)."""
    a, b, path, source = _two_topics(kafka_cluster, tmp_path, "readd")
    both = [stream("s", cluster_md(kafka_cluster, a, b))]
    only_a = [stream("s", cluster_md(kafka_cluster, a))]
    got: list[SourceRecord] = []
    with source.open(parallelism=1) as s:
        # a few records at a time until one of b has come: the rest of what was fetched waits in the hand-off
        deadline = time.monotonic() + 60
        while not any(r.topic == b for r in got) and time.monotonic() < deadline:
            got += s.poll(timeout=0.5, max_records=5)
        assert any(r.topic == b for r in got), "no record of b came"
        time.sleep(2.0)  # the caller is idle: the fetcher fills the hand-off
        returned_before = sum(r.topic == b for r in got)
        write_metadata_file(path, only_a)
        # the enumerator retires b's split (the reader applies it once its fetch thread has room again)
        assert wait_for(lambda: s.status()["metadata"]["retained_splits"] == 1, 15)
        if poll_while_removed:
            after_removal = settle(s, 2.0)
            got += after_removal
            late = [r.offset for r in after_removal if r.topic == b]
            assert late == [], f"{len(late)} records of b fetched before its removal were returned after it"
        write_metadata_file(path, both)
        assert wait_for(lambda: s.status()["metadata"]["retained_splits"] == 0, 15)
        got += drain(s, 0, timeout=60, until=lambda g: sum(r.topic == b for r in got + g) >= 200)
        got += settle(s, 2.0)
    assert returned_before < 200
    assert _twice(got, b) == [], f"{len(_twice(got, b))} records of b returned twice"
    assert sorted(r.offset for r in got if r.topic == b) == list(range(200)), "b must resume, nothing lost"
    assert sorted(r.offset for r in got if r.topic == a) == list(range(200))


def test_run_a_topic_removed_and_re_added_hands_no_record_twice(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    """Finding 1 on the push API: the worker takes its batches through the same delivery as ``poll``, the
    removal's fence reaches it, and batches of ``b`` fetched before the removal that still wait for a slow
    handler are never handed to it, neither while ``b`` is removed nor after it came back."""
    a, b, path, source = _two_topics(kafka_cluster, tmp_path, "run-readd")
    both = [stream("s", cluster_md(kafka_cluster, a, b))]
    handled: list[SourceRecord] = []
    lock = threading.Lock()
    slow = threading.Event()
    slow.set()
    stop = threading.Event()

    def handler(records: list[SourceRecord]) -> None:
        if slow.is_set():
            time.sleep(0.2)  # the hand-off fills while the handler is busy
        with lock:
            handled.extend(records)

    def count(topic: str) -> int:
        with lock:
            return sum(r.topic == topic for r in handled)

    runner = threading.Thread(target=lambda: source.run(handler, 1, stop_event=stop), name="test-run")
    runner.start()
    try:
        assert wait_for(lambda: count(b) >= 1, 60)
        write_metadata_file(path, [stream("s", cluster_md(kafka_cluster, a))])
        time.sleep(1.0)  # removed: what the worker still holds of b must not reach the handler
        at_removal = count(b)
        time.sleep(2.0)
        assert count(b) <= at_removal + 10, "more than the batch the handler was in came after the removal"
        write_metadata_file(path, both)
        slow.clear()
        assert wait_for(lambda: count(b) >= 200 and count(a) >= 200, 60)
        time.sleep(1.0)
    finally:
        stop.set()
        runner.join(60)
    with lock:
        offsets_b = [r.offset for r in handled if r.topic == b]
    assert _twice(handled, b) == [], f"{len(_twice(handled, b))} records of b handled twice"
    assert sorted(offsets_b) == list(range(200))


JOB = Path(__file__).parent / "jobs" / "two_cluster_job.py"
ROOT = Path(__file__).resolve().parents[2]


def _delivered(out: Path) -> Counter[tuple[str, int, int]]:
    if not out.exists():
        return Counter()
    rows = (line.split(":") for line in out.read_text().splitlines())
    return Counter((c, int(p), int(o)) for c, p, o in rows)


def _committed(cluster: Cluster, group: str, topic: str) -> dict[int, int]:
    """The group's committed offset of partition 0, or {} while the cluster cannot say. Asked with a new
    consumer each time (the harness's shared admin client may not recover from its broker's restart)."""
    consumer = Consumer(cluster.client_config(**{"group.id": group, "socket.timeout.ms": 5000}))
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return {0: tp.offset} if tp.error is None and tp.offset >= 0 else {}
    except Exception:  # the coordinator loading, or the broker down
        return {}
    finally:
        consumer.close()


def _coordinator_ready(cluster: Cluster, topic: str) -> bool:
    """Whether the cluster's group coordinator stores a commit now (a fresh cluster's loads first)."""
    consumer = Consumer(cluster.client_config(**{"group.id": "warm-up", "socket.timeout.ms": 5000}))
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        return True
    except Exception:
        return False
    finally:
        consumer.close()


def _start_job(tmp_path: Path, group: str, *parts: tuple[Cluster, str]) -> subprocess.Popen[bytes]:
    specs = [f"{c.cluster_id}={c.bootstrap_servers}/{t}" for c, t in parts]
    with open(tmp_path / "job.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, str(JOB), str(tmp_path / "ckpt"), str(tmp_path / "out.txt"), group, *specs],
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


def test_a_broker_killed_under_offset_commits_does_not_abort_the_process(
    kafka_cluster: Cluster, fresh_cluster, tmp_path: Path
) -> None:
    """Issue 33, finding 2: ``kill -9`` of one cluster's broker while checkpoints commit offsets to it, then
    the broker comes back: the job process lives on (librdkafka 2.16's admin coordinator-request path
    aborted it with ``eonce->refcnt > 0``), keeps delivering the other cluster's records, reads the
    restarted cluster again, and that cluster gets the offsets it is owed."""
    flaky: Cluster = fresh_cluster("flaky")
    ts = kafka_cluster.create_topic("commit-steady", partitions=1)
    tf = flaky.create_topic("commit-flaky", partitions=1)
    kafka_cluster.produce(ts, [f"s-{i}".encode() for i in range(100)])
    flaky.produce(tf, [f"f-{i}".encode() for i in range(100)])
    group = f"commit-fault-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "out.txt"
    job = _start_job(tmp_path, group, (kafka_cluster, ts), (flaky, tf))
    log = tmp_path / "job.log"
    try:
        assert wait_for(lambda: sum(_delivered(out).values()) >= 200, 60), log.read_text()[-3000:]
        assert wait_for(lambda: _committed(flaky, group, tf) == {0: 100}, 30)
        flaky.stop_node(0, graceful=False)
        # checkpoints go on every 0.5 s: their commits to flaky hang, time out (5 s) and are retried
        for i in range(24):
            kafka_cluster.produce(ts, [f"s-down-{i}".encode()])
            time.sleep(0.5)
            assert job.poll() is None, f"the job died (exit {job.returncode}): {log.read_text()[-3000:]}"
        assert wait_for(lambda: _delivered(out)[(kafka_cluster.cluster_id, 0, 123)] == 1, 30), (
            "the healthy cluster stopped delivering while the other was down"
        )
        flaky.start_node(0)
        flaky.produce(tf, [f"f-after-{i}".encode() for i in range(50)])
        for _ in range(40):  # the admin client's connection came back under its pending commit here
            time.sleep(0.5)
            assert job.poll() is None, f"the job died (exit {job.returncode}): {log.read_text()[-3000:]}"
        assert wait_for(lambda: _delivered(out)[(flaky.cluster_id, 0, 149)] == 1, 60)
        assert wait_for(lambda: _committed(flaky, group, tf) == {0: 150}, 60), (
            "the restarted cluster must get the offsets it is owed"
        )
        assert job.poll() is None, f"the job died (exit {job.returncode}): {log.read_text()[-3000:]}"
    finally:
        end_process(job, graceful=False)
    delivered = _delivered(out)
    assert max(delivered.values()) == 1, "no record twice in one run"
    assert {k for k in delivered if k[0] == flaky.cluster_id} == {
        (flaky.cluster_id, 0, o) for o in range(150)
    }
    assert {k for k in delivered if k[0] == kafka_cluster.cluster_id} == {
        (kafka_cluster.cluster_id, 0, o) for o in range(124)
    }


def test_checkpoint_does_not_wait_for_a_cluster_that_is_down(
    kafka_cluster: Cluster, fresh_cluster, tmp_path: Path
) -> None:
    """Issue 33, finding 3 (API section 4 from 0.4): with one cluster down, ``checkpoint()`` returns while it
    is still down (before, it waited 30 s for that cluster's commit while the healthy cluster's records piled
    up), the healthy cluster's offsets are committed by it, and the down cluster gets what it is owed once it
    is back, without another checkpoint."""
    down: Cluster = fresh_cluster("down")
    ts = kafka_cluster.create_topic("ckpt-steady", partitions=1)
    td = down.create_topic("ckpt-down", partitions=1)
    kafka_cluster.produce(ts, [f"s-{i}".encode() for i in range(10)])
    down.produce(td, [f"d-{i}".encode() for i in range(10)])
    assert wait_for(lambda: _coordinator_ready(down, td), 60)
    group = f"ckpt-wait-{uuid.uuid4().hex[:8]}"
    md = [stream("s", cluster_md(kafka_cluster, ts), cluster_md(down, td))]
    source = (
        builder(md, group=group)
        .set_properties({"socket.timeout.ms": "5000", "reconnect.backoff.max.ms": "1000"})
        .build()
    )
    with source.open(parallelism=2, checkpoint_dir=str(tmp_path / "ckpt")) as s:
        got = drain(s, 20)
        assert len(got) == 20
        # a fresh cluster's coordinator may still be loading: checkpoint until both clusters hold the offsets
        assert wait_for(
            lambda: (
                s.checkpoint() > 0
                and _committed(down, group, td) == {0: 10}
                and _committed(kafka_cluster, group, ts) == {0: 10}
            ),
            90,
        )
        down.stop_node(0, graceful=False)
        kafka_cluster.produce(ts, [f"s-more-{i}".encode() for i in range(5)])
        got += drain(s, 5)
        returned = threading.Event()

        def checkpoint_then_say() -> None:
            s.checkpoint()
            returned.set()

        checkpointer = threading.Thread(target=checkpoint_then_say)
        try:
            checkpointer.start()
            # the commit wait is checkpoint.commit.wait.ms (5 s); before, it was 30 s
            assert returned.wait(20), "checkpoint() waited for the cluster that is down"
            assert _committed(kafka_cluster, group, ts) == {0: 15}, "the healthy cluster's offsets"
            # the next checkpoint does not wait at all for a cluster known not to answer, and records flow
            kafka_cluster.produce(ts, [b"s-last"])
            got += drain(s, 1)
            s.checkpoint()
            assert _committed(kafka_cluster, group, ts) == {0: 16}
        finally:
            checkpointer.join(60)
            down.start_node(0)
        down.produce(td, [b"d-after"])
        got += drain(s, 1, timeout=60)
        assert wait_for(lambda: _committed(down, group, td) == {0: 10}, 60)
        s.checkpoint()
        assert wait_for(lambda: _committed(down, group, td) == {0: 11}, 60), "owed offsets after it came back"
    assert sorted(r.value for r in got if r.topic == td) == sorted(
        [f"d-{i}".encode() for i in range(10)] + [b"d-after"]
    )


class _StopsFetchingOnce(Consumer):
    """A reader's client that stops fetching partition 0 after its first 50 records (a pause the source did
    not ask for: it outlives ``unassign()`` in librdkafka, as a stuck fetch state does), the first time only."""

    sabotaged = threading.Event()

    def __init__(self, conf: dict[str, Any]) -> None:
        super().__init__(conf)
        self._armed = "-reader-" in str(conf.get("client.id", "")) and not self.sabotaged.is_set()
        if self._armed:
            self.sabotaged.set()
        self._seen = 0

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        messages = super().consume(num_messages, timeout)
        if self._armed:
            self._seen += sum(1 for m in messages if m.error() is None and m.partition() == 0)
            if self._seen >= 50:
                self.pause([TopicPartition(str(m.topic()), 0) for m in messages[:1]])
                self._armed = False
        return messages


@pytest.mark.parametrize("watchdog", [True, False], ids=["watchdog", "no-watchdog"])
def test_a_partition_that_stops_being_fetched_recovers_by_itself(
    kafka_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, watchdog: bool
) -> None:
    """Issue 33, the stall watchdog: a client that silently stops fetching one partition (librdkafka #5153
    and #4804 left partitions stuck like this) is found by the watchdog, counted, shown in the status, and
    made again at the position; nothing is lost or repeated. Without the watchdog the partition stays stuck."""
    _StopsFetchingOnce.sabotaged.clear()
    monkeypatch.setattr("confluent_kafka.Consumer", _StopsFetchingOnce)
    topic = kafka_cluster.create_topic("stall", partitions=2)
    kafka_cluster.produce_n(topic, 400, partitions=2)
    registry = CollectorRegistry()
    md = [stream("s", cluster_md(kafka_cluster, topic))]
    source = (
        builder(md)
        .set_property("reader.batch.max.records", "10")
        .set_property("reader.stall.timeout.ms", "2000" if watchdog else "-1")
        .build()
    )
    with source.open(registry=registry) as s:
        got = drain(s, 400, timeout=20 if watchdog else 8)
        status = s.status()
        stalls = registry.get_sample_value(
            "multicluster_source_stalled_partitions_total", {"cluster": kafka_cluster.cluster_id}
        )
    assert _StopsFetchingOnce.sabotaged.is_set()
    if not watchdog:
        assert len(got) < 400 and not stalls, "the sabotage must hold the partition without the watchdog"
        return
    assert sorted((r.partition, r.offset) for r in got) == [(p, o) for p in (0, 1) for o in range(200)]
    assert stalls == 1
    [reader] = status["readers"].values()
    assert reader["stalls"][kafka_cluster.cluster_id]["total"] == 1
