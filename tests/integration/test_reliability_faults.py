"""Reliability under broker faults on real Apache Kafka (issue 8, part 1).

- a broker restarted three times while records flow: everything acknowledged is delivered, nothing skipped;
- the 3-broker rack cluster losing the leader of an RF=3 partition: reading goes on from the new leader;
- a position that aged out of the log (``delete_records`` below a checkpoint): reset per
  ``auto.offset.reset`` (earliest by default, latest, or a failure with ``error``), logged and counted.

The other faults of the issue live elsewhere: one cluster stopped while others flow and a topic deleted under
a running reader in ``test_broker_faults.py``, a cluster unreachable at start-up in ``test_single_cluster.py``.
Nothing here asserts on time; it only bounds waits.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from prometheus_client import CollectorRegistry

from harness.audit import Record, Run, audit
from harness.chaos import read_log
from harness.cluster import Cluster
from harness.leaks import ProcessFacts, leaks_after_close, settle_after_close
from harness.scenario import builder, cluster_md, drain, keys, settle, stream, wait_for
from multicluster_source import SourceRecord, SourceStream
from multicluster_source.exceptions import SourceFailedError

pytestmark = pytest.mark.integration

# Clients notice a broker that went away, and come back to it, within a second or two.
FAST_RECONNECT = {
    "reconnect.backoff.ms": "100",
    "reconnect.backoff.max.ms": "1000",
    "socket.timeout.ms": "5000",
    "topic.metadata.refresh.interval.ms": "1000",
}


def _needs_restarts(cluster: Cluster) -> None:
    if cluster.kind != "kafka":
        pytest.skip(f"the tests cannot restart {cluster.kind} brokers")


def _needs_delete_records(cluster: Cluster) -> None:
    if cluster.kind == "tansu":
        pytest.skip("tansu does not delete records below an offset")


class AckedProducer:
    """Produces numbered values to one topic until stopped; remembers which the brokers acknowledged.

    Idempotent with ``acks=all`` and an unbounded delivery timeout, so a broker outage only delays
    deliveries: nothing is lost or written twice by the producer itself.
    """

    def __init__(self, cluster: Cluster, topic: str, prefix: str, interval: float = 0.005) -> None:
        self.cluster, self.topic, self.prefix, self.interval = cluster, topic, prefix, interval
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: list[str] = []
        self.produced = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"test-produce-{prefix}", daemon=True)

    def _run(self) -> None:
        producer = self.cluster.producer(
            **{
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 300_000,
                **FAST_RECONNECT,
            }
        )

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                self.failed.append(str(err))
            else:
                self.acked[msg.value()] = (msg.partition(), msg.offset())

        i = 0
        while not self._stop.is_set():
            try:
                producer.produce(self.topic, f"{self.prefix}-{i}".encode(), on_delivery=delivered)
                i += 1
            except BufferError:
                pass
            producer.poll(0)
            time.sleep(self.interval)
        self.produced = i
        remaining = producer.flush(120)
        producer.close()
        assert remaining == 0, f"{remaining} records of {self.prefix} not delivered at the end"

    def __enter__(self) -> AckedProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)

    def __exit__(self, *exc: object) -> None:
        self.stop()


def poll_until(
    s: SourceStream, done: threading.Event | None = None, *, timeout: float = 120.0
) -> list[SourceRecord]:
    """Poll until ``done`` is set (then 1 s more) or ``timeout``."""
    got: list[SourceRecord] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (done is not None and done.is_set()):
        got.extend(s.poll(timeout=0.2))
    return got


def assert_complete(records: Iterable[SourceRecord], producer: AckedProducer) -> None:
    """Every acknowledged value arrived at its offset, no offset twice (nothing was restored), none skipped.

    Judged by the chaos audit (``harness.audit``), so a failure lists every partition's verdict, not the
    first problem found: missing records as holes or a stalled tail, each range with whether the broker's
    log still holds it (read with a plain consumer at the end), duplicates, gaps and values at the wrong
    offset.
    """
    assert not producer.failed, f"the producer lost records: {producer.failed[:3]}"
    assert len(producer.acked) == producer.produced, (
        f"{producer.produced - len(producer.acked)} records of {producer.produced} had no delivery report"
    )
    cid, topic = producer.cluster.cluster_id, producer.topic
    acknowledged = [Record(cid, topic, p, o, value) for value, (p, o) in producer.acked.items()]
    delivered = [
        Record(r.cluster_id, r.topic, r.partition, r.offset, r.value or b"")
        for r in records
        if r.topic == topic
    ]
    report = audit(acknowledged, [Run(delivered)], read_log=read_log({cid: producer.cluster}))
    assert report.ok, f"the audit of {topic} failed:\n{report.summary()}"


# ---------------------------------------------------------------------------------------- broker restarts


def test_broker_restarted_three_times_while_records_flow(fresh_cluster) -> None:
    bouncy: Cluster = fresh_cluster("bouncy")
    _needs_restarts(bouncy)
    topic = bouncy.create_topic("bounce", partitions=2)
    md = [stream("s", cluster_md(bouncy, topic))]
    source = builder(md).set_properties(FAST_RECONNECT).build()
    cycles_done = threading.Event()
    errors: list[BaseException] = []
    during: list[int] = []

    def bounce(got: list[SourceRecord]) -> None:
        try:
            for _ in range(3):
                wait_for(_grows(got), 30)  # records flow before each stop
                bouncy.stop_node(0)
                time.sleep(2.0)
                bouncy.start_node(0)
                during.append(len(got))
        except BaseException as exc:
            errors.append(exc)
        finally:
            cycles_done.set()

    got: list[SourceRecord] = []
    before = ProcessFacts.now()
    with source.open(parallelism=2) as s, AckedProducer(bouncy, topic, "b") as producer:
        bouncer = threading.Thread(target=bounce, args=(got,), name="test-bouncer", daemon=True)
        bouncer.start()
        deadline = time.monotonic() + 240
        while not cycles_done.is_set() and time.monotonic() < deadline:
            got.extend(s.poll(timeout=0.2))
        bouncer.join(60)
        assert not errors, f"restarting the broker failed: {errors[0]!r}"
        producer.stop()
        got += drain(s, 0, timeout=120, until=lambda g: _all_in(got + g, producer.acked))
        got += settle(s, 1.0)
    leaks = leaks_after_close(before, settle_after_close(before))
    assert len(during) == 3
    assert_complete(got, producer)
    counts = keys(got)
    assert all(n == 1 for n in counts.values()), "nothing was restored: no record may come twice"
    assert leaks == [], "the closed stream (and the test's producer) left something behind"


def _grows(records: list[SourceRecord]) -> Callable[[], bool]:
    """True once ``records`` holds more than it does now."""
    n = len(records)
    return lambda: len(records) > n


def _all_in(records: list[SourceRecord], acked: dict[bytes, tuple[int, int]]) -> bool:
    have = {r.value for r in records}
    return all(v in have for v in acked)


# ---------------------------------------------------------------------------------------- leader failover


def _leader(cluster: Cluster, topic: str, partition: int = 0) -> int:
    md = cluster.admin().list_topics(topic, timeout=10)
    return int(md.topics[topic].partitions[partition].leader)


def test_partition_leader_lost_reading_goes_on_from_the_new_leader(rack_cluster: Cluster) -> None:
    _needs_restarts(rack_cluster)
    topic = rack_cluster.create_topic(
        "failover", partitions=1, replication_factor=3, config={"min.insync.replicas": "1"}
    )
    md = [stream("s", cluster_md(rack_cluster, topic))]
    source = builder(md).set_properties(FAST_RECONNECT).build()
    old_leader = _leader(rack_cluster, topic)
    got: list[SourceRecord] = []
    before = ProcessFacts.now()
    try:
        with source.open() as s, AckedProducer(rack_cluster, topic, "l") as producer:
            got += drain(s, 0, timeout=30, until=lambda g: len(g) >= 50)
            rack_cluster.stop_node(old_leader, graceful=False)  # no controlled shutdown: a crash
            assert wait_for(lambda: _leader(rack_cluster, topic) not in (old_leader, -1), 60), (
                "no new leader was elected"
            )
            new_leader = _leader(rack_cluster, topic)
            at_failover = len(producer.acked)
            # Records acknowledged by the new leader reach the source.
            got += drain(s, 0, timeout=60, until=lambda g: len(producer.acked) > at_failover + 200)
            producer.stop()
            got += drain(s, 0, timeout=60, until=lambda g: _all_in(got + g, producer.acked))
            got += settle(s, 1.0)
        leaks = leaks_after_close(before, settle_after_close(before))
    finally:
        rack_cluster.start_node(old_leader)  # the shared cluster gets its three brokers back
    assert new_leader != old_leader
    assert len(producer.acked) > at_failover + 200
    assert_complete(got, producer)
    assert leaks == [], "the closed stream (and the test's producer) left something behind"


# ------------------------------------------------------------------------------- positions out of range


def _delete_below(cluster: Cluster, topic: str, partition: int, offset: int) -> None:
    futures = cluster.admin().delete_records([TopicPartition(topic, partition, offset)])
    for future in futures.values():
        future.result(30)


def _resets(registry: CollectorRegistry, cluster: Cluster, topic: str) -> float:
    labels = {"cluster": cluster.cluster_id, "topic": topic}
    return registry.get_sample_value("multicluster_source_offset_resets_total", labels) or 0.0


def _checkpointed_positions(ckpt: Path) -> dict[str, int]:
    newest = max(ckpt.glob("chk-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    positions: dict[str, int] = json.loads(newest.read_text())["positions"]
    return positions


def _read_then_checkpoint(cluster: Cluster, topic: str, ckpt: Path) -> list[SourceRecord]:
    """Read the first 30 records of a 1-partition topic of 100, checkpoint, close."""
    _needs_delete_records(cluster)
    cluster.produce_n(topic, 100, partitions=1, prefix="old")
    md = [stream("s", cluster_md(cluster, topic))]
    source = builder(md).set_property("reader.batch.max.records", "10").build()
    first: list[SourceRecord] = []
    with source.open(checkpoint_dir=str(ckpt)) as s:
        deadline = time.monotonic() + 60
        while len(first) < 30 and time.monotonic() < deadline:
            first += s.poll(timeout=0.2, max_records=30 - len(first))
        s.checkpoint()
    assert [r.offset for r in first] == list(range(30))
    return first


def test_checkpointed_offset_aged_out_resets_to_earliest_logged_and_counted(
    kafka_cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = kafka_cluster.create_topic("aged", partitions=1)
    ckpt = tmp_path / "ckpt"
    first = _read_then_checkpoint(kafka_cluster, topic, ckpt)
    old = len(first)
    _delete_below(kafka_cluster, topic, 0, 60)  # the checkpointed position is gone from the log
    kafka_cluster.produce_n(topic, 20, partitions=1, prefix="new")
    caplog.set_level(logging.WARNING, logger="multicluster_source")
    registry = CollectorRegistry()
    md = [stream("s", cluster_md(kafka_cluster, topic))]
    with builder(md).build().open(checkpoint_dir=str(ckpt), registry=registry) as s:
        rest = drain(s, 60)
        rest += settle(s, 1.0)
        resets = _resets(registry, kafka_cluster, topic)
        s.checkpoint()
    assert [r.offset for r in rest] == list(range(60, 120)), "reading resumes at the log start, in order"
    assert resets == 1.0
    warning = [m for m in caplog.messages if "out of range" in m]
    assert warning, "the reset must be logged"
    assert all(
        part in warning[0]
        for part in (f"cluster={kafka_cluster.cluster_id}", f"topic={topic}", "partition=0", str(old), "60")
    ), warning[0]
    assert _checkpointed_positions(ckpt) == {f"{kafka_cluster.cluster_id}/{topic}/0": 120}


def test_aged_out_offset_with_auto_offset_reset_latest_skips_to_the_end(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = kafka_cluster.create_topic("aged-latest", partitions=1)
    ckpt = tmp_path / "ckpt"
    _read_then_checkpoint(kafka_cluster, topic, ckpt)
    _delete_below(kafka_cluster, topic, 0, 60)
    registry = CollectorRegistry()
    md = [stream("s", cluster_md(kafka_cluster, topic))]
    source = builder(md).set_property("auto.offset.reset", "latest").build()
    with source.open(checkpoint_dir=str(ckpt), registry=registry) as s:
        assert wait_for(lambda: _resets(registry, kafka_cluster, topic) == 1.0, 30)
        skipped = settle(s, 1.0)
        kafka_cluster.produce_n(topic, 5, partitions=1, prefix="after")
        after = drain(s, 5)
        after += settle(s, 0.5)
        s.checkpoint()
    assert skipped == [], "latest: records 60..99 that were still in the log are skipped"
    assert [r.value for r in after] == [f"after-{i}".encode() for i in range(5)]
    assert _checkpointed_positions(ckpt) == {f"{kafka_cluster.cluster_id}/{topic}/0": 105}


def test_aged_out_offset_with_auto_offset_reset_error_fails_the_source(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = kafka_cluster.create_topic("aged-error", partitions=1)
    ckpt = tmp_path / "ckpt"
    first = _read_then_checkpoint(kafka_cluster, topic, ckpt)
    _delete_below(kafka_cluster, topic, 0, 60)
    md = [stream("s", cluster_md(kafka_cluster, topic))]
    source = builder(md).set_property("auto.offset.reset", "error").build()
    with (
        source.open(checkpoint_dir=str(ckpt)) as s,
        pytest.raises(
            SourceFailedError, match=rf"topic={topic} partition=0: offset {len(first)} is out of range"
        ),
    ):
        drain(s, 1, timeout=30)


# ------------------------------------------------------ the fetcher's reset paths without a broker (fakes)


class _Msg:
    def __init__(self, topic: str, partition: int, offset: int, error: Any = None) -> None:
        self._t, self._p, self._o, self._e = topic, partition, offset, error

    def error(self) -> Any:
        return self._e

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o


class _FakeConsumer:
    """Reports one out-of-range position for each partition assigned at offset 5, then nothing."""

    def __init__(self, watermarks: tuple[int, int] | None) -> None:
        self.watermarks = watermarks
        self.calls: list[tuple[str, list[tuple[str, int, int]]]] = []
        self._queue: list[_Msg] = []
        self.closed = False

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        from confluent_kafka import KafkaError

        self.calls.append(("assign", [(tp.topic, tp.partition, tp.offset) for tp in tps]))
        for tp in tps:
            if tp.offset == 5:
                self._queue.append(_Msg(tp.topic, tp.partition, 5, KafkaError(KafkaError._AUTO_OFFSET_RESET)))

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        self.calls.append(("unassign", [(tp.topic, tp.partition, tp.offset) for tp in tps]))

    def consume(self, n: int, timeout: float) -> list[_Msg]:
        out, self._queue = self._queue[:n], self._queue[n:]
        if not out:
            time.sleep(timeout)
        return out

    def poll(self, timeout: float) -> _Msg | None:
        got = self.consume(1, timeout)
        return got[0] if got else None

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        if self.watermarks is None:
            raise RuntimeError("broker away")
        return self.watermarks

    def assignment(self) -> list[TopicPartition]:
        return []

    def close(self) -> None:
        self.closed = True


class _Ctx:
    index = 0
    rack = None

    def __init__(self) -> None:
        self.batches: list[Any] = []
        self.failed: list[BaseException] = []

    def send_event_to_enumerator(self, event: Any) -> None:
        pass

    def emit(self, batch: Any, should_stop: Any) -> bool:
        self.batches.append(batch)
        return True

    def offer_inline(self, step: Any, release: Any, hold: Any = None) -> Callable[[], None]:
        return lambda: None

    def fail(self, error: BaseException) -> None:
        self.failed.append(error)

    def reader_failed(self, error: BaseException) -> None:
        self.failed.append(error)


def _fetch_with(
    consumer: _FakeConsumer, policy: str | None, split: Any
) -> tuple[_Ctx, list[list[str]], CollectorRegistry]:
    from multicluster_source.ops._metrics import SourceMetrics
    from multicluster_source.reader._fetcher import ClusterFetcher
    from multicluster_source.reader._settings import FetchSettings

    registry = CollectorRegistry()
    settings = FetchSettings("src", 0, 100, SourceMetrics(registry, "src"), poll_timeout_s=0.01)
    conf = {} if policy is None else {"auto.offset.reset": policy}
    ctx = _Ctx()
    finished: list[list[str]] = []
    fetcher = ClusterFetcher("east", conf, settings, ctx, finished.append, consumer=consumer)
    fetcher.start()
    try:
        fetcher.add_splits([split])
        wait_for(lambda: len(consumer.calls) >= 2 or bool(ctx.failed), 10)
    finally:
        fetcher.stop()
    return ctx, finished, registry


def test_fetcher_reset_falls_back_to_a_logical_offset_when_watermarks_are_unavailable() -> None:
    from confluent_kafka import OFFSET_BEGINNING

    from multicluster_source.framework._split import KafkaPartitionSplit

    consumer = _FakeConsumer(watermarks=None)
    ctx, finished, registry = _fetch_with(consumer, None, KafkaPartitionSplit("east", "t", 0, 5))
    assert consumer.calls[:3] == [
        ("assign", [("t", 0, 5)]),
        ("unassign", [("t", 0, -1001)]),
        ("assign", [("t", 0, OFFSET_BEGINNING)]),
    ]
    assert ctx.batches == [] and ctx.failed == [] and finished == []
    assert registry.get_sample_value(
        "multicluster_source_offset_resets_total", {"cluster": "east", "topic": "t"}
    )


def test_fetcher_reset_past_a_bounded_split_finishes_it() -> None:
    from multicluster_source.framework._split import KafkaPartitionSplit

    consumer = _FakeConsumer(watermarks=(40, 60))
    ctx, finished, _ = _fetch_with(
        consumer, "latest", KafkaPartitionSplit("east", "t", 0, 5, stopping_offset=50)
    )
    assert finished == [["east/t/0"]]
    assert consumer.calls[1] == ("unassign", [("t", 0, -1001)])
    assert ctx.failed == []


def test_fetcher_reset_policy_error_fails_the_source() -> None:
    from multicluster_source.exceptions import OffsetOutOfRangeError
    from multicluster_source.framework._split import KafkaPartitionSplit

    consumer = _FakeConsumer(watermarks=(40, 60))
    ctx, _, _ = _fetch_with(consumer, "error", KafkaPartitionSplit("east", "t", 0, 5))
    assert len(ctx.failed) == 1 and isinstance(ctx.failed[0], OffsetOutOfRangeError)
    assert "cluster=east topic=t partition=0: offset 5 is out of range" in str(ctx.failed[0])


@pytest.mark.parametrize(
    ("value", "policy"),
    [
        (None, "earliest"),
        ("smallest", "earliest"),
        ("beginning", "earliest"),
        ("largest", "latest"),
        ("end", "latest"),
        ("error", "error"),
    ],
)
def test_offset_reset_policy_and_consumer_config(value: str | None, policy: str) -> None:
    from multicluster_source.reader._resets import consumer_config, offset_reset_policy

    conf = {"bootstrap.servers": "x:1"} | ({} if value is None else {"auto.offset.reset": value})
    assert offset_reset_policy(conf) == policy
    assert consumer_config(conf) == {"bootstrap.servers": "x:1", "auto.offset.reset": "error"}
    assert conf.get("auto.offset.reset") == value, "the given configuration is left as it was"
