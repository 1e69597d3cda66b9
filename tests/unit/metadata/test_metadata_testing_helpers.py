import threading

import pytest

from multicluster_source.exceptions import MetadataError, MetadataValidationError
from multicluster_source.metadata import (
    ClusterMetadata,
    KafkaMetadataService,
    KafkaStream,
    NotifyingMetadataService,
    StreamSetSubscriber,
)
from multicluster_source.testing import InMemoryMetadataService, write_metadata_file


def stream(stream_id: str) -> KafkaStream:
    return KafkaStream(stream_id, {"c": ClusterMetadata("c", "c:9092", frozenset({"t"}))})


def test_in_memory_service_protocols_and_reads():
    service = InMemoryMetadataService([stream("a")])
    assert isinstance(service, KafkaMetadataService)
    assert isinstance(service, NotifyingMetadataService)
    assert service.get_all_streams() == {stream("a")}
    assert StreamSetSubscriber(["a"]).get_subscribed_streams(service) == {stream("a")}
    assert service.is_cluster_active("c")
    assert service.reads == 3


def test_set_streams_notifies_and_unsubscribe_stops_it():
    service = InMemoryMetadataService()
    calls: list[int] = []
    unsubscribe = service.subscribe(lambda: calls.append(1))
    service.set_streams([stream("a"), stream("b")])
    assert calls == [1]
    assert {s.stream_id for s in service.get_all_streams()} == {"a", "b"}
    unsubscribe()
    service.set_streams([])
    assert calls == [1]
    assert service.subscriber_count == 0


def test_set_streams_validates():
    service = InMemoryMetadataService()
    with pytest.raises(MetadataValidationError):
        service.set_streams([KafkaStream("a", {"c": ClusterMetadata("c", "b", frozenset())})])
    InMemoryMetadataService(validate=False).set_streams(
        [KafkaStream("a", {"c": ClusterMetadata("c", "b", frozenset())})]
    )


def test_fail_next():
    service = InMemoryMetadataService([stream("a")])
    custom = MetadataError("boom", source="test")
    service.fail_next(2)
    service.fail_next(1, custom)
    with pytest.raises(MetadataError, match="injected"):
        service.get_all_streams()
    with pytest.raises(MetadataError, match="injected"):
        service.describe_streams(["a"])
    with pytest.raises(MetadataError) as info:
        service.is_cluster_active("c")
    assert info.value is custom
    assert service.get_all_streams() == {stream("a")}
    assert service.reads == 4
    service.close()
    assert service.closed


def test_in_memory_service_is_thread_safe():
    service = InMemoryMetadataService([stream("a")])
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(500):
                service.get_all_streams()
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=reader, name=f"reader-{i}") for i in range(4)]
    for t in threads:
        t.start()
    for i in range(200):
        service.set_streams([stream(f"s{i}")])
    for t in threads:
        t.join()
    assert not errors
    assert service.reads == 2000


def test_write_metadata_file_is_atomic_and_accepts_text(tmp_path):
    path = tmp_path / "d" / "streams.yaml"
    write_metadata_file(path, [stream("a")])
    assert "streamId: a" in path.read_text()
    write_metadata_file(path, "raw text")
    assert path.read_text() == "raw text"
    assert sorted(p.name for p in path.parent.iterdir()) == ["streams.yaml"]
