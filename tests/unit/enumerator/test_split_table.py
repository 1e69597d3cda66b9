"""The enumerator's split table: a mapping of split ids with each cluster's ids at hand."""

from __future__ import annotations

import pytest

from multicluster_source.enumerator._split_table import SplitTable
from multicluster_source.framework._split import KafkaPartitionSplit


def test_splits_are_found_by_id_and_by_cluster() -> None:
    table = SplitTable(
        [
            KafkaPartitionSplit("east", "t", 0, 0),
            KafkaPartitionSplit("west", "t", 0, 0),
            KafkaPartitionSplit("east", "t", 1, 0),
        ]
    )
    assert len(table) == 3 and "east/t/1" in table and table["west/t/0"].cluster_id == "west"
    assert list(table.ids_of("east")) == ["east/t/0", "east/t/1"]
    assert [s.split_id for s in table.of_clusters(["west", "nowhere"])] == ["west/t/0"]
    assert sorted(table.cluster_ids()) == ["east", "west"]
    assert list(table) == list(table.keys()) == ["east/t/0", "west/t/0", "east/t/1"]
    assert dict(table.items()) == {s.split_id: s for s in table.values()}


def test_a_replaced_split_keeps_its_place_and_a_popped_one_leaves_its_cluster() -> None:
    table = SplitTable([KafkaPartitionSplit("east", "t", 0, 0)])
    table.put(KafkaPartitionSplit("east", "t", 0, 42))
    assert table["east/t/0"].starting_offset == 42 and list(table.ids_of("east")) == ["east/t/0"]
    popped = table.pop("east/t/0")
    assert popped.starting_offset == 42
    assert len(table) == 0 and list(table.ids_of("east")) == [] and list(table.cluster_ids()) == []
    with pytest.raises(KeyError):
        table.pop("east/t/0")
