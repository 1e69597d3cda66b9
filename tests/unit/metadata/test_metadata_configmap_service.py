import logging
import os
import re
import threading
import time

import pytest

from multicluster_source.exceptions import MetadataError, MetadataValidationError
from multicluster_source.metadata import (
    ClusterMetadata,
    ConfigMapMetadataService,
    KafkaStream,
    NotifyingMetadataService,
    dump_streams,
)
from multicluster_source.testing import make_configmap_volume, update_configmap_volume, write_metadata_file

KEY = "stream-metadata.yaml"


def stream(stream_id: str = "orders", topics: tuple[str, ...] = ("orders",)) -> KafkaStream:
    return KafkaStream(stream_id, {"east": ClusterMetadata("east", "east:9092", frozenset(topics))})


class Recorder:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.count = 0

    def __call__(self) -> None:
        self.count += 1
        self.event.set()

    def wait(self, timeout: float) -> bool:
        ok = self.event.wait(timeout)
        self.event.clear()
        return ok


@pytest.fixture
def closing():
    services: list[ConfigMapMetadataService] = []

    def make(*args, **kwargs) -> ConfigMapMetadataService:
        service = ConfigMapMetadataService(*args, **kwargs)
        services.append(service)
        return service

    yield make
    for service in services:
        service.close()


# ------------------------------------------------------------------------------------------ the helpers


def test_volume_layout_matches_the_kubelet(tmp_path):
    volume = tmp_path / "cm"
    generation = make_configmap_volume(volume, {KEY: "a", "other": "b"})
    assert re.fullmatch(r"\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\..+", generation.name)
    assert os.readlink(volume / "..data") == generation.name
    assert os.readlink(volume / KEY) == f"..data/{KEY}"
    assert (volume / KEY).read_text() == "a"
    assert sorted(os.listdir(volume)) == sorted([generation.name, "..data", KEY, "other"])

    new_generation = update_configmap_volume(volume, {KEY: "c"})
    assert new_generation is not None and new_generation != generation
    assert not generation.exists(), "the old generation is deleted"
    assert not os.path.lexists(volume / "other"), "keys no longer present lose their symlink"
    assert not os.path.lexists(volume / "..data_tmp")
    assert (volume / KEY).read_text() == "c"
    assert update_configmap_volume(volume, {KEY: "c"}) is None, "unchanged content writes nothing"


def test_invalid_configmap_keys_are_rejected(tmp_path):
    with pytest.raises(ValueError):
        make_configmap_volume(tmp_path / "cm", {"..data": "x"})
    with pytest.raises(ValueError):
        make_configmap_volume(tmp_path / "cm", {"a/b": "x"})


# ------------------------------------------------------------------------------------------ volumes


def test_volume_swap_notifies_with_new_content(tmp_path, closing):
    volume = tmp_path / "cm"
    make_configmap_volume(volume, {KEY: dump_streams([stream()]), "unrelated": "x"})
    service = closing(volume, poll_interval=30.0)
    assert isinstance(service, NotifyingMetadataService)
    recorder = Recorder()
    service.subscribe(recorder)
    assert service.get_all_streams() == {stream()}
    time.sleep(0.2)
    started = time.monotonic()
    update_configmap_volume(
        volume, {KEY: dump_streams([stream(topics=("orders", "refunds"))]), "unrelated": "x"}
    )
    assert recorder.wait(1.0), "the ..data swap must be noticed within a second"
    assert time.monotonic() - started < 1.0
    assert service.get_all_streams() == {stream(topics=("orders", "refunds"))}


def test_swap_of_an_unrelated_key_does_not_notify(tmp_path, closing):
    volume = tmp_path / "cm"
    make_configmap_volume(volume, {KEY: dump_streams([stream()]), "unrelated": "1"})
    service = closing(volume, poll_interval=0.1)
    recorder = Recorder()
    service.subscribe(recorder)
    time.sleep(0.2)
    update_configmap_volume(volume, {KEY: dump_streams([stream()]), "unrelated": "2"})
    assert not recorder.wait(0.8)


def test_volume_reads_one_generation(tmp_path, closing, monkeypatch):
    volume = tmp_path / "cm"
    make_configmap_volume(volume, {KEY: dump_streams([stream("v1")])})
    service = closing(volume, watch=False, poll_interval=0)
    # Break the user-visible symlink: the service must go through ..data, not through dir/<key>.
    os.unlink(volume / KEY)
    os.symlink("..data/missing", volume / KEY)
    assert {s.stream_id for s in service.get_all_streams()} == {"v1"}


def test_volume_missing_key_names_key_and_keys_present(tmp_path, closing):
    volume = tmp_path / "cm"
    make_configmap_volume(volume, {"a.yaml": "x", "b.yaml": "y"})
    with pytest.raises(MetadataError) as info:
        closing(volume).get_all_streams()
    assert info.value.key == KEY
    assert "a.yaml, b.yaml" in str(info.value)


def test_volume_with_bad_content_names_the_key_file_and_line(tmp_path, closing):
    volume = tmp_path / "cm"
    make_configmap_volume(volume, {KEY: "- streamId: s\n  clusterMetadataList: []\n"})
    with pytest.raises(MetadataValidationError) as info:
        closing(volume).get_all_streams()
    assert info.value.source == str(volume / KEY)
    assert info.value.line == 2


def test_directory_without_data_link_warns_once_and_works(tmp_path, closing, caplog):
    directory = tmp_path / "plain-dir"
    directory.mkdir()
    write_metadata_file(directory / KEY, [stream()])
    service = closing(directory, poll_interval=5.0)
    recorder = Recorder()
    service.subscribe(recorder)
    with caplog.at_level(logging.WARNING, logger="multicluster_source.metadata"):
        assert service.get_all_streams() == {stream()}
        service.get_all_streams()
    warnings = [r for r in caplog.records if "..data" in r.getMessage()]
    assert len(warnings) == 1 and "subPath" in warnings[0].getMessage()
    write_metadata_file(directory / KEY, [stream("v2")])
    assert recorder.wait(1.5)
    assert {s.stream_id for s in service.get_all_streams()} == {"v2"}


def test_subpath_plain_file_warns_once_and_is_still_watched(tmp_path, closing, caplog):
    path = tmp_path / "stream-metadata.yaml"
    write_metadata_file(path, [stream()])
    service = closing(path, poll_interval=5.0)
    recorder = Recorder()
    service.subscribe(recorder)
    with caplog.at_level(logging.WARNING, logger="multicluster_source.metadata"):
        assert service.get_all_streams() == {stream()}
        write_metadata_file(path, [stream("v2")])
        assert recorder.wait(1.5)
        assert {s.stream_id for s in service.get_all_streams()} == {"v2"}
    warnings = [r for r in caplog.records if "subPath" in r.getMessage()]
    assert len(warnings) == 1
    assert str(path) in warnings[0].getMessage()


def test_key_symlink_inside_a_real_volume_does_not_warn(tmp_path, closing, caplog):
    volume = tmp_path / "cm"
    make_configmap_volume(volume, {KEY: dump_streams([stream()])})
    with caplog.at_level(logging.WARNING, logger="multicluster_source.metadata"):
        assert closing(volume / KEY).get_all_streams() == {stream()}
    assert not [r for r in caplog.records if "subPath" in r.getMessage()]


def test_missing_path(tmp_path, closing):
    with pytest.raises(MetadataError, match="not found"):
        closing(tmp_path / "nothing-here").get_all_streams()


# ------------------------------------------------------------------------------------------ manifests

MANIFEST = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: stream-metadata
data:
  other.txt: hello
  stream-metadata.yaml: |
    - streamId: orders
      clusterMetadataList:
        - clusterId: east
          bootstrapServers: east:9092
          topics: [orders]
"""


def test_manifest(tmp_path, closing):
    path = tmp_path / "configmap.yaml"
    path.write_text(MANIFEST)
    assert closing(path).get_all_streams() == {stream()}


def test_manifest_error_line_is_offset_to_the_manifest(tmp_path, closing):
    path = tmp_path / "configmap.yaml"
    path.write_text(MANIFEST.replace("topics: [orders]", "topics: [orders, '..']"))
    with pytest.raises(MetadataValidationError) as info:
        closing(path).get_all_streams()
    err = info.value
    assert err.source == str(path)
    assert err.line == 12
    assert err.key == 'data["stream-metadata.yaml"][0].clusterMetadataList[0].topics[1]'
    assert path.read_text().splitlines()[err.line - 1].strip().startswith("topics:")


def test_manifest_yaml_error_inside_the_block_is_offset(tmp_path, closing):
    path = tmp_path / "configmap.yaml"
    path.write_text(MANIFEST.replace("topics: [orders]", "topics: [orders"))
    with pytest.raises(MetadataError, match="invalid YAML") as info:
        closing(path).get_all_streams()
    assert info.value.line is not None and info.value.line >= 12
    assert info.value.key == 'data["stream-metadata.yaml"]'


def test_manifest_with_quoted_value_labels_the_embedded_line(tmp_path, closing):
    embedded = "- streamId: s\\n  clusterMetadataList: []\\n"
    path = tmp_path / "cm.yaml"
    path.write_text(f'kind: ConfigMap\ndata:\n  stream-metadata.yaml: "{embedded}"\n')
    with pytest.raises(MetadataValidationError) as info:
        closing(path).get_all_streams()
    assert info.value.line is None
    assert "line 2 of the embedded document" in str(info.value)


def test_manifest_missing_key_lists_keys(tmp_path, closing):
    path = tmp_path / "cm.yaml"
    path.write_text(MANIFEST)
    with pytest.raises(MetadataError) as info:
        closing(path, key="streams.json").get_all_streams()
    assert "'streams.json'" in str(info.value)
    assert "other.txt, stream-metadata.yaml" in str(info.value)
    assert info.value.source == str(path)


def test_manifest_among_other_documents(tmp_path, closing):
    path = tmp_path / "all.yaml"
    path.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n---\n" + MANIFEST)
    assert closing(path).get_all_streams() == {stream()}


def test_manifest_of_another_kind(tmp_path, closing):
    path = tmp_path / "secret.yaml"
    path.write_text("apiVersion: v1\nkind: Secret\ndata: {}\n")
    with pytest.raises(MetadataError, match="no ConfigMap"):
        closing(path).get_all_streams()


def test_manifest_json(tmp_path, closing):
    import json

    path = tmp_path / "cm.json"
    doc = {"kind": "ConfigMap", "data": {KEY: dump_streams([stream()])}}
    path.write_text(json.dumps(doc))
    assert closing(path).get_all_streams() == {stream()}


def test_manifest_change_to_the_key_notifies_but_other_keys_do_not(tmp_path, closing):
    path = tmp_path / "cm.yaml"
    write_metadata_file(path, MANIFEST)
    service = closing(path, poll_interval=5.0)
    recorder = Recorder()
    service.subscribe(recorder)
    time.sleep(0.2)
    write_metadata_file(path, MANIFEST.replace("other.txt: hello", "other.txt: bye"))
    assert not recorder.wait(0.9)
    write_metadata_file(path, MANIFEST.replace("[orders]", "[orders, refunds]"))
    assert recorder.wait(1.5)
    assert service.get_all_streams() == {stream(topics=("orders", "refunds"))}
