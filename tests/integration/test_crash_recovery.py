"""At-least-once across kill -9: a job process is killed mid-stream and restarted from its checkpoints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cluster import Cluster
from harness.scenario import wait_for

pytestmark = pytest.mark.integration

JOB = Path(__file__).parent / "jobs" / "checkpointing_job.py"
ROOT = Path(__file__).resolve().parents[2]


def _lines(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        p, o = line.split(":")
        out.append((int(p), int(o)))
    return out


def _start(cluster: Cluster, topic: str, ckpt: Path, out: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open(out.with_suffix(".log"), "ab") as log:
        return subprocess.Popen(
            [sys.executable, str(JOB), cluster.bootstrap_servers, topic, str(ckpt), str(out)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


def _newest_positions(ckpt: Path) -> dict[int, int]:
    newest = sorted(ckpt.glob("chk-*.json"))[-1]
    positions = json.loads(newest.read_text())["positions"]
    return {int(k.rsplit("/", 1)[1]): v for k, v in positions.items()}


def test_kill_9_then_restart_loses_nothing(kafka_cluster: Cluster, tmp_path: Path) -> None:
    topic = kafka_cluster.create_topic("crash", partitions=2)
    produced = {(p, o) for p in (0, 1) for o in range(3000)}
    for p in (0, 1):
        kafka_cluster.produce(topic, [f"v{i}".encode() for i in range(3000)], partition=p)
    ckpt, out1, out2 = tmp_path / "ckpt", tmp_path / "run1.txt", tmp_path / "run2.txt"

    job = _start(kafka_cluster, topic, ckpt, out1)
    try:
        assert wait_for(lambda: len(_lines(out1)) >= 1500 and any(ckpt.glob("chk-*.json")), 60), (
            out1.with_suffix(".log").read_text()[-3000:]
        )
    finally:
        os.kill(job.pid, signal.SIGKILL)
        job.wait(30)
    first = _lines(out1)
    checkpointed = _newest_positions(ckpt)
    assert len(set(first)) < len(produced), "the job must be killed before it read everything"

    job = _start(kafka_cluster, topic, ckpt, out2)
    try:
        assert wait_for(lambda: produced <= set(first) | set(_lines(out2)), 60), "records were lost"
    finally:
        job.terminate()
        job.wait(30)
    second = _lines(out2)

    # Nothing the checkpoint did not cover was skipped, and the restart resumed at the checkpoint.
    assert produced <= set(first) | set(second)
    for p, position in checkpointed.items():
        assert {o for q, o in first if q == p} >= set(range(position)), "checkpoint covers unreturned records"
        resumed = min((o for q, o in second if q == p), default=None)
        assert resumed == position or (resumed is None and position == 3000)
    # Duplicates only where at-least-once allows: after the checkpoint (a partition none of whose records
    # were returned before the newest checkpoint has no position in it and restarts at the earliest offset).
    for p, o in set(first) & set(second):
        assert o >= checkpointed.get(p, 0)
