"""MirrorMaker 2's offset-sync and checkpoint records: decoded from bytes MM2 itself wrote, and round-trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multicluster_source.replicas._codec import (
    Checkpoint,
    MM2RecordError,
    OffsetSync,
    decode_checkpoint,
    decode_offset_sync,
    encode_checkpoint,
    encode_offset_sync,
)

GOLDEN = json.loads(Path(__file__).with_name("mm2_records_4.1.1.json").read_text())
SYNCS = [s for run in GOLDEN["runs"] for s in run["offset_syncs"]]
CHECKPOINTS = [c for run in GOLDEN["runs"] for c in run["checkpoints"]]


@pytest.mark.parametrize(
    "record", SYNCS, ids=lambda r: f"{r['decoded']['partition']}@{r['decoded']['upstream']}"
)
def test_offset_syncs_written_by_mm2_decode_and_encode_back(record) -> None:
    key, value = bytes.fromhex(record["key"]), bytes.fromhex(record["value"])
    sync = decode_offset_sync(key, value)
    assert sync == OffsetSync(**record["decoded"])
    assert encode_offset_sync(sync) == (key, value)


def test_the_golden_records_hold_shifted_offsets_and_checkpoint_metadata() -> None:
    decoded = [OffsetSync(**s["decoded"]) for s in SYNCS]
    assert OffsetSync("orders-golden", 0, 39, 44) in decoded
    metas = {c["decoded"]["metadata"] for c in CHECKPOINTS}
    assert "mcs:ckpt=7\x00" in metas


@pytest.mark.parametrize(
    "record", CHECKPOINTS, ids=lambda r: f"{r['decoded']['group']}-{r['decoded']['partition']}"
)
def test_checkpoints_written_by_mm2_decode_and_encode_back(record) -> None:
    key, value = bytes.fromhex(record["key"]), bytes.fromhex(record["value"])
    checkpoint = decode_checkpoint(key, value)
    assert checkpoint == Checkpoint(**record["decoded"])
    assert encode_checkpoint(checkpoint) == (key, value)


_names = st.text(min_size=1, max_size=40)
_offsets = st.integers(min_value=0, max_value=2**63 - 1)


@given(_names, st.integers(0, 2**31 - 1), _offsets, _offsets)
def test_offset_sync_round_trip(topic, partition, upstream, downstream) -> None:
    sync = OffsetSync(topic, partition, upstream, downstream)
    assert decode_offset_sync(*encode_offset_sync(sync)) == sync


@given(_names, _names, st.integers(0, 2**31 - 1), _offsets, _offsets, st.text(max_size=30))
def test_checkpoint_round_trip(group, topic, partition, upstream, downstream, metadata) -> None:
    checkpoint = Checkpoint(group, topic, partition, upstream, downstream, metadata)
    assert decode_checkpoint(*encode_checkpoint(checkpoint)) == checkpoint


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        (None, b"\x00" * 16, "null"),
        (b"\x00\x05ab", b"\x00" * 16, "topic needs 5 bytes"),
        (b"\x00\x01a\x00\x00\x00\x01", b"\x00" * 15, "needs 16 bytes"),
        (b"\x00\x01a\x00\x00\x00\x01", b"\x00" * 17, "1 bytes after the last field"),
        (b"\x00\x01\xff\x00\x00\x00\x01", b"\x00" * 16, "not UTF-8"),
        (b"\xff\xff\x00\x00\x00\x01", b"\x00" * 16, "negative length"),
        (b"\x00\x01a\xff\xff\xff\xff", b"\x00" * 16, "negative"),
    ],
)
def test_bad_offset_syncs_name_the_record(key, value, says) -> None:
    with pytest.raises(
        MM2RecordError, match=r"mm2-offset-syncs\.west\.internal partition 0 offset 17"
    ) as info:
        decode_offset_sync(key, value, source="mm2-offset-syncs.west.internal", partition=0, offset=17)
    assert says in str(info.value)


def test_a_checkpoint_of_another_version_is_refused_by_name() -> None:
    key, value = encode_checkpoint(Checkpoint("g", "east.orders", 0, 5, 7, ""))
    with pytest.raises(MM2RecordError, match=r"east.checkpoints.internal partition 0 offset 3: .*version 1"):
        decode_checkpoint(
            key, b"\x00\x01" + value[2:], source="east.checkpoints.internal", partition=0, offset=3
        )
