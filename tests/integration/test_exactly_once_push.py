"""Exactly once on the push API (issue 34): ``source.run(handler, ..., sink=...)`` on real Apache Kafka.

The handler returns one result ``out:<value>`` per record; each worker slot commits its results with its
splits' positions in transactions of its own (``<transactional_id>-<n>``). A ``read_committed`` consumer of
the output is what a user checks: every input's result exactly once, and no transaction left open.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.cluster import Cluster
from harness.eos import EchoResults, read_output
from harness.runtimes import BackgroundRun, Runtime
from harness.scenario import builder, cluster_md, stream, wait_for
from multicluster_source import (
    ExactlyOnceKafkaSink,
    FileMetadataService,
    OffsetsInitializer,
    ProducerFencedError,
    RunControl,
)
from multicluster_source.testing import write_metadata_file

pytestmark = [
    pytest.mark.integration,
    # Ray's own modules warn about their internals; the suite's "warnings are errors" is for ours.
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


def _inputs(east: Cluster, west: Cluster, n: int, prefix: str) -> list[Any]:
    te = east.create_topic(f"{prefix}-e", partitions=2)
    tw = west.create_topic(f"{prefix}-w", partitions=2)
    east.produce(te, [f"e-{i}".encode() for i in range(n)])
    west.produce(tw, [f"w-{i}".encode() for i in range(n)])
    return [stream("s", cluster_md(east, te), cluster_md(west, tw))]


def _source(md: list[Any], *, bounded: bool = True, batch: int = 50) -> Any:
    b = builder(md).set_property("reader.batch.max.records", str(batch))
    if bounded:
        b = b.set_bounded(OffsetsInitializer.latest())
    return b.build()


def _sink(central: Cluster, name: str) -> ExactlyOnceKafkaSink:
    return ExactlyOnceKafkaSink(
        {"bootstrap.servers": central.bootstrap_servers},
        transactional_id=name,
        positions_topic=f"{name}.positions",
    )


def _expected(n: int) -> Counter[str]:
    return Counter([f"out:e-{i}" for i in range(n)] + [f"out:w-{i}" for i in range(n)])


def _results(central: Cluster, out: str) -> Counter[str]:
    return Counter(v.decode() for v in read_output(central, out))


def _twice(results: Counter[str]) -> dict[str, int]:
    return {v: n for v, n in results.items() if n > 1}


def test_each_result_once_and_a_second_run_repeats_nothing(
    kafka_clusters: Any, tmp_path: Path, runtime: Runtime
) -> None:
    """On threads, worker processes and Ray actors."""
    east, west, central = kafka_clusters(3)
    md = _inputs(east, west, 300, f"push-eos-{runtime.name}")
    out = central.create_topic(f"push-eos-{runtime.name}-out", partitions=2)
    sink = _sink(central, f"push-eos-{runtime.name}-{uuid.uuid4().hex[:6]}")
    options = {"runtime": runtime.name, "sink": sink, "checkpoint_interval": 0.3, **runtime.options}

    first = _source(md).run(EchoResults(out), 2, **options)
    assert first.finished and first.records == 600
    assert _results(central, out) == _expected(300)

    second = _source(md).run(EchoResults(out), 2, **options)
    assert second.finished and second.records == 0, "the positions in the sink were not where it started"
    assert _results(central, out) == _expected(300)


def test_a_worker_process_killed_moves_its_splits_at_their_committed_positions(
    kafka_clusters: Any, tmp_path: Path
) -> None:
    """``kill -9`` of one worker process while it has results in an open transaction: the driver fences its
    transactional id, reads the committed positions back, and the other worker reads its splits from there."""
    east, west, central = kafka_clusters(3)
    md = _inputs(east, west, 1500, "push-eos-kill")
    out = central.create_topic("push-eos-kill-out", partitions=2)
    sink = _sink(central, f"push-eos-kill-{uuid.uuid4().hex[:6]}")
    control = RunControl()
    run = BackgroundRun(
        _source(md),
        EchoResults(out, delay_s=0.05),
        2,
        runtime="processes",
        sink=sink,
        checkpoint_interval=0.5,
        control=control,
    )
    try:
        assert control.wait_running(120), "the workers did not start"
        victim = control.workers()[0].pid
        assert victim is not None and victim != os.getpid()
        assert wait_for(lambda: control.records >= 300 or not run.alive, 60)
        time.sleep(0.2)  # into the next transaction
        os.kill(victim, signal.SIGKILL)
        result = run.join(180)
    finally:
        if run.alive:
            control.stop()
            run.join()
    assert result.finished and 0 in result.lost_readers and 1 not in result.lost_readers
    assert control.records < 3000 + 1, "more handled than read"
    results = _results(central, out)
    assert not _twice(results), f"{len(_twice(results))} results twice, e.g. {sorted(_twice(results))[:5]}"
    assert results == _expected(1500)


def test_an_aborted_transaction_rewinds_the_worker_and_repeats_nothing(
    kafka_clusters: Any, tmp_path: Path
) -> None:
    """A result the sink cluster refuses (larger than its topic allows) aborts the worker's transaction: the
    worker reads its splits again from their committed positions, and each result is written once."""
    east, west, central = kafka_clusters(3)
    md = _inputs(east, west, 300, "push-eos-abort")
    out = central.create_topic("push-eos-abort-out", partitions=1)
    small = central.create_topic("push-eos-abort-small", partitions=1, config={"max.message.bytes": "1000"})
    sink = _sink(central, f"push-eos-abort-{uuid.uuid4().hex[:6]}")
    poisoned: list[bytes] = []
    seen: list[bytes] = []
    echo = EchoResults(out)

    def handler(records: list[Any]) -> list[tuple[str, bytes]]:
        seen.extend(r.value for r in records)
        results = echo(records)
        if not poisoned and any(r.value == b"e-150" for r in records):
            poisoned.append(b"e-150")  # once: the record comes again after the rewind
            results.append((small, b"x" * 5000))
        return results

    result = _source(md, batch=20).run(handler, 1, sink=sink, checkpoint_interval=0.2)
    assert poisoned, "the poisoned record never came"
    assert result.finished
    assert seen.count(b"e-150") == 2, "the aborted transaction's records did not come again"
    assert result.records == 600  # what committed: each record once
    assert _results(central, out) == _expected(300)
    assert read_output(central, small) == []


def test_a_second_run_with_the_same_transactional_id_fences_the_first(
    kafka_clusters: Any, tmp_path: Path
) -> None:
    """The first run (unbounded, slow) fails with ProducerFencedError once a second run with the same
    transactional id starts; nothing the first produced after that is visible, and the second, reading from
    the committed positions, completes the output exactly once."""
    east, west, central = kafka_clusters(3)
    md = _inputs(east, west, 600, "push-eos-zombie")
    out = central.create_topic("push-eos-zombie-out", partitions=2)
    sink = _sink(central, f"push-eos-zombie-{uuid.uuid4().hex[:6]}")
    control = RunControl()
    zombie = BackgroundRun(
        _source(md, bounded=False, batch=20),
        EchoResults(out, delay_s=0.05),
        2,
        sink=sink,
        checkpoint_interval=0.3,
        control=control,
    )
    try:
        assert control.wait_running(120)
        assert wait_for(lambda: control.records >= 100 or not zombie.alive, 60)
        second = _source(md).run(EchoResults(out), 2, sink=sink, checkpoint_interval=0.3)
        assert second.finished
        with pytest.raises(ProducerFencedError):
            zombie.join(60)
    finally:
        if zombie.alive:
            control.stop()
            zombie.join()
    results = _results(central, out)
    assert not _twice(results), f"{len(_twice(results))} results twice, e.g. {sorted(_twice(results))[:5]}"
    assert results == _expected(600)


def test_metadata_changes_under_a_push_run_repeat_and_lose_nothing(
    kafka_clusters: Any, tmp_path: Path
) -> None:
    """A cluster added, a topic removed and added back while two workers produce: each result once, and the
    re-added topic resumes where its worker's last transaction committed it."""
    east, west, central = kafka_clusters(3)
    te = east.create_topic("push-eos-meta-e", partitions=2)
    tw = west.create_topic("push-eos-meta-w", partitions=2)
    east.produce(te, [f"e-{i}".encode() for i in range(200)])
    west.produce(tw, [f"w-{i}".encode() for i in range(200)])
    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream("s", cluster_md(east, te))])
    source = builder(FileMetadataService(path), stream_ids=["s"]).set_property(
        "reader.batch.max.records", "20"
    )
    out = central.create_topic("push-eos-meta-out", partitions=1)
    sink = _sink(central, f"push-eos-meta-{uuid.uuid4().hex[:6]}")
    control = RunControl()
    run = BackgroundRun(
        source.build(), EchoResults(out, delay_s=0.02), 2, sink=sink, checkpoint_interval=0.3, control=control
    )
    try:
        assert control.wait_running(120)
        assert wait_for(lambda: control.records >= 100 or not run.alive, 60)
        write_metadata_file(path, [stream("s", cluster_md(east, te), cluster_md(west, tw))])  # west added
        assert wait_for(lambda: control.records >= 300 or not run.alive, 60)
        write_metadata_file(path, [stream("s", cluster_md(east, te))])  # west's topic removed
        east.produce(te, [f"e-{i}".encode() for i in range(200, 250)])
        time.sleep(2)
        west.produce(tw, [f"w-{i}".encode() for i in range(200, 230)])
        write_metadata_file(path, [stream("s", cluster_md(east, te), cluster_md(west, tw))])  # re-added
        assert wait_for(lambda: control.records >= 480 or not run.alive, 60), control.records
        time.sleep(1)  # anything read twice would be handled by now
    finally:
        control.stop()
        run.join()
    want = Counter([f"out:e-{i}" for i in range(250)] + [f"out:w-{i}" for i in range(230)])
    results = _results(central, out)
    assert not _twice(results), f"{len(_twice(results))} results twice, e.g. {sorted(_twice(results))[:5]}"
    assert results == want
    assert control.records == 480
