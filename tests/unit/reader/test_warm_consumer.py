"""Clients opened ahead of their splits (reader/_warm.py): what they ask while connecting, and that each is
closed exactly once, whoever comes last: the connecting thread, the reader closing it, or the fetcher that
took it over. A fake consumer records the calls; a gate holds its first request to order the threads."""

from __future__ import annotations

import threading
import time
from typing import Any

from harness.fake_consumer import FakeConsumer, FakeReaderContext
from multicluster_source.reader import _warm
from multicluster_source.reader._warm import WarmConsumer, leader_partitions, learn_topics


class _NoMetrics:
    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def test_learn_topics_asks_one_by_one_and_not_for_many_at_once() -> None:
    few = FakeConsumer({"a": 2, "b": 3})
    known: dict[str, frozenset[int]] = {}
    found = learn_topics("east", few, ["b", "a", "missing"], known)
    assert [arg for call, arg in few.calls] == ["a", "b", "missing"]
    assert known == {"a": frozenset({0, 1}), "b": frozenset({0, 1, 2})}
    assert sorted(found) == ["a", "b"]

    some = FakeConsumer({f"t{i}": 1 for i in range(6)})
    learn_topics("east", some, [f"t{i}" for i in range(6)], known)
    assert [arg for _call, arg in some.calls] == [f"t{i}" for i in range(6)]
    assert known["t5"] == frozenset({0})

    many = FakeConsumer({f"m{i}": 1 for i in range(_warm.LEARN_MAX_TOPICS + 1)})
    assert learn_topics("east", many, [f"m{i}" for i in range(_warm.LEARN_MAX_TOPICS + 1)], known) == {}
    assert many.calls == []  # left to the client: asking would make closing it slow


def test_learn_topics_skips_a_failed_request() -> None:
    class Failing(FakeConsumer):
        def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
            raise RuntimeError("broker down")

    known: dict[str, frozenset[int]] = {}
    assert learn_topics("east", Failing({"a": 1}), ["a"], known) == {}
    assert known == {}


def test_learn_topics_asks_nothing_more_once_stopped() -> None:
    stop = threading.Event()
    stop.set()
    consumer = FakeConsumer({"a": 2})
    assert learn_topics("east", consumer, ["a", "b"], {}, stop=stop) == {}
    assert consumer.calls == []


def test_close_joins_the_connecting_thread_of_a_cluster_that_is_down() -> None:
    """Every request of a client whose cluster is down waits out its timeout: the connecting thread makes
    short ones and sees the close between them, so close() joins it and the client is closed once."""
    from confluent_kafka import KafkaError, KafkaException

    class Down(FakeConsumer):
        def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
            self.calls.append(("metadata", topic))
            time.sleep(min(timeout, 0.5))
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    consumer = Down({"a": 2})
    warm = WarmConsumer("down", consumer, ["a"], "mcs-warm-test")
    time.sleep(0.2)
    warm.close()
    assert not warm._thread.is_alive()
    assert consumer.count("close") == 1
    assert all(call == "metadata" for call, _ in consumer.calls[:-1])


def test_one_partition_per_leader() -> None:
    found = FakeConsumer({"a": 4, "b": 4}, brokers=3).list_topics().topics
    assert leader_partitions(found) == [("a", 0), ("a", 1), ("a", 2)]


def test_connects_to_every_leader_and_hands_its_metadata_over() -> None:
    consumer = FakeConsumer({"a": 4}, brokers=2)
    warm = WarmConsumer("east", consumer, ["a"], "mcs-warm-test")
    assert warm.take() is consumer
    assert consumer.count("offsets") == 2  # one ListOffsets per leader: brokers 0 and 1
    assert warm.known_partitions == {"a": frozenset(range(4))}
    warm.close()  # taken over: the fetcher closes it, not this
    assert consumer.count("close") == 0


def test_closed_while_connecting_is_closed_once_connecting_ends() -> None:
    gate = threading.Event()
    consumer = FakeConsumer({"a": 2}, gate=gate)
    warm = WarmConsumer("east", consumer, ["a"], "mcs-warm-test")
    warm.close()
    assert consumer.count("close") == 0  # the connecting thread still uses it
    gate.set()
    warm._thread.join(5)
    assert consumer.count("close") == 1
    warm.close()
    assert consumer.count("close") == 1


def test_closed_after_connecting_is_closed_at_once() -> None:
    consumer = FakeConsumer({"a": 2})
    warm = WarmConsumer("east", consumer, ["a"], "mcs-warm-test")
    warm._thread.join(5)
    warm.close()
    assert consumer.count("close") == 1


def test_reader_opens_a_client_per_new_cluster_ahead_and_closes_those_no_split_came_for(
    monkeypatch: Any,
) -> None:
    from multicluster_source.framework._events import MetadataUpdateEvent
    from multicluster_source.framework._split import KafkaPartitionSplit
    from multicluster_source.metadata import ClusterMetadata
    from multicluster_source.reader import _multicluster
    from multicluster_source.reader._multicluster import MultiClusterReader
    from multicluster_source.reader._settings import FetchSettings, ReaderSettings

    made: dict[str, FakeConsumer] = {}
    context = FakeReaderContext()

    def factory(conf: dict[str, Any]) -> FakeConsumer:
        cluster = "east" if "east" in conf["bootstrap.servers"] else "west"
        made[cluster] = FakeConsumer({"orders": 2})
        return made[cluster]

    monkeypatch.setattr(_multicluster, "_AHEAD_S", 0.2)
    fetch = FetchSettings("s", 0, 10, _NoMetrics(), consumer_factory=factory)
    reader = MultiClusterReader(context, ReaderSettings("g", {}, "mcs", False, fetch))
    clusters = {cid: ClusterMetadata(cid, f"{cid}:9092", frozenset({"orders"})) for cid in ("east", "west")}
    reader.handle_source_event(MetadataUpdateEvent(clusters, 1))
    assert sorted(made) == ["east", "west"]  # both connecting before any split came
    assert reader.status()["warm_clients"] == ["east", "west"]

    reader.add_splits([KafkaPartitionSplit("east", "orders", 0, 0)])  # east's client is taken over
    assert reader.status()["warm_clients"] == ["west"]
    assert reader.status()["clusters"] == ["east"]

    time.sleep(0.3)  # west's split never came
    reader.poll_events()
    assert reader.status()["warm_clients"] == []
    assert made["west"].count("close") == 1
    assert made["east"].count("close") == 0  # its fetcher reads with it
    reader.close()
    assert made["east"].count("close") == 1  # closed by its fetcher as it stopped
    assert made["west"].count("close") == 1
    assert made["east"].count("assign") == 1
    assert not context.errors


def test_split_ids_may_be_read_from_another_thread_while_fetchers_come() -> None:
    """assignments() and status() read a reader's fetchers from the caller's thread while the reader thread
    adds them (10,000 splits over 10 clusters once changed the dict under that iteration)."""
    import sys

    from multicluster_source.framework._events import MetadataUpdateEvent
    from multicluster_source.framework._split import KafkaPartitionSplit
    from multicluster_source.metadata import ClusterMetadata
    from multicluster_source.reader._multicluster import MultiClusterReader
    from multicluster_source.reader._settings import FetchSettings, ReaderSettings

    fetch = FetchSettings("s", 0, 10, _NoMetrics(), consumer_factory=lambda conf: FakeConsumer({"orders": 1}))
    reader = MultiClusterReader(FakeReaderContext(), ReaderSettings("g", {}, "mcs", False, fetch))
    names = [f"c{i}" for i in range(40)]
    clusters = {cid: ClusterMetadata(cid, f"{cid}:9092", frozenset({"orders"})) for cid in names}
    errors: list[BaseException] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                reader.split_ids()
                reader.status()
            except BaseException as exc:
                errors.append(exc)
                return

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    watcher = threading.Thread(target=watch)
    try:
        reader.handle_source_event(MetadataUpdateEvent(clusters, 1))
        watcher.start()
        for cid in names:
            reader.add_splits([KafkaPartitionSplit(cid, "orders", 0, 0)])
        deadline = time.monotonic() + 10  # each fetcher takes its split on its own thread
        while len(reader.split_ids()) < len(names) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(reader.split_ids()) == len(names)
    finally:
        done.set()
        watcher.join(10)
        sys.setswitchinterval(interval)
        reader.close()
    assert not errors
