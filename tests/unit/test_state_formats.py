"""Versioned state: splits, enumerator state and checkpoint files read their v1 form from hand-written bytes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from multicluster_source import CheckpointError
from multicluster_source.enumerator._replica_state import ReplicaState
from multicluster_source.enumerator._state import EnumeratorState, RemovedSplit
from multicluster_source.framework._checkpoint import CheckpointStore
from multicluster_source.framework._split import (
    KafkaPartitionSplit,
    make_split_id,
    parse_split_id,
    split_from_dict,
    split_to_dict,
)

GOLDEN = Path(__file__).parent / "golden" / "checkpoint_v1.json"


def test_split_ids_are_unambiguous() -> None:
    split = KafkaPartitionSplit("east-1", "orders-eu-1", 3, 0)
    assert split.split_id == "east-1/orders-eu-1/3"
    assert parse_split_id(split.split_id) == ("east-1", "orders-eu-1", 3)
    assert make_split_id("a.b", "c_d", 0) == "a.b/c_d/0"
    for bad in ("a/b", "a/b/c", "a//1", "/t/1", "a/b/1/2"):
        with pytest.raises(ValueError):
            parse_split_id(bad)


def test_split_round_trip_and_v1_bytes() -> None:
    split = KafkaPartitionSplit("east", "orders", 1, 10, 20)
    assert split_from_dict(split_to_dict(split)) == split
    assert split_from_dict({"v": 1, "cluster": "east", "topic": "orders", "partition": 1, "start": 10}) == (
        KafkaPartitionSplit("east", "orders", 1, 10, None)
    )
    assert split.is_finished_at(20) and not split.is_finished_at(19)
    assert split.starting_at(15) == KafkaPartitionSplit("east", "orders", 1, 15, 20)


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"v": 2, "cluster": "c", "topic": "t", "partition": 0, "start": 0},
        {"v": 1, "cluster": "c", "topic": "t", "partition": "x", "start": 0},
        {"v": 1, "cluster": "c", "topic": "t", "start": 0},
    ],
)
def test_bad_split_is_a_checkpoint_error(bad: object) -> None:
    with pytest.raises(CheckpointError):
        split_from_dict(bad)


def test_golden_checkpoint_v1_is_read(tmp_path: Path) -> None:
    target = tmp_path / "chk-000000000042.json"
    target.write_bytes(GOLDEN.read_bytes())
    checkpoint = CheckpointStore(tmp_path).latest()
    assert checkpoint is not None
    assert checkpoint.checkpoint_id == 42 and checkpoint.source == "billing"
    assert checkpoint.positions == {"east/orders/0": 12, "old/t/0": 11}
    state = EnumeratorState.from_dict(checkpoint.enumerator)
    assert state.metadata_version == 7
    assert state.finished == frozenset({"east/orders/1"})
    assert KafkaPartitionSplit("west.dc-2", "orders-retry", 3, 17) in state.splits
    assert state.removed == (RemovedSplit(KafkaPartitionSplit("old", "t", 0, 9), 1764630000000),)
    moved = state.with_positions(checkpoint.positions)
    assert KafkaPartitionSplit("east", "orders", 0, 12) in moved.splits
    assert moved.removed[0].split.starting_offset == 11
    # Written again, v1 reads back identically.
    assert EnumeratorState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


def test_unknown_versions_are_refused_with_the_file_named(tmp_path: Path) -> None:
    doc = json.loads(GOLDEN.read_text())
    doc["version"] = 99
    path = tmp_path / "chk-000000000001.json"
    path.write_text(json.dumps(doc))
    store = CheckpointStore(tmp_path)
    with pytest.raises(CheckpointError, match=str(path)):
        store.read(path)
    with pytest.raises(CheckpointError, match="version"):
        EnumeratorState.from_dict({"version": 2})


def test_store_keeps_the_last_three_and_skips_a_damaged_newest(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    for i in range(1, 6):
        store.write(i, "s", EnumeratorState().to_dict(), {"c/t/0": i * 10})
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["chk-000000000003.json", "chk-000000000004.json", "chk-000000000005.json"]
    (tmp_path / "chk-000000000005.json").write_text('{"version": 1, "checkpoint_id": 5, "enumer')
    latest = store.latest()
    assert latest is not None and latest.checkpoint_id == 4 and latest.positions == {"c/t/0": 40}


def test_write_is_atomic_no_partial_file_is_ever_visible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(tmp_path)
    store.write(1, "s", EnumeratorState().to_dict(), {})

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk went away")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(CheckpointError, match="chk-000000000002"):
        store.write(2, "s", EnumeratorState().to_dict(), {"c/t/0": 1})
    monkeypatch.undo()
    latest = store.latest()
    assert latest is not None and latest.checkpoint_id == 1


def test_enumerator_state_replicas_section_v1_and_states_without_it() -> None:
    base = {
        "version": 1,
        "splits": [],
        "finished": [],
        "removed": [],
        "seen_topics": {},
        "metadata_version": 3,
    }
    older = EnumeratorState.from_dict(base)  # written before replica handovers existed
    assert older.replicas is None and ReplicaState.from_dict(older.replicas) == ReplicaState()
    section = {
        "version": 1,
        "pending": [
            {
                "to": "west/east.orders/0",
                "from": "east/orders/0",
                "from_offset": 42,
                "last_timestamp_ms": 1700000000000,
                "origin_reachable": False,
            }
        ],
        "done": [
            {
                "from": "east/orders/1",
                "to": "west/east.orders/1",
                "from_offset": 7,
                "to_offset": 5,
                "mode": "conservative",
                "max_repeats": 2,
                "detail": "sync at 4",
            }
        ],
        "auto_failed": ["east"],
    }
    state = EnumeratorState.from_dict({**base, "replicas": section})
    assert state.to_dict()["replicas"] == section
    assert state.with_positions({}).replicas == section
    replicas = ReplicaState.from_dict(state.replicas)
    assert replicas.pending[0].origin.offset == 42 and not replicas.pending[0].origin_reachable
    assert replicas.done[0].max_repeats == 2 and replicas.to_dict() == section
    with pytest.raises(CheckpointError, match="'replicas' section version 2"):
        ReplicaState.from_dict({**section, "version": 2})
    with pytest.raises(CheckpointError, match="malformed 'replicas'"):
        ReplicaState.from_dict({"version": 1, "pending": [{"to": "x"}]})
