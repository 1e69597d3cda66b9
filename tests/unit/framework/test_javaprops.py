"""Java client property names: one-to-one names are accepted under their librdkafka name with a warning, the
others are refused with what to write instead, and the table itself names real librdkafka properties."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from multicluster_source import (
    ClusterMetadata,
    ConfigurationError,
    KafkaStream,
    MultiClusterKafkaSource,
    StaticMetadataService,
)
from multicluster_source.framework._clientconf import cluster_client_config
from multicluster_source.framework._clientprops import _probe, validate_client_properties
from multicluster_source.framework._javaprops import JAVA_CONSUMER_PROPERTIES, translate_java_properties

MD = ClusterMetadata("east", "127.0.0.1:1", frozenset({"orders"}))


def _build(**props: str) -> MultiClusterKafkaSource:
    service = StaticMetadataService([KafkaStream("orders", {"east": MD})])
    b = MultiClusterKafkaSource.builder().set_kafka_metadata_service(service).set_stream_ids(["orders"])
    return b.set_properties(props).build()


def test_a_one_to_one_java_name_is_read_under_its_librdkafka_name(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="multicluster_source"):
        source = _build(**{"fetch.max.wait.ms": "250", "receive.buffer.bytes": "-1"})
    assert source.client_properties["fetch.wait.max.ms"] == "250"
    assert source.client_properties["socket.receive.buffer.bytes"] == "0"  # Java's -1 is librdkafka's 0
    assert "fetch.max.wait.ms" not in source.client_properties
    assert any(
        "'fetch.max.wait.ms'" in r.getMessage() and "'fetch.wait.max.ms'" in r.getMessage()
        for r in caplog.records
    )


def test_both_names_of_one_setting_with_different_values_are_refused() -> None:
    with pytest.raises(
        ConfigurationError, match=r"'fetch\.max\.wait\.ms' \(Java\) and 'fetch\.wait\.max\.ms'"
    ):
        _build(**{"fetch.max.wait.ms": "250", "fetch.wait.max.ms": "100"})


def test_a_java_truststore_gets_did_you_mean() -> None:
    with pytest.raises(ConfigurationError) as err:
        _build(**{"ssl.truststore.location": "/etc/kafka/truststore.jks"})
    message = str(err.value)
    assert message.startswith("set_properties: client property 'ssl.truststore.location'")
    assert "did you mean 'ssl.ca.location'?" in message


def test_sasl_jaas_config_explains_the_librdkafka_keys_and_hides_the_secret() -> None:
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="s3cret";'
    with pytest.raises(ConfigurationError) as err:
        _build(**{"sasl.jaas.config": jaas})
    message = str(err.value)
    for key in ("'sasl.username'", "'sasl.password'", "'sasl.oauthbearer.method'", "'sasl.kerberos.keytab'"):
        assert key in message
    assert "s3cret" not in message


def test_java_deserializer_points_to_the_builder() -> None:
    with pytest.raises(ConfigurationError, match=r"set_deserializer"):
        _build(**{"value.deserializer": "org.apache.kafka.common.serialization.StringDeserializer"})


def test_max_poll_records_is_accepted_with_the_source_knobs_named(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="multicluster_source"):
        validate_client_properties({"max.poll.records": "500"}, where="test-max-poll")
    assert any("reader.batch.max.records" in r.getMessage() for r in caplog.records)


def test_an_unknown_name_that_is_not_java_keeps_the_plain_message() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown client property 'fetch\.bogus'"):
        _build(**{"fetch.bogus": "1"})


def test_a_cluster_s_own_java_name_is_renamed_for_its_clients() -> None:
    md = ClusterMetadata("east", "127.0.0.1:1", frozenset({"orders"}), {"fetch.max.wait.ms": "50"})
    conf = cluster_client_config(md, {"send.buffer.bytes": "65536"}, client_id="c")
    assert conf["fetch.wait.max.ms"] == "50" and conf["socket.send.buffer.bytes"] == "65536"
    assert "fetch.max.wait.ms" not in conf and "send.buffer.bytes" not in conf


@pytest.mark.parametrize("name", sorted(JAVA_CONSUMER_PROPERTIES))
def test_the_table_names_java_names_librdkafka_lacks_and_librdkafka_names_it_has(name: str) -> None:
    entry = JAVA_CONSUMER_PROPERTIES[name]
    java_error, _ = _probe({name: "1"})
    if name != "max.poll.records":  # librdkafka knows that one (without the Java meaning here)
        assert java_error is not None, f"librdkafka accepts {name!r} as written"
    if entry.librdkafka is not None:
        target_error, _ = _probe({entry.librdkafka: "1"})
        assert target_error is None or not target_error.startswith("No such configuration property")
    assert translate_java_properties({name: "1"}, where="t") == (
        {entry.librdkafka: "1"} if entry.rename else {name: "1"}
    )


def test_the_docs_table_lists_every_java_name() -> None:
    readme = (Path(__file__).resolve().parents[3] / "docs" / "flink.md").read_text(encoding="utf-8")
    for name, entry in JAVA_CONSUMER_PROPERTIES.items():
        target = f"`{entry.librdkafka}`" if entry.librdkafka else "—"
        assert f"| `{name}` | {target} |" in readme, name
