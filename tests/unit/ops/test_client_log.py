"""What a cluster that is down writes to the log, and how the enumerator waits for it (issue 25)."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import IsolationLevel, KafkaError, TopicPartition

from multicluster_source.enumerator._offsets import (
    OffsetsInitializer,
    ResolutionStopped,
    await_result,
    resolve_offsets,
)
from multicluster_source.metadata._connection import (
    CONNECTION_DEFAULTS,
    ThrottledClientLog,
    with_connection_defaults,
)
from multicluster_source.ops._clientlog import ClientErrorReporter, client_logging

REFUSED = "[thrd:h:1/bootstrap]: h:1/bootstrap: Connect to ipv4#h:1 failed: Connection refused (after {}ms in state CONNECT)"


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def collect() -> Any:
    handler = Collect()
    logger = logging.getLogger("test.clientlog")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield logger, handler
    logger.removeHandler(handler)


def test_identical_librdkafka_lines_are_logged_once_per_interval_with_a_count(
    collect: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, handler = collect
    now = [100.0]
    monkeypatch.setattr("multicluster_source.metadata._connection.time.monotonic", lambda: now[0])
    log = ThrottledClientLog(logger, quiet_s=30.0)
    for i in range(50):  # one line per connection attempt, each with its own "after Nms"
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", REFUSED.format(i % 3))
        now[0] += 0.1
    log.log(logging.WARNING, "%s [%s] %s", "CONFWARN", "rdkafka#consumer-1", "something else")
    assert len(handler.lines) == 2 and log.lines == 51
    assert handler.lines[0].startswith("FAIL [rdkafka#consumer-1] [thrd:h:1/bootstrap]")
    now[0] += 30.0
    log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", REFUSED.format(7))
    assert handler.lines[-1].endswith("(49 identical lines in the last 35 s)")


def test_client_errors_are_logged_once_per_interval_with_a_count(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [0.0]
    monkeypatch.setattr("multicluster_source.ops._clientlog.time.monotonic", lambda: now[0])
    reporter = ClientErrorReporter("down", "reader 0", quiet_s=30.0)
    refused = KafkaError(KafkaError._TRANSPORT, "Connect to ipv4#h:1 failed: Connection refused")
    caplog.set_level(logging.WARNING, logger="multicluster_source.reader")
    for _ in range(100):
        reporter(refused)
        now[0] += 0.05
    now[0] = 31.0
    reporter(refused)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and reporter.count == 101
    assert lines[0].startswith("cluster=down: reader 0 client error _TRANSPORT: ")
    assert lines[1].endswith("(99 more times in the last 31 s)")
    assert reporter.last is not None and "Connection refused" in reporter.last


def test_every_client_gets_the_connection_defaults_unless_set() -> None:
    assert with_connection_defaults({}) == dict(CONNECTION_DEFAULTS)
    assert CONNECTION_DEFAULTS["metadata.recovery.strategy"] == "none"
    mine = {"reconnect.backoff.ms": "500", "metadata.recovery.strategy": "rebootstrap"}
    assert with_connection_defaults(mine) == mine
    assert isinstance(client_logging("east", "reader 0")["logger"], ThrottledClientLog)


def test_a_wait_for_a_cluster_ends_when_stopped() -> None:
    stop = threading.Event()
    never: Future[Any] = Future()
    stop.set()
    with pytest.raises(ResolutionStopped):
        await_result(never, 30.0, stop)
    with pytest.raises(TimeoutError):
        await_result(never, 0.25, threading.Event())
    done: Future[Any] = Future()
    done.set_result(7)
    assert await_result(done, 1.0, threading.Event()) == 7


class OffsetsAdmin:
    """Answers list_offsets with 11 under read_committed (the last stable offset) and 16 otherwise."""

    def __init__(self) -> None:
        self.isolation: list[Any] = []

    def list_offsets(
        self, request: dict[TopicPartition, Any], isolation_level: Any, request_timeout: float
    ) -> dict[TopicPartition, Future[Any]]:
        self.isolation.append(isolation_level)
        out: dict[TopicPartition, Future[Any]] = {}
        for tp in request:
            fut: Future[Any] = Future()
            committed = isolation_level == IsolationLevel.READ_COMMITTED
            fut.set_result(SimpleNamespace(offset=11 if committed else 16))
            out[tp] = fut
        return out


@pytest.mark.parametrize(("read_committed", "end"), [(True, 11), (False, 16)])
def test_latest_asks_for_the_end_the_readers_isolation_level_sees(read_committed: bool, end: int) -> None:
    admin = OffsetsAdmin()
    found = resolve_offsets(
        OffsetsInitializer.latest(),
        admin=admin,
        cluster_id="east",
        group_id=None,
        partitions=[("t", 0)],
        read_committed=read_committed,
    )
    assert found == {("t", 0): end}
    expected = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
    assert admin.isolation == [expected]
