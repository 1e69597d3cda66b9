"""The stall watchdog (issue 33): a partition whose position stands still while its broker has records beyond
it is logged, counted, shown in the status, and its consumer is made again at its position; an idle
partition, one held by watermark alignment, and one whose client moved past transaction markers are not."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from confluent_kafka import Message, TopicPartition
from prometheus_client import CollectorRegistry

from harness.fake_consumer import FakeReaderContext
from multicluster_source._clock import ManualClock, use
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.ops._metrics import SourceMetrics
from multicluster_source.reader._fetcher import ClusterFetcher
from multicluster_source.reader._settings import FetchSettings
from multicluster_source.reader._stalls import StallWatch


class _Client:
    """A consumer of one partition ``t/0`` whose log holds ``end`` records; ``stuck`` ones return nothing."""

    def __init__(self, end: int, stuck: bool, position: int | None = None) -> None:
        self.end = end
        self.stuck = stuck
        self.next = 0
        self.client_position = position
        self.assigned: list[tuple[str, int, int]] = []
        self.closed = False
        self.lock = threading.Lock()

    def incremental_assign(self, tps: list[Any]) -> None:
        with self.lock:
            self.assigned += [(tp.topic, tp.partition, tp.offset) for tp in tps]
            self.next = tps[0].offset

    def consume(self, n: int, timeout: float) -> list[Any]:
        with self.lock:
            if self.stuck or self.next >= self.end:
                out = []
            else:
                out = [
                    Message(topic="t", partition=0, offset=o, value=b"v", timestamp=(1, o))
                    for o in range(self.next, min(self.end, self.next + n))
                ]
                self.next += len(out)
        if not out:
            time.sleep(min(timeout, 0.01))
        return out

    def poll(self, timeout: float) -> None:
        time.sleep(min(timeout, 0.01))

    def position(self, tps: list[Any]) -> list[Any]:
        with self.lock:
            at = self.next if self.client_position is None else self.client_position
            return [TopicPartition(tp.topic, tp.partition, at) for tp in tps]

    def get_watermark_offsets(self, tp: Any, timeout: float = -1, cached: bool = False) -> tuple[int, int]:
        return (0, self.end)

    def pause(self, tps: list[Any]) -> None:
        pass

    def resume(self, tps: list[Any]) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _progress(offset: int) -> dict[tuple[str, int], Any]:
    return {("t", 0): SimpleNamespace(next_offset=offset, split_id="east/t/0")}


class _Count:
    def __init__(self) -> None:
        self.stalls: list[str] = []

    def stalled_partition(self, cluster: str) -> None:
        self.stalls.append(cluster)


def test_a_position_that_stands_still_with_records_beyond_it_is_a_stall() -> None:
    counted = _Count()
    with use(ManualClock()) as manual:
        watch = StallWatch("east", 0.05, counted)
    client = _Client(end=10, stuck=True)
    assert watch.check(client, _progress(4), set()) == []  # first look
    manual.advance(0.04)
    assert watch.check(client, _progress(4), set()) == [], "not yet the timeout"
    manual.advance(0.02)
    assert watch.check(client, _progress(4), set()) == ["east/t/0"]
    assert counted.stalls == ["east"] and watch.total == 1
    assert watch.last["east/t/0"]["position"] == 4 and watch.last["east/t/0"]["end"] == 10
    assert watch.check(client, _progress(4), set()) == [], "handled: looked at again a timeout later"


def test_idle_held_and_moved_on_partitions_are_not_stalls() -> None:
    counted = _Count()
    with use(ManualClock()) as manual:
        idle = StallWatch("east", 0.01, counted)
        held = StallWatch("east", 0.01, counted)
        markers = StallWatch("east", 0.01, counted)
    at_end = _Client(end=4, stuck=True)
    behind = _Client(end=10, stuck=True)
    past = _Client(end=6, stuck=True, position=6)  # the client's position is past a transaction marker
    for watch, client, hold in ((idle, at_end, set()), (held, behind, {("t", 0)}), (markers, past, set())):
        watch.check(client, _progress(4), hold)
        manual.advance(0.02)
        assert watch.check(client, _progress(4), hold) == []
    assert StallWatch("east", None, counted).check(behind, _progress(4), set()) == []
    assert counted.stalls == []


def test_a_client_past_the_position_with_records_beyond_its_own_is_a_stall() -> None:
    """The client's position ran ahead of the split's (messages taken that never reached it) and records
    lie beyond the client's position too: not transaction markers at the end, a stall."""
    counted = _Count()
    with use(ManualClock()) as manual:
        watch = StallWatch("east", 0.01, counted)
    ahead = _Client(end=10, stuck=True, position=6)
    watch.check(ahead, _progress(4), set())
    manual.advance(0.02)
    assert watch.check(ahead, _progress(4), set()) == ["east/t/0"]
    assert watch.last["east/t/0"]["why"] == "the client's position: 6" and counted.stalls == ["east"]


class _Unanswering(_Client):
    """A client that no longer reaches the broker (a partition left on librdkafka's internal broker)."""

    def get_watermark_offsets(self, tp: Any, timeout: float = -1, cached: bool = False) -> tuple[int, int]:
        raise RuntimeError("KafkaError{code=_TIMED_OUT}")


def test_a_client_that_cannot_tell_the_end_is_stalled_when_another_client_can() -> None:
    counted = _Count()
    made: list[_Client] = []

    def second(client: _Client) -> Any:
        def make() -> _Client:
            made.append(client)
            return client

        return make

    with use(ManualClock()) as manual:
        answered = StallWatch("east", 0.01, counted, second_client=second(_Client(end=10, stuck=True)))
        down = StallWatch("east", 0.01, counted, second_client=second(_Unanswering(end=10, stuck=True)))
        alone = StallWatch("east", 0.01, counted)
    stuck = _Unanswering(end=10, stuck=True)
    for watch in (answered, down, alone):
        watch.check(stuck, _progress(4), set())
    manual.advance(0.02)
    assert answered.check(stuck, _progress(4), set()) == ["east/t/0"]
    assert "another does" in answered.last["east/t/0"]["why"]
    assert down.check(stuck, _progress(4), set()) == [], "no client reaches the broker: down, not stalled"
    assert alone.check(stuck, _progress(4), set()) == []
    assert counted.stalls == ["east"]
    assert [c.closed for c in made] == [True, True], "each second client is closed"


def test_a_stalled_fetcher_makes_its_consumer_again_at_the_position_and_reads_on() -> None:
    registry = CollectorRegistry()
    metrics = SourceMetrics(registry, "s")
    made: list[_Client] = []

    def factory(conf: dict[str, Any]) -> _Client:
        client = _Client(end=50, stuck=not made)  # the first client delivers 20 records, then stops
        made.append(client)
        return client

    first = factory({})
    first.stuck = False
    original = first.consume

    def first_consume(n: int, timeout: float) -> list[Any]:
        if first.next >= 20:
            time.sleep(min(timeout, 0.01))
            return []
        return original(min(n, 20 - first.next), timeout)

    first.consume = first_consume  # type: ignore[method-assign]
    settings = FetchSettings(
        "s",
        0,
        100,
        metrics,
        consumer_factory=factory,
        poll_timeout_s=0.01,
        lag_interval_s=0.02,
        stall_timeout_s=0.2,
    )
    got: list[int] = []

    class Taker(FakeReaderContext):
        def emit(self, batch: Any, should_stop: Any) -> bool:
            got.extend(m.offset() for m in batch.messages)
            return True

    ctx = Taker()
    fetcher = ClusterFetcher("east", {}, settings, ctx, lambda ids: None, consumer=first)
    fetcher.start()
    try:
        fetcher.add_splits([KafkaPartitionSplit("east", "t", 0, 0)])
        deadline = time.monotonic() + 10
        while len(got) < 50 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        fetcher.stop()
    assert got == list(range(50)), "read on from the position where the stalled client stopped"
    assert first.closed and len(made) == 2 and made[1].assigned == [("t", 0, 20)]
    assert registry.get_sample_value("multicluster_source_stalled_partitions_total", {"cluster": "east"}) == 1
    assert fetcher.stalls.total == 1 and fetcher.stalls.last["east/t/0"]["position"] == 20
    assert ctx.errors == []
