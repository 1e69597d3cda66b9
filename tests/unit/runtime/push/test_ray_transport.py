"""``runtime="ray"``: how the driver connects to Ray (no actors: Ray refuses before it connects).

The check runs in a process of its own: the suite's integration tests may have left Ray initialized in
this one, and then ``run()`` does not call ``ray.init`` at all."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]

_CHECK = textwrap.dedent(
    """
    import ray
    from prometheus_client import CollectorRegistry

    from multicluster_source import ClusterMetadata, KafkaStream, MultiClusterKafkaSource
    from multicluster_source import StaticMetadataService
    from multicluster_source.exceptions import ConfigurationError
    from multicluster_source.ops._metrics import SourceMetrics
    from multicluster_source.runtime.push.transports._ray import RayTransport

    md = ClusterMetadata("east", "127.0.0.1:1", frozenset({"t"}))
    service = StaticMetadataService([KafkaStream("s", {"east": md})])
    source = MultiClusterKafkaSource.builder().set_kafka_metadata_service(service)
    source = source.set_stream_ids(["s"]).set_group_id("g").build()
    transport = RayTransport(source, lambda records: None, 1, {}, {"ray_init": {"num_cpus": 2}})
    try:
        transport.start(lambda index, message: None, SourceMetrics(CollectorRegistry(), "s"))
    except ConfigurationError as exc:
        print("ConfigurationError:", exc)
    except BaseException as exc:
        print(type(exc).__name__ + ":", exc)
    print("initialized:", ray.is_initialized())
    """
)


def test_node_settings_refused_by_a_running_ray_name_the_way_out() -> None:
    """A machine with a Ray running (here: ``RAY_ADDRESS``) and ``ray_init`` sized for a Ray of the run's own:
    Ray's bare "must not be provided" becomes an error that says why and what to pass."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'multicluster-kafka-source[ray]')")
    # nothing listens at that address: Ray refuses before it connects
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": "127.0.0.1:1"}
    done = subprocess.run(
        [sys.executable, "-c", _CHECK], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    error, initialized = done.stdout.strip().splitlines()[-2:]
    assert error.startswith("ConfigurationError: run(runtime='ray')"), error
    assert "ray_address='local'" in error and "num_cpus" in error and "RAY_ADDRESS" in error
    assert initialized == "initialized: False"
