"""The driver's planner where it needs no broker: the metadata file, replayed ranges, trigger delays."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from multicluster_source import ClusterMetadata, KafkaStream
from multicluster_source.exceptions import ConfigurationError
from multicluster_source.metadata import dump_streams
from multicluster_source.spark._driver import DataLossError, Planner
from multicluster_source.spark._offsets import Range
from multicluster_source.spark._options import parse_options
from multicluster_source.testing import make_configmap_volume, update_configmap_volume, write_metadata_file


def _file(tmp_path: Path, *clusters: str) -> Path:
    parts = {c: ClusterMetadata(c, f"{c}:9092", frozenset({"orders"})) for c in clusters}
    return write_metadata_file(tmp_path / "streams.yaml", [KafkaStream("s", parts)])


def _planner(path: Path, **options: str) -> Planner:
    return Planner(parse_options({"metadataFile": str(path), "streamIds": "s", **options}))


def test_a_stream_id_not_in_the_file_names_the_option_and_the_file(tmp_path: Path) -> None:
    path = _file(tmp_path, "east")
    with pytest.raises(ConfigurationError, match=r"streamIds.*nope.*streams\.yaml"):
        Planner(parse_options({"metadataFile": str(path), "streamIds": "s,nope"})).refresh()


def test_a_missing_or_bad_file_names_the_option_and_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"metadataFile.*absent\.yaml"):
        _planner(tmp_path / "absent.yaml").refresh()
    bad = write_metadata_file(tmp_path / "bad.yaml", "kafkaStreams: [oops")
    with pytest.raises(ConfigurationError, match=r"metadataFile.*bad\.yaml"):
        _planner(bad).refresh()


def test_a_bad_file_later_keeps_the_last_good_metadata(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _file(tmp_path, "east", "west")
    planner = _planner(path)
    assert sorted(planner.refresh()) == ["east", "west"]
    write_metadata_file(path, "kafkaStreams: [oops")
    with caplog.at_level(logging.WARNING, logger="multicluster_source.spark"):
        assert sorted(planner.refresh()) == ["east", "west"]
    assert "keeping the last good metadata" in caplog.text
    _file(tmp_path, "west")
    assert sorted(planner.refresh()) == ["west"]
    planner.close()


def test_a_replayed_range_of_a_cluster_gone_from_the_file_fails_naming_the_split(tmp_path: Path) -> None:
    planner = _planner(_file(tmp_path, "east"))
    with pytest.raises(DataLossError, match="west/orders/0"):
        planner.plan({"west/orders/0": 3, "east/orders/0": 0}, {"west/orders/0": 9, "east/orders/0": 5})


def test_with_fail_on_data_loss_false_it_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    planner = _planner(_file(tmp_path, "east"), failOnDataLoss="false", minPartitions="3")
    with caplog.at_level(logging.WARNING, logger="multicluster_source.spark"):
        planned = planner.plan(
            {"west/orders/0": 3, "east/orders/0": 0}, {"west/orders/0": 9, "east/orders/0": 6}
        )
    assert [piece for piece, _cluster in planned] == [
        Range("east/orders/0", 0, 1),
        Range("east/orders/0", 1, 3),
        Range("east/orders/0", 3, 6),
    ]
    assert {cluster.bootstrap_servers for _piece, cluster in planned} == {"east:9092"}
    assert "west/orders/0" in caplog.text


def test_a_cluster_removed_during_the_run_still_serves_the_ranges_planned_before(tmp_path: Path) -> None:
    path = _file(tmp_path, "east", "west")
    planner = _planner(path)
    planner.refresh()
    _file(tmp_path, "east")
    planner.refresh()
    ((piece, cluster),) = planner.plan({"west/orders/0": 1}, {"west/orders/0": 4})
    assert (piece, cluster.cluster_id) == (Range("west/orders/0", 1, 4), "west")


def test_fewer_records_than_min_offsets_per_trigger_wait_up_to_the_delay(tmp_path: Path) -> None:
    path = _file(tmp_path, "east")
    waiting = _planner(path, minOffsetsPerTrigger="10", maxTriggerDelay="1h")
    assert waiting._waits(9)
    assert not waiting._waits(10)
    assert not waiting._waits(0)
    assert not _planner(path, minOffsetsPerTrigger="10", maxTriggerDelay="0s")._waits(9)
    assert not _planner(path)._waits(1)


def test_metadata_from_a_mounted_configmap_follows_its_updates(tmp_path: Path) -> None:
    def streams(*clusters: str) -> str:
        parts = {c: ClusterMetadata(c, f"{c}:9092", frozenset({"orders"})) for c in clusters}
        return dump_streams([KafkaStream("s", parts)])

    volume = tmp_path / "volume"
    make_configmap_volume(volume, {"streams.yaml": streams("east")})
    planner = Planner(
        parse_options(
            {"metadataConfigMap": str(volume), "metadataConfigMapKey": "streams.yaml", "streamIds": "s"}
        )
    )
    assert sorted(planner.refresh()) == ["east"]
    update_configmap_volume(volume, {"streams.yaml": streams("east", "west")})
    assert sorted(planner.refresh()) == ["east", "west"]
    planner.close()
    with pytest.raises(ConfigurationError, match=r"metadataConfigMap.*other\.yaml"):
        Planner(
            parse_options(
                {"metadataConfigMap": str(volume), "metadataConfigMapKey": "other.yaml", "streamIds": "s"}
            )
        ).refresh()


def test_a_cluster_that_does_not_answer_stays_where_it_is_and_is_read_when_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    planner = _planner(_file(tmp_path, "east", "west"))
    answering = {"east": True, "west": False}
    ends = {"east": 10, "west": 30}

    def partitions_of(cluster: ClusterMetadata) -> list[tuple[str, int]]:
        if not answering[cluster.cluster_id]:
            raise TimeoutError("no answer")
        return [("orders", 0)]

    def offsets(cluster: ClusterMetadata, kind: str, parts: list[tuple[str, int]]) -> dict[str, int]:
        return {
            f"{cluster.cluster_id}/{t}/{p}": 0 if kind == "earliest" else ends[cluster.cluster_id]
            for t, p in parts
        }

    monkeypatch.setattr(planner, "partitions_of", partitions_of)
    monkeypatch.setattr(planner, "offsets", offsets)
    start = {"east/orders/0": 4, "west/orders/0": 7}
    with caplog.at_level(logging.INFO, logger="multicluster_source.spark"):
        assert planner.latest(start, None) == {"east/orders/0": 10, "west/orders/0": 7}
        assert planner.latest(start, None) == {"east/orders/0": 10, "west/orders/0": 7}
        answering["west"] = True
        assert planner.latest(start, None) == {"east/orders/0": 10, "west/orders/0": 30}
    messages = [r.getMessage() for r in caplog.records]
    assert sum("cluster=west: not read until it answers" in m for m in messages) == 1
    assert "cluster=west: answers again" in messages
