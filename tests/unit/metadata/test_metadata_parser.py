import json
import logging

import pytest

from multicluster_source.exceptions import MetadataError, MetadataValidationError
from multicluster_source.metadata import ClusterMetadata, KafkaStream, dump_streams, parse_streams
from multicluster_source.metadata._validate import validate_streams

CONTRACT_EXAMPLE = """\
- streamId: orders
  clusterMetadataList:
    - clusterId: east
      bootstrapServers: kafka-east-1:9092,kafka-east-2:9092
      topics: [orders, orders-retry]
      properties:                                   # optional
        security.protocol: SASL_SSL
        sasl.password: ${env:EAST_KAFKA_PASSWORD}   # resolved when read
    - clusterId: west
      bootstrapServers: kafka-west-1:9092
      topics: [orders]
"""


def parse(text: str) -> set[KafkaStream]:
    return parse_streams(text, source="streams.yaml")


def error_of(text: str) -> MetadataError:
    with pytest.raises(MetadataError) as info:
        parse(text)
    assert info.value.source == "streams.yaml"
    return info.value


def one_cluster(topics: str = "[t]", extra: str = "", cluster_id: str = "c1") -> str:
    return (
        "- streamId: s\n"
        "  clusterMetadataList:\n"
        f"    - clusterId: {cluster_id}\n"
        "      bootstrapServers: b:9092\n"
        f"      topics: {topics}\n" + extra
    )


def test_contract_example():
    streams = parse(CONTRACT_EXAMPLE)
    assert len(streams) == 1
    (stream,) = streams
    assert stream.stream_id == "orders"
    assert set(stream.clusters) == {"east", "west"}
    east = stream.clusters["east"]
    assert east.bootstrap_servers == "kafka-east-1:9092,kafka-east-2:9092"
    assert east.topics == frozenset({"orders", "orders-retry"})
    assert dict(east.properties) == {
        "security.protocol": "SASL_SSL",
        "sasl.password": "${env:EAST_KAFKA_PASSWORD}",
    }
    assert dict(stream.clusters["west"].properties) == {}


def test_json_by_content_gives_same_streams():
    doc = [
        {
            "streamId": "orders",
            "clusterMetadataList": [
                {
                    "clusterId": "east",
                    "bootstrapServers": "kafka-east-1:9092,kafka-east-2:9092",
                    "topics": ["orders", "orders-retry"],
                    "properties": {
                        "security.protocol": "SASL_SSL",
                        "sasl.password": "${env:EAST_KAFKA_PASSWORD}",
                    },
                },
                {"clusterId": "west", "bootstrapServers": "kafka-west-1:9092", "topics": ["orders"]},
            ],
        }
    ]
    assert parse(json.dumps(doc, indent=2)) == parse(CONTRACT_EXAMPLE)
    assert parse(json.dumps(doc)) == parse(CONTRACT_EXAMPLE)


def test_json_with_tabs_still_parses():
    doc = (
        '[\n\t{\n\t\t"streamId": "s",\n'
        '\t\t"clusterMetadataList": [{"bootstrapServers": "b:1", "topics": ["t"]}]\n\t}\n]'
    )
    (stream,) = parse(doc)
    assert set(stream.clusters) == {"b:1"}


def test_json_syntax_error_is_json_style_with_line():
    err = error_of('[\n  {"streamId": "s",\n   "clusterMetadataList": [}\n]')
    assert "invalid JSON" in str(err)
    assert err.line == 3


def test_json_validation_error_has_line():
    doc = (
        '[\n  {\n    "streamId": "s",\n    "clusterMetadataList": [\n'
        '      {"bootstrapServers": "b", "topics": []}\n    ]\n  }\n]'
    )
    err = error_of(doc)
    assert isinstance(err, MetadataValidationError)
    assert err.line == 5
    assert err.key == "[0].clusterMetadataList[0].topics"


def test_yaml_flow_style_that_is_not_json_is_read_as_yaml():
    (stream,) = parse("[{streamId: s, clusterMetadataList: [{bootstrapServers: 'b:1', topics: [t]}]}]")
    assert stream.stream_id == "s"


def test_invalid_yaml_reports_line():
    text = one_cluster() + "      properties: {a: [\n"
    err = error_of(text)
    assert not isinstance(err, MetadataValidationError)
    assert "invalid YAML" in str(err)
    assert err.line is not None and err.line >= 6
    assert "streams.yaml" in str(err) and f"line {err.line}" in str(err)


def test_tab_indentation_is_a_yaml_error_with_line():
    err = error_of("- streamId: s\n\tclusterMetadataList: []\n")
    assert err.line == 2


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n", "[]", "null", "~\n", "\ufeff"])
def test_empty_documents_mean_zero_streams(text):
    assert parse(text) == set()


def test_bom_is_ignored():
    assert parse("\ufeff" + CONTRACT_EXAMPLE) == parse(CONTRACT_EXAMPLE)


def test_top_level_must_be_a_list():
    err = error_of("streamId: s\n")
    assert isinstance(err, MetadataValidationError)
    assert "list of streams" in err.reason
    assert err.line == 1


def test_multiple_documents_are_an_error():
    err = error_of("[]\n---\n[]\n")
    assert err.line == 2


def test_missing_stream_id():
    err = error_of("- clusterMetadataList:\n    - bootstrapServers: b\n      topics: [t]\n")
    assert err.key == "[0].streamId"
    assert err.line == 1
    assert "missing required key 'streamId'" in err.reason


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("''", "must not be empty"), ("[a]", "got a list"), ("true", "got a boolean"), ("", "got null")],
)
def test_stream_id_type_errors(value, fragment):
    err = error_of(
        f"- streamId: {value}\n  clusterMetadataList:\n    - bootstrapServers: b\n      topics: [t]\n"
    )
    assert fragment in err.reason
    assert err.key == "[0].streamId"


def test_numeric_stream_id_is_taken_as_written():
    (stream,) = parse(
        "- streamId: 2024\n  clusterMetadataList:\n    - bootstrapServers: b\n      topics: [t]\n"
    )
    assert stream.stream_id == "2024"


def test_duplicate_stream_id_names_both_places():
    text = one_cluster() + one_cluster()
    err = error_of(text)
    assert err.line == 6
    assert err.key == "[1].streamId"
    assert "line 1" in err.reason and "[0]" in err.reason


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("", "missing required key 'clusterMetadataList'"),
        ("  clusterMetadataList: []\n", "empty clusterMetadataList"),
        ("  clusterMetadataList: {a: b}\n", "must be a list"),
        ("  clusterMetadataList: [x]\n", "must be a mapping"),
    ],
)
def test_cluster_list_errors(body, fragment):
    err = error_of("- streamId: s\n" + body)
    assert fragment in err.reason


def test_stream_not_a_mapping():
    err = error_of("- just a string\n")
    assert err.key == "[0]"
    assert "must be a mapping" in err.reason


def test_missing_bootstrap_servers():
    err = error_of("- streamId: s\n  clusterMetadataList:\n    - clusterId: c\n      topics: [t]\n")
    assert err.key == "[0].clusterMetadataList[0].bootstrapServers"
    assert err.line == 3


def test_cluster_id_defaults_to_bootstrap_servers():
    (stream,) = parse(
        "- streamId: s\n  clusterMetadataList:\n    - bootstrapServers: h1:9092,h2:9092\n      topics: [t]\n"
    )
    assert set(stream.clusters) == {"h1:9092,h2:9092"}
    assert stream.clusters["h1:9092,h2:9092"].cluster_id == "h1:9092,h2:9092"


def test_defaulted_cluster_id_with_slash_needs_explicit_id():
    err = error_of(
        "- streamId: s\n  clusterMetadataList:\n    - bootstrapServers: 'h/1:9092'\n      topics: [t]\n"
    )
    assert "set clusterId" in err.reason


@pytest.mark.parametrize("cluster_id", ["'a b'", "'east:1'", "'a/b'", "''"])
def test_invalid_explicit_cluster_id(cluster_id):
    err = error_of(one_cluster(cluster_id=cluster_id))
    assert err.key == "[0].clusterMetadataList[0].clusterId"
    assert err.line == 3


def test_duplicate_cluster_id_with_different_servers_names_both_places():
    text = (
        "- streamId: a\n"
        "  clusterMetadataList:\n"
        "    - clusterId: east\n"
        "      bootstrapServers: e1:9092\n"
        "      topics: [t]\n"
        "- streamId: b\n"
        "  clusterMetadataList:\n"
        "    - clusterId: west\n"
        "      bootstrapServers: w:9092\n"
        "      topics: [t]\n"
        "    - clusterId: east\n"
        "      bootstrapServers: e2:9092\n"
        "      topics: [u]\n"
    )
    err = error_of(text)
    assert isinstance(err, MetadataValidationError)
    assert err.line == 11
    assert err.key == "[1].clusterMetadataList[1]"
    assert "[0].clusterMetadataList[0] (line 3)" in err.reason
    assert "e1:9092" in err.reason and "e2:9092" in err.reason


def test_duplicate_cluster_id_with_different_properties_names_keys_not_values():
    text = (
        "- streamId: a\n"
        "  clusterMetadataList:\n"
        "    - clusterId: east\n"
        "      bootstrapServers: e:9092\n"
        "      topics: [t]\n"
        "      properties: {sasl.password: hunter2}\n"
        "- streamId: b\n"
        "  clusterMetadataList:\n"
        "    - clusterId: east\n"
        "      bootstrapServers: e:9092\n"
        "      topics: [t]\n"
        "      properties: {sasl.password: swordfish}\n"
    )
    err = error_of(text)
    assert "sasl.password" in err.reason
    assert "hunter2" not in str(err) and "swordfish" not in str(err)
    assert err.line == 9


def test_same_cluster_in_two_streams_with_same_connection_is_fine():
    text = (
        "- streamId: a\n  clusterMetadataList:\n"
        "    - {clusterId: east, bootstrapServers: 'e:1', topics: [t]}\n"
        "- streamId: b\n  clusterMetadataList:\n"
        "    - {clusterId: east, bootstrapServers: 'e:1', topics: [u]}\n"
    )
    streams = {s.stream_id: s for s in parse(text)}
    assert streams["a"].clusters["east"].topics == {"t"}
    assert streams["b"].clusters["east"].topics == {"u"}


def test_cluster_twice_in_one_stream():
    text = (
        "- streamId: a\n  clusterMetadataList:\n"
        "    - {clusterId: east, bootstrapServers: 'e:1', topics: [t]}\n"
        "    - {clusterId: east, bootstrapServers: 'e:1', topics: [u]}\n"
    )
    err = error_of(text)
    assert err.line == 4
    assert "appears twice" in err.reason


@pytest.mark.parametrize(
    ("topics", "fragment"),
    [
        ("[]", "must not be empty"),
        ("orders", "must be a list"),
        ("", "must be a list"),
        ("[{a: b}]", "got a mapping"),
        ("[null]", "got null"),
    ],
)
def test_topic_list_errors(topics, fragment):
    err = error_of(one_cluster(topics=topics))
    assert fragment in err.reason
    assert err.key is not None and err.key.startswith("[0].clusterMetadataList[0].topics")


def test_missing_topics():
    err = error_of("- streamId: s\n  clusterMetadataList:\n    - bootstrapServers: b\n")
    assert err.key == "[0].clusterMetadataList[0].topics"


@pytest.mark.parametrize("bad", [".", "..", "a b", "x" * 250, "ü", "a/b", "''"])
def test_invalid_topic_names_point_at_the_item(bad):
    text = (
        "- streamId: s\n"
        "  clusterMetadataList:\n"
        "    - bootstrapServers: b\n"
        "      topics: [t]\n"
        "    - clusterId: c2\n"
        "      bootstrapServers: b2\n"
        "      topics:\n"
        "        - ok\n"
        "        - fine\n"
        f"        - {bad!r}\n"
    )
    err = error_of(text)
    assert err.key == "[0].clusterMetadataList[1].topics[2]"
    assert err.line == 10


def test_valid_edge_topic_names():
    (stream,) = parse(one_cluster(topics=f"['{'x' * 249}', a.b_c-d, '...', 2024]"))
    assert stream.clusters["c1"].topics == {"x" * 249, "a.b_c-d", "...", "2024"}


def test_duplicate_topics_are_merged():
    (stream,) = parse(one_cluster(topics="[t, t]"))
    assert stream.clusters["c1"].topics == {"t"}


def test_property_values_are_converted_to_text():
    extra = "      properties:\n        a: 1\n        b: 1.50\n        c: yes\n"
    extra += "        d: False\n        e: text\n"
    (stream,) = parse(one_cluster(extra=extra))
    assert dict(stream.clusters["c1"].properties) == {
        "a": "1",
        "b": "1.50",
        "c": "true",
        "d": "false",
        "e": "text",
    }


@pytest.mark.parametrize(
    ("props", "fragment"),
    [
        ("{a: [1]}", "must be scalars"),
        ("{a: null}", "must not be null"),
        ("[a]", "must be a mapping"),
        ("{1: a}", "keys must be strings"),
    ],
)
def test_property_errors(props, fragment):
    err = error_of(one_cluster(extra=f"      properties: {props}\n"))
    assert fragment in err.reason


def test_null_properties_mean_none():
    (stream,) = parse(one_cluster(extra="      properties:\n"))
    assert dict(stream.clusters["c1"].properties) == {}


def test_unknown_placeholder_kind_is_a_validation_error_with_line_and_key():
    extra = "      properties:\n        security.protocol: SASL_SSL\n"
    extra += "        sasl.password: ${vault:secret/east}\n"
    err = error_of(one_cluster(extra=extra))
    assert isinstance(err, MetadataValidationError)
    assert err.line == 8
    assert err.key == '[0].clusterMetadataList[0].properties["sasl.password"]'
    assert "vault" in err.reason


@pytest.mark.parametrize("value", ["'${env:'", "'${nocolon}'", "'${env:1BAD}'", "'${file:relative/path}'"])
def test_malformed_placeholders_are_validation_errors(value):
    err = error_of(one_cluster(extra=f"      properties: {{p: {value}}}\n"))
    assert isinstance(err, MetadataValidationError)
    assert err.key == '[0].clusterMetadataList[0].properties["p"]'


def test_duplicate_keys_are_errors():
    err = error_of("- streamId: a\n  streamId: b\n")
    assert err.line == 2
    assert "duplicate key" in err.reason


def test_merge_keys_are_rejected():
    text = (
        "- streamId: s\n  clusterMetadataList:\n"
        "    - &base {bootstrapServers: b, topics: [t]}\n"
        "    - <<: *base\n      clusterId: x\n"
    )
    err = error_of(text)
    assert "merge" in err.reason


def test_anchors_and_aliases_work():
    text = (
        "- streamId: s\n  clusterMetadataList:\n"
        "    - {clusterId: a, bootstrapServers: b, topics: &t [x, y]}\n"
        "    - {clusterId: c, bootstrapServers: d, topics: *t}\n"
    )
    (stream,) = parse(text)
    assert stream.clusters["c"].topics == {"x", "y"}


def test_unknown_keys_warn_once_and_are_ignored(caplog):
    text = one_cluster(extra="      compression: zstd\n") + "  owner: team-a\n"
    with caplog.at_level(logging.WARNING, logger="multicluster_source.metadata"):
        first = parse_streams(text, source="unknown-keys.yaml")
        second = parse_streams(text, source="unknown-keys.yaml")
    assert first == second
    messages = [r.getMessage() for r in caplog.records if "unknown key" in r.getMessage()]
    assert len(messages) == 2
    assert any("[0].clusterMetadataList[0].compression" in m and "line 6" in m for m in messages)
    assert any("[0].owner" in m for m in messages)


def test_round_trip_dump_then_parse():
    streams = {
        KafkaStream(
            "orders",
            {
                "east": ClusterMetadata(
                    "east",
                    "e1:9092,e2:9092",
                    frozenset({"orders", "2024", "true"}),
                    {
                        "sasl.jaas.config": 'x required password="${env:PW}";',
                        "acks": "1",
                        "enable.idempotence": "true",
                        "empty": "",
                        "literal": "$${not a placeholder}",
                    },
                ),
                "h:9092": ClusterMetadata("h:9092", "h:9092", frozenset({"o"})),
            },
        ),
        KafkaStream("null", {"west": ClusterMetadata("west", "w:9092", frozenset({"t"}))}),
    }
    text = dump_streams(streams)
    assert parse(text) == streams
    assert "${env:PW}" in text
    assert dump_streams(parse(text)) == text


def test_dump_of_nothing_parses_to_nothing():
    assert parse(dump_streams([])) == set()


def test_error_message_names_source_line_and_key():
    err = error_of(one_cluster(topics="[]"))
    text = str(err)
    assert text.startswith("streams.yaml, line 5, key '[0].clusterMetadataList[0].topics'")


def test_validate_streams_rules():
    good = KafkaStream("s", {"c": ClusterMetadata("c", "b:1", frozenset({"t"}))})
    validate_streams([good], source="static")
    with pytest.raises(MetadataValidationError, match="different bootstrap servers"):
        validate_streams(
            [good, KafkaStream("s2", {"c": ClusterMetadata("c", "b:2", frozenset({"t"}))})], source="x"
        )
    with pytest.raises(MetadataValidationError, match="topics must not be empty"):
        validate_streams([KafkaStream("s", {"c": ClusterMetadata("c", "b", frozenset())})], source="x")
    with pytest.raises(MetadataValidationError, match="not a valid topic name"):
        validate_streams([KafkaStream("s", {"c": ClusterMetadata("c", "b", frozenset({".."}))})], source="x")
    with pytest.raises(MetadataValidationError, match="cluster_id"):
        validate_streams(
            [KafkaStream("s", {"other": ClusterMetadata("c", "b", frozenset({"t"}))})], source="x"
        )
    with pytest.raises(MetadataValidationError, match="two different streams"):
        validate_streams(
            [good, KafkaStream("s", {"d": ClusterMetadata("d", "b:1", frozenset({"t"}))})], source="x"
        )
    with pytest.raises(MetadataValidationError, match="unknown placeholder kind"):
        validate_streams(
            [KafkaStream("s", {"c": ClusterMetadata("c", "b", frozenset({"t"}), {"p": "${vault:x}"})})],
            source="x",
        )


def test_a_big_file_reads_the_same_with_libyaml_as_with_pure_python_yaml(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """libyaml composes metadata when PyYAML has it (6x less CPU for 100 clusters); documents, keys' lines and
    errors' lines are those of the pure-Python loader."""
    import yaml

    from multicluster_source.metadata import _compose

    if not yaml.__with_libyaml__:
        pytest.skip("this PyYAML was built without libyaml")
    assert _compose.SAFE_LOADER is yaml.CSafeLoader
    streams = {
        KafkaStream(
            "many",
            {
                f"c{i:03d}": ClusterMetadata(
                    f"c{i:03d}", f"kafka-{i}:9092", frozenset({f"t{i}", "shared"}), {"client.id": f"x{i}"}
                )
                for i in range(100)
            },
        )
    }
    text = dump_streams(streams)
    broken = text.replace("kafka-57:9092", "kafka-57:9092: x", 1)
    fast, fast_error = parse(text), error_of(broken)
    monkeypatch.setattr(_compose, "SAFE_LOADER", yaml.SafeLoader)
    assert parse(text) == fast == streams
    slow_error = error_of(broken)
    assert (
        fast_error.line
        == slow_error.line
        == text.splitlines().index("    bootstrapServers: kafka-57:9092") + 1
    )
