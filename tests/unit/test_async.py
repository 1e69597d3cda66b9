"""AsyncSourceStream without brokers: bad arguments fail at once, use before opening is a clear error."""

from __future__ import annotations

import asyncio

import pytest

from multicluster_source import (
    AsyncSourceStream,
    ClusterMetadata,
    ConfigurationError,
    KafkaStream,
    MultiClusterKafkaSource,
    StaticMetadataService,
)


def _source() -> MultiClusterKafkaSource:
    md = ClusterMetadata("east", "127.0.0.1:1", frozenset({"orders"}))
    service = StaticMetadataService([KafkaStream("orders", {"east": md})])
    return (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(service)
        .set_stream_ids(["orders"])
        .build()
    )


def test_bad_open_async_arguments_raise_at_once() -> None:
    source = _source()
    with pytest.raises(ConfigurationError, match="parallelism"):
        source.open_async(parallelism=0)
    with pytest.raises(ConfigurationError, match=r"checkpoint_interval.*needs checkpoint_dir"):
        source.open_async(checkpoint_interval=5.0)


def test_an_unopened_stream_says_how_to_open_it() -> None:
    stream = _source().open_async()
    assert isinstance(stream, AsyncSourceStream)
    with pytest.raises(RuntimeError, match=r"async with source\.open_async"):
        asyncio.run(stream.poll(timeout=0))
    assert stream.watermark is None
    asyncio.run(stream.close())  # closing what never opened is a no-op
