"""HybridStream.poll_columns: an archive stage read as columns through the hybrid stream, then records
from the next stage, with one exact handover and checkpoints that cover exactly the columns returned."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from harness.archive import kafka_log, write_archive
from multicluster_source import HybridSource, KafkaArchiveSource
from multicluster_source.hybrid import InMemoryArchiveStage
from multicluster_source.hybrid._columns import skip_columns
from multicluster_source.hybrid.archive._archive_pieces import ArchivedColumns

SPLIT = "east/orders/0"
IDS: dict[int, int] = {}  # offset -> the "id" field of the archived value (the log written last)


def _archive(root: Path, count: int = 50, gaps: str = "none") -> tuple[KafkaArchiveSource, list[int]]:
    log = kafka_log(count, gaps=gaps)  # type: ignore[arg-type]
    IDS.clear()
    IDS.update({r.offset: r.value["id"] for r in log})
    write_archive(root, "orders", 0, log, fmt="parquet", flush_size=20, offset_field="__offset")
    source = KafkaArchiveSource({"east": str(root)}, format="parquet", offset_field="__offset")
    return source, [r.offset for r in log]


def _live(last: int) -> InMemoryArchiveStage:
    # the next stage holds offsets 0..last+9 of the same split: it must start right after the archive
    return InMemoryArchiveStage({SPLIT: [f"v{i}".encode() for i in range(last + 11)]}, name="live")


def _columns(stream, max_records: int = 15) -> list[int]:
    """Offsets of every part until the stream leaves the columnar stage; each part's Arrow rows line up
    with its offsets (the archive's "id" column holds the record's index in the log, see ``ids``)."""
    offsets: list[int] = []
    while stream.columnar:
        for part in stream.poll_columns(1.0, max_records):
            assert part.split_id == SPLIT
            assert part.batch.column("id").to_pylist() == [IDS[o] for o in part.offsets]
            offsets.extend(part.offsets)
    return offsets


def _records(stream) -> list[int]:
    out: list[int] = []
    while not stream.finished:
        out.extend(r.offset for r in stream.poll(0.2, 100))
    return out


def test_columns_then_records_with_an_exact_handover(tmp_path: Path) -> None:
    source, archived = _archive(tmp_path / "archive", gaps="compacted")
    hybrid = HybridSource.builder(source).add_source(_live(archived[-1])).build()
    with hybrid.open(parallelism=1) as stream:
        assert stream.columnar
        assert _columns(stream) == archived
        assert not stream.columnar  # the live stage has no columns: poll() goes on
        with pytest.raises(TypeError, match="poll\\(\\) or poll_batches"):
            stream.poll_columns(0.1)
        live = _records(stream)
        hybrid_status = stream.status()["hybrid"]
    assert live == list(range(archived[-1] + 1, archived[-1] + 11))  # nothing twice, nothing skipped
    assert hybrid_status["stage"] == 1
    assert hybrid_status["handover"]["modes"] == {"exact": 1}


def test_a_checkpoint_covers_exactly_the_columns_returned(tmp_path: Path) -> None:
    source, archived = _archive(tmp_path / "archive")
    ckpt = tmp_path / "ckpt"
    hybrid = HybridSource.builder(source).add_source(_live(archived[-1])).build()
    first: list[int] = []
    with hybrid.open(parallelism=1, checkpoint_dir=str(ckpt)) as stream:
        while len(first) < 25:
            for part in stream.poll_columns(1.0, 7):
                first.extend(part.offsets)
        stream.checkpoint()
        for part in stream.poll_columns(1.0, 7):  # returned after the checkpoint: read again after restore
            assert part.offsets
    with hybrid.open(parallelism=1, checkpoint_dir=str(ckpt)) as stream:
        rest = _columns(stream, 100)
        live = _records(stream)
    assert first + rest == archived
    assert live[0] == archived[-1] + 1


def test_skip_columns_cuts_rows_below_the_skip_offset_once() -> None:
    batch = pa.record_batch({"id": [10, 11, 12, 13]})
    part = ArchivedColumns(
        "east", "orders", 0, [10, 11, 12, 13], [1, 2, 3, 4], [b"a", b"b", b"c", b"d"], None, None, batch
    )
    other = ArchivedColumns("east", "orders", 1, [5], None, None, None, ["x"], None)
    skip = {SPLIT: 12, "east/orders/9": 3}
    (cut, kept) = skip_columns([part, other], skip)
    assert cut.timestamps is not None and cut.keys is not None and cut.batch is not None
    assert list(cut.offsets) == [12, 13] and list(cut.timestamps) == [3, 4] and list(cut.keys) == [b"c", b"d"]
    assert cut.batch.column("id").to_pylist() == [12, 13]
    assert kept is other
    assert skip == {"east/orders/9": 3}  # the split's entry went with the first row at or past it
    below = ArchivedColumns("east", "orders", 9, [1, 2], None, None, None, ["p", "q"], None)
    assert skip_columns([below], skip) == [] and skip == {"east/orders/9": 3}
