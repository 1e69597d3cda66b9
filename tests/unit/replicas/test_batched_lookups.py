"""Look-ups gathered into batches (``ClusterLookup.batch``, ``BaseTranslator.translate``'s rounds), without a
broker: the look-up's two batched requests (log ends, reads) are replaced by an in-memory cluster that counts
them. A handover of thousands of partitions asks each cluster a few times, not once per partition, and every
split gets the answer it would get alone; one partition's failure stays that split's."""

from __future__ import annotations

from typing import Any

import pytest

from multicluster_source.metadata import ClusterMetadata
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.replicas import OriginPosition, Translation, _base
from multicluster_source.replicas._base import BaseTranslator
from multicluster_source.replicas._lookup import ClusterLookup, RecordCopy, ReplicaLookupError

EAST = ClusterMetadata("east", "127.0.0.1:1", frozenset({"t"}))
WEST = ClusterMetadata("west", "127.0.0.1:2", frozenset({"t"}))


class _Cluster:
    """Partition ``p`` of topic ``t`` holds offsets ``p % 7`` up to ``50 + p`` (log start, end); every
    record's value names its offset. Counts the batched requests and the partitions in each."""

    def __init__(self, broken: frozenset[int] = frozenset(), *, passing_for: int | None = None) -> None:
        self.broken = broken
        self.passing_for = passing_for  # a number: the broken ones fail (retriable) in this many requests
        self.mark_requests: list[int] = []
        self.read_requests: list[int] = []

    def marks(self, partitions: list[tuple[str, int]]) -> dict[Any, Any]:
        self.mark_requests.append(len(partitions))
        out: dict[Any, Any] = {}
        for topic, p in partitions:
            if p in self.broken and (self.passing_for is None or len(self.mark_requests) <= self.passing_for):
                out[(topic, p)] = ReplicaLookupError(
                    f"cluster west {topic}/{p}: watermarks: not leader",
                    retriable=self.passing_for is not None,
                )
            else:
                out[(topic, p)] = (p % 7, 50 + p)
        return out

    def reads(self, reads: list[Any], timeout_s: float) -> dict[Any, Any]:
        self.read_requests.append(len(reads))
        assert len({(t, p) for t, p, *_ in reads}) == len(reads), "one range per partition in a request"
        return {
            (t, p, start, end, limit): [
                RecordCopy(o, None, str(o).encode(), (), 0) for o in range(start, min(end, 50 + p))
            ][:limit]
            for t, p, start, end, limit in reads
        }


class _LastRecord(BaseTranslator):
    """A translation that needs two dependent look-ups, as ``mirrormaker2``'s do: the log start, then the
    records from there up to the position; the answer is right after the last record read."""

    batched = True

    def batched_lookups(self) -> tuple[ClusterLookup, ...]:
        return (self.replica_lookup,) if self.batched else ()

    def translate_one(
        self, position: OriginPosition, to_split: str, *, origin_reachable: bool, deadline: float
    ) -> Translation:
        partition = int(to_split.rsplit("/", 1)[1])
        low, _high = self.replica_lookup.watermarks("t", partition)
        records = self.replica_lookup.read(
            "t", partition, max(low, position.offset - 5), position.offset, limit=5
        )
        to = records[-1].offset + 1 if records else low
        return Translation(position.split, to_split, position.offset, to, "exact", 0, f"from {low}")


def _translator(cluster: _Cluster, monkeypatch: pytest.MonkeyPatch) -> _LastRecord:
    translator = _LastRecord(ReplicaOf("east", "mirrormaker2"), EAST, WEST)
    monkeypatch.setattr(ClusterLookup, "_watermarks_of", cluster.marks)
    monkeypatch.setattr(ClusterLookup, "_read_many", cluster.reads)
    return translator


def _asks(n: int) -> list[tuple[OriginPosition, str]]:
    return [(OriginPosition(f"east/t/{p}", 20 + p % 11, None), f"west/t/{p}") for p in range(n)]


def test_thousands_of_splits_ask_each_cluster_a_few_times_with_the_answers_they_get_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = _Cluster()
    translator = _translator(cluster, monkeypatch)
    out = translator.translate(_asks(2345), origin_reachable=True, wait_s=0)
    assert cluster.mark_requests == [1000, 1000, 345]  # log starts of every partition, 1,000 a request
    assert cluster.read_requests == [1000, 1000, 345]  # then every partition's records, 1,000 a request
    assert [t.to_offset for t in out] == [20 + p % 11 for p in range(2345)]  # right after offset - 1
    assert [t.to_split for t in out] == [f"west/t/{p}" for p in range(2345)]  # in the order asked

    # the same translation one split at a time (the look-ups answered by the same cluster)
    alone = _LastRecord(ReplicaOf("east", "mirrormaker2"), EAST, WEST)
    alone.batched = False
    monkeypatch.setattr(ClusterLookup, "watermarks", lambda _lk, t, p, **_: cluster.marks([(t, p)])[(t, p)])
    monkeypatch.setattr(
        ClusterLookup,
        "read",
        lambda _lk, t, p, s, e, *, limit, timeout_s=None: cluster.reads([(t, p, s, e, limit)], 1)[
            (t, p, s, e, limit)
        ],
    )
    assert alone.translate(_asks(2345), origin_reachable=True, wait_s=0) == out


def test_one_partitions_failed_look_up_is_that_splits_start_and_the_others_translate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = _Cluster(broken=frozenset({3}))
    translator = _translator(cluster, monkeypatch)
    out = translator.translate(_asks(10), origin_reachable=True, wait_s=0)
    assert out[3].mode == "start" and "west t/3: watermarks: not leader" in out[3].detail
    assert all(t.mode == "exact" for i, t in enumerate(out) if i != 3)
    assert cluster.mark_requests == [10] and cluster.read_requests == [9]


def test_splits_whose_look_ups_failed_for_a_moment_are_asked_again_together_within_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = _Cluster(broken=frozenset({2, 5, 8}), passing_for=2)  # not leader in the first two requests
    translator = _translator(cluster, monkeypatch)
    out = translator.translate(_asks(10), origin_reachable=True, wait_s=5.0)
    assert [t.mode for t in out] == ["exact"] * 10
    assert [t.to_offset for t in out] == [20 + p % 11 for p in range(10)]
    assert cluster.mark_requests == [10, 3, 3]  # the three asked again together, in one request each time
    assert cluster.read_requests == [7, 3]


def test_splits_failing_past_the_wait_get_their_start_with_the_last_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = _Cluster(broken=frozenset({4}), passing_for=10**6)
    translator = _translator(cluster, monkeypatch)
    out = translator.translate(_asks(6), origin_reachable=True, wait_s=0.5)
    assert out[4].mode == "start" and "t/4: watermarks: not leader" in out[4].detail
    assert [t.mode for i, t in enumerate(out) if i != 4] == ["exact"] * 5
    assert cluster.mark_requests[0] == 6 and set(cluster.mark_requests[1:]) == {1}
    assert 3 <= len(cluster.mark_requests) <= 6  # pauses of 0.1, 0.2, then up to the deadline, once after


class _Moving(_LastRecord):
    """Asks for another range at every replay (as when the offset syncs move between rounds)."""

    def translate_one(
        self, position: OriginPosition, to_split: str, *, origin_reachable: bool, deadline: float
    ) -> Translation:
        self.calls = getattr(self, "calls", 0) + 1
        partition = int(to_split.rsplit("/", 1)[1])
        records = self.replica_lookup.read("t", partition, self.calls, self.calls + 3, limit=3)
        return Translation(position.split, to_split, position.offset, records[-1].offset, "exact", 0, "")


def test_a_translation_that_asks_anew_at_every_round_ends_looking_up_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = _Cluster()
    translator = _Moving(ReplicaOf("east", "mirrormaker2"), EAST, WEST)
    monkeypatch.setattr(ClusterLookup, "_read_many", cluster.reads)
    (out,) = translator.translate(_asks(1), origin_reachable=True, wait_s=0)
    assert len(cluster.read_requests) == _base._ROUNDS + 1  # every round's, then the last one made at once
    assert out.mode == "exact" and out.to_offset == translator.calls + 2


class _AfterTime(_LastRecord):
    """As ``_LastRecord``, with the first offset at a time asked between the log start and the read (as a
    long ``mirrormaker2`` scan window does): that look-up is made at once, never deferred."""

    def translate_one(
        self, position: OriginPosition, to_split: str, *, origin_reachable: bool, deadline: float
    ) -> Translation:
        partition = int(to_split.rsplit("/", 1)[1])
        low, _high = self.replica_lookup.watermarks("t", partition)
        first = self.replica_lookup.offset_for_time("t", partition, 1_000 + partition) or low
        records = self.replica_lookup.read("t", partition, first, position.offset, limit=5)
        to = records[-1].offset + 1 if records else first
        return Translation(position.split, to_split, position.offset, to, "exact", 0, f"from {first}")


def test_a_time_asked_between_deferred_look_ups_is_asked_once_a_split_not_at_every_replay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = _Cluster(broken=frozenset({3}))
    translator = _AfterTime(ReplicaOf("east", "mirrormaker2"), EAST, WEST)
    monkeypatch.setattr(ClusterLookup, "_watermarks_of", cluster.marks)
    monkeypatch.setattr(ClusterLookup, "_read_many", cluster.reads)
    asked: list[tuple[int, int]] = []

    def offset_for_time(_self: Any, topic: str, partition: int, timestamp_ms: int) -> int | None:
        asked.append((partition, timestamp_ms))
        if partition == 5:
            raise ReplicaLookupError("cluster west t/5: offsets for times: not leader")
        return 10 + partition if partition % 2 else None

    monkeypatch.setattr(ClusterLookup, "_offset_for_time", offset_for_time)
    out = translator.translate(
        [(OriginPosition(f"east/t/{p}", 20 + p, None), f"west/t/{p}") for p in range(8)],
        origin_reachable=True,
        wait_s=0,
    )
    assert sorted(asked) == [(p, 1_000 + p) for p in range(8) if p != 3]  # 3's log start failed first
    assert [t.mode for t in out] == ["exact", "exact", "exact", "start", "exact", "start", "exact", "exact"]
    assert "offsets for times: not leader" in out[5].detail
    # five records read from the offset at that time (odd partitions) or the log start (even ones)
    assert [t.to_offset for i, t in enumerate(out) if i in (0, 1, 2, 7)] == [5, 16, 7, 22]
