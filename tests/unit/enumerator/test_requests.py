"""Admin requests over many partitions go out in groups of at most REQUEST_PARTITIONS, and nothing is lost.

Offset look-ups, committed offsets and offset commits of thousands of partitions: each request names at most
``REQUEST_PARTITIONS`` of them, every partition is answered (or deferred, or owed again) exactly as with one
request, and a failed group of a commit is owed again on its own while the others count as committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from multicluster_source.enumerator._commit import CommitLedger, Offsets
from multicluster_source.enumerator._offsets import OffsetsInitializer, resolve_offsets
from multicluster_source.enumerator._requests import REQUEST_PARTITIONS, groups
from multicluster_source.framework._split import KafkaPartitionSplit

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


class Cluster:
    """A per-cluster enumerator whose commit requests the test ends by hand."""

    def __init__(self) -> None:
        self.requests: list[tuple[Offsets, Future[None]]] = []

    def commit_offsets(self, offsets: Offsets) -> Future[None]:
        future: Future[None] = Future()
        self.requests.append((dict(offsets), future))
        return future


def test_a_commit_of_thousands_of_offsets_goes_in_groups_and_a_failed_group_alone_is_owed() -> None:
    splits = {s.split_id: s for s in (KafkaPartitionSplit("east", t, p, 0) for t, p in PARTITIONS)}
    positions = {f"east/{t}/{p}": 5 for t, p in PARTITIONS}
    east = Cluster()
    clusters: dict[str, Any] = {"east": east}
    committed: list[tuple[str, Offsets]] = []
    ledger = CommitLedger()
    wait = ledger.commit(1, positions, splits, clusters, lambda c, o: committed.append((c, o)))
    assert [len(r) for r, _f in east.requests] == [1000, 1000, 345]
    assert {tp for r, _f in east.requests for tp in r} == set(PARTITIONS)
    (first, f1), (second, f2), (third, f3) = east.requests
    f1.set_result(None)
    f2.set_exception(RuntimeError("coordinator not available"))
    f3.set_result(None)
    wait(1.0)
    assert committed == [("east", first), ("east", third)]
    assert ledger.owed() == {"east": second}
    ledger.commit(2, {}, splits, clusters, lambda c, o: None)
    assert east.requests[3][0] == second  # owed, sent again with the next checkpoint


def test_a_cluster_whose_client_is_gone_owes_every_group() -> None:
    splits = {s.split_id: s for s in (KafkaPartitionSplit("east", t, p, 0) for t, p in PARTITIONS)}

    class Gone:
        def commit_offsets(self, offsets: Offsets) -> Future[None]:
            raise RuntimeError("admin client closed")

    gone: dict[str, Any] = {"east": Gone()}
    ledger = CommitLedger()
    ledger.commit(1, {f"east/{t}/{p}": 3 for t, p in PARTITIONS}, splits, gone, lambda c, o: None)
    assert ledger.owed() == {"east": dict.fromkeys(PARTITIONS, 3)}
