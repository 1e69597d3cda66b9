"""A source as a new user meets it, without brokers: subscribed stream ids the metadata lacks are warned
about and shown in ``status()``/``health()``, at start and after a change; a closed stream says so."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest

from multicluster_source import KafkaStream, MultiClusterKafkaSource, MultiClusterSourceError
from multicluster_source.exceptions import StreamClosedError
from multicluster_source.testing import InMemoryMetadataService


def _stream(stream_id: str) -> KafkaStream:
    # without clusters (allowed by validate=False below): no client is made, no broker needed
    return KafkaStream(stream_id, {})


def _wait(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _source(service: InMemoryMetadataService, *ids: str) -> MultiClusterKafkaSource:
    return (
        MultiClusterKafkaSource.builder()
        .set_name("billing")
        .set_kafka_metadata_service(service)
        .set_stream_ids(list(ids))
        .set_property("partition.discovery.interval.ms", "-1")
        .build()
    )


def test_a_subscribed_id_missing_at_start_is_a_warning_and_a_health_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = InMemoryMetadataService([])
    with caplog.at_level(logging.WARNING, logger="multicluster_source"):
        stream = _source(service, "orders", "ordres").open()
    with stream:
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("orders, ordres" in m and "no streams" in m for m in warnings), warnings
        status = stream.status()
        assert status["metadata"]["missing_streams"] == ["orders", "ordres"]
        health = stream.health()
        assert health["status"] == "not_ready"
        assert any("orders, ordres" in r for r in health["reasons"]), health


def test_a_typo_names_the_ids_that_exist_and_a_later_change_clears_the_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = InMemoryMetadataService([_stream("payments")], validate=False)
    with caplog.at_level(logging.WARNING, logger="multicluster_source"):
        stream = _source(service, "payments", "orders").open()
    with stream:
        message = next(r.getMessage() for r in caplog.records if "not in the metadata" in r.getMessage())
        assert "orders" in message and "it contains: payments" in message
        caplog.clear()
        service.set_streams([_stream("payments"), _stream("orders")])
        assert _wait(lambda: stream.status()["metadata"]["missing_streams"] == [])
        assert not any("not in the metadata" in r for r in stream.health()["reasons"])
        with caplog.at_level(logging.WARNING, logger="multicluster_source"):
            service.set_streams([_stream("orders")])  # and after a change that drops one
            assert _wait(lambda: stream.status()["metadata"]["missing_streams"] == ["payments"])
        assert any(
            "payments" in r.getMessage() and "it contains: orders" in r.getMessage() for r in caplog.records
        )


def test_poll_poll_batches_and_iteration_on_a_closed_stream_raise() -> None:
    stream = _source(InMemoryMetadataService([]), "orders").open()
    assert stream.poll(timeout=0.05) == []
    stream.close()
    for call in (lambda: stream.poll(timeout=0.05), lambda: stream.poll_batches(timeout=0.05)):
        with pytest.raises(StreamClosedError, match=r"billing: poll.* on a closed stream"):
            call()
    with pytest.raises(StreamClosedError, match="iterating on a closed stream"):
        iter(stream)
    assert issubclass(StreamClosedError, MultiClusterSourceError)
    assert issubclass(StreamClosedError, RuntimeError)
    stream.close()  # still idempotent


def test_iteration_ends_when_the_stream_is_closed_meanwhile() -> None:
    stream = _source(InMemoryMetadataService([]), "orders").open()
    closer = threading.Timer(0.3, stream.close)
    closer.name = "test-closer"
    closer.start()
    assert list(stream) == []  # ends, no error: the stream was open when iteration began
    closer.join()
