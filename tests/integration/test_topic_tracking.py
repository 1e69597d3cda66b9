"""Topic tracking (KIP-558 adapted to many clusters) and the admin HTTP API, on real Kafka clusters."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]
from prometheus_client import CollectorRegistry

from harness.cluster import Cluster, unique_name
from harness.scenario import builder, cluster_md, drain, settle, stream, wait_for
from multicluster_source import OffsetsInitializer
from multicluster_source.ops._topic_stores import InMemoryTopicStatusStore, KafkaTopicStatusStore
from multicluster_source.ops._tracking import RESET_DISABLED, TRACKING_DISABLED, TopicTrackingDisabledError
from multicluster_source.testing import InMemoryMetadataService

pytestmark = pytest.mark.integration

SECRET = "hunter2-never-shown"


def call(url: str, method: str = "GET") -> tuple[int, bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=15) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def _keys(store: InMemoryTopicStatusStore) -> list[tuple[str, bool]]:
    return [(k, v is not None) for k, v in list(store.appends)]


class _Producer:
    """Produces to one topic until stopped (keeps a topic 'in use')."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self.cluster, self.topic = cluster, topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"test-produce-{topic}", daemon=True)

    def _run(self) -> None:
        producer = self.cluster.producer(**{"linger.ms": 5})
        while not self._stop.is_set():
            producer.produce(self.topic, b"x")
            producer.poll(0)
            time.sleep(0.01)
        producer.flush(30)

    def __enter__(self) -> _Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def test_first_record_is_recorded_once_with_three_readers(kafka_clusters) -> None:
    east, west = kafka_clusters(2)
    te = east.create_topic("track", partitions=3)
    tw = west.create_topic("track", partitions=3)
    east.produce_n(te, 300, partitions=3)
    west.produce_n(tw, 300, partitions=3)
    store = InMemoryTopicStatusStore()
    source = builder([stream("s", cluster_md(east, te), cluster_md(west, tw))]).set_name("tracked3")
    source.set_topic_tracking_store(store)
    with source.build().open(parallelism=3, registry=CollectorRegistry()) as s:
        assert len(drain(s, 600)) == 600
        assert wait_for(lambda: len(store.appends) >= 2, 10)
        settle(s, 1.0)
        readers: dict[str, set[int]] = {}
        for idx, splits in s.assignments().items():
            for sid in splits:
                readers.setdefault(sid.split("/")[0], set()).add(idx)
        assert s.tracked_topics() == {east.cluster_id: [te], west.cluster_id: [tw]}
    # every reader read each topic, yet each (cluster, topic) was appended exactly once
    assert all(len(r) == 3 for r in readers.values()), readers
    assert sorted(_keys(store)) == [
        (f"topic:tracked3:{east.cluster_id}/{te}", True),
        (f"topic:tracked3:{west.cluster_id}/{tw}", True),
    ]
    for _key, value in store.appends:
        assert value is not None and value["source"] == "tracked3" and value["reader"] in (0, 1, 2)


def test_reset_while_running_keeps_only_topics_still_read(kafka_clusters) -> None:
    east, west = kafka_clusters(2)
    live = east.create_topic("live", partitions=1)
    idle = east.create_topic("idle", partitions=1)
    gone = west.create_topic("gone", partitions=1)
    east.produce(idle, [b"i"] * 5)
    west.produce(gone, [b"g"] * 5)
    east.produce(live, [b"l"] * 5)
    store = InMemoryTopicStatusStore()
    service = InMemoryMetadataService([stream("s", cluster_md(east, live, idle), cluster_md(west, gone))])
    source = builder(service, stream_ids=["s"]).set_name("resetting").set_topic_tracking_store(store).build()
    with _Producer(east, live), source.open(parallelism=2, registry=CollectorRegistry()) as s:
        drain(s, 0, until=lambda got: {r.topic for r in got} == {live, idle, gone})
        assert wait_for(lambda: len(s.tracked_topics().get(east.cluster_id, [])) == 2, 10)
        # removing a cluster from the metadata does not erase its history
        service.set_streams([stream("s", cluster_md(east, live, idle))])
        assert wait_for(lambda: west.cluster_id not in str(s.assignments()), 15)
        assert s.tracked_topics()[west.cluster_id] == [gone]

        assert s.reset_tracked_topics() == 3
        # the topic still being written to comes back as the caller keeps reading; the idle and removed
        # ones do not (a caller that stopped polling gets no records: the bounded buffer holds them back)
        drain(s, 0, timeout=15, until=lambda _got: s.tracked_topics() == {east.cluster_id: [live]})
        assert s.tracked_topics() == {east.cluster_id: [live]}
        settle(s, 1.0)
        assert s.tracked_topics() == {east.cluster_id: [live]}
    tombstones = [k for k, present in _keys(store) if not present]
    assert sorted(tombstones) == sorted(
        f"topic:resetting:{c}/{t}"
        for c, t in [(east.cluster_id, live), (east.cluster_id, idle), (west.cluster_id, gone)]
    )
    assert store.load().keys() == {f"topic:resetting:{east.cluster_id}/{live}"}


def test_disabled_tracking_records_nothing(kafka_cluster: Cluster) -> None:
    topic = kafka_cluster.create_topic("off", partitions=2)
    kafka_cluster.produce_n(topic, 20, partitions=2)
    store = InMemoryTopicStatusStore()
    source = (
        builder([stream("s", cluster_md(kafka_cluster, topic))])
        .set_name("untracked")
        .set_property("topic.tracking.enable", "false")
        .set_topic_tracking_store(store)
        .build()
    )
    with source.open(parallelism=2, registry=CollectorRegistry(), admin_address="127.0.0.1:0") as s:
        assert len(drain(s, 20)) == 20
        settle(s, 0.5)
        with pytest.raises(TopicTrackingDisabledError):
            s.tracked_topics()
        assert s.admin_url is not None
        status, body = call(f"{s.admin_url}/sources/untracked/topics")
        assert (status, json.loads(body)) == (403, {"error_code": 403, "message": TRACKING_DISABLED})
        status, body = call(f"{s.admin_url}/sources/untracked/topics/reset", "PUT")
        assert (status, json.loads(body)) == (403, {"error_code": 403, "message": TRACKING_DISABLED})
    assert store.appends == []


def test_disallowed_reset_is_403_and_keeps_topics(kafka_cluster: Cluster) -> None:
    topic = kafka_cluster.create_topic("noreset", partitions=1)
    kafka_cluster.produce_n(topic, 10, partitions=1)
    source = (
        builder([stream("s", cluster_md(kafka_cluster, topic))])
        .set_name("noreset")
        .set_property("topic.tracking.allow.reset", "false")
        .build()
    )
    with source.open(registry=CollectorRegistry(), admin_address="127.0.0.1:0") as s:
        assert len(drain(s, 10)) == 10
        url = f"{s.admin_url}/sources/noreset/topics"
        assert wait_for(lambda: json.loads(call(url)[1])["noreset"]["topics"] != {}, 10)
        status, body = call(f"{url}/reset", "PUT")
        assert (status, json.loads(body)) == (403, {"error_code": 403, "message": RESET_DISABLED})
        assert json.loads(call(url)[1]) == {"noreset": {"topics": {kafka_cluster.cluster_id: [topic]}}}


def _read_status_topic(cluster: Cluster, topic: str) -> list[tuple[str, Any]]:
    consumer = cluster.consumer(**{"group.id": unique_name("peek"), "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[tuple[str, Any]] = []
        deadline = time.monotonic() + 20
        while high > low and time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.5):
                if msg.error() is None:
                    key, value = msg.key() or b"", msg.value()
                    out.append((key.decode(), None if value is None else json.loads(value)))
                    if (msg.offset() or 0) + 1 >= high:
                        return out
        return out
    finally:
        consumer.close()


def test_kafka_status_topic_store_survives_restart_and_forget_erases(kafka_clusters, tmp_path: Path) -> None:
    east, west = kafka_clusters(2)
    te = east.create_topic("kt", partitions=2)
    tw = west.create_topic("kt", partitions=1)
    east.produce_n(te, 20, partitions=2)
    west.produce_n(tw, 10, partitions=1)
    status_topic = unique_name("_mcs-topic-status")
    md = [stream("s", cluster_md(east, te), cluster_md(west, tw))]

    def build() -> Any:
        return (
            builder(md, group="kt-group")
            .set_name("ktsource")
            .set_topic_tracking_topic(east.bootstrap_servers, status_topic)
        )

    with build().build().open(parallelism=2, registry=CollectorRegistry()) as s:
        assert len(drain(s, 30)) == 30
        assert wait_for(lambda: len(s.tracked_topics()) == 2, 10)
        s.checkpoint()
    records = _read_status_topic(east, status_topic)
    assert sorted(k for k, _ in records) == sorted(
        [f"topic:ktsource:{east.cluster_id}/{te}", f"topic:ktsource:{west.cluster_id}/{tw}"]
    )
    assert all(v["version"] == 1 and v["source"] == "ktsource" for _, v in records)
    configs = east.admin().describe_configs([ConfigResource("topic", status_topic)])
    described = next(iter(configs.values())).result(10)
    assert described["cleanup.policy"].value == "compact"

    # a restart reads the history back before any record is read
    source = build().set_starting_offsets(OffsetsInitializer.latest()).build()
    with source.open(registry=CollectorRegistry()) as s:
        assert s.tracked_topics() == {east.cluster_id: [te], west.cluster_id: [tw]}
        s.close(forget_topics=True)
    store = KafkaTopicStatusStore(east.bootstrap_servers, status_topic)
    try:
        assert store.load() == {}
    finally:
        store.close()
    tail = _read_status_topic(east, status_topic)[-2:]
    assert sorted(tail) == sorted(
        [(f"topic:ktsource:{east.cluster_id}/{te}", None), (f"topic:ktsource:{west.cluster_id}/{tw}", None)]
    )


def test_admin_http_api_with_a_real_source(kafka_clusters, tmp_path: Path) -> None:
    east, west = kafka_clusters(2)
    te = east.create_topic("http", partitions=2)
    tw = west.create_topic("http", partitions=1)
    east.produce_n(te, 40, partitions=2)
    west.produce_n(tw, 10, partitions=1)
    md = [
        stream(
            "orders",
            cluster_md(east, te, **{"sasl.password": SECRET}),
            cluster_md(west, tw),
        )
    ]
    registry = CollectorRegistry()
    source = builder(md).set_name("httpsource").build()
    with source.open(
        parallelism=2, checkpoint_dir=str(tmp_path / "ckpt"), registry=registry, admin_address="127.0.0.1:0"
    ) as s:
        base = s.admin_url
        assert base is not None and base.startswith("http://127.0.0.1:")
        assert len(drain(s, 50)) == 50
        want = {"httpsource": {"topics": {east.cluster_id: [te], west.cluster_id: [tw]}}}
        assert wait_for(lambda: json.loads(call(f"{base}/sources/httpsource/topics")[1]) == want, 10)
        assert call(f"{base}/sources/other/topics")[0] == 404

        status, body = call(f"{base}/health")
        assert status == 200 and json.loads(body)["status"] == "ready"

        lag_rows = {(east.cluster_id, te, 0), (east.cluster_id, te, 1), (west.cluster_id, tw, 0)}

        def lag_reported() -> bool:  # each fetcher reports lag once a second, each on its own clock
            doc = json.loads(call(f"{base}/status")[1])
            return {(r["cluster"], r["topic"], r["partition"]) for r in doc["lag"]} == lag_rows

        assert wait_for(lag_reported, 10)
        metrics = call(f"{base}/metrics")[1].decode()
        assert (
            f'multicluster_source_records_consumed_total{{cluster="{east.cluster_id}",topic="{te}"}} 40.0'
            in metrics
        )

        doc = json.loads(call(f"{base}/status")[1])
        assert doc["clusters"][east.cluster_id] == {
            "bootstrap_servers": east.bootstrap_servers,
            "topics": [te],
            "assigned_splits": 2,
            "error": None,  # the cluster's current client or discovery error
        }
        assert doc["streams"] == {"orders": {east.cluster_id: [te], west.cluster_id: [tw]}}
        assert sorted(sid for r in doc["readers"].values() for sid in r["splits"]) == sorted(
            [f"{east.cluster_id}/{te}/0", f"{east.cluster_id}/{te}/1", f"{west.cluster_id}/{tw}/0"]
        )
        assert all(r["alive"] for r in doc["readers"].values())
        assert {(r["cluster"], r["topic"], r["partition"]) for r in doc["lag"]} == lag_rows
        assert doc["last_reconciliation"]["added"] == sorted([east.cluster_id, west.cluster_id])
        assert doc["tracking"]["store"].endswith("topic-status.jsonl")

        status, body = call(f"{base}/sources/httpsource/topics/reset", "PUT")
        assert (status, body) == (202, b"")
        assert json.loads(call(f"{base}/sources/httpsource/topics")[1]) == {"httpsource": {"topics": {}}}

        for path in ("/", "/status", "/health", "/metrics", "/sources/httpsource/topics"):
            assert SECRET.encode() not in call(base + path)[1], path
        east.produce_n(te, 4, partitions=2, prefix="again")
        assert len(drain(s, 4)) == 4
        assert wait_for(lambda: s.tracked_topics() == {east.cluster_id: [te]}, 10)
    # close() stopped the server
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{base}/health", timeout=2)
    assert not [t for t in threading.enumerate() if t.name.startswith(("mcs-admin-", "mcs-tracking-"))]
