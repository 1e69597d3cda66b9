"""The admin HTTP server against a fake source, with a real HTTP client (urllib)."""

from __future__ import annotations

import hmac
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

from multicluster_source import MultiClusterKafkaSource, StaticMetadataService
from multicluster_source.exceptions import ConfigurationError
from multicluster_source.ops._admin import AdminServer, check_admin_address, parse_admin_address
from multicluster_source.ops._admin_target import lag_rows
from multicluster_source.ops._metrics import SourceMetrics
from multicluster_source.ops._status_page import render_status_page
from multicluster_source.ops._topic_stores import InMemoryTopicStatusStore
from multicluster_source.ops._tracking import RESET_DISABLED, TRACKING_DISABLED, TopicTracker

SECRET = "hunter2-very-secret"


class FakeSource:
    """What SourceStream offers the admin server, with a status that (wrongly) leaks a secret."""

    def __init__(self, *, enabled: bool = True, allow_reset: bool = True) -> None:
        self.name = "billing"
        self.metrics_registry = CollectorRegistry()
        self.metrics = SourceMetrics(self.metrics_registry, "billing")
        self.metrics.set_offsets("east", "orders", 0, current=40, lag=7, committed=30)
        self.metrics.set_offsets("east", "other-source-topic", 0, current=1, lag=1)
        self.metrics.record_consumed("east", "orders", 40, 400)
        self.tracker = TopicTracker(
            "billing", InMemoryTopicStatusStore(), enabled=enabled, allow_reset=allow_reset
        )
        self.tracker.start()
        self.tracker.record("east", "orders", 0)
        self.ready = True
        self.resets = 0

    def tracked_topics(self) -> dict[str, list[str]]:
        return self.tracker.active()

    def reset_tracked_topics(self) -> int:
        self.resets += 1
        return self.tracker.reset()

    def health(self) -> dict[str, Any]:
        if self.ready:
            return {"status": "ready", "reasons": []}
        return {"status": "not_ready", "reasons": ["reader 1 is not running"]}

    def status(self) -> dict[str, Any]:
        clusters = {"east": {"bootstrap_servers": "east-1:9092", "topics": ["orders"], "assigned_splits": 1}}
        return {
            "source": self.name,
            "state": "running",
            "health": self.health(),
            "parallelism": 2,
            "streams": {"orders": {"east": ["orders"]}},
            "clusters": clusters,
            "readers": {
                "0": {"alive": True, "splits": ["east/orders/0"]},
                "1": {"alive": True, "splits": []},
            },
            "lag": lag_rows(self.metrics_registry, {"east": ["orders"]}),
            "last_reconciliation": {
                "version": 2,
                "at_ms": 1_700_000_000_000,
                "added": ["east"],
                "removed": ["west"],
                "reconnected": [],
                "topics_changed": [],
                "splits_retired": 3,
            },
            "metadata": {"version": 2, "failures_in_a_row": 0, "failures_total": 1.0, "retained_splits": 3},
            "tracking": {
                "enabled": True,
                "allow_reset": True,
                "store": "memory",
                "topics": {"east": ["orders"]},
            },
            "checkpoint": {"last_id": None, "restored_from": None},
            # A bug that must not leak: the safety net masks it.
            "debug": {"sasl.password": SECRET, "jaas": f"password='{SECRET}'"},
        }

    def secret_values(self) -> set[str]:
        return {SECRET}

    def close(self) -> None:
        self.tracker.close()
        self.metrics.close()


@pytest.fixture
def source() -> Iterator[FakeSource]:
    fake = FakeSource()
    yield fake
    fake.close()


@pytest.fixture
def server(source: FakeSource) -> Iterator[AdminServer]:
    srv = AdminServer("127.0.0.1:0", {"billing": source}, source_name="billing").start()
    yield srv
    srv.close()


def call(url: str, method: str = "GET", token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read()


# ------------------------------------------------------------------------------------------ endpoints


def test_get_topics(server: AdminServer) -> None:
    status, headers, body = call(f"{server.url}/sources/billing/topics")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"billing": {"topics": {"east": ["orders"]}}}


def test_get_handovers(server: AdminServer) -> None:
    status, _, body = call(f"{server.url}/sources/billing/handovers")
    assert status == 200
    assert json.loads(body) == {"billing": {"handovers": [], "replicas": {"pending": [], "held_topics": {}}}}
    assert call(f"{server.url}/sources/nope/handovers")[0] == 404
    assert call(f"{server.url}/sources/billing/handovers", method="PUT")[0] == 405


def test_reset_is_202_and_empties_topics(server: AdminServer, source: FakeSource) -> None:
    status, _, body = call(f"{server.url}/sources/billing/topics/reset", "PUT")
    assert status == 202 and body == b""
    assert source.resets == 1
    assert json.loads(call(f"{server.url}/sources/billing/topics")[2]) == {"billing": {"topics": {}}}


def test_unknown_source_is_404(server: AdminServer) -> None:
    for method, path in (("GET", "/sources/nope/topics"), ("PUT", "/sources/nope/topics/reset")):
        status, _, body = call(server.url + path, method)
        assert status == 404
        assert json.loads(body) == {"error_code": 404, "message": "unknown source 'nope'"}
    assert call(f"{server.url}/nothing/here")[0] == 404


def test_wrong_method_is_405(server: AdminServer) -> None:
    status, headers, _ = call(f"{server.url}/sources/billing/topics/reset")
    assert status == 405 and headers["Allow"] == "PUT"
    status, headers, _ = call(f"{server.url}/sources/billing/topics", "PUT")
    assert status == 405 and headers["Allow"] == "GET"
    assert call(f"{server.url}/status", "DELETE")[0] == 405


@pytest.mark.parametrize(
    ("enabled", "allow_reset", "get_status", "reset_message"),
    [(False, True, 403, TRACKING_DISABLED), (True, False, 200, RESET_DISABLED)],
)
def test_disabled_tracking_and_reset_are_403(
    enabled: bool, allow_reset: bool, get_status: int, reset_message: str
) -> None:
    fake = FakeSource(enabled=enabled, allow_reset=allow_reset)
    srv = AdminServer("127.0.0.1:0", {"billing": fake}).start()
    try:
        status, _, body = call(f"{srv.url}/sources/billing/topics")
        assert status == get_status
        if get_status == 403:
            assert json.loads(body) == {"error_code": 403, "message": TRACKING_DISABLED}
        status, _, body = call(f"{srv.url}/sources/billing/topics/reset", "PUT")
        assert status == 403
        assert json.loads(body) == {"error_code": 403, "message": reset_message}
    finally:
        srv.close()
        fake.close()


def test_metrics_is_prometheus_text(server: AdminServer) -> None:
    status, headers, body = call(f"{server.url}/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    text = body.decode()
    assert 'multicluster_source_records_consumed_total{cluster="east",topic="orders"} 40.0' in text
    assert 'multicluster_source_records_lag{cluster="east",partition="0",topic="orders"} 7.0' in text


def test_health_ready_and_not_ready(server: AdminServer, source: FakeSource) -> None:
    status, _, body = call(f"{server.url}/health")
    assert status == 200 and json.loads(body)["status"] == "ready"
    source.ready = False
    status, _, body = call(f"{server.url}/health")
    assert status == 503
    assert json.loads(body) == {"status": "not_ready", "reasons": ["reader 1 is not running"]}


def test_status_json_has_the_parts_and_lag_of_this_source_only(server: AdminServer) -> None:
    status, _, body = call(f"{server.url}/status")
    assert status == 200
    doc = json.loads(body)
    assert doc["clusters"]["east"]["bootstrap_servers"] == "east-1:9092"
    assert doc["readers"]["0"]["splits"] == ["east/orders/0"]
    assert doc["lag"] == [
        {
            "cluster": "east",
            "topic": "orders",
            "partition": 0,
            "current_offset": 40,
            "lag": 7,
            "committed_offset": 30,
        }
    ]
    assert doc["last_reconciliation"]["removed"] == ["west"]


def test_status_page_is_html_that_refreshes(server: AdminServer) -> None:
    status, headers, body = call(f"{server.url}/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    page = body.decode()
    assert '<meta http-equiv="refresh" content="2">' in page
    assert '<tr data-cluster="east"' in page and "east-1:9092" in page
    assert 'data-topic="orders" data-partition="0"' in page
    assert '<td class="num lagging">7</td>' in page
    assert "east/orders/0" in page


def test_no_secret_in_any_answer(server: AdminServer) -> None:
    for method, path in [
        ("GET", "/"),
        ("GET", "/status"),
        ("GET", "/health"),
        ("GET", "/metrics"),
        ("GET", "/sources"),
        ("GET", "/sources/billing/topics"),
        ("PUT", "/sources/billing/topics/reset"),
        ("GET", "/missing"),
    ]:
        _, headers, body = call(server.url + path, method)
        assert SECRET.encode() not in body, path
        assert SECRET not in json.dumps(headers), path
    assert b"***" in call(f"{server.url}/status")[2]


def test_page_escapes_html() -> None:
    page = render_status_page([{"source": "<script>x</script>", "clusters": {"<b>": {"topics": ["a&b"]}}}])
    assert "<script>x</script>" not in page and "&lt;script&gt;" in page and "a&amp;b" in page


def test_page_shows_replica_handovers_and_held_topics() -> None:
    handover = {
        "from": "east/orders/0",
        "to": "west/east.orders/0",
        "from_offset": 120,
        "to_offset": 117,
        "mode": "conservative",
        "max_repeats": 2,
        "detail": "sync 115 -> 112",
    }
    status = {
        "source": "s",
        "handovers": [handover],
        "replicas": {"pending": [], "held_topics": {"west": ["x"]}},
    }
    page = render_status_page([status])
    assert 'id="handovers"' in page and 'data-split="west/east.orders/0"' in page
    assert ">conservative<" in page and ">117<" in page and "sync 115 -&gt; 112" in page
    assert "west: not read (origin read)" in page
    assert 'id="handovers"' in render_status_page([{"source": "s"}])  # "no split handed over"


# ------------------------------------------------------------------------------------- binding and auth


def test_token_is_required_except_for_health(source: FakeSource) -> None:
    token = "s3cr3t-token-value"
    srv = AdminServer("127.0.0.1:0", {"billing": source}, token=token).start()
    try:
        status, headers, body = call(f"{srv.url}/sources/billing/topics")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
        assert json.loads(body)["error_code"] == 401
        assert call(f"{srv.url}/sources/billing/topics", token="wrong-token-value")[0] == 401
        assert call(f"{srv.url}/sources/billing/topics", token=token)[0] == 200
        assert call(f"{srv.url}/health")[0] == 200
        assert token.encode() not in call(f"{srv.url}/status", token=token)[2]
    finally:
        srv.close()


@pytest.mark.parametrize("address", ["0.0.0.0:0", "192.0.2.1:8080"])
def test_non_loopback_needs_a_token(address: str) -> None:
    with pytest.raises(ConfigurationError, match="admin_token"):
        check_admin_address(address, None)
    assert check_admin_address(address, "long-enough-token") == parse_admin_address(address)


@pytest.mark.parametrize("address", ["127.0.0.1:0", "localhost:0", "[::1]:0"])
def test_loopback_is_fine_without_token(address: str) -> None:
    check_admin_address(address, None)


@pytest.mark.parametrize("address", ["127.0.0.1", ":80", "host:port", "a:b:1", "127.0.0.1:70000", ""])
def test_bad_addresses(address: str) -> None:
    with pytest.raises(ConfigurationError, match="host:port"):
        parse_admin_address(address)


def test_short_token_refused() -> None:
    with pytest.raises(ConfigurationError, match="admin_token"):
        check_admin_address("127.0.0.1:0", "short")


def test_ipv6_loopback_serves(source: FakeSource) -> None:
    try:
        srv = AdminServer("[::1]:0", {"billing": source}).start()
    except ConfigurationError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    try:
        assert srv.url.startswith("http://[::1]:")
        assert call(f"{srv.url}/health")[0] == 200
    finally:
        srv.close()


def test_threads_are_named_and_stop(source: FakeSource) -> None:
    srv = AdminServer("127.0.0.1:0", {"billing": source}, source_name="billing").start()
    assert "mcs-admin-billing" in {t.name for t in threading.enumerate()}
    for _ in range(5):
        call(f"{srv.url}/status")
    srv.close()
    srv.close()  # idempotent
    assert not [t for t in threading.enumerate() if t.name.startswith("mcs-admin-billing")]
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{srv.url}/health", timeout=2)


def test_lag_rows_ignore_other_metrics() -> None:
    registry = CollectorRegistry()
    Counter("unrelated", "x", ["cluster", "topic", "partition"], registry=registry).labels(
        "e", "t", "0"
    ).inc()
    assert lag_rows(registry, {"e": ["t"]}) == []


# --------------------------------------------------------------------- every endpoint behind the token

ENDPOINTS = [
    ("GET", "/"),
    ("GET", "/index.html"),
    ("GET", "/metrics"),
    ("GET", "/status"),
    ("GET", "/sources"),
    ("GET", "/sources/billing/topics"),
    ("PUT", "/sources/billing/topics/reset"),
    ("GET", "/sources/other/topics"),  # unknown names and paths say nothing either
    ("GET", "/no/such/path"),
    ("POST", "/status"),
    ("DELETE", "/sources/billing/topics"),
    ("HEAD", "/status"),
]


def test_a_non_loopback_bind_without_a_token_is_refused_before_any_socket_or_thread() -> None:
    source = FakeSource()
    threads = {t.name for t in threading.enumerate()}
    try:
        for address in ("0.0.0.0:0", "[::]:0"):
            with pytest.raises(ConfigurationError, match=r"not a loopback address.*admin_token"):
                AdminServer(address, {"billing": source})
        assert {t.name for t in threading.enumerate()} - threads == set()
    finally:
        source.close()


def test_open_refuses_a_non_loopback_admin_address_without_a_token() -> None:
    built = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([]))
        .set_stream_ids(["orders"])
        .build()
    )
    before = {t.name for t in threading.enumerate()}
    with pytest.raises(ConfigurationError, match="admin_token"):
        built.open(admin_address="0.0.0.0:0")
    assert not [n for n in {t.name for t in threading.enumerate()} - before if n.startswith("mcs-")]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_every_endpoint_but_health_answers_401_without_the_token(method: str, path: str) -> None:
    source = FakeSource()
    token = "right-token-0123456789"
    # bound to every interface (allowed with a token), asked over loopback
    srv = AdminServer("0.0.0.0:0", {"billing": source}, token=token, source_name="billing").start()
    port = srv.url.rsplit(":", 1)[1]
    url = f"http://127.0.0.1:{port}{path}"
    try:
        for presented in (None, "wrong-token-0123456789", token[:-1], token + "x", ""):
            status, headers, body = call(url, method, presented)
            assert status == 401, (presented, status)
            assert headers["WWW-Authenticate"].startswith("Bearer")
            assert token.encode() not in body and SECRET.encode() not in body
        assert source.resets == 0, "a refused reset did nothing"
        assert call(url, method, token)[0] != 401
        assert call(f"http://127.0.0.1:{port}/health")[0] == 200, "probes need no token"
    finally:
        srv.close()
        source.close()


def test_the_token_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch, source: FakeSource) -> None:
    """Timing cannot be asserted reliably; what makes a compare constant-time is that every presented value
    goes through ``hmac.compare_digest`` (never ``==`` or a prefix check), whatever its length."""
    seen: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)  # looked up at each call by _admin
    token = "right-token-0123456789"
    srv = AdminServer("127.0.0.1:0", {"billing": source}, token=token)
    try:
        presented = ["Bearer wrong", f"Bearer {token[:-1]}", f"Bearer {token}", "Basic abc", ""]
        results = [srv.authorized(value) for value in presented]
        assert results == [False, False, True, False, False]
        assert [a for a, _ in seen] == [p.encode() for p in presented]
        assert all(b == f"Bearer {token}".encode() for _, b in seen)
        assert srv.authorized(None) is False  # no header: nothing secret-dependent to time
    finally:
        srv.close()


def test_page_shows_a_cluster_error_escaped(source: FakeSource) -> None:
    status = source.status()
    status["clusters"]["east"]["error"] = "_AUTHENTICATION: SASL authentication error: <bad>"
    page = render_status_page([status])
    assert "_AUTHENTICATION: SASL authentication error: &lt;bad&gt;" in page


def test_page_shows_the_watermark_and_the_splits_alignment_pauses() -> None:
    status = {"source": "s", "event_time": {"watermark": 1700000000000, "paused": ["old/orders/0"]}}
    page = render_status_page([status])
    assert "1700000000000" in page and "paused by watermark alignment" in page and "old/orders/0" in page
