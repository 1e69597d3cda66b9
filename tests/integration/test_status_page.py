"""The admin status page of a real source, rendered by headless Chromium (Debian's ``chromium`` package).

Chromium is not installed by the tests: without ``/usr/bin/chromium`` (``apt-get install -y chromium``) they
skip. The screenshot is kept in ``test-artifacts/status-page.png`` for people (and CI artifacts) to look at.
"""

from __future__ import annotations

import html.parser
import subprocess
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from harness.chromium import MISSING, SKIP_REASON, headless_args
from harness.scenario import builder, cluster_md, stream, wait_for
from multicluster_source import SourceStream

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def _chromium(tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    args = [*headless_args(profile, "--window-size=1200,900", *extra), url]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


class _Rows(html.parser.HTMLParser):
    """Collects the data-* attributes of table rows by table id, and each row's cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[tuple[dict[str, str], list[str]]]] = {}
        self.badge = ""
        self._table: str | None = None
        self._row: tuple[dict[str, str], list[str]] | None = None
        self._cell: list[str] | None = None
        self._in_badge = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "table":
            self._table = a.get("id")
        elif tag == "tr" and self._table is not None and any(k.startswith("data-") for k in a):
            self._row = ({k[5:]: v for k, v in a.items() if k.startswith("data-")}, [])
        elif tag == "td" and self._row is not None:
            self._cell = []
        elif tag == "span" and a.get("id") == "health":
            self._in_badge = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._row is not None and self._cell is not None:
            self._row[1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            self.tables.setdefault(self._table, []).append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "span":
            self._in_badge = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._in_badge:
            self.badge += data


class _SlowCaller:
    """Polls a stream a few records at a time, so the source stays behind and shows lag."""

    def __init__(self, s: SourceStream) -> None:
        self.s = s
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-slow-caller", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.count += len(self.s.poll(timeout=0.1, max_records=20))
            self._stop.wait(0.2)

    def __enter__(self) -> _SlowCaller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.mark.skipif(MISSING, reason=SKIP_REASON)
def test_status_page_shows_clusters_readers_and_lag(kafka_clusters, tmp_path: Path) -> None:
    east, west = kafka_clusters(2)
    te = east.create_topic("page", partitions=2)
    tw = west.create_topic("page", partitions=1)
    east.produce_n(te, 6000, partitions=2)
    west.produce_n(tw, 3000, partitions=1)
    source = (
        builder([stream("orders", cluster_md(east, te), cluster_md(west, tw))])
        .set_name("pagesource")
        .set_property("reader.buffer.max.batches", "1")
        .set_property("reader.batch.max.records", "10")
        .build()
    )
    registry = CollectorRegistry()
    with (
        source.open(parallelism=2, registry=registry, admin_address="127.0.0.1:0") as s,
        _SlowCaller(s) as caller,
    ):
        url = s.admin_url
        assert url is not None

        def lagging() -> bool:
            rows = s.status()["lag"]
            return len(rows) == 3 and any((r["lag"] or 0) > 0 for r in rows)

        assert wait_for(lagging, 30), s.status()["lag"]
        assert wait_for(lambda: len(s.tracked_topics()) == 2, 30)

        dom = _chromium(tmp_path, url, "--dump-dom")
        assert dom.returncode == 0, dom.stderr[-2000:]
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "status-page.png"
        shot.unlink(missing_ok=True)
        result = _chromium(tmp_path, url, f"--screenshot={shot}")
        assert result.returncode == 0, result.stderr[-2000:]
        assert caller.count < 9000  # still behind while the page was taken

    assert shot.exists() and shot.stat().st_size > 10_000
    page = _Rows()
    page.feed(dom.stdout)
    assert page.badge == "ready"
    clusters = {attrs["cluster"]: cells for attrs, cells in page.tables["clusters"]}
    assert set(clusters) == {east.cluster_id, west.cluster_id}
    assert clusters[east.cluster_id][1] == east.bootstrap_servers
    assert clusters[east.cluster_id][2] == te  # metadata topics
    assert clusters[east.cluster_id][3] == te  # topics read (tracking)
    assert clusters[west.cluster_id][4] == "1"  # assigned splits
    lag = {
        (a["cluster"], a["topic"], int(a["partition"])): int(cells[4])
        for a, cells in page.tables["lag"]
        if cells[4] != "-"
    }
    assert set(lag) == {(east.cluster_id, te, 0), (east.cluster_id, te, 1), (west.cluster_id, tw, 0)}
    assert sum(lag.values()) > 0
    readers = {a["reader"]: cells for a, cells in page.tables["readers"]}
    assert set(readers) == {"0", "1"} and all(cells[1] == "running" for cells in readers.values())
    assert sum(int(cells[2]) for cells in readers.values()) == 3
    assert [a["stream"] for a, _ in page.tables["streams"]] == ["orders"]
