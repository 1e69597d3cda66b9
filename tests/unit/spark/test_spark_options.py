"""The Spark source's options: parsed from Spark's strings, bad ones named (no Spark, no broker)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import multicluster_source.spark as spark_package
from multicluster_source.exceptions import ConfigurationError
from multicluster_source.spark._options import for_batch, for_streaming, parse_options, parse_starting_offsets

BASE = {"metadataFile": "/etc/streams.yaml", "streamIds": "orders, payments"}


def test_defaults_follow_sparks_kafka_source() -> None:
    parsed = parse_options(BASE)
    assert parsed.metadata_file == "/etc/streams.yaml"
    assert parsed.stream_ids == ("orders", "payments")
    assert parsed.starting.kind == "latest"
    assert parsed.max_offsets_per_trigger is None
    assert parsed.fail_on_data_loss is True
    assert parsed.include_headers is False


def test_option_names_are_case_insensitive_as_spark_passes_them_lower_cased() -> None:
    parsed = parse_options({"metadatafile": "m.yaml", "streamids": "s", "maxoffsetspertrigger": "10"})
    assert (parsed.metadata_file, parsed.stream_ids, parsed.max_offsets_per_trigger) == ("m.yaml", ("s",), 10)


def test_client_properties_lose_their_prefix_and_keep_their_placeholders() -> None:
    parsed = parse_options({**BASE, "kafka.sasl.password": "${env:PW}", "kafka.fetch.max.bytes": "1024"})
    assert dict(parsed.client_properties) == {"fetch.max.bytes": "1024", "sasl.password": "${env:PW}"}


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"streamIds": "s"}, "metadataFile"),
        ({**BASE, "metadataConfigMap": "/etc/config"}, "metadataConfigMap"),
        ({"metadataFile": "m.yaml"}, "streamIds"),
        ({**BASE, "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({**BASE, "maxOffsetsPerTrigger": "lots"}, "maxOffsetsPerTrigger"),
        ({**BASE, "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({**BASE, "includeHeaders": "yes please"}, "includeHeaders"),
        ({**BASE, "startingOffsets": "{oops"}, "startingOffsets"),
        ({**BASE, "startingOffsets": "[1, 2]"}, "startingOffsets"),
        ({**BASE, "kafka.bootstrap.servers": "h:9092"}, "kafka.bootstrap.servers"),
        ({**BASE, "kafka.group.id": "g"}, "kafka.group.id"),
        ({**BASE, "kafka.fetch.max.bites": "1"}, "fetch.max.bites"),
        ({**BASE, "kafka.fetch.max.bytes": "lots"}, "fetch.max.bytes"),
    ],
)
def test_a_bad_option_is_named(options: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named.replace(".", r"\.")):
        parse_options(options)


def test_starting_offsets_as_json_take_split_ids_and_minus_two_or_minus_one() -> None:
    parsed = parse_starting_offsets('{"w/t/1": -1, "e/t/0": 42, "e/t/1": -2}')
    assert parsed.kind == "explicit"
    assert list(parsed.explicit.items()) == [("e/t/0", 42), ("e/t/1", -2), ("w/t/1", -1)]
    assert parse_starting_offsets("EARLIEST").kind == "earliest"
    assert parse_starting_offsets(None).kind == "latest"
    with pytest.raises(ConfigurationError, match="t/0"):
        parse_starting_offsets('{"t/0": 1}')
    with pytest.raises(ConfigurationError, match="-3"):
        parse_starting_offsets('{"e/t/0": -3}')


def test_importing_the_library_does_not_import_pyspark() -> None:
    code = "import sys, multicluster_source, multicluster_source.spark; print('pyspark' in sys.modules)"
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "False"


def test_an_older_pyspark_gets_an_error_naming_the_version_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata, "version", lambda name: "3.5.1")
    with pytest.raises(ImportError, match=r"pyspark>=4\.2.*3\.5\.1"):
        spark_package.register(object())


def test_trigger_options_take_sparks_durations() -> None:
    assert parse_options(BASE).max_trigger_delay_ms == 15 * 60_000
    assert parse_options({**BASE, "maxTriggerDelay": "30s"}).max_trigger_delay_ms == 30_000
    assert parse_options({**BASE, "maxTriggerDelay": "250"}).max_trigger_delay_ms == 250
    assert parse_options({**BASE, "maxTriggerDelay": "2h"}).max_trigger_delay_ms == 7_200_000
    with pytest.raises(ConfigurationError, match="maxTriggerDelay"):
        parse_options({**BASE, "maxTriggerDelay": "soon"})
    parsed = parse_options(
        {**BASE, "minOffsetsPerTrigger": "5", "minPartitions": "4", "commitGroupId": " lag "}
    )
    assert (parsed.min_offsets_per_trigger, parsed.min_partitions, parsed.commit_group_id) == (5, 4, "lag")


def test_a_batch_read_starts_at_earliest_and_ends_at_latest_unless_told() -> None:
    batch = for_batch(parse_options(BASE), BASE)
    assert (batch.starting.kind, batch.ending and batch.ending.kind) == ("earliest", "latest")
    told = {**BASE, "startingOffsets": '{"east/o/0": 5}', "endingOffsets": '{"east/o/0": 9, "west/o/1": -1}'}
    batch = for_batch(parse_options(told), told)
    assert dict(batch.starting.explicit) == {"east/o/0": 5}
    assert batch.ending is not None and dict(batch.ending.explicit) == {"east/o/0": 9, "west/o/1": -1}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsets": "latest"}, "startingOffsets: a batch read cannot start at latest"),
        ({"startingOffsets": '{"e/o/0": -1}'}, "startingOffsets: a batch read cannot start at latest"),
        ({"endingOffsets": "earliest"}, "endingOffsets: earliest"),
        ({"endingOffsets": '{"e/o/0": -2}'}, "endingOffsets: earliest"),
        ({"endingOffsets": '{"nope": 3}'}, "endingOffsets: key 'nope'"),
    ],
)
def test_batch_offsets_spark_refuses_are_refused_naming_the_option(
    options: dict[str, str], message: str
) -> None:
    raw = {**BASE, **options}
    with pytest.raises(ConfigurationError, match=message):
        for_batch(parse_options(raw), raw)


def test_ending_offsets_are_refused_for_streaming() -> None:
    with pytest.raises(ConfigurationError, match="endingOffsets is for batch reads"):
        for_streaming(parse_options({**BASE, "endingOffsets": "latest"}))


def test_a_metadata_topic_needs_its_bootstrap_servers_and_excludes_the_other_metadata_options() -> None:
    parsed = parse_options(
        {
            "metadataTopic": "streams.metadata",
            "metadataTopicBootstrapServers": "meta:9092",
            "metadataTopic.kafka.security.protocol": "SSL",
            "streamIds": "s",
        }
    )
    assert (parsed.metadata_file, parsed.metadata_servers) == ("streams.metadata", "meta:9092")
    assert parsed.metadata_properties == {"security.protocol": "SSL"}
    assert parsed.client_properties == {}
    assert "metadataTopic 'streams.metadata'" in parsed.metadata_option
    with pytest.raises(ConfigurationError, match="metadataTopicBootstrapServers is required"):
        parse_options({"metadataTopic": "m", "streamIds": "s"})
    with pytest.raises(ConfigurationError, match="metadataFile and metadataTopic"):
        parse_options({"metadataTopic": "m", "metadataFile": "f.yaml", "streamIds": "s"})
    with pytest.raises(ConfigurationError, match=r"metadataTopic\.kafka\.group\.id"):
        parse_options(
            {
                "metadataTopic": "m",
                "metadataTopicBootstrapServers": "x:1",
                "metadataTopic.kafka.group.id": "g",
                "streamIds": "s",
            }
        )


def test_replica_sync_wait_is_a_duration() -> None:
    assert parse_options({"metadataFile": "f.yaml", "streamIds": "s"}).replica_sync_wait_ms == 5000
    parsed = parse_options({"metadataFile": "f.yaml", "streamIds": "s", "replicaSyncWait": "20s"})
    assert parsed.replica_sync_wait_ms == 20_000
    with pytest.raises(ConfigurationError, match="option replicaSyncWait"):
        parse_options({"metadataFile": "f.yaml", "streamIds": "s", "replicaSyncWait": "soon"})
