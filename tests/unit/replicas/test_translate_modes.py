"""The translators' choices that need no broker: which translator a declaration gets, that one split's
failure becomes a ``start`` translation with the reason instead of an exception, that a passing failure is
asked again while the wait lasts, and that ``mirrormaker2`` keeps its conservative start when the copy's
search fails."""

from __future__ import annotations

import pytest

from multicluster_source.metadata import ClusterMetadata
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.replicas import OriginPosition, Translation
from multicluster_source.replicas._base import START_OFFSET
from multicluster_source.replicas._codec import OffsetSync
from multicluster_source.replicas._lookup import RecordCopy, ReplicaLookupError
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


class _Origin:
    """The origin of the MM2 tests below: partition 0 holds offsets 0..199, each value its offset."""

    def watermarks(self, topic, partition, **_):
        return 0, 200

    def read(self, topic, partition, start, end, *, limit, timeout_s=None):
        return [RecordCopy(o, None, str(o).encode(), (), 1000 + o) for o in range(start, end)][:limit]

    def close(self):
        pass


class _Replica:
    """A replica whose look-ups fail ``failures`` times with the given kind of error, then answer: the
    copy of origin offset ``o`` above 100 is at ``o + 100``."""

    def __init__(self, failures: int, *, retriable: bool) -> None:
        self.failures = failures
        self.retriable = retriable
        self.asked = 0

    def watermarks(self, topic, partition, **_):
        self.asked += 1
        if self.failures > 0:
            self.failures -= 1
            raise ReplicaLookupError(
                f"cluster west {topic}/{partition}: watermarks: Leader epoch is older than broker epoch",
                retriable=self.retriable,
            )
        return 0, 300

    def read(self, topic, partition, start, end, *, limit, timeout_s=None):
        return [RecordCopy(o, None, str(o - 100).encode(), (), 900 + o) for o in range(start, end)][:limit]

    def offset_for_time(self, topic, partition, ts):
        return None

    def close(self):
        pass


class _NoFollower:
    def start(self):
        pass

    def wait_ready(self, deadline):
        return True

    def close(self):
        pass


def _mm2(replica: _Replica) -> MirrorMaker2Translator:
    translator = MirrorMaker2Translator(ReplicaOf("east", "mirrormaker2"), EAST, WEST)
    translator.follower.close()
    translator.follower = _NoFollower()  # type: ignore[assignment]
    translator.origin_lookup = _Origin()  # type: ignore[assignment]
    translator.replica_lookup = replica  # type: ignore[assignment]
    translator.batched_lookups = lambda: ()  # type: ignore[method-assign]  # the fakes answer at once
    translator.store.add(OffsetSync("orders", 0, 100, 200))
    return translator


def _hand_over_150(translator: MirrorMaker2Translator, wait_s: float) -> Translation:
    """The handover of origin position 150 (the last record returned: offset 149) with MM2 past it."""
    translator.store.add(OffsetSync("orders", 0, 180, 280))  # MM2 is past the position: no wait for it
    (out,) = translator.translate(
        [(OriginPosition("east/orders/0", 150, last_timestamp_ms=1149), "west/east.orders/0")],
        origin_reachable=True,
        wait_s=wait_s,
    )
    return out


@pytest.mark.parametrize(("retriable", "wait_s"), [(False, 0.0), (True, 0.0), (True, 0.6)])
def test_a_failed_copy_search_keeps_mirrormaker2s_conservative_start_instead_of_the_starting_offsets(
    retriable: bool, wait_s: float
) -> None:
    # the chaos soak's failure: the replica's log end failed (a broker's restart) while looking for the copy
    replica = _Replica(failures=1000, retriable=retriable)
    translator = _mm2(replica)
    out = _hand_over_150(translator, wait_s)
    assert (replica.asked > 2) == (wait_s > 0)  # a passing error is asked again while the wait lasts
    assert (out.mode, out.to_offset, out.max_repeats) == ("conservative", 201, 49)  # right after the sync
    assert "the copy's search failed" in out.detail and "Leader epoch is older" in out.detail


def test_a_passing_look_up_error_is_asked_again_within_the_wait_and_translates_exactly() -> None:
    replica = _Replica(failures=2, retriable=True)
    translator = _mm2(replica)
    out = _hand_over_150(translator, 5.0)
    assert (out.mode, out.to_offset) == ("exact", 250)  # right after the copy of origin offset 149
    assert replica.asked == 3  # twice failed, then answered


def test_a_look_up_error_that_will_not_pass_is_not_asked_again() -> None:
    translator = make_translator(ReplicaOf("east", "identical"), EAST, WEST)
    replica = _Replica(failures=1, retriable=False)
    translator.replica_lookup = replica  # type: ignore[attr-defined]
    (out,) = translator.translate(
        [(OriginPosition("east/orders/0", 10, last_timestamp_ms=1000), "west/east.orders/0")],
        origin_reachable=True,
        wait_s=5.0,
    )
    assert out.mode == "start" and "Leader epoch" in out.detail
    assert replica.asked == 1
