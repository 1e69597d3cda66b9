"""The per-cluster offset committer (issue 33, findings 2 and 3): commits with a consumer, one round at a time,
owes what failed until the cluster answers, and says whether the cluster answers."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from multicluster_source.enumerator._committer import GroupCommitter


class FakeCommitConsumer:
    """Records commits; the test answers them, and ``poll`` (the committer's thread) delivers the answers."""

    made: list[FakeCommitConsumer] = []

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.conf = dict(conf)
        self.commits: queue.SimpleQueue[list[TopicPartition]] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[tuple[Any, list[Any]]] = queue.SimpleQueue()
        self.closed = threading.Event()
        self.threads: set[str] = set()
        FakeCommitConsumer.made.append(self)

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert asynchronous
        self.threads.add(threading.current_thread().name)
        self.commits.put(offsets)

    def poll(self, timeout: float) -> None:
        self.threads.add(threading.current_thread().name)
        try:
            error, parts = self._answers.get(timeout=min(timeout, 0.02))
        except queue.Empty:
            return
        self.conf["on_commit"](error, parts)

    def answer(self, parts: list[Any], error: Any = None) -> None:
        self._answers.put((error, parts))

    def next_commit(self, timeout: float = 10.0) -> list[TopicPartition]:
        return self.commits.get(timeout=timeout)

    def close(self) -> None:
        self.closed.set()


class Answer:
    """A partition of a commit's answer, as confluent-kafka gives it (with its error)."""

    def __init__(self, topic: str, partition: int, offset: int, error: Any = None) -> None:
        self.topic, self.partition, self.offset, self.error = topic, partition, offset, error


def _offsets(parts: list[TopicPartition]) -> dict[tuple[str, int], int]:
    return {(tp.topic, tp.partition): tp.offset for tp in parts}


def _committer(**kwargs: Any) -> tuple[GroupCommitter, Callable[[], FakeCommitConsumer]]:
    FakeCommitConsumer.made.clear()
    committer = GroupCommitter(
        "east",
        {"bootstrap.servers": "east:9092", "client.id": "src-east-enumerator"},
        "billing",
        consumer_factory=FakeCommitConsumer,
        **kwargs,
    )

    def consumer() -> FakeCommitConsumer:
        deadline = time.monotonic() + 10
        while not FakeCommitConsumer.made and time.monotonic() < deadline:
            time.sleep(0.005)
        return FakeCommitConsumer.made[0]

    return committer, consumer


def test_offsets_are_committed_with_a_consumer_of_the_group_in_requests_of_at_most_1000() -> None:
    committer, consumer = _committer()
    offsets = {(f"t{i // 100}", i % 100): i for i in range(2_345)}
    done = committer.submit(offsets)
    fake = consumer()
    assert fake.conf["group.id"] == "billing" and fake.conf["enable.auto.commit"] is False
    assert fake.conf["client.id"] == "src-east-committer"
    requests = [fake.next_commit() for _ in range(3)]
    assert [len(r) for r in requests] == [1000, 1000, 345]
    assert {k: v for r in requests for k, v in _offsets(r).items()} == offsets
    for r in requests:
        assert not done.done()
        fake.answer(r)
    done.result(10)
    assert committer.answering and committer.owed() == {}
    committer.close()
    assert fake.closed.is_set()
    assert fake.threads == {"mcs-commit-east"}, "every consumer call runs on the committer's thread"


def test_what_failed_is_owed_and_sent_again_until_the_cluster_answers() -> None:
    committer, consumer = _committer(retry_backoff_s=0.05)
    first = committer.submit({("t", 0): 5, ("t", 1): 6})
    fake = consumer()
    sent = fake.next_commit()
    newer = committer.submit({("t", 1): 9})  # while a round is in flight: owed, not sent yet
    with pytest.raises(queue.Empty):
        fake.next_commit(timeout=0.2)
    wait_coord = KafkaError(KafkaError._WAIT_COORD)
    fake.answer([Answer(tp.topic, tp.partition, tp.offset, wait_coord) for tp in sent], wait_coord)
    again = fake.next_commit()
    assert _offsets(again) == {("t", 0): 5, ("t", 1): 9}, "the newer offset wins over the failed one"
    assert not committer.answering and not first.done()
    fake.answer(again)
    first.result(10)
    newer.result(10)
    assert committer.answering
    committer.close()


def test_a_partition_refused_alone_is_owed_alone() -> None:
    committer, consumer = _committer(retry_backoff_s=0.05)
    done = committer.submit({("t", 0): 5, ("t", 1): 6})
    fake = consumer()
    sent = fake.next_commit()
    refused = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
    fake.answer([Answer("t", 0, 5), Answer("t", 1, 6, refused)])
    assert _offsets(fake.next_commit()) == {("t", 1): 6}
    assert len(sent) == 2 and not done.done()
    committer.close()
    assert committer.owed() == {("t", 1): 6}


def test_a_round_not_answered_in_time_marks_the_cluster_not_answering() -> None:
    committer, consumer = _committer(answer_within_s=0.05)
    committer.submit({("t", 0): 5})
    fake = consumer()
    sent = fake.next_commit()
    deadline = time.monotonic() + 10
    while committer.answering and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not committer.answering
    fake.answer(sent)
    deadline = time.monotonic() + 10
    while not committer.answering and time.monotonic() < deadline:
        time.sleep(0.01)
    assert committer.answering, "answering again once a round is stored"
    committer.close()


def test_every_broker_down_marks_the_cluster_not_answering_at_once() -> None:
    committer, consumer = _committer()
    committer.submit({("t", 0): 5})
    fake = consumer()
    fake.conf["error_cb"](KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert not committer.answering
    committer.close()


def test_close_returns_what_is_still_owed() -> None:
    committer, consumer = _committer()
    committer.submit({("t", 0): 5})
    fake = consumer()
    fake.next_commit()
    committer.submit({("t", 1): 2})
    assert committer.close() == {("t", 0): 5, ("t", 1): 2}
    assert fake.closed.wait(5)
    assert not any(t.name == "mcs-commit-east" for t in threading.enumerate())


def test_a_client_that_cannot_be_made_is_tried_again() -> None:
    made: list[int] = []

    def flaky_factory(conf: Mapping[str, Any]) -> FakeCommitConsumer:
        made.append(1)
        if len(made) == 1:
            raise ValueError("No such configuration property")
        return FakeCommitConsumer(conf)

    FakeCommitConsumer.made.clear()
    committer = GroupCommitter("east", {}, "g", consumer_factory=flaky_factory, retry_backoff_s=0.05)
    done = committer.submit({("t", 0): 1})
    deadline = time.monotonic() + 10
    while not FakeCommitConsumer.made and time.monotonic() < deadline:
        time.sleep(0.01)
    fake = FakeCommitConsumer.made[0]
    fake.answer(fake.next_commit())
    done.result(10)
    committer.close()
