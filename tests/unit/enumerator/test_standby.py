from __future__ import annotations

import itertools
import logging
import uuid
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multicluster_source.enumerator._standby import (
    DefaultRackAwareStandbyAssignor,
    RackAwareStandbyAssignor,
    load_assignor,
    place_actives,
)
from multicluster_source.exceptions import ConfigurationError

RACK_NAMES = ["a", "b", "c", "eu-1a", "eu-1b", "us-2c", "z"]


# ------------------------------------------------------------------------------------------ strategies


@st.composite
def standby_inputs(draw: st.DrawFn) -> tuple[dict[str, str], set[str], int]:
    """1..6 reader racks, 0..200 splits (active in a reader rack, sometimes outside), 1..3 standbys."""
    racks = draw(st.lists(st.sampled_from(RACK_NAMES), min_size=1, max_size=6, unique=True))
    n_splits = draw(st.integers(0, 200))
    choice = st.sampled_from(racks)
    if draw(st.booleans()):
        choice = st.one_of(choice, st.just("elsewhere"))
    split_racks = {f"c{i % 3}-t-{i}": draw(choice) for i in range(n_splits)}
    k = draw(st.integers(1, 3))
    return split_racks, set(racks), k


def _racks_of(result: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """Split id -> racks in which it has a standby."""
    out: dict[str, set[str]] = {}
    for rack, split_ids in result.items():
        for split_id in split_ids:
            out.setdefault(split_id, set()).add(rack)
    return out


# ------------------------------------------------------------------------------------------ default assignor


@settings(max_examples=300, deadline=None)
@given(standby_inputs())
def test_every_split_appears(inputs: tuple[dict[str, str], set[str], int]) -> None:
    split_racks, reader_racks, k = inputs
    result = DefaultRackAwareStandbyAssignor(k).assign_standbys(split_racks, reader_racks)
    assert set(_racks_of(result)) == set(split_racks)
    assert reader_racks <= set(result)


@settings(max_examples=300, deadline=None)
@given(standby_inputs())
def test_never_in_active_rack_when_another_rack_exists(inputs: tuple[dict[str, str], set[str], int]) -> None:
    split_racks, reader_racks, k = inputs
    result = DefaultRackAwareStandbyAssignor(k).assign_standbys(split_racks, reader_racks)
    for split_id, racks in _racks_of(result).items():
        active = split_racks[split_id]
        if reader_racks - {active}:
            assert active not in racks, split_id
            assert racks <= reader_racks
        else:
            # fallback: only the active's rack exists (or none other), so the split stays there
            assert racks == {active}


@settings(max_examples=300, deadline=None)
@given(standby_inputs())
def test_standby_count_per_split(inputs: tuple[dict[str, str], set[str], int]) -> None:
    split_racks, reader_racks, k = inputs
    result = DefaultRackAwareStandbyAssignor(k).assign_standbys(split_racks, reader_racks)
    for split_id, racks in _racks_of(result).items():
        eligible = reader_racks - {split_racks[split_id]}
        assert len(racks) <= k
        # exactly as many distinct racks as asked for, or as there are eligible racks
        assert len(racks) == (min(k, len(eligible)) if eligible else 1)


@settings(max_examples=300, deadline=None)
@given(
    racks=st.lists(st.sampled_from(RACK_NAMES), min_size=1, max_size=6, unique=True),
    n_splits=st.integers(0, 200),
    k=st.integers(1, 3),
    active_outside=st.booleans(),
)
def test_spread_with_a_common_eligible_set(
    racks: list[str], n_splits: int, k: int, active_outside: bool
) -> None:
    # Proven property of the greedy: when every split has the same eligible set E (all actives in one reader
    # rack, or all outside the reader racks), standby counts over E differ by at most one. Invariant: loads on
    # E take at most two adjacent values L, L+1; picking the k <= |E| least-loaded racks raises some L's to
    # L+1, or all L's and then some L+1's to L+2 -- either way still two adjacent values.
    active = "elsewhere" if active_outside else racks[0]
    split_racks = {f"s{i:03d}": active for i in range(n_splits)}
    result = DefaultRackAwareStandbyAssignor(k).assign_standbys(split_racks, set(racks))
    eligible = set(racks) - {active}
    if not eligible:
        return
    counts = [len(result[rack]) for rack in eligible]
    assert max(counts) - min(counts) <= 1
    assert sum(counts) == n_splits * min(k, len(eligible))


@settings(max_examples=100, deadline=None)
@given(standby_inputs())
def test_deterministic_and_independent_of_input_order(inputs: tuple[dict[str, str], set[str], int]) -> None:
    split_racks, reader_racks, k = inputs
    snapshot = dict(split_racks)
    assignor = DefaultRackAwareStandbyAssignor(k)
    first = assignor.assign_standbys(split_racks, reader_racks)
    reversed_input = dict(reversed(list(split_racks.items())))
    assert assignor.assign_standbys(reversed_input, set(sorted(reader_racks, reverse=True))) == first
    assert split_racks == snapshot  # input untouched


def test_seed_wipe_bug_regression() -> None:
    # KIP-708's sample replaces a rack's set with an empty one whenever it meets a split of that rack, losing
    # the standbys already placed there. Here s1 and s2 (active in b) are placed in a, then s3 (active in a)
    # comes later in iteration order: a must still hold s1 and s2.
    split_racks = {"s1": "b", "s2": "b", "s3": "a"}
    result = DefaultRackAwareStandbyAssignor().assign_standbys(split_racks, {"a", "b"})
    assert result == {"a": {"s1", "s2"}, "b": {"s3"}}


def test_seed_wipe_bug_regression_many_racks() -> None:
    # Interleave actives so that every rack is met as an active rack after receiving standbys.
    split_racks = {f"s{i:02d}": "abc"[i % 3] for i in range(30)}
    result = DefaultRackAwareStandbyAssignor(2).assign_standbys(split_racks, {"a", "b", "c"})
    for split_id, active in split_racks.items():
        assert {r for r, ids in result.items() if split_id in ids} == {"a", "b", "c"} - {active}


def test_least_loaded_rack_first_ties_by_name() -> None:
    result = DefaultRackAwareStandbyAssignor().assign_standbys(
        {"s1": "a", "s2": "a", "s3": "b", "s4": "a"}, {"a", "b", "c"}
    )
    # s1 -> b (tie b/c, name), s2 -> c, s3 -> a (tie a/c at 0/1 -> a has 0), s4 -> b (b=1, c=1 -> b)
    assert result == {"a": {"s3"}, "b": {"s1", "s4"}, "c": {"s2"}}


def test_fallback_to_active_rack_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="multicluster_source.enumerator._standby")
    result = DefaultRackAwareStandbyAssignor(2).assign_standbys({"s1": "a", "s2": "a", "s3": "a"}, {"a"})
    assert result == {"a": {"s1", "s2", "s3"}}
    warnings = [r for r in caplog.records if r.name == "multicluster_source.enumerator._standby"]
    assert len(warnings) == 1
    assert "3 of 3 splits" in warnings[0].getMessage()


def test_fallback_without_any_reader_rack(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="multicluster_source.enumerator._standby")
    result = DefaultRackAwareStandbyAssignor().assign_standbys({"s1": "a", "s2": "b"}, set())
    assert result == {"a": {"s1"}, "b": {"s2"}}
    assert len(caplog.records) == 1


def test_no_warning_when_other_racks_exist(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="multicluster_source.enumerator._standby")
    DefaultRackAwareStandbyAssignor().assign_standbys({"s1": "a", "s2": "b"}, {"a", "b"})
    assert caplog.records == []


def test_empty_input() -> None:
    assert DefaultRackAwareStandbyAssignor().assign_standbys({}, {"a", "b"}) == {"a": set(), "b": set()}
    assert DefaultRackAwareStandbyAssignor().assign_standbys({}, set()) == {}


@pytest.mark.parametrize("bad", [0, -1, True, 1.0, "1"])
def test_constructor_rejects_bad_replica_count(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="num_standby_replicas"):
        DefaultRackAwareStandbyAssignor(bad)  # type: ignore[arg-type]


def test_default_satisfies_protocol() -> None:
    assignor = DefaultRackAwareStandbyAssignor()
    assert isinstance(assignor, RackAwareStandbyAssignor)
    assert assignor.num_standby_replicas == 1
    assert "num_standby_replicas=1" in repr(assignor)


# ------------------------------------------------------------------------------------------ load_assignor


def _write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> str:
    name = f"standby_plugin_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


PLUGIN = """
class EverywhereAssignor:
    def assign_standbys(self, split_racks, reader_racks):
        return {rack: set(split_racks) for rack in reader_racks}

class Outer:
    class Inner(EverywhereAssignor):
        pass

class NeedsArgs:
    def __init__(self, x):
        self.x = x
    def assign_standbys(self, split_racks, reader_racks):
        return {}

class Exploding:
    def __init__(self):
        raise RuntimeError("boom")

class NotAnAssignor:
    pass

class AttributeOnly:
    assign_standbys = 3

CONSTANT = 42
"""


def test_load_assignor_default_class() -> None:
    assignor = load_assignor("multicluster_source.enumerator._standby:DefaultRackAwareStandbyAssignor")
    assert isinstance(assignor, DefaultRackAwareStandbyAssignor)
    assert assignor.assign_standbys({"s": "a"}, {"a", "b"}) == {"a": set(), "b": {"s"}}


def test_load_assignor_user_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _write_module(tmp_path, monkeypatch, PLUGIN)
    assignor = load_assignor(f"{module}:EverywhereAssignor")
    assert isinstance(assignor, RackAwareStandbyAssignor)
    assert assignor.assign_standbys({"s": "a"}, {"a"}) == {"a": {"s"}}
    nested = load_assignor(f" {module} : Outer.Inner ")
    assert type(nested).__name__ == "Inner"


@pytest.mark.parametrize("spec", ["no_colon", ":Cls", "mod:", "a:b:c", "", "  :  "])
def test_load_assignor_malformed(spec: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        load_assignor(spec)
    assert repr(spec) in str(info.value)


def test_load_assignor_not_a_string() -> None:
    with pytest.raises(ConfigurationError):
        load_assignor(DefaultRackAwareStandbyAssignor)  # type: ignore[arg-type]


def test_load_assignor_missing_module() -> None:
    spec = "no_such_module_for_standby_tests:Cls"
    with pytest.raises(ConfigurationError, match="cannot import module") as info:
        load_assignor(spec)
    assert spec in str(info.value)
    assert isinstance(info.value.__cause__, ImportError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("attr", "fragment"),
    [
        ("Missing", "has no attribute"),
        ("Outer.Missing", "has no attribute"),
        ("CONSTANT", "not a class or callable"),
        ("NeedsArgs", "without arguments failed"),
        ("Exploding", "without arguments failed"),
        ("NotAnAssignor", "no callable 'assign_standbys'"),
        ("AttributeOnly", "no callable 'assign_standbys'"),
    ],
)
def test_load_assignor_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attr: str, fragment: str
) -> None:
    module = _write_module(tmp_path, monkeypatch, PLUGIN)
    spec = f"{module}:{attr}"
    with pytest.raises(ConfigurationError, match=fragment) as info:
        load_assignor(spec)
    assert spec in str(info.value)


# ------------------------------------------------------------------------------------------ place_actives


@st.composite
def active_inputs(draw: st.DrawFn) -> tuple[dict[str, str | None], dict[int, str | None]]:
    racks = draw(st.lists(st.sampled_from(RACK_NAMES), min_size=1, max_size=4, unique=True))
    reader_rack = (
        st.one_of(st.sampled_from(racks), st.none()) if draw(st.booleans()) else st.sampled_from(racks)
    )
    n_readers = draw(st.integers(1, 8))
    reader_ids = draw(st.lists(st.integers(0, 50), min_size=n_readers, max_size=n_readers, unique=True))
    readers = {r: draw(reader_rack) for r in reader_ids}
    leader_rack = st.one_of(st.sampled_from([*racks, "unseen"]), st.none())
    n_splits = draw(st.integers(0, 80))
    splits = {f"s{i:03d}": draw(leader_rack) for i in range(n_splits)}
    return splits, readers


def _best_locality(splits: Mapping[str, str | None], readers: Mapping[int, str | None]) -> int:
    """Brute force: best number of local splits over every choice of which readers take the extra split."""
    base, extra = divmod(len(splits), len(readers))
    demand = Counter(r for r in splits.values() if r)
    best = 0
    for extras in itertools.combinations(sorted(readers), extra):
        cap: Counter[str] = Counter()
        for reader, rack in readers.items():
            if rack:
                cap[rack] += base + (reader in extras)
        best = max(best, sum(min(demand[rack], cap[rack]) for rack in cap))
    return best


@settings(max_examples=300, deadline=None)
@given(active_inputs())
def test_place_actives_balanced_complete_and_locality_optimal(
    inputs: tuple[dict[str, str | None], dict[int, str | None]],
) -> None:
    splits, readers = inputs
    assignment, reasons = place_actives(splits, readers)
    assert set(assignment) == set(readers)
    placed = [s for ids in assignment.values() for s in ids]
    assert sorted(placed) == sorted(splits)  # every split exactly once
    assert set(reasons) == set(splits)
    loads = [len(ids) for ids in assignment.values()]
    assert max(loads) - min(loads) <= 1
    local = 0
    for reader, ids in assignment.items():
        assert ids == sorted(ids)
        for split_id in ids:
            leader = splits[split_id]
            reason = reasons[split_id]
            if reason.startswith("leader rack "):
                assert leader == readers[reader] == reason.removeprefix("leader rack ")
                local += 1
            elif leader is None:
                assert reason == "balanced: leader rack unknown"
            elif leader not in set(readers.values()):
                assert reason == f"balanced: no reader in leader rack {leader}"
            else:
                assert reason == "balance over locality"
    assert local == _best_locality(splits, readers)


@settings(max_examples=200, deadline=None)
@given(
    n_racks=st.integers(1, 5),
    readers_per_rack=st.integers(1, 4),
    splits_per_rack=st.integers(0, 20),
)
def test_place_actives_balanced_racks_are_fully_local(
    n_racks: int, readers_per_rack: int, splits_per_rack: int
) -> None:
    racks = RACK_NAMES[:n_racks]
    readers: dict[int, str | None] = {
        i * n_racks + j: rack for j, rack in enumerate(racks) for i in range(readers_per_rack)
    }
    splits: dict[str, str | None] = {f"{rack}-{i}": rack for rack in racks for i in range(splits_per_rack)}
    assignment, reasons = place_actives(splits, readers)
    for reader, ids in assignment.items():
        for split_id in ids:
            assert splits[split_id] == readers[reader]
            assert reasons[split_id] == f"leader rack {readers[reader]}"
    loads = [len(ids) for ids in assignment.values()]
    assert max(loads) - min(loads) <= 1


@settings(max_examples=100, deadline=None)
@given(active_inputs())
def test_place_actives_deterministic(inputs: tuple[dict[str, str | None], dict[int, str | None]]) -> None:
    splits, readers = inputs
    first = place_actives(splits, readers)
    assert place_actives(splits, readers) == first
    shuffled_splits = dict(reversed(list(splits.items())))
    shuffled_readers = dict(reversed(list(readers.items())))
    assert place_actives(shuffled_splits, shuffled_readers) == first


def test_place_actives_balance_wins_over_locality() -> None:
    assignment, reasons = place_actives({"s1": "a", "s2": "a", "s3": "a", "s4": "a"}, {0: "a", 1: "b"})
    assert assignment == {0: ["s1", "s2"], 1: ["s3", "s4"]}
    assert reasons == {
        "s1": "leader rack a",
        "s2": "leader rack a",
        "s3": "balance over locality",
        "s4": "balance over locality",
    }


def test_place_actives_extra_goes_to_rack_with_demand() -> None:
    # 3 splits, 2 readers: the reader allowed 2 splits must be the one in rack b, where the demand is.
    assignment, reasons = place_actives({"s1": "a", "s2": "b", "s3": "b"}, {0: "a", 1: "b"})
    assert assignment == {0: ["s1"], 1: ["s2", "s3"]}
    assert all(r.startswith("leader rack") for r in reasons.values())


def test_place_actives_unknown_and_missing_racks() -> None:
    assignment, reasons = place_actives({"s1": None, "s2": "c", "s3": "a", "s4": ""}, {0: "a", 1: None})
    assert sorted(len(ids) for ids in assignment.values()) == [2, 2]
    assert reasons["s1"] == "balanced: leader rack unknown"
    assert reasons["s4"] == "balanced: leader rack unknown"
    assert reasons["s2"] == "balanced: no reader in leader rack c"
    assert reasons["s3"] == "leader rack a"
    assert "s3" in assignment[0]


def test_place_actives_no_readers() -> None:
    assert place_actives({}, {}) == ({}, {})
    with pytest.raises(ConfigurationError, match="no readers"):
        place_actives({"s1": "a"}, {})


def test_place_actives_more_readers_than_splits() -> None:
    assignment, reasons = place_actives({"s1": "b"}, {0: "a", 1: "a", 2: "b", 3: "b"})
    assert assignment == {0: [], 1: [], 2: ["s1"], 3: []}
    assert reasons == {"s1": "leader rack b"}
