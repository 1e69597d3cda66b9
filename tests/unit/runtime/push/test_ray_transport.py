"""``runtime="ray"``: how the driver connects to Ray (no actors: Ray refuses before it connects)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from multicluster_source import ClusterMetadata, KafkaStream, MultiClusterKafkaSource, StaticMetadataService
from multicluster_source.exceptions import ConfigurationError
from multicluster_source.ops._metrics import SourceMetrics
from multicluster_source.runtime.push.transports._ray import RayTransport


def _source() -> MultiClusterKafkaSource:
    md = ClusterMetadata("east", "127.0.0.1:1", frozenset({"t"}))
    b = MultiClusterKafkaSource.builder().set_kafka_metadata_service(
        StaticMetadataService([KafkaStream("s", {"east": md})])
    )
    return b.set_stream_ids(["s"]).set_group_id("g").build()


def test_node_settings_refused_by_a_running_ray_name_the_way_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with a Ray running (here: ``RAY_ADDRESS``) and ``ray_init`` sized for a Ray of the run's own:
    Ray's bare "must not be provided" becomes an error that says why and what to pass."""
    ray = pytest.importorskip(
        "ray", reason="Ray is not installed (pip install 'multicluster-kafka-source[ray]')"
    )
    if ray.is_initialized():
        pytest.skip("Ray is initialized in this process: run() would not call ray.init")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    transport = RayTransport(_source(), lambda records: None, 1, {}, {"ray_init": {"num_cpus": 2}})
    with pytest.raises(ConfigurationError, match="ray_address='local'") as caught:
        transport.start(lambda index, message: None, SourceMetrics(CollectorRegistry(), "s"))
    assert "num_cpus" in str(caught.value) and "RAY_ADDRESS" in str(caught.value)
    assert not ray.is_initialized()
