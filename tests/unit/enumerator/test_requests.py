"""Admin requests over many partitions go out in groups of at most REQUEST_PARTITIONS, and nothing is lost.

Offset look-ups and committed offsets of thousands of partitions: each request names at most
``REQUEST_PARTITIONS`` of them, and every partition is answered (or deferred) exactly as with one request.
Offset commits in groups: ``tests/unit/runtime/core/test_checkpointer.py`` (the commit ledger's tests).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from multicluster_source.enumerator._offsets import OffsetsInitializer, resolve_offsets
from multicluster_source.enumerator._requests import REQUEST_PARTITIONS, groups

PARTITIONS = [(f"t{i // 100}", i % 100) for i in range(2_345)]


class CountingAdmin:
    """Answers offset look-ups (offset = 10 * partition + topic number) and committed offsets (the even
    partitions have one), recording every request's size."""

    def __init__(self, not_ready: frozenset[tuple[str, int]] = frozenset()) -> None:
        self.sizes: list[int] = []
        self.not_ready = not_ready

    def list_offsets(self, request: Mapping[Any, Any], **_kw: Any) -> dict[Any, Future[Any]]:
        from confluent_kafka import KafkaError, KafkaException

        self.sizes.append(len(request))
        out: dict[Any, Future[Any]] = {}
        for tp in request:
            fut: Future[Any] = Future()
            if (tp.topic, tp.partition) in self.not_ready:
                fut.set_exception(KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE)))
            else:
                fut.set_result(SimpleNamespace(offset=_offset(tp.topic, tp.partition)))
            out[tp] = fut
        return out

    def list_consumer_group_offsets(self, request: list[Any], **_kw: Any) -> dict[str, Future[Any]]:
        from confluent_kafka import TopicPartition

        (group,) = request
        self.sizes.append(len(group.topic_partitions))
        answer = [
            TopicPartition(tp.topic, tp.partition, 7 if tp.partition % 2 == 0 else -1001)
            for tp in group.topic_partitions
        ]
        fut: Future[Any] = Future()
        fut.set_result(SimpleNamespace(topic_partitions=answer))
        return {group.group_id: fut}


def _offset(topic: str, partition: int) -> int:
    return 10 * partition + int(topic[1:])


def test_groups_cut_a_sequence_in_order() -> None:
    assert groups([]) == []
    assert groups(list(range(5)), 2) == [[0, 1], [2, 3], [4]]
    assert [len(g) for g in groups(list(range(2_345)))] == [1000, 1000, 345]


def test_offsets_of_thousands_of_partitions_are_asked_in_groups_and_all_answered() -> None:
    admin = CountingAdmin()
    found = resolve_offsets(
        OffsetsInitializer.earliest(), admin=admin, cluster_id="east", group_id=None, partitions=PARTITIONS
    )
    assert found == {(t, p): _offset(t, p) for t, p in PARTITIONS}
    assert admin.sizes == [1000, 1000, 345]


def test_a_partition_not_ready_in_a_later_group_is_deferred_the_others_answered() -> None:
    late = PARTITIONS[2_100]
    admin = CountingAdmin(not_ready=frozenset({late}))
    deferred: list[tuple[str, int]] = []
    found = resolve_offsets(
        OffsetsInitializer.latest(),
        admin=admin,
        cluster_id="east",
        group_id=None,
        partitions=PARTITIONS,
        deferred=deferred,
    )
    assert deferred == [late]
    assert set(found) == set(PARTITIONS) - {late}


def test_committed_offsets_are_asked_in_groups_and_the_rest_falls_back() -> None:
    admin = CountingAdmin()
    found = resolve_offsets(
        OffsetsInitializer.committed(reset="earliest"),
        admin=admin,
        cluster_id="east",
        group_id="billing",
        partitions=PARTITIONS,
    )
    assert found == {(t, p): 7 if p % 2 == 0 else _offset(t, p) for t, p in PARTITIONS}
    odd = sum(1 for _t, p in PARTITIONS if p % 2)
    assert admin.sizes[:3] == [1000, 1000, 345]  # the committed offsets
    assert sum(admin.sizes[3:]) == odd and max(admin.sizes[3:]) <= REQUEST_PARTITIONS  # the fallback
