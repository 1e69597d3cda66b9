from __future__ import annotations

import dataclasses
import logging
import re
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multicluster_source.exceptions import ConfigurationError
from multicluster_source.framework._clientprops import _shown, validate_client_properties
from multicluster_source.framework._options import (
    MAX_MS,
    SOURCE_OPTION_KEYS,
    EnumeratorMode,
    SourceOptions,
    split_properties,
)

DEFAULTS = {
    "stream-metadata-discovery-interval-ms": "30000",
    "stream-metadata-discovery-failure-threshold": "-1",
    "stream-metadata-removed-retention-ms": "86400000",
    "partition.discovery.interval.ms": "30000",
    "stream-enumerator-mode": "per_cluster",
    "num.standby.replicas": "0",
    "deserialization-error-policy": "fail",
    "topic.tracking.enable": "true",
    "topic.tracking.allow.reset": "true",
    "reader.buffer.max.batches": "16",
    "reader.batch.max.records": "1000",
    "metadata.change.debounce.ms": "20",
    "standby.assignor": "",
    "reader.heartbeat.timeout.ms": "10000",
    "replica.sync.wait.ms": "5000",
    "replica.failover.unreachable.ms": "-1",
    "checkpoint.commit.wait.ms": "5000",
    "reader.stall.timeout.ms": "60000",
}


# ------------------------------------------------------------------------------------------ source options


def test_option_keys_are_exactly_the_contract_plus_extras() -> None:
    assert frozenset(DEFAULTS) | {"commit.offsets.on.checkpoint"} == SOURCE_OPTION_KEYS
    assert "client.id.prefix" not in SOURCE_OPTION_KEYS


def test_defaults() -> None:
    opts = SourceOptions()
    assert opts == SourceOptions.from_properties({})
    assert opts.stream_metadata_discovery_interval_ms == 30_000
    assert opts.stream_metadata_discovery_failure_threshold == -1
    assert opts.stream_metadata_removed_retention_ms == 86_400_000
    assert opts.partition_discovery_interval_ms == 30_000
    assert opts.commit_offsets_on_checkpoint is None
    assert opts.enumerator_mode == "per_cluster"
    assert opts.num_standby_replicas == 0
    assert opts.deserialization_error_policy == "fail"
    assert opts.topic_tracking_enable is True
    assert opts.topic_tracking_allow_reset is True
    assert opts.reader_buffer_max_batches == 16
    assert opts.reader_batch_max_records == 1000
    assert opts.metadata_change_debounce_ms == 20
    assert opts.standby_assignor == ""
    assert opts.reader_heartbeat_timeout_ms == 10_000
    assert opts.as_dict() == DEFAULTS


def test_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SourceOptions().num_standby_replicas = 1  # type: ignore[misc]


def test_parse_every_option() -> None:
    props = {
        "stream-metadata-discovery-interval-ms": "-1",
        "stream-metadata-discovery-failure-threshold": "3",
        "stream-metadata-removed-retention-ms": "0",
        "partition.discovery.interval.ms": "-1",
        "commit.offsets.on.checkpoint": "FALSE",
        "stream-enumerator-mode": "global",
        "num.standby.replicas": "1",
        "deserialization-error-policy": "skip",
        "topic.tracking.enable": "False",
        "topic.tracking.allow.reset": "false",
        "reader.buffer.max.batches": "1",
        "reader.batch.max.records": "1000000",
        "metadata.change.debounce.ms": "0",
    }
    opts = SourceOptions.from_properties(props)
    assert opts == SourceOptions(
        stream_metadata_discovery_interval_ms=-1,
        stream_metadata_discovery_failure_threshold=3,
        stream_metadata_removed_retention_ms=0,
        partition_discovery_interval_ms=-1,
        commit_offsets_on_checkpoint=False,
        enumerator_mode="global",
        num_standby_replicas=1,
        deserialization_error_policy="skip",
        topic_tracking_enable=False,
        topic_tracking_allow_reset=False,
        reader_buffer_max_batches=1,
        reader_batch_max_records=1_000_000,
        metadata_change_debounce_ms=0,
    )
    assert SourceOptions.from_properties(opts.as_dict()) == opts
    assert opts.as_dict()["commit.offsets.on.checkpoint"] == "false"


@pytest.mark.parametrize("text", ["true", "TRUE", " True ", "tRuE"])
def test_booleans_case_insensitive(text: str) -> None:
    assert SourceOptions.from_properties({"commit.offsets.on.checkpoint": text}).commit_offsets_on_checkpoint


def test_commits_offsets() -> None:
    assert SourceOptions().commits_offsets("billing") is True
    assert SourceOptions().commits_offsets(None) is False
    assert SourceOptions().commits_offsets("") is False
    assert SourceOptions(commit_offsets_on_checkpoint=False).commits_offsets("billing") is False
    assert SourceOptions(commit_offsets_on_checkpoint=True).commits_offsets(None) is True


BAD_VALUES = [
    ("stream-metadata-discovery-interval-ms", "0", "-1 (discover once) or an integer from 1"),
    ("stream-metadata-discovery-interval-ms", "-2", "-1 (discover once) or an integer from 1"),
    ("stream-metadata-discovery-interval-ms", "abc", "-1 (discover once) or an integer from 1"),
    ("stream-metadata-discovery-interval-ms", "1.5", "-1 (discover once) or an integer from 1"),
    ("stream-metadata-discovery-interval-ms", str(MAX_MS + 1), f"to {MAX_MS}"),
    ("stream-metadata-discovery-failure-threshold", "0", "-1 (never fail) or an integer from 1"),
    ("stream-metadata-discovery-failure-threshold", "-5", "-1 (never fail) or an integer from 1"),
    ("stream-metadata-removed-retention-ms", "-1", "an integer from 0"),
    ("stream-metadata-removed-retention-ms", "", "an integer from 0"),
    ("partition.discovery.interval.ms", "0", "-1 (disabled) or an integer from 1"),
    ("commit.offsets.on.checkpoint", "yes", "'true' or 'false'"),
    ("commit.offsets.on.checkpoint", "1", "'true' or 'false'"),
    ("stream-enumerator-mode", "per-cluster", "'per_cluster' or 'global'"),
    ("num.standby.replicas", "-1", "an integer from 0"),
    ("num.standby.replicas", "one", "an integer from 0"),
    ("deserialization-error-policy", "ignore", "'fail' or 'skip'"),
    ("topic.tracking.enable", "on", "'true' or 'false'"),
    ("topic.tracking.allow.reset", "0", "'true' or 'false'"),
    ("reader.buffer.max.batches", "0", "an integer from 1"),
    ("reader.batch.max.records", "0", "an integer from 1"),
    ("reader.batch.max.records", "1000001", "an integer from 1 to 1000000"),
    ("metadata.change.debounce.ms", "-1", "an integer from 0"),
    ("standby.assignor", "not a spec", "'module:Class'"),
    ("reader.heartbeat.timeout.ms", "99", "an integer from 100"),
    ("replica.sync.wait.ms", "-1", "an integer from 0"),
    ("reader.stall.timeout.ms", "0", "-1 (never checked) or an integer from 1"),
    ("checkpoint.commit.wait.ms", "-1", "an integer from 0"),
    ("replica.failover.unreachable.ms", "0", "-1 (never automatic) or an integer from 1"),
]


@pytest.mark.parametrize(("key", "value", "allowed"), BAD_VALUES)
def test_bad_value_names_key_value_and_allowed(key: str, value: str, allowed: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        SourceOptions.from_properties({key: value})
    message = str(info.value)
    assert repr(key) in message
    assert repr(value) in message
    assert allowed in message


def test_every_option_has_a_bad_value_test() -> None:
    assert {key for key, _, _ in BAD_VALUES} == SOURCE_OPTION_KEYS


@pytest.mark.parametrize(
    ("field", "value", "key"),
    [
        ("num_standby_replicas", -1, "num.standby.replicas"),
        ("num_standby_replicas", True, "num.standby.replicas"),
        ("stream_metadata_discovery_interval_ms", 0, "stream-metadata-discovery-interval-ms"),
        ("enumerator_mode", "round_robin", "stream-enumerator-mode"),
        ("topic_tracking_enable", 1, "topic.tracking.enable"),
        ("commit_offsets_on_checkpoint", "true", "commit.offsets.on.checkpoint"),
    ],
)
def test_direct_construction_is_validated(field: str, value: object, key: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(key)):
        SourceOptions(**{field: value})  # type: ignore[arg-type]


def test_unknown_source_option_is_rejected_with_hint() -> None:
    with pytest.raises(ConfigurationError, match=re.escape("unknown source option 'fetch.min.bytes'")):
        SourceOptions.from_properties({"fetch.min.bytes": "1"})
    with pytest.raises(
        ConfigurationError, match=re.escape("did you mean source option 'num.standby.replicas'")
    ):
        SourceOptions.from_properties({"num.standby.replica": "1"})


def test_configuration_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        SourceOptions.from_properties({"num.standby.replicas": "x"})


@given(
    interval=st.one_of(st.just(-1), st.integers(1, MAX_MS)),
    threshold=st.one_of(st.just(-1), st.integers(1, 2**31 - 1)),
    retention=st.integers(0, MAX_MS),
    commit=st.sampled_from([None, True, False]),
    mode=st.sampled_from(["per_cluster", "global"]),
)
def test_as_dict_round_trips(
    interval: int, threshold: int, retention: int, commit: bool | None, mode: EnumeratorMode
) -> None:
    opts = SourceOptions(
        stream_metadata_discovery_interval_ms=interval,
        stream_metadata_discovery_failure_threshold=threshold,
        stream_metadata_removed_retention_ms=retention,
        commit_offsets_on_checkpoint=commit,
        enumerator_mode=mode,
    )
    assert SourceOptions.from_properties(opts.as_dict()) == opts


# -------------------------------------------------------------------------------------------- split


def test_split_properties_keeps_the_two_apart_without_mutating() -> None:
    props = {
        "stream-metadata-discovery-interval-ms": "1000",
        "num.standby.replicas": "1",
        "fetch.min.bytes": "1",
        "client.rack": "r1",
        "client.id.prefix": "x",
    }
    frozen = MappingProxyType(dict(props))
    source, client = split_properties(frozen)
    assert source == {"stream-metadata-discovery-interval-ms": "1000", "num.standby.replicas": "1"}
    assert client == {"fetch.min.bytes": "1", "client.rack": "r1", "client.id.prefix": "x"}
    assert dict(frozen) == props
    source["x"] = "y"
    assert "x" not in frozen


@given(st.dictionaries(st.sampled_from([*sorted(SOURCE_OPTION_KEYS), "a.b", "fetch.min.bytes"]), st.text()))
def test_split_is_a_partition(props: dict[str, str]) -> None:
    before = dict(props)
    source, client = split_properties(props)
    assert props == before
    assert set(source) <= SOURCE_OPTION_KEYS
    assert not set(client) & SOURCE_OPTION_KEYS
    assert {**source, **client} == props


# ------------------------------------------------------------------------------------ client properties


def test_valid_client_properties_pass(capfd: pytest.CaptureFixture[str]) -> None:
    validate_client_properties(
        {
            "fetch.min.bytes": "1",
            "client.rack": "r1",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "p",
            "enable.auto.commit": "false",
            "group.id": "explicit",
            "bootstrap.servers": "127.0.0.1:9",
            "auto.offset.reset": "earliest",
        },
        where="set_properties",
    )
    validate_client_properties({}, where="set_properties")
    err = capfd.readouterr().err
    assert "Connect" not in err
    assert "rdkafka" not in err


def test_unknown_property_named() -> None:
    with pytest.raises(ConfigurationError) as info:
        validate_client_properties({"fetch.min.bytes": "1", "no.such.prop": "1"}, where="set_properties")
    message = str(info.value)
    assert message.startswith("set_properties:")
    assert "unknown client property 'no.such.prop'" in message


def test_misspelt_source_option_gets_a_hint() -> None:
    with pytest.raises(ConfigurationError, match="did you mean source option 'stream-enumerator-mode'"):
        validate_client_properties({"stream-enumerator-modes": "global"}, where="set_properties")


def test_client_id_prefix_hint() -> None:
    with pytest.raises(ConfigurationError, match=r"set_client_id_prefix\(\)"):
        validate_client_properties({"client.id.prefix": "x"}, where="set_properties")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("fetch.min.bytes", "abc"),
        ("fetch.min.bytes", "-5"),
        ("auto.offset.reset", "bogus"),
        ("security.protocol", "nope"),
        ("check.crcs", "maybe"),
        ("partition.assignment.strategy", "bogus"),  # refused when the client is created, not when set
    ],
)
def test_bad_value_named(key: str, value: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        validate_client_properties({"client.rack": "r1", key: value}, where="cluster east properties")
    message = str(info.value)
    assert message.startswith("cluster east properties:")
    assert repr(key) in message
    assert repr(value) in message


def test_keystore_without_password_refused_naming_it() -> None:
    with pytest.raises(ConfigurationError) as info:
        validate_client_properties({"ssl.keystore.location": "/nonexistent.p12"}, where="w")
    assert "'ssl.keystore.location'" in str(info.value)


def test_secret_values_are_masked() -> None:
    assert _shown("sasl.password", "hunter2") == "'***'"
    assert _shown("sasl.oauthbearer.client.secret", "hunter2") == "'***'"
    assert _shown("ssl.key.pem", "hunter2") == "'***'"
    assert _shown("fetch.min.bytes", "abc") == "'abc'"


def test_placeholders_skip_value_validation_but_not_key() -> None:
    validate_client_properties(
        {"fetch.min.bytes": "${env:FETCH}", "sasl.password": "${file:/run/secret}"}, where="w"
    )
    with pytest.raises(ConfigurationError, match=re.escape("unknown client property 'no.such.key'")):
        validate_client_properties({"no.such.key": "${env:X}"}, where="w")


def test_placeholder_may_complete_a_combination() -> None:
    # Without its password the keystore is refused; with an unresolved password it is not judged.
    validate_client_properties(
        {"ssl.keystore.location": "/nonexistent.p12", "ssl.keystore.password": "${env:PW}"}, where="w"
    )


@pytest.mark.parametrize("value", ["true", "TRUE", "t", "1"])
def test_auto_commit_true_rejected(value: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape("'enable.auto.commit' must not be true")):
        validate_client_properties({"enable.auto.commit": value}, where="set_properties")


def test_auto_commit_false_accepted() -> None:
    validate_client_properties({"enable.auto.commit": "False"}, where="set_properties")


def test_empty_group_id_rejected() -> None:
    with pytest.raises(ConfigurationError, match=re.escape("'group.id' must not be empty")):
        validate_client_properties({"group.id": ""}, where="set_properties")


def test_callback_keys_rejected() -> None:
    with pytest.raises(ConfigurationError, match="'stats_cb' is a confluent-kafka callback"):
        validate_client_properties({"stats_cb": "x"}, where="set_properties")


def test_non_string_value_rejected() -> None:
    with pytest.raises(
        ConfigurationError, match=re.escape("'fetch.min.bytes' must map a string to a string")
    ):
        validate_client_properties({"fetch.min.bytes": 1}, where="w")  # type: ignore[dict-item]


def test_producer_property_warns(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    with caplog.at_level(logging.WARNING, logger="multicluster_source.framework._options"):
        validate_client_properties({"linger.ms": "5"}, where="set_properties")
    assert any("producer property" in r.getMessage() for r in caplog.records)
    assert "rdkafka" not in capfd.readouterr().err


def test_input_not_mutated() -> None:
    props = MappingProxyType({"fetch.min.bytes": "1", "sasl.password": "${env:X}"})
    validate_client_properties(props, where="w")
    assert dict(props) == {"fetch.min.bytes": "1", "sasl.password": "${env:X}"}
