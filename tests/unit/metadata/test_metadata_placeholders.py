import logging

import pytest

from multicluster_source.exceptions import MetadataError
from multicluster_source.metadata import parse_streams, redact_properties, resolve_properties
from multicluster_source.metadata._placeholders import (
    find_placeholder_errors,
    find_unresolvable_placeholders,
    has_placeholder,
    is_secret_key,
)

SECRET = "s3cr3t-V4lue"


def test_resolves_env_and_file(monkeypatch, tmp_path):
    monkeypatch.setenv("MCS_TEST_PW", SECRET)
    secret_file = tmp_path / "token"
    secret_file.write_text("file-secret\n")
    props = {
        "plain": "value",
        "sasl.password": "${env:MCS_TEST_PW}",
        "token": f"${{file:{secret_file}}}",
        "sasl.jaas.config": 'Login required username="u" password="${env:MCS_TEST_PW}";',
        "two": "${env:MCS_TEST_PW}/${env:MCS_TEST_PW}",
        "literal": "$${env:MCS_TEST_PW}",
    }
    resolved = resolve_properties(props, source="streams.yaml")
    assert resolved == {
        "plain": "value",
        "sasl.password": SECRET,
        "token": "file-secret",
        "sasl.jaas.config": f'Login required username="u" password="{SECRET}";',
        "two": f"{SECRET}/{SECRET}",
        "literal": "${env:MCS_TEST_PW}",
    }
    assert props["sasl.password"] == "${env:MCS_TEST_PW}"  # input untouched


def test_resolved_values_are_not_rescanned(monkeypatch):
    monkeypatch.setenv("MCS_TEST_NESTED", "${env:HOME}")
    assert resolve_properties({"p": "${env:MCS_TEST_NESTED}"}, source="s") == {"p": "${env:HOME}"}


def test_missing_env_names_source_and_key(monkeypatch):
    monkeypatch.delenv("MCS_TEST_MISSING", raising=False)
    with pytest.raises(MetadataError) as info:
        resolve_properties({"sasl.password": "${env:MCS_TEST_MISSING}"}, source="cluster east")
    err = info.value
    assert err.source == "cluster east"
    assert err.key == "sasl.password"
    assert "MCS_TEST_MISSING" in err.reason


def test_unreadable_file_names_key_not_content(tmp_path):
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe" + SECRET.encode())
    with pytest.raises(MetadataError) as info:
        resolve_properties({"ssl.key.password": f"${{file:{binary}}}"}, source="s")
    assert info.value.key == "ssl.key.password"
    assert SECRET not in str(info.value)
    with pytest.raises(MetadataError, match="cannot read file") as info:
        resolve_properties({"k": f"${{file:{tmp_path / 'absent'}}}"}, source="s")
    assert info.value.key == "k"


def test_error_for_one_key_never_shows_other_resolved_values(monkeypatch):
    monkeypatch.setenv("MCS_TEST_PW", SECRET)
    with pytest.raises(MetadataError) as info:
        resolve_properties({"a": "${env:MCS_TEST_PW}", "b": "${vault:x}"}, source="s")
    assert SECRET not in str(info.value)
    assert info.value.key == "b"
    assert "unknown placeholder kind 'vault'" in info.value.reason


def test_placeholder_errors():
    assert find_placeholder_errors("plain") == []
    assert find_placeholder_errors("${env:OK} and ${file:/abs}") == []
    assert find_placeholder_errors("$${literal") == []
    assert "unknown placeholder kind" in find_placeholder_errors("${vault:x}")[0]
    assert "unterminated" in find_placeholder_errors("abc ${env:X")[0]
    assert "malformed" in find_placeholder_errors("${}")[0]
    assert "absolute" in find_placeholder_errors("${file:rel}")[0]
    assert "environment variable name" in find_placeholder_errors("${env:A-B}")[0]
    assert has_placeholder("x${env:A}") and not has_placeholder("x") and not has_placeholder("$${env:A}")


def test_unresolvable_placeholders_are_listed_without_values(monkeypatch):
    monkeypatch.setenv("MCS_TEST_PW", SECRET)
    monkeypatch.delenv("MCS_TEST_MISSING", raising=False)
    problems = find_unresolvable_placeholders({"a": "${env:MCS_TEST_PW}", "b": "${env:MCS_TEST_MISSING}"})
    assert [k for k, _ in problems] == ["b"]
    assert SECRET not in repr(problems)


def test_missing_env_is_a_warning_at_read_time_and_never_logs_values(monkeypatch, caplog, tmp_path):
    monkeypatch.delenv("MCS_TEST_MISSING", raising=False)
    monkeypatch.setenv("MCS_TEST_PW", SECRET)
    text = (
        "- streamId: s\n  clusterMetadataList:\n"
        "    - clusterId: east\n      bootstrapServers: b\n      topics: [t]\n"
        "      properties:\n        sasl.password: ${env:MCS_TEST_MISSING}\n"
        "        other.password: ${env:MCS_TEST_PW}\n"
    )
    source = str(tmp_path / "warn.yaml")
    with caplog.at_level(logging.DEBUG):
        (stream,) = parse_streams(text, source=source)
        parse_streams(text, source=source)
    assert stream.clusters["east"].properties["sasl.password"] == "${env:MCS_TEST_MISSING}"
    warnings = [r.getMessage() for r in caplog.records if "MCS_TEST_MISSING" in r.getMessage()]
    assert len(warnings) == 1
    assert "east" in warnings[0] and "sasl.password" in warnings[0]
    assert all(SECRET not in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "key",
    [
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.keystore.key",
        "ssl.truststore.password",
        "sasl.jaas.config",
        "sasl.oauthbearer.client.credentials.client.secret",
        "basic.auth.user.info",
        "api_token",
        "SECRET_ACCESS_KEY",
        "private.key",
    ],
)
def test_secret_keys(key):
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    ["bootstrap.servers", "security.protocol", "ssl.keystore.location", "key.deserializer", "client.rack"],
)
def test_non_secret_keys(key):
    assert not is_secret_key(key)


def test_redaction():
    props = {
        "security.protocol": "SASL_SSL",
        "sasl.password": "hunter2",
        "ssl.key.password": "${env:KEY_PW}",
        "sasl.jaas.config": 'Login required username="u" password="hunter2";',
        "token": " ${file:/run/secrets/token} ",
        "api.secret": "${env:A}${env:B}",
        "client.rack": "${env:RACK}",
    }
    redacted = redact_properties(props)
    assert redacted == {
        "security.protocol": "SASL_SSL",
        "sasl.password": "***",
        "ssl.key.password": "${env:KEY_PW}",
        "sasl.jaas.config": "***",
        "token": " ${file:/run/secrets/token} ",
        "api.secret": "${env:A}${env:B}",
        "client.rack": "${env:RACK}",
    }
    assert "hunter2" not in repr(redacted)
    assert props["sasl.password"] == "hunter2"


def test_redaction_hides_partly_literal_secret_values():
    assert redact_properties({"sasl.jaas.config": 'a password="${env:PW}" user="alice";'}) == {
        "sasl.jaas.config": "***"
    }


def test_repr_of_cluster_metadata_and_streams_masks_secret_values_and_keeps_placeholders() -> None:
    from multicluster_source import ClusterMetadata, KafkaStream

    cluster = ClusterMetadata(
        "east",
        "h:9092",
        frozenset({"t"}),
        {"sasl.password": "hunter2-literal", "ssl.key.password": "${env:KEY_PW}", "sasl.username": "svc"},
    )
    for text in (repr(cluster), repr(KafkaStream("s", {"east": cluster})), str(cluster)):
        assert "hunter2-literal" not in text
        assert "${env:KEY_PW}" in text and "'svc'" in text and "h:9092" in text
