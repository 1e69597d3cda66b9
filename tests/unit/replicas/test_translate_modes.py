"""The translators' choices that need no broker: which translator a declaration gets, and that one split's
failure becomes a ``start`` translation with the reason instead of an exception."""

from __future__ import annotations

import pytest

from multicluster_source.metadata import ClusterMetadata
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.replicas import OriginPosition
from multicluster_source.replicas._base import START_OFFSET
from multicluster_source.replicas._lookup import ReplicaLookupError
from multicluster_source.replicas._mm2 import MirrorMaker2Translator
from multicluster_source.replicas._translate import (
    IdenticalTranslator,
    TimestampTranslator,
    make_translator,
)

EAST = ClusterMetadata("east", "127.0.0.1:1", frozenset({"orders"}))
WEST = ClusterMetadata("west", "127.0.0.1:2", frozenset({"east.orders"}))


@pytest.mark.parametrize(
    ("mode", "kind"),
    [
        ("identical", IdenticalTranslator),
        ("timestamp", TimestampTranslator),
        ("mirrormaker2", MirrorMaker2Translator),
    ],
)
def test_the_declared_mode_picks_the_translator(mode, kind) -> None:
    translator = make_translator(ReplicaOf("east", mode), EAST, WEST, group_id="g")
    try:
        assert isinstance(translator, kind)
    finally:
        translator.close()
        translator.close()  # idempotent


def test_a_declaration_of_another_origin_is_refused() -> None:
    with pytest.raises(ValueError, match="replicaOf names 'central'"):
        make_translator(ReplicaOf("central"), EAST, WEST)


class _Failing:
    def watermarks(self, topic, partition, **_):
        raise ReplicaLookupError(f"cluster west {topic}/{partition}: watermarks: timed out")

    def offset_for_time(self, topic, partition, ts):
        raise ReplicaLookupError(f"cluster west {topic}/{partition}: offsets for times: timed out")

    def close(self):
        pass


@pytest.mark.parametrize("mode", ["identical", "timestamp"])
def test_a_failed_look_up_gives_that_split_the_starting_offsets_with_the_reason(mode) -> None:
    translator = make_translator(ReplicaOf("east", mode), EAST, WEST)
    translator.replica_lookup = _Failing()  # type: ignore[attr-defined]
    positions = [
        (OriginPosition("east/orders/0", 10, last_timestamp_ms=1000), "west/east.orders/0"),
        (OriginPosition("east/orders/1", 5, last_timestamp_ms=1000), "west/east.orders/1"),
    ]
    out = translator.translate(positions, origin_reachable=True, wait_s=0.0)
    assert [t.mode for t in out] == ["start", "start"]
    assert [t.to_offset for t in out] == [START_OFFSET, START_OFFSET]
    assert "east.orders/1" in out[1].detail and "timed out" in out[1].detail
    assert out[0].to_status()["from"] == "east/orders/0" and out[0].to_status()["to"] == "west/east.orders/0"


def test_timestamp_mode_without_a_returned_record_starts_at_the_starting_offsets() -> None:
    translator = make_translator(ReplicaOf("east", "timestamp"), EAST, WEST)
    translator.replica_lookup = _Failing()  # type: ignore[attr-defined]
    (out,) = translator.translate(
        [(OriginPosition("east/orders/0", 0), "west/east.orders/0")], origin_reachable=True, wait_s=0
    )
    assert out.mode == "start" and "no record was returned" in out.detail
