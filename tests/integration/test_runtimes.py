"""The push API on every runtime: one behavioural suite, parametrised over threads, processes and Ray (the
``runtime`` fixture of ``tests/conftest.py``; Ray as a local two-node cluster, skipped without Ray).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from harness.cluster import Cluster
from harness.runtimes import BackgroundRun, FileSink, Runtime, positions, sink_rows, values
from harness.scenario import builder, cluster_md, samples_with_label, stream, wait_for
from multicluster_source import FileMetadataService, OffsetsInitializer, RunControl
from multicluster_source.exceptions import SourceFailedError
from multicluster_source.testing import write_metadata_file

pytestmark = [
    pytest.mark.integration,
    # Ray's own modules warn about their internals; the suite's "warnings are errors" is for ours.
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


def _two_topics(east: Cluster, west: Cluster, n: int, prefix: str = "rt") -> tuple[str, str]:
    t_east = east.create_topic(prefix, partitions=2)
    t_west = west.create_topic(prefix, partitions=3)
    east.produce_n(t_east, n, partitions=2, prefix="e")
    west.produce_n(t_west, n, partitions=3, prefix="w")
    return t_east, t_west


def _expected(n: int, *prefixes: str) -> set[str]:
    return {f"{p}-{i}" for p in prefixes for i in range(n)}


def test_bounded_two_clusters_exactly_once(kafka_clusters, runtime: Runtime, tmp_path: Path) -> None:
    east, west = kafka_clusters(2)
    t_east, t_west = _two_topics(east, west, 300)
    md = [stream("orders", cluster_md(east, t_east), cluster_md(west, t_west))]
    source = builder(md).set_bounded(OffsetsInitializer.latest()).build()
    control = RunControl()
    result = source.run(
        FileSink(tmp_path / "out"),
        2,
        runtime=runtime.name,
        checkpoint_dir=str(tmp_path / "ckpt"),
        control=control,
        **runtime.options,
    )
    rows = sink_rows(tmp_path / "out")
    assert result.finished and result.records == 600 and result.runtime == runtime.name
    assert len(rows) == 600 and set(values(rows)) == _expected(300, "e", "w"), "lost or duplicated"
    assert sum(result.records_per_reader.values()) == 600 and not result.lost_readers
    # The final checkpoint covers every record handled: each partition at its end.
    newest = sorted((tmp_path / "ckpt").glob("chk-*.json"))[-1]
    checkpointed = json.loads(newest.read_text())["positions"]
    assert checkpointed == {f"{c}/{t}/{p}": o + 1 for (c, t, p), o in _last_offsets(rows).items()}
    # Every reader opened the handler in its worker; where the workers ran.
    workers = control.workers()
    assert sorted(workers) == [0, 1] and not any(w.alive for w in workers.values())
    pids = {w.pid for w in workers.values()}
    assert len(list((tmp_path / "out").glob("open-*"))) == 2
    if runtime.name == "threads":
        assert pids == {os.getpid()}
    else:
        assert os.getpid() not in pids and len(pids) == 2
    if runtime.name == "ray":
        assert {i: w.rack for i, w in workers.items()} == {0: "a", 1: "b"}
    # Every worker process was reaped and every thread of the run ended.
    assert not [p.name for p in multiprocessing.active_children() if p.name.startswith("mcs-")]
    name = source.name
    assert wait_for(lambda: not [t.name for t in threading.enumerate() if name in t.name], 10)


def _last_offsets(rows) -> dict[tuple[str, str, int], int]:
    last: dict[tuple[str, str, int], int] = {}
    for cluster, topic, partition, offset, _v in rows:
        key = (cluster, topic, partition)
        last[key] = max(last.get(key, -1), offset)
    return last


def test_unbounded_follows_a_cluster_added_live(kafka_clusters, runtime: Runtime, tmp_path: Path) -> None:
    east, west = kafka_clusters(2)
    t_east = east.create_topic("live", partitions=2)
    t_west = west.create_topic("live", partitions=2)
    east.produce_n(t_east, 200, partitions=2, prefix="e")
    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream("orders", cluster_md(east, t_east))])
    source = builder(FileMetadataService(path), stream_ids=["orders"]).build()
    out = tmp_path / "out"
    control = RunControl()
    run = BackgroundRun(source, FileSink(out), 2, runtime=runtime.name, control=control, **runtime.options)
    try:
        assert wait_for(lambda: len(sink_rows(out)) >= 200 or not run.alive, 60), "east was not read"
        write_metadata_file(path, [stream("orders", cluster_md(east, t_east), cluster_md(west, t_west))])
        west.produce_n(t_west, 200, partitions=2, prefix="w")
        east.produce_n(t_east, 100, partitions=2, prefix="late")
        done = wait_for(lambda: len(sink_rows(out)) >= 500 or not run.alive, 60)
    finally:
        control.stop()
        result = run.join()
    assert done, f"only {len(sink_rows(out))} of 500 records arrived"
    rows = sink_rows(out)
    counts = values(rows)
    assert set(counts) == _expected(200, "e", "w") | _expected(100, "late")
    assert all(n == 1 for n in counts.values()), "a graceful stop must not duplicate anything"
    assert not result.finished and result.records == 500
    assert {r[0] for r in rows} == {east.cluster_id, west.cluster_id}


def test_restore_resumes_after_what_handlers_returned(
    kafka_clusters, runtime: Runtime, tmp_path: Path
) -> None:
    east, west = kafka_clusters(2)
    t_east, t_west = _two_topics(east, west, 1500, prefix="restore")
    md = [stream("orders", cluster_md(east, t_east), cluster_md(west, t_west))]
    group = f"g-{uuid.uuid4().hex[:8]}"
    ckpt = tmp_path / "ckpt"

    def make_source():
        return (
            builder(md, group=group)
            .set_bounded(OffsetsInitializer.latest())
            .set_property("reader.batch.max.records", "50")
            .build()
        )

    # Run 1: slow handlers, stopped part-way; periodic checkpoints, then a final one at the stop.
    out1 = tmp_path / "out1"
    control = RunControl()
    run = BackgroundRun(
        make_source(),
        FileSink(out1, delay_s=0.02),
        2,
        runtime=runtime.name,
        checkpoint_dir=str(ckpt),
        checkpoint_interval=0.2,
        control=control,
        **runtime.options,
    )
    try:
        assert wait_for(lambda: len(sink_rows(out1)) >= 600 or not run.alive, 60), "run 1 read nothing"
    finally:
        control.stop()
        first = run.join()
    rows1 = sink_rows(out1)
    assert not first.finished and 0 < len(rows1) < 3000 and first.checkpoints >= 1
    # The final checkpoint covers exactly what the handlers returned from, and nothing more.
    newest = sorted(ckpt.glob("chk-*.json"))[-1]
    checkpointed = json.loads(newest.read_text())["positions"]
    handled = positions(rows1)
    for split, position in checkpointed.items():
        cluster, topic, partition = split.rsplit("/", 2)
        have = {o for (c, t, p, o) in handled if (c, t, p) == (cluster, topic, int(partition))}
        assert have == set(range(position)), f"{split}: checkpoint at {position}, handled {len(have)}"
    assert sum(checkpointed.values()) == len(rows1)

    # Run 2 restores and reads the rest, to the end: together exactly once.
    out2 = tmp_path / "out2"
    second = make_source().run(
        FileSink(out2), 2, runtime=runtime.name, checkpoint_dir=str(ckpt), **runtime.options
    )
    rows2 = sink_rows(out2)
    assert second.finished and second.restored_from is not None
    total = values(rows1) + values(rows2)
    assert set(total) == _expected(1500, "e", "w")
    assert all(n == 1 for n in total.values()), "records handled before the checkpoint came again"


def test_handler_failure_fails_the_run(kafka_cluster: Cluster, runtime: Runtime, tmp_path: Path) -> None:
    topic = kafka_cluster.create_topic("hfail", partitions=2)
    kafka_cluster.produce_n(topic, 100, partitions=2, prefix="v")
    source = builder([stream("s", cluster_md(kafka_cluster, topic))]).build()
    sink = FileSink(tmp_path / "out", fail_on=b"v-42")
    with pytest.raises(SourceFailedError, match=r"the handler failed in reader .*refusing b'v-42'"):
        source.run(sink, 2, runtime=runtime.name, **runtime.options)


def test_worker_killed_with_kill_9_loses_nothing(kafka_clusters, runtime: Runtime, tmp_path: Path) -> None:
    if runtime.name == "threads":
        pytest.skip(
            "a thread cannot be killed alone; failover of a push worker thread: "
            "tests/unit/runtime/push/test_push.py::test_a_failed_reader_fails_over_and_nothing_is_lost"
        )
    east, west = kafka_clusters(2)
    t_east, t_west = _two_topics(east, west, 1500, prefix="kill")
    md = [stream("orders", cluster_md(east, t_east), cluster_md(west, t_west))]
    source = (
        builder(md)
        .set_bounded(OffsetsInitializer.latest())
        .set_property("reader.batch.max.records", "50")
        .build()
    )
    out = tmp_path / "out"
    control = RunControl()
    run = BackgroundRun(
        source, FileSink(out, delay_s=0.05), 2, runtime=runtime.name, control=control, **runtime.options
    )
    try:
        assert control.wait_running(120), "the workers did not start"
        victim = control.workers()[0].pid
        assert victim is not None and victim != os.getpid()
        assert wait_for(lambda: len(sink_rows(out, pid=victim)) >= 100 or not run.alive, 60)
        os.kill(victim, signal.SIGKILL)
        result = run.join(180)
    finally:
        if run.alive:
            control.stop()
            run.join()
    rows = sink_rows(out)
    counts = values(rows)
    assert set(counts) == _expected(1500, "e", "w"), "records were lost"
    assert result.finished and 0 in result.lost_readers and 1 not in result.lost_readers
    assert len(sink_rows(out, pid=victim)) < 3000, "the victim was killed after it had read everything"
    assert not control.workers()[0].alive


def test_reader_metrics_of_every_worker_reach_the_registry_given_to_run(
    kafka_clusters, runtime: Runtime, tmp_path: Path
) -> None:
    """The metrics contract on every runtime: the readers' samples (records, bytes, current offset, lag) are
    in the registry given to ``run()`` whatever process or actor the readers run in, and a removed cluster's
    label sets leave it."""
    east, west = kafka_clusters(2)
    t_east, t_west = _two_topics(east, west, 120, prefix="metrics")
    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream("orders", cluster_md(east, t_east), cluster_md(west, t_west))])
    source = builder(FileMetadataService(path), stream_ids=["orders"]).build()
    registry = CollectorRegistry()
    control = RunControl()
    out = tmp_path / "out"
    run = BackgroundRun(
        source, FileSink(out), 2, runtime=runtime.name, control=control, registry=registry, **runtime.options
    )
    ends = {(east.cluster_id, t_east, p): 60 for p in range(2)} | {
        (west.cluster_id, t_west, p): 40 for p in range(3)
    }

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"multicluster_source_{name}", labels)

    def caught_up() -> bool:
        return all(
            sample("current_offset", cluster=c, topic=t, partition=str(p)) == end
            and sample("records_lag", cluster=c, topic=t, partition=str(p)) == 0
            for (c, t, p), end in ends.items()
        ) and all(
            sample("records_consumed_total", cluster=c, topic=t) == 120
            for c, t in ((east.cluster_id, t_east), (west.cluster_id, t_west))
        )

    try:
        assert wait_for(lambda: (len(sink_rows(out)) >= 240 and caught_up()) or not run.alive, 60), (
            "the readers' metrics did not reach the registry given to run()"
        )
        assert (sample("bytes_consumed_total", cluster=west.cluster_id, topic=t_west) or 0) > 0
        assert sample("active_clusters") == 2
        write_metadata_file(path, [stream("orders", cluster_md(east, t_east))])
        gone = wait_for(
            lambda: not samples_with_label(registry, "cluster", west.cluster_id) or not run.alive, 30
        )
        assert gone, f"west still labels {samples_with_label(registry, 'cluster', west.cluster_id)}"
        assert sample("records_consumed_total", cluster=east.cluster_id, topic=t_east) == 120
    finally:
        control.stop()
        run.join()
    assert not samples_with_label(registry, "cluster", east.cluster_id)  # released when the run ended
