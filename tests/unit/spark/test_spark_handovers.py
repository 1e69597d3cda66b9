"""Replica handovers as the Spark driver plans them (no broker: the translator is a stand-in that records
what it was asked; the real translators run on MirrorMaker 2 in ``tests/integration/test_spark_replicas.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from multicluster_source import ClusterMetadata, KafkaStream
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.replicas._model import OriginPosition, Translation
from multicluster_source.spark._driver import Planner
from multicluster_source.spark._handovers import SparkHandovers, origin_split_of
from multicluster_source.spark._options import parse_options
from multicluster_source.testing import write_metadata_file


class _Translator:
    """Answers ``origin offset + shift`` (or ``start`` for partition 9); records its calls and its life."""

    made: list[_Translator] = []

    def __init__(self, replica_of: ReplicaOf, origin: ClusterMetadata, replica: ClusterMetadata, **_: Any):
        self.replica = replica.cluster_id
        self.asked: list[tuple[str, int, str]] = []
        self.reachable: list[bool] = []
        self.closed = False
        _Translator.made.append(self)

    def start(self) -> None:
        pass

    def translate(
        self, handovers: Sequence[tuple[OriginPosition, str]], *, origin_reachable: bool, wait_s: float
    ) -> list[Translation]:
        self.reachable.append(origin_reachable)
        out = []
        for position, to_split in handovers:
            self.asked.append((position.split, position.offset, to_split))
            if to_split.endswith("/9"):
                out.append(Translation(position.split, to_split, position.offset, -1, "start"))
            else:
                out.append(
                    Translation(position.split, to_split, position.offset, position.offset + 100, "exact")
                )
        return out

    def close(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def _fresh() -> None:
    _Translator.made = []


def _declared(*, origin: bool, failover: bool = False) -> dict[str, ClusterMetadata]:
    east = ClusterMetadata("east", "east:9092", frozenset({"orders"} if origin else {"other"}))
    west = ClusterMetadata(
        "west",
        "west:9092",
        frozenset({"east.orders", "own"}),
        replica_of=ReplicaOf("east", failover=failover),
    )
    return {"east": east, "west": west}


def test_the_copy_is_read_only_when_its_origin_topic_leaves_or_fails() -> None:
    handovers = SparkHandovers({}, factory=_Translator)
    read = handovers.effective(_declared(origin=True))
    assert read["east"].topics == {"orders"} and read["west"].topics == {"own"}
    assert handovers.effective(_declared(origin=False))["west"].topics == {"east.orders", "own"}
    failed = handovers.effective(_declared(origin=True, failover=True))
    assert failed["west"].topics == {"east.orders", "own"} and "east" not in failed
    assert len(_Translator.made) == 1, "one translator per declaration, made once"
    handovers.effective({"east": _declared(origin=True)["east"]})
    assert _Translator.made[0].closed, "closed when the declaration goes"
    handovers.close()


def test_a_replica_split_without_a_position_starts_at_its_origin_position_translated() -> None:
    handovers = SparkHandovers({}, factory=_Translator)
    declared = _declared(origin=False)
    handovers.effective(declared)
    positions = {"east/orders/0": 40, "east/orders/9": 7, "west/east.orders/1": 5, "east/orders/1": 60}
    discovered = {"west": ["west/east.orders/0", "west/east.orders/1", "west/east.orders/9", "west/own/0"]}
    starts = handovers.translate(declared, discovered, positions, set())
    assert starts == {"west/east.orders/0": 140}, "a split with a position goes on; a 'start' is left out"
    (translator,) = _Translator.made
    assert translator.asked == [
        ("east/orders/0", 40, "west/east.orders/0"),
        ("east/orders/9", 7, "west/east.orders/9"),
    ]
    assert translator.reachable == [True]
    handovers.translate(declared, discovered, positions, {"east"})
    assert translator.reachable[-1] is False, "an origin that does not answer is not asked"
    assert origin_split_of("west/own/0", declared) is None
    handovers.close()


def test_the_planner_enters_the_copy_at_the_translated_offsets_from_the_next_micro_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import multicluster_source.replicas._translate as translate

    monkeypatch.setattr(translate, "make_translator", _Translator)
    path = write_metadata_file(tmp_path / "streams.yaml", [KafkaStream("s", _declared(origin=True))])
    planner = Planner(parse_options({"metadataFile": str(path), "streamIds": "s"}))
    ends = {"east/orders/0": 50, "east/other/0": 3, "west/east.orders/0": 500, "west/own/0": 8}

    def partitions_of(cluster: ClusterMetadata) -> list[tuple[str, int]]:
        return sorted((t, 0) for t in cluster.topics)

    def offsets(cluster: ClusterMetadata, kind: str, parts: list[tuple[str, int]]) -> dict[str, int]:
        keys = [f"{cluster.cluster_id}/{t}/{p}" for t, p in parts]
        return {k: 0 if kind == "earliest" else ends[k] for k in keys}

    monkeypatch.setattr(planner, "partitions_of", partitions_of)
    monkeypatch.setattr(planner, "offsets", offsets)
    first = planner.latest({"east/orders/0": 10, "west/own/0": 0}, None)
    assert first == {"east/orders/0": 50, "west/own/0": 8}, "the copy is not read while its origin is"
    write_metadata_file(path, [KafkaStream("s", _declared(origin=False))])
    second = planner.latest(first, None)
    assert second == {"east/orders/0": 50, "east/other/0": 0, "west/east.orders/0": 150, "west/own/0": 8}
    third = planner.latest(second, None)
    assert third["west/east.orders/0"] == 500 and third["east/orders/0"] == 50
    planner.close()
    assert _Translator.made[0].closed
