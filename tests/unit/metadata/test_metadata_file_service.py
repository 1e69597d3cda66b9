import os
import threading
import time

import pytest
from watchdog.observers.inotify_c import InotifyFD

from multicluster_source.exceptions import MetadataError, MetadataValidationError
from multicluster_source.metadata import (
    ClusterMetadata,
    FileMetadataService,
    KafkaMetadataService,
    KafkaStream,
    NotifyingMetadataService,
)
from multicluster_source.testing import write_metadata_file


def stream(
    stream_id: str = "orders", topics: tuple[str, ...] = ("orders",), cluster: str = "east"
) -> KafkaStream:
    return KafkaStream(stream_id, {cluster: ClusterMetadata(cluster, f"{cluster}:9092", frozenset(topics))})


class Recorder:
    def __init__(self) -> None:
        self.count = 0
        self.event = threading.Event()
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.count += 1
        self.event.set()

    def wait(self, timeout: float) -> bool:
        ok = self.event.wait(timeout)
        self.event.clear()
        return ok


@pytest.fixture
def metadata_file(tmp_path):
    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream()])
    return path


@pytest.fixture
def service_factory():
    services: list[FileMetadataService] = []

    def make(path, **kwargs) -> FileMetadataService:
        service = FileMetadataService(path, **kwargs)
        services.append(service)
        return service

    yield make
    for service in services:
        service.close()


def test_satisfies_the_protocols(metadata_file, service_factory):
    service = service_factory(metadata_file)
    assert isinstance(service, KafkaMetadataService)
    assert isinstance(service, NotifyingMetadataService)


def test_reads_streams_and_caches_by_content(metadata_file, service_factory):
    service = service_factory(metadata_file)
    assert service.get_all_streams() == {stream()}
    assert service.describe_streams(["orders", "nope"]) == {"orders": stream()}
    assert service.is_cluster_active("east") and not service.is_cluster_active("west")
    assert service.reads == 1  # three calls, one parse
    write_metadata_file(metadata_file, [stream()])  # identical content
    service.get_all_streams()
    assert service.reads == 1
    result = service.get_all_streams()
    result.clear()  # callers cannot corrupt the cache
    assert service.get_all_streams() == {stream()}


@pytest.mark.parametrize("how", ["atomic", "in-place"])
def test_change_is_notified_within_a_second(metadata_file, service_factory, how):
    service = service_factory(metadata_file, poll_interval=30.0)  # only events can be this fast
    recorder = Recorder()
    service.subscribe(recorder)
    assert service.get_all_streams() == {stream()}
    time.sleep(0.2)
    new = [stream(topics=("orders", "orders-retry")), stream("payments", cluster="west")]
    started = time.monotonic()
    if how == "atomic":
        write_metadata_file(metadata_file, new)
    else:
        from multicluster_source.metadata import dump_streams

        with open(metadata_file, "w") as fh:
            fh.write(dump_streams(new))
    assert recorder.wait(1.0), "no notification within a second"
    assert time.monotonic() - started < 1.0
    assert service.get_all_streams() == set(new)


def test_a_write_still_going_on_is_read_only_once_complete(metadata_file, service_factory):
    # Modifications alone wait for the debounce; the close ends the write: one notification, whole content.
    from multicluster_source.metadata import dump_streams

    service = service_factory(metadata_file, poll_interval=30.0)
    recorder = Recorder()
    service.subscribe(recorder)
    assert service.get_all_streams() == {stream()}
    time.sleep(0.2)
    new = [stream(topics=("orders", "orders-retry")), stream("payments", cluster="west")]
    text = dump_streams(new)
    half = len(text) // 2
    with open(metadata_file, "w") as fh:
        fh.write(text[:half])  # half a file: not valid metadata
        fh.flush()
        time.sleep(0.03)
        fh.write(text[half:])
    assert recorder.wait(1.0)
    time.sleep(0.3)
    assert recorder.count == 1
    assert service.get_all_streams() == set(new)


def test_a_burst_of_changes_is_checked_once(tmp_path):
    from multicluster_source.metadata._watch import DirectoryWatcher

    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream()])
    changes: list[bytes] = []
    watcher = DirectoryWatcher(
        tmp_path,
        {path.name},
        path.read_bytes,
        lambda: changes.append(path.read_bytes()),
        settle=0.2,  # wide, so that the burst below stays inside it on a busy machine
        debounce=0.3,
        max_delay=2.0,
        poll_interval=30.0,
    )
    watcher.start()
    try:
        time.sleep(0.2)
        for n in range(5):  # atomic rewrites and in-place writes, each a complete change
            content = [stream(topics=("orders", f"t{n}"))]
            if n % 2:
                write_metadata_file(path, content)
            else:
                from multicluster_source.metadata import dump_streams

                path.write_text(dump_streams(content))
        deadline = time.monotonic() + 2.0
        while not changes and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.4)
        assert len(changes) == 1
        assert changes[0] == path.read_bytes()
        assert watcher.checks == 1
    finally:
        watcher.close()


def test_identical_rewrite_does_not_notify(metadata_file, service_factory):
    service = service_factory(metadata_file, poll_interval=0.1)
    recorder = Recorder()
    service.subscribe(recorder)
    time.sleep(0.2)
    for _ in range(3):
        write_metadata_file(metadata_file, [stream()])
        os.utime(metadata_file)
    assert not recorder.wait(0.8)
    assert recorder.count == 0


def test_polling_alone_detects_changes(metadata_file, service_factory):
    service = service_factory(metadata_file, poll_interval=0.1, watch=False)
    recorder = Recorder()
    service.subscribe(recorder)
    write_metadata_file(metadata_file, [stream("other")])
    assert recorder.wait(2.0)
    assert {s.stream_id for s in service.get_all_streams()} == {"other"}


def test_bad_file_raises_with_file_and_line_then_recovers(metadata_file, service_factory):
    service = service_factory(metadata_file, poll_interval=5.0)
    recorder = Recorder()
    service.subscribe(recorder)
    assert service.get_all_streams() == {stream()}
    write_metadata_file(
        metadata_file,
        "- streamId: orders\n  clusterMetadataList:\n"
        "    - clusterId: east\n      bootstrapServers: e\n      topics: []\n",
    )
    assert recorder.wait(1.5), "a change to a bad file must notify too"
    with pytest.raises(MetadataValidationError) as info:
        service.get_all_streams()
    assert info.value.source == str(metadata_file)
    assert info.value.line == 5
    assert str(metadata_file) in str(info.value) and "line 5" in str(info.value)
    # Unchanged bad content keeps failing: the service never swallows the error.
    with pytest.raises(MetadataValidationError):
        service.get_all_streams()
    write_metadata_file(metadata_file, "- streamId: [unclosed\n")
    assert recorder.wait(1.5)
    with pytest.raises(MetadataError, match="invalid YAML"):
        service.get_all_streams()
    write_metadata_file(metadata_file, [stream("fixed")])
    assert recorder.wait(1.5)
    assert {s.stream_id for s in service.get_all_streams()} == {"fixed"}


def test_missing_file_raises_and_appearing_file_notifies(tmp_path, service_factory):
    path = tmp_path / "later.yaml"
    service = service_factory(path, poll_interval=5.0)
    recorder = Recorder()
    service.subscribe(recorder)
    with pytest.raises(MetadataError, match="file not found") as info:
        service.get_all_streams()
    assert info.value.source == str(path)
    write_metadata_file(path, [stream()])
    assert recorder.wait(1.5)
    assert service.get_all_streams() == {stream()}
    path.unlink()
    assert recorder.wait(1.5), "deleting the file is a change"
    with pytest.raises(MetadataError, match="file not found"):
        service.get_all_streams()


def test_directory_created_later_is_watched_by_polling(tmp_path, service_factory):
    path = tmp_path / "sub" / "streams.yaml"
    service = service_factory(path, poll_interval=0.1)
    recorder = Recorder()
    service.subscribe(recorder)
    write_metadata_file(path, [stream()])
    assert recorder.wait(2.0)
    assert service.get_all_streams() == {stream()}


def test_invalid_utf8_is_a_metadata_error_with_line(tmp_path, service_factory):
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"- streamId: a\n- streamId: \xff\n")
    with pytest.raises(MetadataError, match="UTF-8") as info:
        service_factory(path).get_all_streams()
    assert info.value.line == 2


def test_json_content_with_yaml_extension(tmp_path, service_factory):
    path = tmp_path / "streams.yaml"
    path.write_text(
        '[{"streamId": "j", "clusterMetadataList": [{"bootstrapServers": "b:1", "topics": ["t"]}]}]'
    )
    (only,) = service_factory(path).get_all_streams()
    assert only.stream_id == "j"


def test_unsubscribe_and_close_stop_everything(metadata_file):
    before = set(threading.enumerate())
    service = FileMetadataService(metadata_file, poll_interval=0.1)
    recorder = Recorder()
    unsubscribe = service.subscribe(recorder)
    assert service.watching
    ours = [t for t in threading.enumerate() if t not in before]
    assert ours and all(t.name.startswith("metadata-watch[") for t in ours), [t.name for t in ours]
    # check, events, inotify emitter, inotify reader (and its dispatcher from watchdog 7.1)
    assert len(ours) == (5 if hasattr(InotifyFD, "_dispatch_raw_buffers") else 4), [t.name for t in ours]
    unsubscribe()
    unsubscribe()  # idempotent
    write_metadata_file(metadata_file, [stream("x")])
    assert not recorder.wait(0.6)
    service.close()
    assert not service.watching
    deadline = time.monotonic() + 5
    while any(t.is_alive() for t in ours) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.is_alive() for t in ours)
    # Reads still work after close, without a watcher.
    assert {s.stream_id for s in service.get_all_streams()} == {"x"}
    assert not service.watching


def test_watcher_starts_lazily(metadata_file):
    service = FileMetadataService(metadata_file)
    try:
        assert not service.watching
        service.get_all_streams()
        assert service.watching
    finally:
        service.close()


def test_no_threads_when_watch_and_polling_are_off(metadata_file):
    with FileMetadataService(metadata_file, watch=False, poll_interval=0) as service:
        service.subscribe(lambda: None)
        assert service.get_all_streams() == {stream()}
        assert not service.watching


def test_a_failing_listener_does_not_stop_others(metadata_file, service_factory):
    service = service_factory(metadata_file, poll_interval=5.0)

    def broken() -> None:
        raise RuntimeError("listener bug")

    recorder = Recorder()
    service.subscribe(broken)
    service.subscribe(recorder)
    service.get_all_streams()
    write_metadata_file(metadata_file, [stream("y")])
    assert recorder.wait(1.5)


def test_configmap_volume_swap_notifies_a_file_service_on_the_key(tmp_path, service_factory):
    from multicluster_source.metadata import dump_streams
    from multicluster_source.testing import make_configmap_volume, update_configmap_volume

    volume = tmp_path / "cm"
    make_configmap_volume(volume, {"streams.yaml": dump_streams([stream()])})
    service = service_factory(volume / "streams.yaml", poll_interval=30.0)
    recorder = Recorder()
    service.subscribe(recorder)
    assert service.get_all_streams() == {stream()}
    update_configmap_volume(volume, {"streams.yaml": dump_streams([stream("v2")])})
    assert recorder.wait(1.0)
    assert {s.stream_id for s in service.get_all_streams()} == {"v2"}
