"""The admin HTTP server of a running source: topic tracking, metrics, health, status and a status page.

Endpoints (JSON unless noted; errors are ``{"error_code": <status>, "message": ...}``)::

    GET  /sources                          ["<name>"]
    GET  /sources/{name}/topics            {"<name>": {"topics": {"<cluster>": ["<topic>", ...]}}}
    PUT  /sources/{name}/topics/reset      202; 403 when tracking or its reset is disabled; 404 unknown name
    GET  /sources/{name}/handovers         {"<name>": {"handovers": [...], "replicas": {...}}} (replicas)
    GET  /metrics                          Prometheus text of the stream's registry
    GET  /health                           200 {"status": "ready"} or 503 {"status": "not_ready", ...}
    GET  /status                           streams, clusters, splits per reader, lag, last reconciliation
    GET  /                                 an HTML page showing the status, refreshing itself every 2 s

It binds to a loopback address unless a bearer token is configured; with a token every request but
``/health`` (for probes) needs ``Authorization: Bearer <token>`` (401 otherwise). Answers carry bootstrap
servers and topics, never cluster properties; as a safety net, any secret-looking property value the
target names (:meth:`AdminTarget.secret_values`) is masked in every answer.

Here: the address and token checks, the server, routing and answers. What the server asks a source is
:class:`AdminTarget` (:mod:`multicluster_source.ops._admin_target`); the HTML page is rendered by
:mod:`multicluster_source.ops._status_page`.

Threads: ``mcs-admin-<source>`` accepts connections; each request runs on ``mcs-admin-<source>-request``
(HTTP/1.0, one request per connection, a 10 s socket timeout). :meth:`AdminServer.close` stops and joins them.
"""

from __future__ import annotations

import hmac
import html
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from multicluster_source.exceptions import ConfigurationError
from multicluster_source.ops._admin_target import AdminTarget
from multicluster_source.ops._status_page import render_status_page
from multicluster_source.ops._tracking import TopicTrackingDisabledError

__all__ = ["AdminServer", "check_admin_address", "parse_admin_address"]

_log = logging.getLogger("multicluster_source.admin")

_MIN_SECRET_LEN: Final = 4


# ------------------------------------------------------------------------------------------------ address


def parse_admin_address(address: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` -> ``(host, port)``; raises :class:`ConfigurationError`."""
    bad = ConfigurationError(
        f"open(admin_address=...): {address!r} must be 'host:port' (e.g. '127.0.0.1:0'; port 0 picks one)"
    )
    if not isinstance(address, str):
        raise bad
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise bad
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise bad
    port = int(port_text)
    if not host or port > 65535:
        raise bad
    return host, port


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def check_admin_address(address: str, token: str | None) -> tuple[str, int]:
    """Parse ``address``; refuse a non-loopback one unless a bearer ``token`` is configured."""
    host, port = parse_admin_address(address)
    if token is not None and (not isinstance(token, str) or len(token) < 8 or token != token.strip()):
        raise ConfigurationError("open(admin_token=...): needs a string of at least 8 characters, no spaces")
    if token is None and not _is_loopback(host):
        raise ConfigurationError(
            f"open(admin_address={address!r}): not a loopback address; the admin server answers anyone who "
            "can reach it, so a non-loopback address needs open(admin_token=...) (bearer token)"
        )
    return host, port


# ------------------------------------------------------------------------------------------------- server


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], admin: AdminServer, family: socket.AddressFamily) -> None:
        self.address_family = family
        self.admin = admin
        self._workers: list[threading.Thread] = []
        self._workers_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        worker = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name=f"mcs-admin-{self.admin.source_name}-request",
            daemon=True,
        )
        with self._workers_lock:
            self._workers = [w for w in self._workers if w.is_alive()]
            self._workers.append(worker)
        worker.start()

    def join_workers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._workers_lock:
            workers = list(self._workers)
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))


class AdminServer:
    """Serves the admin endpoints of ``targets`` (source name -> target) on ``host:port``."""

    def __init__(
        self,
        address: str,
        targets: Mapping[str, AdminTarget],
        *,
        token: str | None = None,
        source_name: str | None = None,
    ) -> None:
        host, port = check_admin_address(address, token)
        self.targets = dict(targets)
        self.source_name = source_name or "-".join(sorted(self.targets)) or "admin"
        self._token = token
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._server = _Server((host, port), self, family)
        except OSError as exc:
            raise ConfigurationError(f"open(admin_address={address!r}): cannot listen: {exc}") from exc
        bound = self._server.server_address
        bound_host = bound[0].decode() if isinstance(bound[0], bytes) else str(bound[0])
        bound_port = int(bound[1])
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        self.url = f"http://{shown}:{bound_port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"mcs-admin-{self.source_name}",
            daemon=True,
        )
        self._closed = False

    def start(self) -> AdminServer:
        """Start serving."""
        self._thread.start()
        _log.info("source=%s: admin server at %s", self.source_name, self.url)
        return self

    def close(self, timeout: float = 10.0) -> None:
        """Stop serving, close the socket, join the threads. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout)
        self._server.server_close()
        self._server.join_workers(timeout)

    def authorized(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header value passes (always, without a token)."""
        if self._token is None:
            return True
        expected = f"Bearer {self._token}".encode()
        return header is not None and hmac.compare_digest(header.strip().encode(), expected)

    def secrets(self) -> set[str]:
        """Every value to mask, over all targets."""
        out: set[str] = set()
        for target in self.targets.values():
            try:
                out.update(v for v in target.secret_values() if len(v) >= _MIN_SECRET_LEN)
            except Exception:
                _log.exception("admin: secret values of %s unavailable", target.name)
        if self._token is not None:
            out.add(self._token)
        return out


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"
    timeout = 10
    server_version = "multicluster-source-admin"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("admin %s: " + format, self.client_address[0], *args)

    # ------------------------------------------------------------------------------------------- routes

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("GET", head=True)

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str, *, head: bool = False) -> None:
        admin = self.server.admin
        path = urlsplit(self.path).path.rstrip("/") or "/"
        parts = [unquote(p) for p in path.split("/") if p]
        try:
            if path != "/health" and not admin.authorized(self.headers.get("Authorization")):
                self._error(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token", auth=True)
                return
            self._route(method, path, parts, head)
        except Exception as exc:
            _log.exception("admin: %s %s failed", method, path)
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")

    def _route(self, method: str, path: str, parts: list[str], head: bool) -> None:
        admin = self.server.admin
        routes = {
            "/": ("GET", self._page),
            "/index.html": ("GET", self._page),
            "/metrics": ("GET", self._metrics),
            "/health": ("GET", self._health),
            "/status": ("GET", self._status),
            "/sources": ("GET", lambda: self._json(HTTPStatus.OK, sorted(admin.targets))),
        }
        if path in routes:
            allowed, handler = routes[path]
            if method != allowed:
                self._not_allowed(allowed)
                return
            self._head = head
            handler()
            return
        if len(parts) == 3 and parts[0] == "sources" and parts[2] == "handovers":
            self._handovers(admin.targets.get(parts[1]), parts[1], method, head)
            return
        if len(parts) >= 3 and parts[0] == "sources" and parts[2] == "topics" and len(parts) <= 4:
            target = admin.targets.get(parts[1])
            if len(parts) == 3:
                want = "GET"
            elif parts[3] == "reset":
                want = "PUT"
            else:
                self._error(HTTPStatus.NOT_FOUND, f"no such resource: {path}")
                return
            if method != want:
                self._not_allowed(want)
                return
            if target is None:
                self._error(HTTPStatus.NOT_FOUND, f"unknown source {parts[1]!r}")
                return
            self._head = head
            self._topics(target, reset=want == "PUT")
            return
        self._error(HTTPStatus.NOT_FOUND, f"no such resource: {path}")

    def _handovers(self, target: AdminTarget | None, name: str, method: str, head: bool) -> None:
        """Replica handovers of one source: what each handed-over split started at, and what waits."""
        if method != "GET":
            self._not_allowed("GET")
            return
        if target is None:
            self._error(HTTPStatus.NOT_FOUND, f"unknown source {name!r}")
            return
        self._head = head
        status = target.status()
        replicas = status.get("replicas", {"pending": [], "held_topics": {}})
        self._json(HTTPStatus.OK, {name: {"handovers": status.get("handovers", []), "replicas": replicas}})

    def _topics(self, target: AdminTarget, *, reset: bool) -> None:
        try:
            if reset:
                target.reset_tracked_topics()
                self._send(HTTPStatus.ACCEPTED, b"", "application/json")
                return
            topics = target.tracked_topics()
        except TopicTrackingDisabledError as exc:
            self._error(HTTPStatus.FORBIDDEN, exc.message)
            return
        self._json(HTTPStatus.OK, {target.name: {"topics": topics}})

    def _metrics(self) -> None:
        targets = list(self.server.admin.targets.values())
        seen: set[int] = set()
        chunks: list[bytes] = []
        for target in targets:
            registry = target.metrics_registry
            if id(registry) not in seen:
                seen.add(id(registry))
                chunks.append(generate_latest(registry))
        self._send(HTTPStatus.OK, self._mask(b"".join(chunks).decode()).encode(), CONTENT_TYPE_LATEST)

    def _health(self) -> None:
        answers = {name: t.health() for name, t in self.server.admin.targets.items()}
        ready = all(a.get("status") == "ready" for a in answers.values())
        body: dict[str, Any] = {"status": "ready" if ready else "not_ready"}
        if len(answers) == 1:
            body.update(next(iter(answers.values())))
        else:
            body["sources"] = answers
        self._json(HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE, body)

    def _status(self) -> None:
        statuses = [t.status() for t in self.server.admin.targets.values()]
        self._json(HTTPStatus.OK, statuses[0] if len(statuses) == 1 else {"sources": statuses})

    def _page(self) -> None:
        statuses = [t.status() for t in self.server.admin.targets.values()]
        page = render_status_page(statuses)
        self._send(HTTPStatus.OK, self._mask(page, html_escaped=True).encode(), "text/html; charset=utf-8")

    # ------------------------------------------------------------------------------------------ answers

    _head = False

    def _mask(self, text: str, *, html_escaped: bool = False) -> str:
        for secret in self.server.admin.secrets():
            forms = {secret, json.dumps(secret)[1:-1]}
            if html_escaped:
                forms.add(html.escape(secret))
            for form in forms:
                if form in text:
                    text = text.replace(form, "***")
        return text

    def _json(self, status: HTTPStatus, doc: Any) -> None:
        text = json.dumps(doc, default=str)
        self._send(status, self._mask(text).encode(), "application/json")

    def _error(self, status: HTTPStatus, message: str, *, auth: bool = False) -> None:
        extra = {"WWW-Authenticate": 'Bearer realm="multicluster-source"'} if auth else {}
        text = json.dumps({"error_code": int(status), "message": message})
        self._send(status, self._mask(text).encode(), "application/json", extra)

    def _not_allowed(self, allowed: str) -> None:
        self._send(
            HTTPStatus.METHOD_NOT_ALLOWED,
            json.dumps({"error_code": 405, "message": f"method not allowed; use {allowed}"}).encode(),
            "application/json",
            {"Allow": allowed},
        )

    def _send(
        self, status: HTTPStatus, body: bytes, content_type: str, headers: Mapping[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if body and not self._head and self.command != "HEAD":
            self.wfile.write(body)
