"""Topic tracking without a broker: keys, stores, and the tracker's record/reset/forget semantics."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from multicluster_source.exceptions import MultiClusterSourceError
from multicluster_source.ops._topic_stores import (
    InMemoryTopicStatusStore,
    LocalTopicStatusStore,
    TopicStatusStore,
)
from multicluster_source.ops._tracking import (
    RESET_DISABLED,
    TRACKING_DISABLED,
    TopicTracker,
    TopicTrackingDisabledError,
    parse_topic_status_key,
    topic_status_key,
)


def _tracker(store: TopicStatusStore | None = None, **kw: Any) -> TopicTracker:
    tracker = TopicTracker(
        "billing", store or InMemoryTopicStatusStore(), clock=lambda: 1_700_000_000.0, **kw
    )
    tracker.start()
    return tracker


# ----------------------------------------------------------------------------------------------- keys


@pytest.mark.parametrize(
    ("source", "cluster", "topic"),
    [
        ("billing", "east", "orders"),
        ("a.b-c_d", "kafka-1:9092,kafka-2:9092", "t.x-y_z"),  # a cluster id defaulted to bootstrap servers
        ("s", "[::1]:9092", "t"),
    ],
)
def test_key_round_trips(source: str, cluster: str, topic: str) -> None:
    key = topic_status_key(source, cluster, topic)
    assert key == f"topic:{source}:{cluster}/{topic}"
    assert parse_topic_status_key(key) == (source, cluster, topic)


@pytest.mark.parametrize(
    "key",
    [
        "status-topic-orders:connector-x",  # Connect's own keys
        "topic-billing:east/orders",
        "topic::east/orders",
        "topic:billing:east",
        "topic:billing:/orders",
        "topic:billing:east/",
        "topic:billing:east/a/b",
        "partition:billing:east/orders/0",  # a newer writer's kind of key
    ],
)
def test_unknown_keys_do_not_parse(key: str) -> None:
    assert parse_topic_status_key(key) is None


# --------------------------------------------------------------------------------------------- tracker


def test_first_record_is_appended_once_with_value() -> None:
    store = InMemoryTopicStatusStore()
    tracker = _tracker(store)
    tracker.record("east", "orders", 2)
    tracker.record("east", "orders", 0)
    tracker.record("west", "orders", 1)
    assert tracker.flush(5)
    assert tracker.active() == {"east": ["orders"], "west": ["orders"]}
    assert [k for k, _ in store.appends] == ["topic:billing:east/orders", "topic:billing:west/orders"]
    assert store.appends[0][1] == {
        "version": 1,
        "source": "billing",
        "cluster": "east",
        "topic": "orders",
        "reader": 2,
        "discovered_ms": 1_700_000_000_000,
    }
    tracker.close()


def test_eight_racing_readers_append_once_per_topic() -> None:
    store = InMemoryTopicStatusStore()
    tracker = _tracker(store)
    barrier = threading.Barrier(8)

    def reader(i: int) -> None:
        barrier.wait()
        for _ in range(200):
            for topic in ("a", "b", "c"):
                tracker.record("east", topic, i)

    threads = [threading.Thread(target=reader, args=(i,), name=f"test-reader-{i}") for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tracker.flush(5)
    assert sorted(k for k, _ in store.appends) == [
        "topic:billing:east/a",
        "topic:billing:east/b",
        "topic:billing:east/c",
    ]
    tracker.close()


def test_reset_tombstones_active_topics_and_they_come_back() -> None:
    store = InMemoryTopicStatusStore()
    tracker = _tracker(store)
    tracker.record("east", "orders", 0)
    tracker.record("west", "payments", 0)
    assert tracker.reset() == 2
    assert tracker.active() == {}
    tracker.record("west", "payments", 1)
    assert tracker.flush(5)
    assert [(k, v is None) for k, v in store.appends] == [
        ("topic:billing:east/orders", False),
        ("topic:billing:west/payments", False),
        ("topic:billing:east/orders", True),
        ("topic:billing:west/payments", True),
        ("topic:billing:west/payments", False),
    ]
    assert store.load().keys() == {"topic:billing:west/payments"}
    assert tracker.active() == {"west": ["payments"]}
    tracker.close()


def test_disabled_tracking_records_nothing_and_answers_403_messages() -> None:
    store = InMemoryTopicStatusStore()
    tracker = _tracker(store, enabled=False)
    tracker.record("east", "orders", 0)
    assert store.appends == []
    with pytest.raises(TopicTrackingDisabledError) as info:
        tracker.active()
    assert info.value.message == TRACKING_DISABLED
    with pytest.raises(TopicTrackingDisabledError, match=TRACKING_DISABLED):
        tracker.reset()
    tracker.close()


def test_reset_can_be_disallowed_but_forget_still_erases() -> None:
    store = InMemoryTopicStatusStore()
    tracker = _tracker(store, allow_reset=False)
    tracker.record("east", "orders", 0)
    with pytest.raises(TopicTrackingDisabledError) as info:
        tracker.reset()
    assert info.value.message == RESET_DISABLED
    assert tracker.active() == {"east": ["orders"]}
    assert tracker.forget() == 1
    tracker.record("east", "payments", 0)  # closing for good: nothing is recorded any more
    assert tracker.flush(5)
    assert store.load() == {}
    tracker.close()
    with pytest.raises(MultiClusterSourceError):
        tracker.forget()


def test_forget_with_tracking_disabled_reads_the_store_for_it() -> None:
    store = InMemoryTopicStatusStore()
    store.append(topic_status_key("billing", "east", "orders"), {"version": 1})
    store.append(topic_status_key("other", "east", "orders"), {"version": 1})
    tracker = TopicTracker("billing", store, enabled=False)
    tracker.start()
    assert tracker.forget() == 1
    assert store.load().keys() == {"topic:other:east/orders"}


def test_load_keeps_own_source_skips_unknown_keys_and_values() -> None:
    store = InMemoryTopicStatusStore()
    store.append("topic:billing:east/orders", {"version": 1, "cluster": "east"})
    store.append("topic:billing:west/orders", {"version": 7, "future": ["field"]})  # newer writer
    store.append("topic:other:east/orders", {"version": 1})
    store.append("status-connector-x", {"state": "RUNNING"})
    store.append("topic:billing:north/gone", {"version": 1})
    store.append("topic:billing:north/gone", None)
    tracker = _tracker(store)
    assert tracker.active() == {"east": ["orders"], "west": ["orders"]}
    tracker.record("east", "orders", 0)  # already known from the store: not appended again
    assert tracker.flush(5)
    assert len(store.appends) == 6
    tracker.close()


class _FlakyStore(InMemoryTopicStatusStore):
    def __init__(self) -> None:
        super().__init__()
        self.fail = True

    def append(self, key: str, value: Any) -> None:
        if self.fail:
            raise OSError("store down")
        super().append(key, value)


def test_failed_append_is_retried_after_backoff() -> None:
    store = _FlakyStore()
    tracker = _tracker(store, retry_backoff_s=0.0)
    tracker.record("east", "orders", 0)
    assert tracker.flush(5)
    assert tracker.active() == {}  # not recorded, so not shown as recorded
    store.fail = False
    tracker.record("east", "orders", 0)
    assert tracker.flush(5)
    assert tracker.active() == {"east": ["orders"]}
    assert store.load().keys() == {"topic:billing:east/orders"}
    tracker.close()


def test_failed_tombstone_keeps_the_topic_for_another_reset() -> None:
    store = _FlakyStore()
    store.fail = False
    tracker = _tracker(store)
    tracker.record("east", "orders", 0)
    assert tracker.flush(5)
    store.fail = True
    tracker.reset()
    assert tracker.flush(5)
    assert tracker.active() == {"east": ["orders"]}
    store.fail = False
    tracker.reset()
    assert tracker.flush(5)
    assert store.load() == {}
    tracker.close()


def test_tracker_thread_is_named_and_stops() -> None:
    tracker = _tracker()
    names = {t.name for t in threading.enumerate()}
    assert "mcs-tracking-billing" in names
    tracker.close()
    assert "mcs-tracking-billing" not in {t.name for t in threading.enumerate()}


# ----------------------------------------------------------------------------------------- local store


def test_local_store_survives_reopen_and_compacts(tmp_path: Path) -> None:
    path = tmp_path / "ckpt" / "topic-status.jsonl"
    tracker = _tracker(LocalTopicStatusStore(path))
    tracker.record("east", "orders", 0)
    tracker.record("west", "orders", 1)
    tracker.record("east", "payments", 0)
    assert tracker.flush(5)
    tracker.reset()
    tracker.record("west", "orders", 2)
    tracker.close()
    assert len(path.read_text().splitlines()) == 7

    again = _tracker(LocalTopicStatusStore(path))
    assert again.active() == {"west": ["orders"]}
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [
        {
            "key": "topic:billing:west/orders",
            "value": {
                "version": 1,
                "source": "billing",
                "cluster": "west",
                "topic": "orders",
                "reader": 2,
                "discovered_ms": 1_700_000_000_000,
            },
        }
    ]
    again.close()


def test_local_store_skips_torn_and_foreign_lines(tmp_path: Path) -> None:
    path = tmp_path / "topic-status.jsonl"
    path.write_text(
        json.dumps({"key": "topic:billing:east/orders", "value": {"version": 1}})
        + "\n"
        + "not json\n"
        + json.dumps({"value": {}})
        + "\n"
        + json.dumps({"key": "topic:billing:west/orders", "value": {"version": 1}})
        + "\n"
        + '{"key": "topic:billing:west/pay'  # torn last line (crash mid-write)
    )
    store = LocalTopicStatusStore(path)
    assert store.load().keys() == {"topic:billing:east/orders", "topic:billing:west/orders"}
    store.append("topic:billing:east/orders", None)
    store.close()
    reopened = LocalTopicStatusStore(path)
    assert reopened.load().keys() == {"topic:billing:west/orders"}
    reopened.close()


def test_local_store_compacts_while_appending(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    store = LocalTopicStatusStore(path)
    store.load()
    for i in range(1100):
        store.append("topic:s:c/t", {"i": i})
    store.close()
    assert len(path.read_text().splitlines()) < 1100
    reopened = LocalTopicStatusStore(path)
    assert reopened.load() == {"topic:s:c/t": {"i": 1099}}
    reopened.close()


def test_stores_satisfy_the_protocol(tmp_path: Path) -> None:
    from multicluster_source.ops._topic_stores import KafkaTopicStatusStore

    assert isinstance(InMemoryTopicStatusStore(), TopicStatusStore)
    assert isinstance(LocalTopicStatusStore(tmp_path / "x"), TopicStatusStore)
    kafka = KafkaTopicStatusStore("host:9092", "_status", {"sasl.password": "hunter2-secret"})
    assert isinstance(kafka, TopicStatusStore)
    assert kafka.describe() == "kafka topic _status on host:9092"


# --------------------------------------------------------------------------------------------- builder


def _builder() -> Any:
    from multicluster_source import (
        ClusterMetadata,
        KafkaStream,
        MultiClusterKafkaSource,
        StaticMetadataService,
    )

    md = KafkaStream("s", {"east": ClusterMetadata("east", "127.0.0.1:1", frozenset({"t"}))})
    return (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([md]))
        .set_stream_ids(["s"])
    )


def test_builder_store_setters_conflict_and_validate() -> None:
    from multicluster_source.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match="conflicts with set_topic_tracking_store"):
        _builder().set_topic_tracking_store(InMemoryTopicStatusStore()).set_topic_tracking_topic(
            "h:9092", "st"
        )
    with pytest.raises(ConfigurationError, match="TopicStatusStore"):
        _builder().set_topic_tracking_store(object())
    with pytest.raises(ConfigurationError, match="not a valid topic name"):
        _builder().set_topic_tracking_topic("h:9092", "bad/topic")
    with pytest.raises(ConfigurationError, match="unknown client property"):
        _builder().set_topic_tracking_topic("h:9092", "st", {"no.such.property": "1"})


def test_default_store_is_a_file_in_the_checkpoint_dir_else_memory(tmp_path: Path) -> None:
    from multicluster_source.ops._topic_stores import KafkaTopicStatusStore

    source = _builder().set_name("src").build()
    tracker = source.create_topic_tracker(str(tmp_path))
    assert isinstance(tracker.store, LocalTopicStatusStore)
    assert tracker.store.path == tmp_path / "topic-status.jsonl"
    assert isinstance(source.create_topic_tracker(None).store, InMemoryTopicStatusStore)
    kafka = _builder().set_topic_tracking_topic("h:9092", "st").build().create_topic_tracker(str(tmp_path))
    assert isinstance(kafka.store, KafkaTopicStatusStore) and kafka.store.topic == "st"
    off = _builder().set_property("topic.tracking.enable", "false").build().create_topic_tracker(None)
    assert not off.enabled


def test_open_refuses_a_public_admin_address_without_token_before_starting() -> None:
    from multicluster_source.exceptions import ConfigurationError

    before = {t.name for t in threading.enumerate()}
    with pytest.raises(ConfigurationError, match="admin_token"):
        _builder().set_name("src").build().open(admin_address="0.0.0.0:0")
    assert {t.name for t in threading.enumerate()} == before
