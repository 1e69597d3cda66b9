"""Partition discovery describes topics in groups of a few hundred partitions, a few requests at a time."""

from __future__ import annotations

import gc
import threading
import time
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from multicluster_source.enumerator._describe import (
    CHUNK_PARTITIONS,
    GUESS_PARTITIONS,
    IN_FLIGHT,
    describe_partitions,
    topic_groups,
)


class _Read(Future[Any]):
    """A future whose first ``result()`` counts as the answer being read."""

    def __init__(self, admin: _Admin) -> None:
        super().__init__()
        self._admin, self._read = admin, False

    def result(self, timeout: float | None = None) -> Any:
        if not self._read:
            self._read = True
            self._admin.unread -= 1
        return super().result(timeout)


class _Admin:
    """Answers each describe_topics request on a thread of its own, as the client's thread does."""

    def __init__(self, topics: dict[str, int], broken: str | None = None) -> None:
        self.topics, self.broken = topics, broken
        self.requests: list[list[str]] = []
        self.unread = 0  # topics asked for whose answer was not read yet
        self.most_unread = 0
        self.collector_on: list[bool] = []  # whether the garbage collector was enabled at each answer
        self.threads: list[threading.Thread] = []

    def describe_topics(self, collection: Any, request_timeout: float) -> dict[str, Future[Any]]:
        names = list(collection.topic_names)
        self.requests.append(names)
        self.unread += len(names)
        self.most_unread = max(self.most_unread, self.unread)
        returned: dict[str, Future[Any]] = {t: _Read(self) for t in names}
        thread = threading.Thread(target=self._answer, args=(returned, dict(returned)), name="fake-admin")
        self.threads.append(thread)
        thread.start()
        return returned

    def _answer(self, returned: dict[str, Future[Any]], futures: dict[str, Future[Any]]) -> None:
        time.sleep(0.002)  # the caller has the dict by now
        self.collector_on.append(gc.isenabled())
        intact = returned == futures  # confluent-kafka fails a request whose dict lost entries
        for topic, fut in futures.items():
            if not intact:
                fut.set_exception(RuntimeError("the dict describe_topics returned was changed"))
            elif topic == self.broken:
                fut.set_exception(KafkaException(KafkaError(KafkaError._TRANSPORT)))
            elif topic in self.topics:
                n = self.topics[topic]
                parts = [SimpleNamespace(id=p, leader=SimpleNamespace(id=p % 3)) for p in range(n)]
                fut.set_result(SimpleNamespace(partitions=list(reversed(parts))))
            else:
                fut.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))


def test_groups_follow_known_partition_counts() -> None:
    counts = {"a": 300, "b": 200, "c": 1, "big": 5000}
    groups = topic_groups(["a", "b", "c", "big", "d", "e"], counts)
    assert (CHUNK_PARTITIONS, GUESS_PARTITIONS) == (500, 100)  # the grouping below is worked out for these
    assert groups == [["a", "b"], ["c"], ["big"], ["d", "e"]]


def test_a_round_of_many_topics_asks_in_groups_a_few_at_a_time() -> None:
    topics = {f"t{i:03d}": 100 for i in range(120)}
    admin = _Admin(topics)
    found, missing, leaders = describe_partitions(admin, [*topics, "gone"], dict(topics), 30.0, None)

    assert found == sorted((t, p) for t, n in topics.items() for p in range(n))
    assert missing == ["gone"]
    assert leaders[("t007", 4)] == 1
    assert all(sum(topics.get(t, GUESS_PARTITIONS) for t in r) <= CHUNK_PARTITIONS for r in admin.requests)
    assert len(admin.requests) > IN_FLIGHT
    # never more than IN_FLIGHT requests' topics out at once
    assert admin.most_unread <= IN_FLIGHT * max(len(r) for r in admin.requests)


def test_a_cluster_that_does_not_answer_fails_the_round() -> None:
    admin = _Admin({"a": 3, "b": 3}, broken="b")
    with pytest.raises(KafkaException):
        describe_partitions(admin, ["a", "b"], {}, 30.0, None)


def test_the_collector_is_held_off_while_answers_are_read_and_on_again_after() -> None:
    assert gc.isenabled()
    admin = _Admin({f"t{i}": 10 for i in range(30)})
    describe_partitions(admin, list(admin.topics), {}, 30.0, None)
    assert admin.collector_on and not any(admin.collector_on)
    assert gc.isenabled()
    with pytest.raises(KafkaException):
        describe_partitions(_Admin({"a": 1}, broken="a"), ["a"], {}, 30.0, None)
    assert gc.isenabled()
