"""Broker faults on real Apache Kafka: one cluster goes away and comes back while the others keep flowing."""

from __future__ import annotations

import logging
import time

import pytest

from harness.cluster import Cluster
from harness.scenario import builder, cluster_md, drain, settle, stream
from multicluster_source import SourceRecord

pytestmark = pytest.mark.integration


def test_stopped_broker_other_cluster_keeps_flowing_then_resumes(
    kafka_cluster: Cluster, fresh_cluster, caplog: pytest.LogCaptureFixture
) -> None:
    flaky: Cluster = fresh_cluster("flaky")
    te = kafka_cluster.create_topic("steady", partitions=1)
    tf = flaky.create_topic("flaky", partitions=2)
    flaky.produce_n(tf, 100, partitions=2, prefix="before")
    md = [stream("s", cluster_md(kafka_cluster, te), cluster_md(flaky, tf))]
    caplog.set_level(logging.WARNING, logger="multicluster_source")
    source = (
        builder(md).set_properties({"reconnect.backoff.max.ms": "1000", "socket.timeout.ms": "5000"}).build()
    )
    got = []
    with source.open(parallelism=2) as s:
        got += drain(s, 100)
        flaky.stop_node(0)
        # While flaky is down, the steady cluster delivers every record within seconds of its production.
        for i in range(5):
            kafka_cluster.produce(te, [f"steady-{i}".encode()])
            wanted = f"steady-{i}".encode()

            def arrived_now(g: list[SourceRecord], wanted: bytes = wanted) -> bool:
                return any(r.value == wanted for r in g)

            arrived = drain(s, 0, timeout=10, until=arrived_now)
            assert arrived_now(arrived), f"steady-{i} did not arrive"
            got += arrived
            time.sleep(0.5)
        flaky.start_node(0)
        flaky.produce_n(tf, 50, partitions=2, prefix="after")
        got += drain(s, 0, timeout=60, until=lambda g: sum(r.topic == tf for r in got + g) >= 150)
        got += settle(s, 1.0)
    from_flaky = sorted(r.value for r in got if r.topic == tf)
    expected = sorted(
        [f"before-{i}".encode() for i in range(100)] + [f"after-{i}".encode() for i in range(50)]
    )
    assert from_flaky == expected, (
        "the restarted cluster must resume where it was: nothing lost, nothing re-read"
    )
    assert sorted(r.value for r in got if r.topic == te) == [f"steady-{i}".encode() for i in range(5)]
    assert "cluster=flaky" in caplog.text, "the outage must be visible in the logs with the cluster id"


def test_topic_deleted_under_a_running_reader_does_not_stop_the_others(kafka_cluster: Cluster) -> None:
    keep = kafka_cluster.create_topic("keep", partitions=1)
    doomed = kafka_cluster.create_topic("doomed", partitions=1)
    kafka_cluster.produce(doomed, [b"d1"])
    md = [stream("s", cluster_md(kafka_cluster, keep, doomed))]
    with builder(md).build().open() as s:
        assert [r.value for r in drain(s, 1)] == [b"d1"]
        kafka_cluster.delete_topic(doomed)
        time.sleep(1.0)
        kafka_cluster.produce(keep, [b"k1", b"k2"])
        got = drain(s, 2, timeout=30)
    assert [r.value for r in got] == [b"k1", b"k2"]
