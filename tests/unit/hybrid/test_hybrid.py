"""The hybrid source with in-memory stages: builder checks, exact handover, checkpoints and restore at every
step of the switch, the state file's versions, watermarks across the switch, status, metrics, run()."""

from __future__ import annotations

import asyncio
import json
import pickle
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from multicluster_source import (
    CheckpointError,
    ClusterMetadata,
    ConfigurationError,
    HybridSource,
    KafkaStream,
    MultiClusterKafkaSource,
    OffsetsInitializer,
    SourceRecord,
    StaticMetadataService,
)
from multicluster_source.enumerator._offsets import handover_offsets
from multicluster_source.exceptions import StreamClosedError
from multicluster_source.hybrid import HybridStage, StageHandover
from multicluster_source.hybrid._state import HybridState, HybridStateStore
from multicluster_source.testing import InMemoryArchiveStage


class Crash(Exception):
    """Stands for kill -9 at a switch step (the stream is then abandoned, not checkpointed)."""


def _archive(n: int = 5, splits: tuple[str, ...] = ("c/t/0", "c/t/1"), **kw: Any) -> InMemoryArchiveStage:
    return InMemoryArchiveStage({s: [f"{s}:{i}".encode() for i in range(n)] for s in splits}, **kw)


def _next(
    n: int = 3, start: int = 5, splits: tuple[str, ...] = ("c/t/0", "c/t/1", "c/t/2")
) -> InMemoryArchiveStage:
    # records 0..start+n-1 per split, so a stage started from the handover must skip the archived ones
    return InMemoryArchiveStage(
        {s: [f"{s}:{i}".encode() for i in range(start + n)] for s in splits}, name="next"
    )


def _keys(records: list[SourceRecord]) -> list[tuple[str, int]]:
    return [(r.split_id, r.offset) for r in records]


def _drain(stream: Any) -> list[SourceRecord]:
    out: list[SourceRecord] = []
    while not stream.finished:
        out.extend(stream.poll(0.01, 3))
    return out


EXPECTED = sorted([(s, i) for s in ("c/t/0", "c/t/1") for i in range(8)] + [("c/t/2", i) for i in range(8)])


def test_builder_needs_bounded_stages_before_the_last() -> None:
    live = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(
            StaticMetadataService(
                [KafkaStream("s", {"c": ClusterMetadata("c", "localhost:1", frozenset({"t"}))})]
            )
        )
        .set_stream_ids(["s"])
        .build()
    )
    with pytest.raises(ConfigurationError, match=r"stage 0 \(.*\) is not bounded"):
        HybridSource.builder(live).add_source(_archive()).build()
    with pytest.raises(ConfigurationError, match="stage 1 is a str"):
        HybridSource.builder(_archive()).add_source("nope").build()  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="set_gap_policy"):
        HybridSource.builder(_archive()).set_gap_policy("ignore")
    hybrid = HybridSource.builder(_archive()).add_source(live).build()
    assert not hybrid.bounded and hybrid.name == f"hybrid-{live.name}"
    assert isinstance(_archive(), HybridStage)


def test_exact_handover_no_record_twice_none_skipped() -> None:
    first, second = _archive(), _next()
    hybrid = HybridSource.builder(first).add_source(second).set_name("h").build()
    with hybrid.open() as stream:
        got = _drain(stream)
        status = stream.status()
    assert sorted(_keys(got)) == EXPECTED
    assert len(got) == len(set(_keys(got)))
    assert [r.value for r in got if r.split_id == "c/t/0"] == [f"c/t/0:{i}".encode() for i in range(8)]
    h = status["hybrid"]
    assert (h["stage"], h["stages"], h["stage_name"]) == (1, 2, "next")
    assert h["handover"]["positions"] == {"c/t/0": 5, "c/t/1": 5}
    assert h["handover"]["modes"] == {"exact": 2}
    assert h["splits"]["c/t/0"] == {"phase": "live", "start": "exact"}
    assert status["state"] == "finished"
    assert len(h["switches"]) == 1 and h["switches"][0]["latency_ms"] is not None


def test_iteration_and_batches_cross_the_switch() -> None:
    hybrid = HybridSource.builder(_archive()).add_source(_next()).build()
    with hybrid.open() as stream:
        assert sorted(_keys(list(stream))) == EXPECTED
    with hybrid.open() as stream:
        seen: list[tuple[str, int]] = []
        while not stream.finished:
            for batch in stream.poll_batches(0.01, 4):
                seen.extend((f"{batch.cluster_id}/{m.topic()}/{m.partition()}", m.offset()) for m in batch)
        assert sorted(seen) == EXPECTED


def test_timestamp_handover_when_the_archive_has_no_offsets() -> None:
    records = {"c/t/0": [SourceRecord("c", "t", 0, i, 1000 + i, None, b"v", None) for i in range(3)]}
    first = InMemoryArchiveStage(records, with_offsets=False)
    with HybridSource.builder(first).add_source(_next()).build().open() as stream:
        _drain(stream)
        h = stream.status()["hybrid"]
    assert h["handover"] == {"modes": {}, "timestamp_ms": 1002, "positions": {}}


@pytest.mark.parametrize("step", ["none", "finished", "written", "closed", "opened", "after"])
def test_restore_at_every_step_of_the_switch(tmp_path: Path, step: str) -> None:
    """Checkpoint mid-archive, crash at ``step`` of the switch, restore: nothing lost, and what comes
    again is only what came after the last checkpoint."""
    ckpt = str(tmp_path / "ckpt")
    hybrid = HybridSource.builder(_archive()).add_source(_next()).build()

    def hook(at: str) -> None:
        if at == step:
            raise Crash(at)

    hybrid._switch_hook = hook
    first: list[SourceRecord] = []
    stream = hybrid.open(checkpoint_dir=ckpt)
    first.extend(stream.poll(0.01, 4))
    stream.checkpoint()
    covered = set(_keys(first))
    try:
        while not stream.finished:
            first.extend(stream.poll(0.01, 3))
            if step == "after" and stream.stage == 1 and len(first) > 12:
                stream.checkpoint()
                covered = set(_keys(first))
                raise Crash("after")
    except Crash:
        pass
    finally:
        stream.close()
    assert step == "none" or len(first) < len(EXPECTED)
    hybrid._switch_hook = None
    with hybrid.open(checkpoint_dir=ckpt) as again:
        assert again.restored_from is not None
        second = _drain(again)
    assert set(_keys(first)) | set(_keys(second)) == set(EXPECTED)
    assert not covered & set(_keys(second)), "a record the checkpoint covered came again"
    assert len(second) == len(set(_keys(second)))
    if step in ("written", "closed", "opened"):
        assert again.status()["hybrid"]["stage"] == 1


def test_checkpoint_mid_second_stage_restores_there(tmp_path: Path) -> None:
    ckpt = str(tmp_path / "ckpt")
    hybrid = HybridSource.builder(_archive()).add_source(_next()).build()
    with hybrid.open(checkpoint_dir=ckpt) as stream:
        got: list[SourceRecord] = []
        while stream.stage == 0 or len(got) < 14:
            got.extend(stream.poll(0.01, 1))
        stream.checkpoint()
    with hybrid.open(checkpoint_dir=ckpt) as again:
        rest = _drain(again)
    assert sorted(_keys(got) + _keys(rest)) == EXPECTED


def test_state_file_versions_and_a_different_chain(tmp_path: Path) -> None:
    old = {
        "v": 1,
        "seq": 4,
        "checkpoint_id": 2,
        "stages": ["archive", "next"],
        "stage": 1,
        "handover": {"v": 1, "positions": {"c/t/0": 5}, "modes": {"c/t/0": "exact"}, "timestamp_ms": None},
        "snapshot": None,
    }
    (tmp_path / "hybrid-000000000004.json").write_text(json.dumps(old))
    found = HybridStateStore(tmp_path).latest()
    assert found is not None
    state = found[0]
    assert state.stage == 1 and state.handover == StageHandover({"c/t/0": 5}, {"c/t/0": "exact"})
    assert state.watermark is None and state.switches == ()
    with HybridSource.builder(_archive()).add_source(_next()).build().open(checkpoint_dir=str(tmp_path)) as s:
        got = _drain(s)
    # stage 1 from the hand-written handover: c/t/0 from 5, the others from their first record
    assert sorted(_keys(got)) == sorted(
        [("c/t/0", i) for i in range(5, 8)] + [(s, i) for s in ("c/t/1", "c/t/2") for i in range(8)]
    )
    (tmp_path / "hybrid-000000000099.json").write_text(json.dumps({**old, "v": 7}))
    with pytest.raises(CheckpointError, match="unknown version 7"):
        HybridStateStore(tmp_path).latest()
    (tmp_path / "hybrid-000000000099.json").write_text("{not json")
    assert HybridStateStore(tmp_path).latest() is not None  # a damaged newest file is skipped
    three = HybridSource.builder(_archive()).add_source(_archive(name="x")).add_source(_next()).build()
    with pytest.raises(CheckpointError, match="written for stages"):
        three.open(checkpoint_dir=str(tmp_path))
    with pytest.raises(CheckpointError, match="malformed"):
        HybridState.from_dict({"v": 1}, "f")


def test_watermark_never_goes_back_across_the_switch() -> None:
    late = {"c/t/0": [SourceRecord("c", "t", 0, i, 5000 + i, None, b"v", None) for i in range(3)]}
    early = {"c/t/0": [SourceRecord("c", "t", 0, i, 10 + i, None, b"v", None) for i in range(6)]}
    first = InMemoryArchiveStage(late, out_of_orderness_ms=0)
    second = InMemoryArchiveStage(early, name="next", out_of_orderness_ms=0)
    seen = []
    with HybridSource.builder(first).add_source(second).build().open() as stream:
        while not stream.finished:
            stream.poll(0.01, 1)
            seen.append(stream.watermark)
    marks = [w for w in seen if w is not None]
    assert marks == sorted(marks) and marks[-1] == 5002


def test_metrics_and_closed_stream(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    with HybridSource.builder(_archive()).add_source(_next()).build().open(registry=registry) as stream:
        assert registry.get_sample_value("multicluster_source_hybrid_stage") == 0
        _drain(stream)
        assert registry.get_sample_value("multicluster_source_hybrid_stage") == 1
        assert registry.get_sample_value("multicluster_source_hybrid_handovers_total", {"mode": "exact"}) == 2
        assert registry.get_sample_value("multicluster_source_hybrid_switch_seconds") is not None
        assert stream.metrics_registry is registry
    with pytest.raises(StreamClosedError):
        stream.poll()
    assert stream.status()["state"] == "closed"


def test_run_on_the_calling_thread(tmp_path: Path) -> None:
    hybrid = HybridSource.builder(_archive()).add_source(_next()).build()
    got: list[SourceRecord] = []
    result = hybrid.run(got.extend, checkpoint_dir=str(tmp_path / "c"), checkpoint_interval=0.001)
    assert result.finished and result.records == len(EXPECTED) and result.checkpoints >= 1
    assert sorted(_keys(got)) == EXPECTED
    with pytest.raises(ConfigurationError, match="runtime='threads'"):
        hybrid.run(got.extend, runtime="processes")


def test_open_async_crosses_the_switch(tmp_path: Path) -> None:
    hybrid = HybridSource.builder(_archive()).add_source(_next()).build()

    async def main() -> list[SourceRecord]:
        out = []
        async with hybrid.open_async(checkpoint_dir=str(tmp_path / "a"), checkpoint_interval=0.01) as stream:
            async for record in stream:
                out.append(record)
            assert await stream.checkpoint() >= 1
        return out

    assert sorted(_keys(asyncio.run(main()))) == EXPECTED


def test_handover_initializer_pickles_and_describes() -> None:
    init = handover_offsets({"c/t/0": 5}, OffsetsInitializer.timestamp(7), "warn")
    again = pickle.loads(pickle.dumps(init))
    assert again == init and hash(again) == hash(init)
    assert again.fallback == OffsetsInitializer.timestamp(7) and again.gap_policy == "warn"
    assert init.describe() == "handover(1 positions, others timestamp(7))"


def test_in_memory_stage_checks_its_input() -> None:
    with pytest.raises(ConfigurationError, match="cluster/topic/partition"):
        InMemoryArchiveStage({"t/0": [b"x"]})
    with pytest.raises(ConfigurationError, match="listed under split"):
        InMemoryArchiveStage({"c/t/0": [SourceRecord("c", "t", 1, 0, None, None, b"x", None)]})
    with pytest.raises(ConfigurationError, match="offset 3 after 3"):
        InMemoryArchiveStage({"c/t/0": [SourceRecord("c", "t", 0, 3, None, None, b"x", None)] * 2})
    with pytest.raises(ConfigurationError, match="offset 2 after 3"):
        record = SourceRecord("c", "t", 0, 2, None, None, b"x", None)
        InMemoryArchiveStage({"c/t/0": [b"a", record]}, first_offsets={"c/t/0": 3})


def test_status_page_and_admin_server_show_the_stage() -> None:
    import urllib.request

    hybrid = HybridSource.builder(_archive()).add_source(_next()).set_name("h").build()
    with hybrid.open(admin_address="127.0.0.1:0") as stream:
        _drain(stream)
        assert stream.admin_url is not None
        with urllib.request.urlopen(stream.admin_url + "/") as answer:
            page = answer.read().decode()
        with urllib.request.urlopen(stream.admin_url + "/status") as answer:
            doc = json.loads(answer.read())
        with urllib.request.urlopen(stream.admin_url + "/metrics") as answer:
            metrics = answer.read().decode()
    assert 'id="hybrid"' in page and "2 of 2 (next)" in page and "exact: 2" in page
    assert 'data-split="c/t/2"' in page
    assert doc["hybrid"]["stage"] == 1
    assert "multicluster_source_hybrid_stage 1.0" in metrics


class _FailingOnce:
    """A stage whose first open fails (a user's own stage: only bounded, name and open_stage)."""

    def __init__(self, inner: InMemoryArchiveStage) -> None:
        self.inner = inner
        self.failures = 1
        self.bounded = True
        self.name = "flaky"

    def open_stage(self, **kwargs: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise OSError("archive bucket unreachable")
        return self.inner.open_stage(**kwargs)


def test_a_next_stage_that_fails_to_open_fails_the_stream_and_a_restart_opens_it(tmp_path: Path) -> None:
    ckpt = str(tmp_path / "ckpt")
    flaky = _FailingOnce(_next())
    hybrid = HybridSource.builder(_archive()).add_source(flaky).build()
    got: list[SourceRecord] = []
    with hybrid.open(checkpoint_dir=ckpt) as stream:
        with pytest.raises(OSError, match="unreachable"):
            while True:
                got.extend(stream.poll(0.01, 5))
        with pytest.raises(OSError, match="unreachable"):
            stream.poll(0.01)
    with hybrid.open(checkpoint_dir=ckpt) as again:
        assert again.stage == 1
        rest = _drain(again)
    assert sorted(_keys(got + rest)) == EXPECTED


def test_the_live_runs_watermark_never_goes_below_the_archives() -> None:
    from multicluster_source.hybrid._run import WatermarkFloor

    told: list[int | None] = []

    class Handler:
        def __call__(self, records: Any) -> None:
            pass

        def on_watermark(self, ms: int | None) -> None:
            told.append(ms)

    floor = WatermarkFloor(Handler(), 500)
    for ms in (None, 100, 500, 700, 600, 900):
        floor.on_watermark(ms)
    assert told == [500, 700, 900]
    assert pickle.loads(pickle.dumps(WatermarkFloor(42, 1))).floor == 1


class _OwnSnapshot:
    """An in-memory stage whose readers have no ``snapshot_later`` and whose ``snapshot()`` is the reader's
    own table, changed by every later poll: the ``for`` loop must copy it before each batch."""

    def __init__(self, stage: InMemoryArchiveStage) -> None:
        self._stage = stage

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stage, name)

    def open_stage(self, **kw: Any) -> Any:
        return _OwnSnapshotReader(self._stage.open_stage(**kw))


class _OwnSnapshotReader:
    def __init__(self, reader: Any) -> None:
        self._reader = reader

    def __getattr__(self, name: str) -> Any:
        if name == "snapshot_later":
            raise AttributeError(name)
        return getattr(self._reader, name)

    def snapshot(self) -> dict[str, Any]:
        return {"v": 1, "next": self._reader._next}  # not a copy


@pytest.mark.parametrize("later", [True, False], ids=["snapshot_later", "snapshot-copied"])
@pytest.mark.parametrize("cut", [1, 3, 7, 10, 12, 20])
def test_for_loop_checkpoint_mid_batch_then_restore(tmp_path: Path, cut: int, later: bool) -> None:
    """The loop takes a batch from the stage and hands it out record by record: a checkpoint after
    ``cut`` records covers exactly those (a skip filter over the batch's earlier snapshot), twice over;
    the same for a stage whose readers keep no cheap snapshot (``snapshot_later``) and hand their own table."""
    ckpt = str(tmp_path / "ckpt")
    first_stage: Any = _archive() if later else _OwnSnapshot(_archive())
    hybrid = HybridSource.builder(first_stage).add_source(_next()).build()
    first: list[SourceRecord] = []
    with hybrid.open(checkpoint_dir=ckpt) as stream:
        for record in stream:
            first.append(record)
            if len(first) == cut:
                stream.checkpoint()
                break
    second: list[SourceRecord] = []
    with hybrid.open(checkpoint_dir=ckpt) as again:
        for record in again:
            second.append(record)
            if len(second) == 2:
                again.checkpoint()  # the filter of the first restore may still be active: it must persist
                break
    with hybrid.open(checkpoint_dir=ckpt) as third:
        rest = list(third)
    assert sorted(_keys(first + second + rest)) == EXPECTED
    assert len(first + second + rest) == len(EXPECTED), "a record came twice"


def test_poll_after_leaving_the_loop_returns_what_it_held() -> None:
    hybrid = HybridSource.builder(_archive()).add_source(_next()).build()
    with hybrid.open() as stream:
        got = []
        for record in stream:
            got.append(record)
            break
        got.extend(stream.poll(0.01, 2))
        seen = [
            (b.cluster_id, m.topic(), m.partition(), m.offset(), m.value())
            for b in stream.poll_batches(0.01, 3)
            for m in b
        ]
        got.extend(SourceRecord(c, t, p, o, None, None, v, None) for c, t, p, o, v in seen)
        got.extend(_drain(stream))
    assert sorted(_keys(got)) == EXPECTED and len(got) == len(EXPECTED)
    assert [r.value for r in got if r.split_id == "c/t/0"][:3] == [b"c/t/0:0", b"c/t/0:1", b"c/t/0:2"]


def test_state_version_2_carries_the_skip_filter(tmp_path: Path) -> None:
    store = HybridStateStore(tmp_path)
    store.write(HybridState(stages=("a", "b"), snapshot={"v": 1, "next": {}}, skip={"c/t/0": 3}))
    found = store.latest()
    assert found is not None and found[0].skip == {"c/t/0": 3}
    doc = json.loads(found[1].read_text())
    assert doc["v"] == 2 and doc["skip"] == {"c/t/0": 3}


def test_periodic_checkpoints_inside_the_loop_cover_exactly_what_it_got(tmp_path: Path) -> None:
    ckpt = str(tmp_path / "ckpt")
    hybrid = HybridSource.builder(_archive(n=40)).add_source(_next(n=3, start=40)).build()
    first: list[SourceRecord] = []
    with hybrid.open(checkpoint_dir=ckpt, checkpoint_interval=0.001) as stream:
        for record in stream:
            first.append(record)
            time.sleep(0.002)  # a job at work: the interval passes between records
            if len(first) == 37:
                break
    # the last periodic checkpoint was captured between two records the loop got (mid-batch), and written
    # in the background (close() waited for it); the loop went on meanwhile, so it may be a few records back
    state = HybridStateStore(ckpt).latest()
    assert state is not None and state[0].stage == 0 and state[0].skip
    with hybrid.open(checkpoint_dir=ckpt) as again:
        rest = _drain(again)
    expected = {(s, i) for s in ("c/t/0", "c/t/1") for i in range(43)} | {("c/t/2", i) for i in range(43)}
    assert set(_keys(first)) | set(_keys(rest)) == expected
    came_again = set(_keys(first)) & set(_keys(rest))
    covered = len(first) - len(came_again)  # the records the loop got before the checkpoint
    assert covered > 0
    assert set(_keys(first[covered:])) == came_again, "what came again is not what the loop got after it"
    assert len(rest) == len(expected) - covered, "a record came twice in the restore"


class _LaggingEnd:
    """A stage whose reader notices its end only on a poll after its last record (as readers with threads
    do): the hybrid for loop then switches inside its poll and holds the next stage's first batch."""

    def __init__(self, inner: InMemoryArchiveStage) -> None:
        self.inner, self.bounded, self.name = inner, True, inner.name

    def open_stage(self, **kwargs: Any) -> Any:
        reader = self.inner.open_stage(**kwargs)
        ended = {"seen": False}
        poll = reader.poll

        def lagging_poll(timeout: float, max_records: int) -> list[SourceRecord]:
            out = poll(timeout, max_records)
            ended["seen"] = not out
            return out

        reader.poll = lagging_poll  # type: ignore[method-assign]
        return _Lagging(reader, ended)


class _Lagging:
    def __init__(self, reader: Any, ended: dict[str, bool]) -> None:
        self._reader, self._ended = reader, ended

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)

    @property
    def finished(self) -> bool:
        return bool(self._reader.finished and self._ended["seen"])


class _WithIterator:
    """A stage whose reader has its own iterator (as a Kafka stage's)."""

    def __init__(self, inner: InMemoryArchiveStage) -> None:
        self.inner, self.bounded, self.name = inner, True, inner.name

    def open_stage(self, **kwargs: Any) -> Any:
        reader = self.inner.open_stage(**kwargs)

        def iterate() -> Any:
            while not reader.finished:
                yield from reader.poll(0, 1)

        reader.iterate = iterate  # type: ignore[attr-defined]
        return reader


@pytest.mark.parametrize("cut", [11, 13, 16])
def test_checkpoint_in_the_next_stages_first_batch_then_restore(tmp_path: Path, cut: int) -> None:
    ckpt = str(tmp_path / "ckpt")
    hybrid = HybridSource.builder(_LaggingEnd(_archive())).add_source(_WithIterator(_next())).build()
    first: list[SourceRecord] = []
    with hybrid.open(checkpoint_dir=ckpt) as stream:
        for record in stream:
            first.append(record)
            if len(first) == cut:  # the archive has 10: these came in the next stage's first batch
                assert stream.stage == 1 and stream._held.buffer
                stream.checkpoint()
                break
    with hybrid.open(checkpoint_dir=ckpt) as again:
        rest = list(again)
    assert sorted(_keys(first + rest)) == EXPECTED
    assert len(first) + len(rest) == len(EXPECTED), "a record the checkpoint covered came again"


def test_the_watermark_covers_only_records_handed_out_by_the_loop() -> None:
    records = {"c/t/0": [SourceRecord("c", "t", 0, i, 100 * i, None, b"v", None) for i in range(20)]}
    stage = InMemoryArchiveStage(records, out_of_orderness_ms=0)
    with HybridSource.builder(stage).build().open() as stream:
        for record in stream:
            mark = stream.watermark
            assert mark is None or mark <= (record.timestamp or 0), "the watermark ran ahead of the records"
        assert stream.watermark == 1900


def test_run_with_batches_and_the_handlers_hooks(tmp_path: Path) -> None:
    calls: list[Any] = []

    class Handler:
        def open(self, index: int) -> None:
            calls.append(("open", index))

        def __call__(self, batch: Any) -> None:
            calls.extend((batch.cluster_id, m.topic(), m.partition(), m.offset()) for m in batch)

        def close(self) -> None:
            calls.append(("close",))

    hybrid = HybridSource.builder(_archive()).add_source(_next()).build()
    result = hybrid.run(Handler(), batches=True, checkpoint_dir=str(tmp_path / "c"))
    assert result.finished and result.records == len(EXPECTED)
    assert calls[0] == ("open", 0) and calls[-1] == ("close",)
    assert sorted((f"{c}/{t}/{p}", o) for c, t, p, o in calls[1:-1]) == EXPECTED
