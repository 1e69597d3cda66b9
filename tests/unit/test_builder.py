"""The builder validates in one place and names what is wrong."""

from __future__ import annotations

import re

import pytest

from multicluster_source import (
    ConfigurationError,
    MultiClusterKafkaSource,
    OffsetsInitializer,
    StaticMetadataService,
)


def test_two_subscriber_setters_fail_naming_both() -> None:
    b = MultiClusterKafkaSource.builder().set_stream_ids(["a"])
    with pytest.raises(ConfigurationError) as info:
        b.set_stream_pattern("x")
    assert "set_stream_pattern" in str(info.value) and "set_stream_ids" in str(info.value)


def test_required_parts_are_named() -> None:
    with pytest.raises(ConfigurationError, match="set_kafka_metadata_service"):
        MultiClusterKafkaSource.builder().set_stream_ids(["a"]).build()
    with pytest.raises(ConfigurationError, match="subscriber"):
        MultiClusterKafkaSource.builder().set_kafka_metadata_service(StaticMetadataService([])).build()


def test_options_and_client_properties_are_validated_by_name() -> None:
    b = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([]))
        .set_stream_ids(["a"])
    )
    with pytest.raises(ConfigurationError, match="stream-enumerator-mode"):
        b.set_property("stream-enumerator-mode", "sideways").build()
    b = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([]))
        .set_stream_ids(["a"])
    )
    with pytest.raises(ConfigurationError, match=re.escape("fetch.bogus.bytes")):
        b.set_property("fetch.bogus.bytes", "1").build()
    b = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([]))
        .set_stream_ids(["a"])
    )
    with pytest.raises(ConfigurationError, match=re.escape("enable.auto.commit")):
        b.set_property("enable.auto.commit", "true").build()
    b = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([]))
        .set_stream_ids(["a"])
    )
    with pytest.raises(ConfigurationError, match="set_group_id"):
        b.set_property("group.id", "x").build()


def test_committed_offsets_need_a_group() -> None:
    b = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([]))
        .set_stream_ids(["a"])
        .set_starting_offsets(OffsetsInitializer.committed())
    )
    with pytest.raises(ConfigurationError, match="set_group_id"):
        b.build()


def test_a_valid_source_keeps_options_and_client_properties_apart() -> None:
    source = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([]))
        .set_stream_ids(["a"])
        .set_group_id("billing")
        .set_properties({"fetch.min.bytes": "1", "stream-metadata-discovery-interval-ms": "1000"})
        .build()
    )
    assert source.client_properties == {"fetch.min.bytes": "1"}
    assert source.options.stream_metadata_discovery_interval_ms == 1000
    assert source.name == "billing" and not source.bounded


@pytest.mark.parametrize("bad", ["", "has space", "a/b"])
def test_names_are_checked(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="set_name"):
        MultiClusterKafkaSource.builder().set_name(bad)


def test_open_arguments_are_checked() -> None:
    source = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([]))
        .set_stream_ids(["a"])
        .build()
    )
    with pytest.raises(ConfigurationError, match="parallelism"):
        source.open(parallelism=0)
    with pytest.raises(ConfigurationError, match="checkpoint_dir"):
        source.open(checkpoint_interval=1.0)


def test_offsets_initializer_validates() -> None:
    with pytest.raises(ConfigurationError, match="reset"):
        OffsetsInitializer.committed(reset="sometimes")
    with pytest.raises(ConfigurationError, match="topic/partition"):
        OffsetsInitializer.offsets({"nopartition": 1})
    with pytest.raises(ConfigurationError, match="timestamp"):
        OffsetsInitializer.timestamp(-5)
    assert OffsetsInitializer.offsets({"c/t/0": 3}).explicit == {"c/t/0": 3}
