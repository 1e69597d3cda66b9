"""The documentation site as a reader sees it: built (mkdocs, strict), served on loopback, opened in headless
Chromium (Debian's ``chromium`` package; the test skips without ``/usr/bin/chromium``).

The home page, one guide and the API reference must render with their navigation and log no console error
(messages, uncaught exceptions, resources that fail to load). Chromium is driven over the DevTools protocol on
a pipe (``--remote-debugging-pipe``: NUL-terminated JSON on fds 3 and 4), which reports console errors with
their level; ``--dump-dom`` does not. Screenshots go to ``test-artifacts/docs-*.png`` for people to look at.

``./dev test`` builds the site before pytest and passes it in ``MCS_DOCS_SITE``; alone, the test builds it.
"""

from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from docblocks import ROOT
from harness.chromium import MISSING, SKIP_REASON, headless_args

ARTIFACTS = ROOT / "test-artifacts"

pytestmark = pytest.mark.skipif(MISSING, reason=SKIP_REASON)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("MCS_DOCS_SITE")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, name="docs-site-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _Browser:
    """Headless Chromium over the DevTools protocol on a pipe: one page, its console errors, screenshots."""

    def __init__(self, profile: Path) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def pipes_as_3_and_4() -> None:  # runs in the child before exec
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self._proc = subprocess.Popen(
            headless_args(profile, "--remote-debugging-pipe", "about:blank"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=pipes_as_3_and_4,
            close_fds=False,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next_id = 0
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._replies: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="docs-site-cdp", daemon=True)
        self._reader.start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(domain, session=True)
        self.call("Page.setLifecycleEventsEnabled", session=True, enabled=True)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            session=True,
            width=1440,
            height=900,
            deviceScaleFactor=1,
            mobile=False,
        )

    def _read(self) -> None:
        buffer = b""
        while True:
            chunk = os.read(self._from_chrome, 65536)
            if not chunk:
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message:
                    with self._lock:
                        waiter = self._replies.pop(message["id"], None)
                    if waiter is not None:
                        waiter.put(message)
                else:
                    self._events.put(message)

    def call(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its answer (30 s at most)."""
        with self._lock:
            self._next_id += 1
            ident = self._next_id
            reply: queue.Queue[dict[str, Any]] = queue.Queue()
            self._replies[ident] = reply
        message: dict[str, Any] = {"id": ident, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        answer = reply.get(timeout=30)
        assert "error" not in answer, f"{method}: {answer['error']}"
        result: dict[str, Any] = answer.get("result", {})
        return result

    def open(self, url: str) -> list[str]:
        """Load ``url`` until the network is idle; the console errors it logged meanwhile."""
        while not self._events.empty():
            self._events.get_nowait()
        self.call("Page.navigate", session=True, url=url)
        errors: list[str] = []
        while True:
            event = self._events.get(timeout=60)
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                errors.append(details.get("exception", {}).get("description") or details.get("text", ""))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                errors.append(f"{params['entry']['text']} {params['entry'].get('url', '')}")
            elif method == "Page.lifecycleEvent" and params.get("name") == "networkIdle":
                return errors

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression on the page."""
        return self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)[
            "result"
        ]["value"]

    def screenshot(self, path: Path) -> None:
        """A PNG of the visible page."""
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        """Close the browser and wait for it."""
        try:
            self.call("Browser.close")
        finally:
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            os.close(self._to_chrome)
            self._reader.join(timeout=5)
            os.close(self._from_chrome)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Browser]:
    b = _Browser(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield b
    finally:
        b.close()


_PAGE = """(() => ({
  title: document.title,
  h1: ((document.querySelector("article h1") || {}).textContent || "").replace("\u00b6", "").trim(),
  nav: Array.from(document.querySelectorAll("nav.md-nav--primary a.md-nav__link, nav.md-nav--primary label.md-nav__link"))
    .filter(a => a.offsetParent !== null).map(a => a.textContent.trim()),
  active: Array.from(document.querySelectorAll("nav.md-nav--primary .md-nav__link--active"))
    .map(a => a.textContent.trim()),
  toc: document.querySelectorAll("nav.md-nav--secondary a.md-nav__link").length,
  objects: Array.from(document.querySelectorAll("article .doc-heading")).map(h => h.id),
  images: Array.from(document.images).map(i => [i.getAttribute("src"), i.complete && i.naturalWidth > 0]),
}))()"""


def _look(browser: _Browser, url: str, shot: str) -> dict[str, Any]:
    errors = browser.open(url)
    assert errors == [], f"console errors on {url}: {errors}"
    page: dict[str, Any] = browser.evaluate(_PAGE)
    browser.screenshot(ARTIFACTS / shot)
    # the navigation, visible in the left sidebar: every section of mkdocs.yml
    for section in ("Getting started", "Concepts", "Guides", "Operations", "Reference"):
        assert section in page["nav"], (section, page["nav"])
    assert all(ok for _, ok in page["images"]), page["images"]
    return page


def test_the_home_page_renders_with_its_navigation(browser: _Browser, served: str) -> None:
    page = _look(browser, f"{served}/", "docs-home.png")
    assert page["h1"].strip() == "multicluster-kafka-source"
    assert "Home" in page["active"]


def test_a_guide_renders_with_its_navigation_and_table_of_contents(browser: _Browser, served: str) -> None:
    page = _look(browser, f"{served}/guides/migrate/", "docs-guide.png")
    assert page["h1"].strip().startswith("Migrate a stream between clusters")
    assert "Migrate a stream between clusters" in page["active"]
    assert page["toc"] >= 4  # the guide's steps in the table of contents


def test_the_concepts_page_shows_the_data_path_picture(browser: _Browser, served: str) -> None:
    page = _look(browser, f"{served}/concepts/", "docs-concepts.png")
    assert ["../assets/data-path.svg", True] in page["images"]


def test_the_api_reference_renders_the_docstrings(browser: _Browser, served: str) -> None:
    page = _look(browser, f"{served}/reference/api/", "docs-api.png")
    assert "Python API" in page["active"]
    for name in (
        "MultiClusterKafkaSource",
        "MultiClusterKafkaSourceBuilder",
        "SourceStream",
        "WatermarkStrategy",
    ):
        assert f"multicluster_source.{name}" in page["objects"], name
    assert "multicluster_source.MultiClusterKafkaSourceBuilder.set_stream_ids" in page["objects"]
    text = browser.evaluate('document.querySelector("article").innerText')
    assert "Build it with builder; run it with open:" in text
    assert ":meth:" not in text and ":class:" not in text  # docs/_griffe/rst_roles.py turned roles into code
