"""A fetcher asks for a topic's metadata before assigning partitions its consumer has not seen yet.

librdkafka starts fetching a newly assigned partition it has no metadata for only after its next metadata
refresh (about a second); the fetcher asks first. These tests use a fake consumer that records the calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from harness.fake_consumer import FakeConsumer, FakeReaderContext
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.reader import _warm
from multicluster_source.reader._fetcher import ClusterFetcher
from multicluster_source.reader._settings import FetchSettings


class _Metrics:
    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def _split(topic: str, partition: int) -> KafkaPartitionSplit:
    return KafkaPartitionSplit("east", topic, partition, 0)


def _wait_for(consumer: FakeConsumer, count: int) -> list[tuple[str, Any]]:
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        with consumer.lock:
            calls = [c for c in consumer.calls if c[0] != "close"]
        if len(calls) >= count:
            return calls
        time.sleep(0.005)
    raise AssertionError(f"expected {count} calls, got {calls}")


def test_metadata_is_asked_for_new_topics_new_partitions_and_re_added_topics() -> None:
    consumer = FakeConsumer({"orders": 2, "refunds": 1})
    context = FakeReaderContext()
    settings = FetchSettings(source_name="s", reader_index=0, batch_max_records=10, metrics=_Metrics())
    fetcher = ClusterFetcher("east", {}, settings, context, lambda ids: None, consumer=consumer)
    fetcher.start()
    try:
        fetcher.add_splits([_split("orders", 0), _split("orders", 1), _split("refunds", 0)])
        calls = _wait_for(consumer, 3)
        assert calls == [
            ("metadata", "orders"),  # once per topic, before the assignment
            ("metadata", "refunds"),
            ("assign", [("orders", 0), ("orders", 1), ("refunds", 0)]),
        ]

        consumer.partitions["orders"] = 3  # a partition added to a known topic
        fetcher.add_splits([_split("orders", 2)])
        assert _wait_for(consumer, 5)[3:] == [("metadata", "orders"), ("assign", [("orders", 2)])]

        fetcher.remove_topics(["refunds"])
        fetcher.add_splits([_split("refunds", 0)])  # a topic added again may have been recreated
        assert _wait_for(consumer, 8)[5:] == [
            ("unassign", [("refunds", 0)]),
            ("metadata", "refunds"),
            ("assign", [("refunds", 0)]),
        ]
    finally:
        fetcher.stop()
    assert not context.errors
    assert consumer.calls[-1] == ("close", None)


def test_partitions_already_known_are_assigned_without_a_metadata_request() -> None:
    consumer = FakeConsumer({"orders": 4})
    settings = FetchSettings(source_name="s", reader_index=0, batch_max_records=10, metrics=_Metrics())
    fetcher = ClusterFetcher("east", {}, settings, FakeReaderContext(), lambda ids: None, consumer=consumer)
    fetcher.start()
    try:
        fetcher.add_splits([_split("orders", 0), _split("orders", 1)])
        _wait_for(consumer, 2)
        fetcher.add_splits([_split("orders", 2), _split("orders", 3)])  # e.g. taken over from a failed reader
        calls = _wait_for(consumer, 3)
    finally:
        fetcher.stop()
    assert calls == [
        ("metadata", "orders"),
        ("assign", [("orders", 0), ("orders", 1)]),
        ("assign", [("orders", 2), ("orders", 3)]),
    ]


def test_consumer_defaults_for_quick_first_records_unless_a_property_says_otherwise() -> None:
    from multicluster_source.metadata import ClusterMetadata
    from multicluster_source.reader._multicluster import MultiClusterReader
    from multicluster_source.reader._settings import ReaderSettings

    settings = FetchSettings(source_name="s", reader_index=0, batch_max_records=10, metrics=_Metrics())

    def conf(source_props: dict[str, str], cluster_props: dict[str, str]) -> dict[str, Any]:
        reader_settings = ReaderSettings("g", source_props, "mcs", False, settings)
        reader = MultiClusterReader(FakeReaderContext(), reader_settings)
        cluster = ClusterMetadata("east", "east:9092", frozenset({"orders"}), cluster_props)
        return reader._client_conf(cluster)

    assert conf({}, {})["fetch.wait.max.ms"] == "100"
    assert conf({}, {})["reconnect.backoff.ms"] == "10"
    assert conf({}, {"reconnect.backoff.ms": "100"})["reconnect.backoff.ms"] == "100"
    # the broker handles of a cluster that is down are kept, so their backoff grows (issue 25)
    assert conf({}, {})["metadata.recovery.strategy"] == "none"
    assert (
        conf({"metadata.recovery.strategy": "rebootstrap"}, {})["metadata.recovery.strategy"] == "rebootstrap"
    )
    assert conf({"fetch.wait.max.ms": "500"}, {})["fetch.wait.max.ms"] == "500"
    assert conf({"fetch.wait.max.ms": "500"}, {"fetch.wait.max.ms": "20"})["fetch.wait.max.ms"] == "20"


def test_new_topics_are_asked_for_one_by_one_but_not_a_big_assignment() -> None:
    topics = {f"t{i}": 1 for i in range(6)}
    consumer = FakeConsumer({**topics, "big": _warm.LEARN_MAX_PARTITIONS + 1})
    settings = FetchSettings(source_name="s", reader_index=0, batch_max_records=10, metrics=_Metrics())
    fetcher = ClusterFetcher("east", {}, settings, FakeReaderContext(), lambda ids: None, consumer=consumer)
    fetcher.start()
    try:
        fetcher.add_splits([_split(t, 0) for t in topics])
        assert _wait_for(consumer, 7) == [
            *[("metadata", t) for t in sorted(topics)],
            ("assign", [(t, 0) for t in sorted(topics)]),
        ]
        fetcher.remove_topics(["t0"])
        fetcher.add_splits([_split("t0", 0)])  # one topic again: asked for by name
        assert _wait_for(consumer, 10)[7:] == [
            ("unassign", [("t0", 0)]),
            ("metadata", "t0"),
            ("assign", [("t0", 0)]),
        ]
        big = [_split("big", p) for p in range(_warm.LEARN_MAX_PARTITIONS + 1)]
        fetcher.add_splits(big)  # left to the client's own metadata request (closing it stays quick)
        assert _wait_for(consumer, 11)[10:] == [("assign", [("big", p) for p in range(len(big))])]
    finally:
        fetcher.stop()
