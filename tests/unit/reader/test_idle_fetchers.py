"""A reader closes the fetcher (client and fetch thread) of a cluster that has held no split for the window
(``_AHEAD_S``), and reads that cluster's splits that come later with a new one.

Fake consumers record the calls (``assign``, ``close``); the reader is driven as its runner does, by calling
``poll_events``; the window passes on a manual clock, in steps of the reader's idle check, not in real time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness.fake_consumer import FakeConsumer, FakeReaderContext
from multicluster_source._clock import ManualClock, clock, use
from multicluster_source.framework._events import MetadataUpdateEvent, StandbySplitsEvent
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.metadata import ClusterMetadata
from multicluster_source.reader import _multicluster
from multicluster_source.reader._multicluster import MultiClusterReader
from multicluster_source.reader._settings import FetchSettings, ReaderSettings

WINDOW_S = _multicluster._AHEAD_S
STEP_S = _multicluster._IDLE_CHECK_S


class _NoMetrics:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: self.calls.append(name)


class _Reader:
    """A reader of clusters east and west (topics orders and refunds) over fake consumers."""

    def __init__(self, *, bounded: bool = False) -> None:
        self.made: list[tuple[str, FakeConsumer]] = []  # (cluster, consumer) in the order they were opened
        self.context = FakeReaderContext()
        self.metrics = _NoMetrics()
        fetch = FetchSettings("s", 0, 10, self.metrics, consumer_factory=self._factory, poll_timeout_s=0.01)
        self.reader = MultiClusterReader(self.context, ReaderSettings("g", {}, "mcs", bounded, fetch))
        self.version = 0

    def _factory(self, conf: dict[str, Any]) -> FakeConsumer:
        consumer = FakeConsumer({"orders": 2, "refunds": 2})
        self.made.append((conf["bootstrap.servers"].split(":")[0], consumer))
        return consumer

    def metadata(self, **topics: set[str]) -> None:
        self.version += 1
        clusters = {cid: ClusterMetadata(cid, f"{cid}:9092", frozenset(t)) for cid, t in topics.items()}
        self.reader.handle_source_event(MetadataUpdateEvent(clusters, self.version))

    def clients(self, cluster: str) -> list[FakeConsumer]:
        return [c for cid, c in self.made if cid == cluster]

    def open_clients(self, cluster: str) -> int:
        return sum(1 for c in self.clients(cluster) if c.count("close") == 0)

    def let_pass(self, seconds: float) -> None:
        """Advance the manual clock by ``seconds``, one idle check at a time, the reader polled after each."""
        manual = clock()
        assert isinstance(manual, ManualClock)
        for _ in range(round(seconds / STEP_S)):
            manual.advance(STEP_S)
            self.reader.poll_events()

    def poll_until(self, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 10
        while not condition():
            assert time.monotonic() < deadline, "condition not met within 10 s"
            self.reader.poll_events()
            time.sleep(0.01)
        self.reader.poll_events()


@pytest.fixture(autouse=True)
def _manual_clock() -> Iterator[ManualClock]:
    with use(ManualClock()) as clock:
        yield clock


def _fetch_threads(cluster: str) -> list[str]:
    return [
        t.name for t in threading.enumerate() if t.name.startswith("mcs-fetch-") and t.name.endswith(cluster)
    ]


def test_a_fetcher_whose_topics_were_removed_is_closed_after_the_window_and_new_splits_get_a_new_one() -> (
    None
):
    r = _Reader()
    reader = r.reader
    try:
        r.metadata(east={"orders", "refunds"}, west={"orders"})
        reader.add_splits(
            [KafkaPartitionSplit("east", "orders", 0, 0), KafkaPartitionSplit("west", "orders", 0, 0)]
        )
        assert reader.status()["clusters"] == ["east", "west"]
        first = r.clients("east")[0]
        r.poll_until(lambda: first.count("assign") == 1)

        r.metadata(east={"refunds"}, west={"orders"})  # east stays in the metadata; its only read topic goes
        r.poll_until(lambda: reader.split_ids() == ["west/orders/0"])
        r.let_pass(WINDOW_S - 2 * STEP_S)
        assert reader.status()["clusters"] == ["east", "west"], "not before the window"
        assert first.count("close") == 0
        r.let_pass(3 * STEP_S)
        r.poll_until(lambda: reader.status()["clusters"] == ["west"])
        assert first.count("close") == 1
        assert r.open_clients("east") == 0 and not _fetch_threads("east")
        assert reader.split_ids() == ["west/orders/0"]
        assert r.open_clients("west") == 1  # west holds a split: untouched
        assert "remove_cluster" not in r.metrics.calls  # east is still in the metadata: its metrics stay

        reader.add_splits([KafkaPartitionSplit("east", "refunds", 1, 0)])  # splits of east again: read anew
        assert reader.status()["clusters"] == ["east", "west"]
        second = r.clients("east")[-1]
        assert second is not first
        r.poll_until(lambda: second.count("assign") == 1)
        assert second.calls[-1] == ("assign", [("refunds", 1)])
        assert reader.split_ids() == ["east/refunds/1", "west/orders/0"]
    finally:
        reader.close()
    assert all(c.count("close") == 1 for _cid, c in r.made)
    assert not r.context.errors


def test_a_fetcher_that_gets_splits_again_within_the_window_is_kept() -> None:
    r = _Reader()
    reader = r.reader
    try:
        r.metadata(east={"orders", "refunds"})
        reader.add_splits([KafkaPartitionSplit("east", "orders", 0, 0)])
        r.metadata(east={"refunds"})
        reader.poll_events()
        reader.add_splits([KafkaPartitionSplit("east", "refunds", 0, 0)])
        first = r.clients("east")[0]
        r.poll_until(lambda: first.count("assign") == 2)
        r.let_pass(WINDOW_S * 2)
        assert reader.status()["clusters"] == ["east"]
        assert first.count("close") == 0 and len(r.clients("east")) == 1
    finally:
        reader.close()


def test_bounded_splits_all_finished_close_the_fetcher_and_the_reader_stays_finished() -> None:
    r = _Reader(bounded=True)
    reader = r.reader
    try:
        r.metadata(east={"orders"})
        reader.add_splits([KafkaPartitionSplit("east", "orders", p, 5, stopping_offset=5) for p in range(2)])
        reader.notify_no_more_splits()
        r.poll_until(reader.is_finished)
        r.let_pass(WINDOW_S + 2 * STEP_S)
        r.poll_until(lambda: reader.status()["clusters"] == [])
        assert reader.is_finished()
        assert r.open_clients("east") == 0
    finally:
        reader.close()


def test_the_fetcher_of_a_cluster_the_reader_stands_by_for_is_kept() -> None:
    r = _Reader()
    reader = r.reader
    try:
        r.metadata(east={"orders", "refunds"})
        reader.add_splits([KafkaPartitionSplit("east", "orders", 0, 0)])
        reader.handle_source_event(StandbySplitsEvent((KafkaPartitionSplit("east", "orders", 1, 0),)))
        r.metadata(east={"refunds"})
        r.poll_until(lambda: reader.split_ids() == [])
        r.let_pass(WINDOW_S * 2)
        assert reader.status()["clusters"] == ["east"]  # its client is the one ready to take over
        assert reader.status()["warm_clients"] == []
        assert r.open_clients("east") == 1

        reader.handle_source_event(StandbySplitsEvent(()))  # no longer standing by: closed after the window
        r.let_pass(WINDOW_S + 2 * STEP_S)
        r.poll_until(lambda: reader.status()["clusters"] == [])
        assert r.open_clients("east") == 0
    finally:
        reader.close()
