"""One owner per checkpoint directory (API.md section 8), without brokers: the directory lock, ``open()`` and
``run()`` on a held directory, another process holding it, and a holder killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from multicluster_source import CheckpointError, MultiClusterKafkaSource, RunControl, StaticMetadataService
from multicluster_source.framework import DirectoryCheckpointStorage
from multicluster_source.framework._dirlock import LOCK_NAME, DirectoryLock

REPO = Path(__file__).resolve().parents[3]


def _source(name: str = "billing") -> MultiClusterKafkaSource:
    """A source whose metadata is empty: it opens without any broker (and reads nothing)."""
    return (
        MultiClusterKafkaSource.builder()
        .set_name(name)
        .set_kafka_metadata_service(StaticMetadataService([]))
        .set_stream_ids(["orders"])
        .build()
    )


def _holder(directory: Path) -> subprocess.Popen[str]:
    """A child process that takes the lock through DirectoryCheckpointStorage, says so, and waits."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from multicluster_source.framework import DirectoryCheckpointStorage
        storage = DirectoryCheckpointStorage({str(directory)!r})
        storage.acquire("other-job")
        print("held", flush=True)
        time.sleep(600)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env, stdin=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_lock_in_the_same_process_is_refused_naming_directory_and_pid(tmp_path: Path) -> None:
    first = DirectoryLock(tmp_path / "ckpt", "billing")
    first.acquire()
    with pytest.raises(CheckpointError) as info:
        DirectoryLock(tmp_path / "ckpt", "billing").acquire()
    message = str(info.value)
    assert str(tmp_path / "ckpt") in message
    assert f"pid {os.getpid()}" in message and "billing" in message
    first.release()
    again = DirectoryLock(tmp_path / "ckpt")
    again.acquire()  # released: free again
    assert again.held
    again.release()
    assert (tmp_path / "ckpt" / LOCK_NAME).exists(), "the lock file stays (removing it would race)"


def test_open_twice_on_one_checkpoint_dir_fails_and_closing_frees_it(tmp_path: Path) -> None:
    ckpt = str(tmp_path / "ckpt")
    stream = _source().open(checkpoint_dir=ckpt)
    try:
        with pytest.raises(CheckpointError, match=rf"{tmp_path}.*pid {os.getpid()}"):
            _source("other").open(checkpoint_dir=ckpt)
        with pytest.raises(CheckpointError, match="pid"):
            _source("third").run(lambda records: None, checkpoint_dir=ckpt)
        stream.checkpoint()  # the owner goes on working
    finally:
        stream.close()
    with _source().open(checkpoint_dir=ckpt) as second:
        assert second.restored_from is not None and second.restored_from.endswith("chk-000000000001.json")


def test_another_process_holding_the_directory_blocks_open_and_run_until_it_is_killed(
    tmp_path: Path,
) -> None:
    ckpt = tmp_path / "ckpt"
    proc = _holder(ckpt)
    try:
        with pytest.raises(CheckpointError) as info:
            _source().open(checkpoint_dir=str(ckpt))
        assert str(ckpt) in str(info.value) and f"pid {proc.pid}" in str(info.value)
        assert "other-job" in str(info.value)
        storage = DirectoryCheckpointStorage(ckpt)
        with pytest.raises(CheckpointError, match=f"pid {proc.pid}"):
            _source().run(lambda records: None, checkpoint_storage=storage)
    finally:
        proc.send_signal(signal.SIGKILL)  # no clean-up runs in the holder: the kernel drops its lock
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    with _source().open(checkpoint_dir=str(ckpt)) as stream:
        assert stream.checkpoint() == 1


def test_one_storage_object_cannot_be_acquired_twice(tmp_path: Path) -> None:
    storage = DirectoryCheckpointStorage(tmp_path / "ckpt")
    storage.acquire("first")
    with pytest.raises(CheckpointError, match=rf"pid {os.getpid()}, source first"):
        storage.acquire("second")
    storage.release()
    storage.acquire("third")  # free again once released
    storage.release()


def test_run_holds_the_directory_and_releases_it_when_it_ends(tmp_path: Path) -> None:
    storage = DirectoryCheckpointStorage(tmp_path / "ckpt")
    control = RunControl()
    seen: list[str] = []

    def probe() -> None:  # while the run runs, the directory is taken
        control._running.wait(30)
        try:
            DirectoryLock(tmp_path / "ckpt").acquire()
            seen.append("acquired")
        except CheckpointError as exc:
            seen.append(str(exc))
        control.stop()

    prober = threading.Thread(target=probe, name="test-ownership-probe")
    prober.start()
    result = _source().run(lambda records: None, checkpoint_storage=storage, control=control)
    prober.join(30)
    assert len(seen) == 1 and "in use by another running source" in seen[0], seen
    assert result.checkpoints >= 1
    lock = DirectoryLock(tmp_path / "ckpt")
    lock.acquire()  # run() released it
    lock.release()
