"""Split placement: leader-rack preference with balance, standby placement, reader loss."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from multicluster_source import DefaultRackAwareStandbyAssignor
from multicluster_source.enumerator._assignment import SplitAssigner
from multicluster_source.framework._split import KafkaPartitionSplit


def splits(n: int, cluster: str = "c", topic: str = "t") -> list[KafkaPartitionSplit]:
    return [KafkaPartitionSplit(cluster, topic, p, 0) for p in range(n)]


def test_leader_rack_wins_when_balance_allows() -> None:
    a = SplitAssigner(3, "per_cluster", {0: "a", 1: "b", 2: "c"})
    for p, rack in enumerate("abcabc"):
        a.leader_rack[f"c/t/{p}"] = rack
    placed = a.place(splits(6))
    assert {r: sorted(s.partition for s in v) for r, v in placed.items()} == {0: [0, 3], 1: [1, 4], 2: [2, 5]}
    assert all(reason.startswith("leader rack") for reason in a.reasons.values())


def test_balance_wins_over_locality_when_one_rack_leads_everything() -> None:
    a = SplitAssigner(3, "per_cluster", {0: "a", 1: "b", 2: "c"})
    for p in range(6):
        a.leader_rack[f"c/t/{p}"] = "a"
    a.place(splits(6))
    loads = a.loads()
    assert loads == [2, 2, 2]
    assert sum(r.startswith("balance over locality") for r in a.reasons.values()) == 4


@settings(max_examples=200, deadline=None)
@given(
    readers=st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=6),
    leaders=st.lists(st.sampled_from(["a", "b", "c", "d", None]), max_size=60),
    batches=st.integers(min_value=1, max_value=5),
)
def test_loads_never_differ_by_more_than_one(
    readers: list[str | None], leaders: list[str | None], batches: int
) -> None:
    a = SplitAssigner(len(readers), "per_cluster", dict(enumerate(readers)))
    all_splits = splits(len(leaders))
    for s, rack in zip(all_splits, leaders, strict=True):
        a.leader_rack[s.split_id] = rack
    if not any(readers):
        return  # without racks, per_cluster mode spreads by hash, not by load
    size = max(1, len(all_splits) // batches)
    for i in range(0, len(all_splits), size):
        a.place(all_splits[i : i + size])
        loads = a.loads()
        assert max(loads) - min(loads) <= 1
    assert set(a.owner) == {s.split_id for s in all_splits}


def test_standbys_go_to_another_rack_and_failover_uses_them() -> None:
    a = SplitAssigner(
        3,
        "per_cluster",
        {0: "a", 1: "b", 2: "c"},
        num_standby=1,
        standby_assignor=DefaultRackAwareStandbyAssignor(1),
    )
    for p, rack in enumerate("abcabc"):
        a.leader_rack[f"c/t/{p}"] = rack
    a.place(splits(6))
    per_reader = a.place_standbys(list(a.owner))
    assert sum(len(v) for v in per_reader.values()) == 6
    racks = {0: "a", 1: "b", 2: "c"}
    for sid, owner in a.owner.items():
        (standby,) = a.standby[sid]
        assert racks[standby] != racks[owner]
    lost = a.reader_lost(1)
    assert lost == sorted(sid for sid in a.standby if sid not in a.owner)
    for sid in lost:
        target = a.standby_target(sid)
        assert target is not None and target != 1
    assert a.alive == {0, 2}
    assert 1 not in {r for r, _ in [a._choose(s, a.loads()) for s in splits(3, topic="u")]}


def test_global_and_per_cluster_modes_without_racks() -> None:
    g = SplitAssigner(4, "global", {})
    g.place(splits(5, "x") + splits(4, "y"))
    assert max(g.loads()) - min(g.loads()) <= 1
    p = SplitAssigner(3, "per_cluster", {})
    p.place(splits(3))
    assert sorted(p.owner.values()) == [0, 1, 2], "one topic's partitions spread round-robin"
