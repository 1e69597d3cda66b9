import logging
import re

import pytest

from multicluster_source.exceptions import ConfigurationError, MetadataValidationError
from multicluster_source.metadata import (
    ClusterMetadata,
    KafkaMetadataService,
    KafkaStream,
    KafkaStreamSubscriber,
    StaticMetadataService,
    StreamPatternSubscriber,
    StreamSetSubscriber,
)


def stream(stream_id: str, cluster: str = "c") -> KafkaStream:
    return KafkaStream(stream_id, {cluster: ClusterMetadata(cluster, f"{cluster}:9092", frozenset({"t"}))})


SERVICE = StaticMetadataService(
    [stream("orders"), stream("orders-eu"), stream("payments", "p"), stream("my-orders")]
)


def ids(streams: set[KafkaStream]) -> set[str]:
    return {s.stream_id for s in streams}


def test_set_subscriber_returns_known_streams_only(caplog):
    subscriber = StreamSetSubscriber(["orders", "missing"])
    assert isinstance(subscriber, KafkaStreamSubscriber)
    with caplog.at_level(logging.DEBUG, logger="multicluster_source.metadata"):
        assert ids(subscriber.get_subscribed_streams(SERVICE)) == {"orders"}
    assert any("missing" in r.getMessage() and r.levelno == logging.DEBUG for r in caplog.records)


def test_set_subscriber_is_a_value():
    assert StreamSetSubscriber(["a", "b"]) == StreamSetSubscriber(("b", "a", "a"))
    assert StreamSetSubscriber(["a"]).stream_ids == frozenset({"a"})
    with pytest.raises(TypeError):
        StreamSetSubscriber("orders")


def test_pattern_subscriber_uses_search():
    assert ids(StreamPatternSubscriber(r"orders").get_subscribed_streams(SERVICE)) == {
        "orders",
        "orders-eu",
        "my-orders",
    }
    assert ids(StreamPatternSubscriber(r"^orders-.*").get_subscribed_streams(SERVICE)) == {"orders-eu"}
    compiled = re.compile(r"PAY", re.IGNORECASE)
    assert ids(StreamPatternSubscriber(compiled).get_subscribed_streams(SERVICE)) == {"payments"}
    assert StreamPatternSubscriber("x").pattern.pattern == "x"


def test_invalid_pattern_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="invalid stream pattern"):
        StreamPatternSubscriber("(")


def test_static_service():
    assert isinstance(SERVICE, KafkaMetadataService)
    assert ids(SERVICE.get_all_streams()) == {"orders", "orders-eu", "payments", "my-orders"}
    assert ids(set(SERVICE.describe_streams(["orders", "zzz"]).values())) == {"orders"}
    assert SERVICE.is_cluster_active("p") and not SERVICE.is_cluster_active("nope")
    SERVICE.close()


def test_static_service_validates_like_a_file():
    with pytest.raises(MetadataValidationError) as info:
        StaticMetadataService(
            [
                KafkaStream("a", {"east": ClusterMetadata("east", "e1:9092", frozenset({"t"}))}),
                KafkaStream("b", {"east": ClusterMetadata("east", "e2:9092", frozenset({"t"}))}),
            ]
        )
    assert info.value.source == "static"
    assert "east" in str(info.value)
    with pytest.raises(MetadataValidationError):
        StaticMetadataService(
            [KafkaStream("a", {"bad id": ClusterMetadata("bad id", "b", frozenset({"t"}))})]
        )
