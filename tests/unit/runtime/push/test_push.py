"""The push API without brokers: the worker host, the driver on the threads runtime over a fake source
(failover, stop, final checkpoints, restore through an object store), messages across pickling, option
checks, and the checkpoint storages."""

from __future__ import annotations

import gc
import pickle
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from confluent_kafka import Message

from multicluster_source import (
    ClusterMetadata,
    ConfigurationError,
    DeserializationError,
    KafkaStream,
    MultiClusterKafkaSource,
    OffsetsInitializer,
    RunControl,
    SourceRecord,
    StaticMetadataService,
)
from multicluster_source.exceptions import SourceFailedError
from multicluster_source.framework import (
    CheckpointStorage,
    DirectoryCheckpointStorage,
    ObjectStoreCheckpointStorage,
)
from multicluster_source.framework._checkpoint import CheckpointStore
from multicluster_source.framework._events import (
    GetMetadataUpdateEvent,
    MetadataUpdateEvent,
    SplitsFinishedEvent,
)
from multicluster_source.framework._interfaces import RecordBatch
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.framework._storage import InMemoryObjectStore
from multicluster_source.runtime.core._factory import check_picklable, reader_only_source
from multicluster_source.runtime.core._messages import (
    AssignSplits,
    Delivered,
    EventToEnumerator,
    EventToReader,
    Heartbeat,
    NoMoreSplits,
    StartReader,
    StopWorker,
    WorkerFailure,
    WorkerReady,
    WorkerStopped,
    error_blob,
)
from multicluster_source.runtime.push._host import WorkerHost
from multicluster_source.runtime.push._push import run_source


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


# ------------------------------------------------------------------------------------------ fakes


class FakeReader:
    """Emits records ``offset`` .. ``stop`` of each split in batches of ``batch`` from a fetch thread;
    ``fail_after`` batches in, it reports a reader failure (as a broken client would)."""

    def __init__(self, ctx: Any, *, batch: int = 10, fail_after: int | None = None) -> None:
        self.ctx = ctx
        self.batch = batch
        self.fail_after = fail_after
        self.splits: list[KafkaPartitionSplit] = []
        self.no_more = False
        self.done: list[str] = []
        self.reported: set[str] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.emitted = 0

    def start(self) -> None:
        self.ctx.send_event_to_enumerator(GetMetadataUpdateEvent())

    def add_splits(self, splits: Sequence[KafkaPartitionSplit]) -> None:
        for split in splits:
            self.splits.append(split)
            t = threading.Thread(target=self._fetch, args=(split,), name=f"fake-fetch-{split.split_id}")
            self._threads.append(t)
            t.start()

    def _fetch(self, split: KafkaPartitionSplit) -> None:
        offset, stop = split.starting_offset, split.stopping_offset
        assert stop is not None
        while offset < stop and not self._stop.is_set():
            if self.fail_after is not None and self.emitted >= self.fail_after:
                self.ctx.reader_failed(RuntimeError("broken client"))
                return
            end = min(stop, offset + self.batch)
            messages = [
                Message(
                    topic=split.topic,
                    partition=split.partition,
                    offset=o,
                    value=f"{split.split_id}@{o}".encode(),
                )
                for o in range(offset, end)
            ]
            batch = RecordBatch(split.cluster_id, messages, {split.split_id: end})
            if not self.ctx.emit(batch, self._stop.is_set):
                return
            self.emitted += 1
            offset = end
        if offset >= stop:
            self.done.append(split.split_id)

    def handle_source_event(self, event: Any) -> None:
        pass

    def notify_no_more_splits(self) -> None:
        self.no_more = True

    def poll_events(self) -> None:
        fresh = [s for s in self.done if s not in self.reported]
        if fresh:
            self.reported |= set(fresh)
            self.ctx.send_event_to_enumerator(SplitsFinishedEvent(frozenset(fresh)))

    def is_finished(self) -> bool:
        return self.no_more and all(s.split_id in self.reported for s in self.splits)

    def split_ids(self) -> list[str]:
        return sorted(s.split_id for s in self.splits if s.split_id not in self.reported)

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)


class FakeEnumerator:
    """Splits ``c/t/p`` ending at ``ends[p]``; round-robin over readers; failover from delivered positions."""

    def __init__(self, ctx: Any, ends: dict[str, int], positions: dict[str, int] | None) -> None:
        self.ctx = ctx
        self.splits = {
            sid: KafkaPartitionSplit("c", "t", int(sid.rsplit("/", 1)[1]), (positions or {}).get(sid, 0), end)
            for sid, end in ends.items()
        }
        self.owner: dict[str, int] = {}
        self.alive = set(range(ctx.parallelism))
        self.finished: set[str] = set()
        self.commits: list[dict[str, int]] = []

    def start(self) -> None:
        pass

    def handle_reader_event(self, reader: int, event: Any) -> None:
        if isinstance(event, GetMetadataUpdateEvent):
            mine = [
                s
                for i, s in enumerate(sorted(self.splits.values(), key=lambda s: s.partition))
                if i % self.ctx.parallelism == reader
            ]
            for s in mine:
                self.owner[s.split_id] = reader
            self.ctx.assign_splits({reader: mine})
            self.ctx.signal_no_more_splits(reader)
        elif isinstance(event, SplitsFinishedEvent):
            self.finished |= set(event.split_ids)

    def reader_failed(self, reader: int) -> None:
        self.alive.discard(reader)
        if not self.alive:
            self.ctx.fail(SourceFailedError("every reader failed"))
            return
        moving = [sid for sid, r in self.owner.items() if r == reader and sid not in self.finished]
        at = self.ctx.delivered_positions(moving)
        target = min(self.alive)
        moved = [
            self.splits[sid].starting_at(at.get(sid, self.splits[sid].starting_offset)) for sid in moving
        ]
        for sid in moving:
            self.owner[sid] = target
        self.ctx.assign_splits({target: moved})

    def is_finished(self) -> bool:
        return self.finished == set(self.splits)

    def snapshot_state(self, checkpoint_id: int) -> dict[str, Any]:
        return {
            "version": 1,
            "splits": [
                {"cluster": "c", "topic": "t", "partition": s.partition} for s in self.splits.values()
            ],
        }

    def notify_checkpoint_complete(
        self, checkpoint_id: int, positions: dict[str, int]
    ) -> Callable[[float], None]:
        self.commits.append(dict(positions))
        return lambda timeout: None

    def close(self) -> None:
        pass


class FakeTracker:
    enabled = True

    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, int]] = []
        self.store = SimpleNamespace(describe=lambda: "fake")

    def start(self) -> None:
        pass

    def record(self, cluster: str, topic: str, reader: int) -> None:
        self.recorded.append((cluster, topic, reader))

    def close(self) -> None:
        pass


class FakeSource:
    def __init__(self, ends: dict[str, int], *, fail_reader: int | None = None, fail_after: int = 2) -> None:
        self.name = "fake"
        self.bounded = True
        self.metadata_service = None
        self.deserializer = None
        self.options = SimpleNamespace(
            reader_heartbeat_timeout_ms=10_000,
            reader_buffer_max_batches=4,
            topic_tracking_enable=True,
            deserialization_error_policy="fail",
        )
        self.ends = ends
        self.fail_reader = fail_reader
        self.fail_after = fail_after
        self.enumerator: FakeEnumerator | None = None
        self.tracker = FakeTracker()

    def create_topic_tracker(self, checkpoint_dir: Any) -> FakeTracker:
        return self.tracker

    def create_enumerator(self, ctx: Any, restored: Any, positions: Any, metrics: Any) -> FakeEnumerator:
        self.enumerator = FakeEnumerator(ctx, self.ends, positions)
        return self.enumerator

    def create_reader(self, ctx: Any, metrics: Any, on_read: Any) -> FakeReader:
        if on_read is not None:
            on_read("c", "t", ctx.index)
        fail = self.fail_after if ctx.index == self.fail_reader else None
        return FakeReader(ctx, fail_after=fail)


class Collect:
    def __init__(
        self, delay: float = 0.0, stop_after: int | None = None, stop: threading.Event | None = None
    ):
        self.lock = threading.Lock()
        self.values: list[str] = []
        self.delay = delay
        self.stop_after = stop_after
        self.stop = stop
        self.opened: list[int] = []
        self.closed = 0

    def open(self, reader: int) -> None:
        self.opened.append(reader)

    def close(self) -> None:
        self.closed += 1

    def __call__(self, records: list[SourceRecord]) -> None:
        time.sleep(self.delay)
        with self.lock:
            self.values.extend(r.value.decode() for r in records)
            if self.stop is not None and self.stop_after is not None and len(self.values) >= self.stop_after:
                self.stop.set()


ENDS = {f"c/t/{p}": 100 for p in range(4)}


def _all_values(ends: dict[str, int]) -> set[str]:
    return {f"{sid}@{o}" for sid, end in ends.items() for o in range(end)}


def _run(source: FakeSource, handler: Any, parallelism: int = 2, **kwargs: Any) -> Any:
    return run_source(cast(Any, source), handler, parallelism, **kwargs)


# ------------------------------------------------------------------------------------------ driver


def test_bounded_run_handles_everything_once_and_checkpoints_the_ends() -> None:
    source, sink = FakeSource(ENDS), Collect()
    store = InMemoryObjectStore()
    control = RunControl()
    result = _run(source, sink, checkpoint_storage=ObjectStoreCheckpointStorage(store, "j/"), control=control)
    assert result.finished and result.records == 400 and result.runtime == "threads"
    assert Counter(sink.values) == Counter(_all_values(ENDS))
    assert sorted(sink.opened) == [0, 1] and sink.closed == 2
    latest = ObjectStoreCheckpointStorage(store, "j/").latest()
    assert (
        latest is not None
        and latest.positions == ENDS
        and result.last_checkpoint == "j/chk-000000000001.json"
    )
    assert source.enumerator is not None and source.enumerator.commits == [ENDS]
    assert {r[2] for r in source.tracker.recorded} == {0, 1}  # topic tracking, once per reader
    assert control.records == 400 and not any(w.alive for w in control.workers().values())
    # Every thread of the run ended (the I/O pool's threads go a moment after the coordinator's).
    assert wait_for(
        lambda: not [t for t in threading.enumerate() if t.name.startswith("mcs-") and "fake" in t.name]
    )


def test_a_handler_runs_with_the_collector_held_off_and_leaves_it_on() -> None:
    enabled: list[bool] = []
    collect = Collect()

    def handler(records: list[SourceRecord]) -> None:
        enabled.append(gc.isenabled())  # the records are in the handler's hands: no pass walks them
        collect(records)

    result = _run(FakeSource(ENDS), handler)
    assert result.finished and Counter(collect.values) == Counter(_all_values(ENDS))
    assert enabled and not any(enabled)
    assert gc.isenabled()


def test_a_stop_before_the_workers_started_returns_without_reading() -> None:
    control = RunControl()
    control.stop()
    result = _run(FakeSource(ENDS), Collect(), control=control)
    assert not result.finished and result.records == 0 and result.checkpoints == 0


def test_a_failed_reader_fails_over_and_nothing_is_lost() -> None:
    source, sink = FakeSource(ENDS, fail_reader=0, fail_after=2), Collect(delay=0.005)
    result = _run(source, sink)
    assert result.finished and list(result.lost_readers) == [0]
    assert "broken client" in result.lost_readers[0]
    assert set(sink.values) == _all_values(ENDS)  # at least once


def test_stop_checkpoints_exactly_what_handlers_returned_and_restore_resumes() -> None:
    store = InMemoryObjectStore()
    stop = threading.Event()
    first = Collect(delay=0.002, stop_after=150, stop=stop)
    result = _run(
        FakeSource(ENDS), first, checkpoint_storage=ObjectStoreCheckpointStorage(store), stop_event=stop
    )
    assert not result.finished and 150 <= result.records < 400 and result.records == len(first.values)
    latest = ObjectStoreCheckpointStorage(store).latest()
    assert latest is not None and sum(latest.positions.values()) == len(first.values)
    for sid, position in latest.positions.items():
        assert {v for v in first.values if v.startswith(f"{sid}@")} == {f"{sid}@{o}" for o in range(position)}

    second = Collect()
    again = _run(FakeSource(ENDS), second, checkpoint_storage=ObjectStoreCheckpointStorage(store))
    assert again.finished and again.restored_from is not None
    assert Counter(first.values + second.values) == Counter(_all_values(ENDS))


def test_a_failing_handler_fails_the_run_with_its_error() -> None:
    def handler(records: list[SourceRecord]) -> None:
        raise KeyError("no such customer")

    with pytest.raises(
        SourceFailedError, match=r"the handler failed in reader .: KeyError: 'no such customer'"
    ) as info:
        _run(FakeSource(ENDS), handler)
    assert isinstance(info.value.__cause__, KeyError)


def test_every_reader_lost_fails_the_run() -> None:
    source = FakeSource({"c/t/0": 100}, fail_reader=0, fail_after=1)
    with pytest.raises(SourceFailedError, match="every reader failed"):
        _run(source, Collect(), parallelism=1)


# ------------------------------------------------------------------------------------------ worker host


def test_host_reports_a_finished_split_only_after_the_handler_returned() -> None:
    sent: list[object] = []
    gate = threading.Event()
    handled: list[int] = []

    def handler(records: list[SourceRecord]) -> None:
        gate.wait(10)
        handled.append(len(records))

    host = WorkerHost(
        index=0,
        source_name="s",
        handler=handler,
        make_reader=lambda ctx, on_read: FakeReader(ctx, batch=50),
        send=sent.append,
        buffer_max_batches=4,
    )
    t = threading.Thread(target=host.run, name="test-host")
    t.start()
    try:
        host.deliver(StartReader())
        host.deliver(AssignSplits((KafkaPartitionSplit("c", "t", 0, 0, 100),)))
        host.deliver(NoMoreSplits())
        assert wait_for(lambda: host._handoff.full() or len(host._handoff) >= 1)
        time.sleep(0.2)  # the fetcher has long finished emitting; the split must not be reported yet
        assert not any(
            isinstance(m, EventToEnumerator) and isinstance(m.event, SplitsFinishedEvent) for m in sent
        )
        gate.set()
        assert wait_for(lambda: any(isinstance(m, Heartbeat) and m.finished for m in sent))
    finally:
        host.deliver(StopWorker())
        t.join(10)
    kinds = [type(m).__name__ for m in sent]
    assert kinds[0] == "WorkerReady" and kinds[-1] == "WorkerStopped"
    finished_at = next(
        i
        for i, m in enumerate(sent)
        if isinstance(m, EventToEnumerator) and isinstance(m.event, SplitsFinishedEvent)
    )
    delivered = [i for i, m in enumerate(sent) if isinstance(m, Delivered)]
    assert len(delivered) == 2 and max(delivered) < finished_at and handled == [50, 50]
    assert isinstance(sent[-1], WorkerStopped) and sent[-1].records == 100


def test_host_reader_failure_is_reported_and_fences_emits() -> None:
    sent: list[object] = []
    host = WorkerHost(
        index=3,
        source_name="s",
        handler=lambda records: None,
        make_reader=lambda ctx, on_read: FakeReader(ctx),
        send=sent.append,
        buffer_max_batches=4,
        rack="az-1",
    )
    t = threading.Thread(target=host.run, name="test-host")
    t.start()
    host.deliver(StartReader())
    host.reader_failed(RuntimeError("client fenced"))
    t.join(10)
    assert not t.is_alive()
    ready = sent[0]
    assert isinstance(ready, WorkerReady) and ready.rack == "az-1"
    failures = [m for m in sent if isinstance(m, WorkerFailure)]
    assert (
        len(failures) == 1
        and failures[0].kind == "reader"
        and failures[0].summary == "RuntimeError: client fenced"
    )
    assert not host.emit(RecordBatch("c", [], {}), lambda: False)
    assert isinstance(sent[-1], WorkerStopped)


# ------------------------------------------------------------------------------------------ messages


def test_messages_survive_pickling() -> None:
    cluster = ClusterMetadata("east", "k:9092", frozenset({"orders"}), {"security.protocol": "SSL"})
    messages = [
        AssignSplits((KafkaPartitionSplit("east", "orders", 0, 5, 9),)),
        EventToReader(MetadataUpdateEvent({"east": cluster}, version=4)),
        Delivered({"east/orders/0": 7}, 2),
        KafkaStream("s", {"east": cluster}),
        OffsetsInitializer.offsets({"east/orders/0": 3}),
    ]
    for message in messages:
        assert pickle.loads(pickle.dumps(message)) == message


def test_error_blob_only_for_errors_that_unpickle() -> None:
    assert error_blob(ValueError("x")) is not None
    assert error_blob(DeserializationError("east", "orders", 0, 7)) is None


def test_state_split_ids_include_removed_splits() -> None:
    from multicluster_source.enumerator._state import EnumeratorState, RemovedSplit, state_split_ids
    from multicluster_source.framework._split import KafkaPartitionSplit

    state = EnumeratorState(
        splits=(KafkaPartitionSplit("a", "t", 0, 0),),
        removed=(RemovedSplit(KafkaPartitionSplit("b", "u", 2, 5), 1),),
    ).to_dict()
    assert state_split_ids(state) == {"a/t/0", "b/u/2"}


# ------------------------------------------------------------------------------------------ options


def _source(**props: str) -> MultiClusterKafkaSource:
    md = ClusterMetadata("east", "127.0.0.1:1", frozenset({"t"}))
    b = MultiClusterKafkaSource.builder().set_kafka_metadata_service(
        StaticMetadataService([KafkaStream("s", {"east": md})])
    )
    return b.set_stream_ids(["s"]).set_group_id("g").set_properties(props).build()


def _handler(records: list[SourceRecord]) -> None:
    pass


def test_reader_only_source_drops_what_readers_do_not_need() -> None:
    source = _source()
    clone = reader_only_source(source)
    assert clone.metadata_service is None and clone.subscriber is None and clone.name == source.name
    assert source.metadata_service is not None and clone.options == source.options
    pickle.loads(pickle.dumps(clone))


def test_processes_need_picklable_handler_and_deserializer() -> None:
    source = _source()
    with pytest.raises(ConfigurationError, match="the handler cannot be sent"):
        check_picklable("processes", reader_only_source(source), lambda records: None)
    source.deserializer = lambda raw: raw.value
    with pytest.raises(ConfigurationError, match=r"deserializer cannot be sent.*module-level function"):
        source.run(_handler, runtime="processes")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"runtime": "cluster"}, "one of threads, processes, ray"),
        ({"parallelism": 0}, "parallelism"),
        ({"checkpoint_interval": 1.0}, "needs checkpoint_dir or checkpoint_storage"),
        ({"checkpoint_dir": "x", "checkpoint_storage": DirectoryCheckpointStorage}, "not both"),
        ({"bogus": 1}, r"unknown options \['bogus'\]"),
        ({"runtime": "processes", "start_method": "thread"}, "spawn, forkserver or fork"),
        ({"stop_event": object()}, "is_set"),
    ],
)
def test_run_rejects_bad_options_before_starting(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        _source().run(_handler, **kwargs)


def test_a_control_serves_one_run() -> None:
    control = RunControl()
    control._done.set()
    with pytest.raises(ConfigurationError, match="one run"):
        _source().run(_handler, control=control)
    assert not control.wait_running(0.01)


def test_ray_missing_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'multicluster-kafka-source\[ray\]'"):
        _source().run(_handler, runtime="ray")


# ------------------------------------------------------------------------------------------ storages


def _write(storage: CheckpointStorage, ids: range) -> None:
    for i in ids:
        storage.write(i, "src", {"version": 1, "splits": []}, {"a/t/0": i * 10})


def test_directory_storage_keeps_the_newest(tmp_path: Path) -> None:
    storage = DirectoryCheckpointStorage(tmp_path, keep=2)
    assert storage.latest() is None
    _write(storage, range(1, 5))
    assert sorted(p.name for p in tmp_path.glob("chk-*")) == [
        "chk-000000000003.json",
        "chk-000000000004.json",
    ]
    latest = storage.latest()
    assert latest is not None and latest.checkpoint_id == 4 and latest.positions == {"a/t/0": 40}
    assert isinstance(storage, CheckpointStorage) and "directory" in storage.describe()


def test_object_store_storage_skips_damaged_and_matches_the_file_format(tmp_path: Path) -> None:
    store = InMemoryObjectStore()
    storage = ObjectStoreCheckpointStorage(store, "jobs/billing/", keep=3)
    _write(storage, range(1, 6))
    assert store.list("jobs/billing/") == [f"jobs/billing/chk-{i:012d}.json" for i in (3, 4, 5)]
    store.put("jobs/billing/chk-000000000006.json", b"{torn")
    store.put("jobs/other/chk-000000000009.json", store.get("jobs/billing/chk-000000000005.json"))
    latest = storage.latest()
    assert latest is not None and latest.checkpoint_id == 5 and latest.positions == {"a/t/0": 50}
    # The same document as the directory storage writes: an object copied into a directory reads back.
    (tmp_path / "chk-000000000005.json").write_bytes(store.get("jobs/billing/chk-000000000005.json"))
    from_file = CheckpointStore(tmp_path).latest()
    assert from_file is not None and from_file.positions == latest.positions
    with pytest.raises(TypeError):
        ObjectStoreCheckpointStorage(cast(Any, object()))


# ------------------------------------------------------------------------------------------ benchmark


def test_scaling_benchmark_table_on_made_up_results() -> None:
    from benchmarks import bench_scaling

    counts = [1, 2]
    stats = {"median": 200_000.0, "min": 150_000.0, "max": 250_000.0}
    keys = [f"{kind}-{n}" for n in counts for kind in bench_scaling.KINDS]
    result = {
        "machine": {"cores": 2},
        "config": {"records": 1000, "clusters": 2, "partitions_per_topic": 4, "repeats": 3, "counts": counts},
        "records_per_second": dict.fromkeys(keys, stats),
        "ratios": {
            str(n): {"processes_over_raw": 1.0, "steady_processes_over_raw": 0.9, "threads_over_raw": 1.0}
            for n in counts
        },
        "scaling_over_1": {str(n): dict.fromkeys(bench_scaling.KINDS, float(n)) for n in counts},
    }
    table = bench_scaling.format_table(result)
    assert "| 2 | 200k [150k-250k] |" in table and "2.00x (raw 2.00x)" in table


def test_run_refuses_what_is_not_an_exactly_once_sink() -> None:
    with pytest.raises(ConfigurationError, match=r"run\(sink=\.\.\.\): an ExactlyOnceKafkaSink, got object"):
        _source().run(_handler, sink=object())  # type: ignore[arg-type]
