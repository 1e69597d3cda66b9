"""``replicaOf`` in the metadata: the file parser (lines and keys of errors), stream objects, the metadata
topic's records, the written form, and the value type's equality, hash, pickle and repr."""

from __future__ import annotations

import pickle

import pytest

from multicluster_source import ClusterMetadata, KafkaStream
from multicluster_source.exceptions import MetadataValidationError
from multicluster_source.framework._clientconf import merge_stream_clusters
from multicluster_source.metadata import dump_streams, parse_streams, validate_streams
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.metadata.topic._topic_log import MetadataLog, MetadataSnapshot
from multicluster_source.metadata.topic._topic_plan import plan_publish
from multicluster_source.metadata.topic._topic_records import PartKey, StreamPart, decode_value, encode_value

BASE = """\
- streamId: orders
  clusterMetadataList:
    - clusterId: east
      bootstrapServers: east-1:9092
      topics: [orders]
    - clusterId: west
      bootstrapServers: west-1:9092
      topics: [orders, east.orders]
"""


def _parse(replica: str) -> ClusterMetadata:
    streams = parse_streams(BASE + replica, source="streams.yaml")
    return next(iter(streams)).clusters["west"]


def test_contract_keys_and_defaults() -> None:
    west = _parse("      replicaOf:\n        cluster: east\n")
    assert west.replica_of == ReplicaOf("east")
    r = west.replica_of
    assert r is not None
    assert r.offsets == "mirrormaker2"
    assert r.origin_topic("east.orders") == "orders"
    assert r.origin_topic("orders") is None  # west's own topic
    assert r.offset_syncs_topic("west") == "mm2-offset-syncs.west.internal"
    assert r.mm2_checkpoints_topic() == "east.checkpoints.internal"


def test_every_key() -> None:
    west = _parse(
        "      replicaOf:\n"
        "        cluster: east\n"
        "        offsets: identical\n"
        "        topics: {orders-copy: orders}\n"
        "        offsetSyncs: {location: target, topic: syncs}\n"
        "        checkpointsTopic: cps\n"
        "        failover: true\n"
    )
    assert west.replica_of == ReplicaOf(
        "east", "identical", {"orders-copy": "orders"}, "target", "syncs", "cps", failover=True
    )


def test_format_without_replica_of_is_unchanged() -> None:
    streams = parse_streams(BASE, source="streams.yaml")
    assert next(iter(streams)).clusters["west"].replica_of is None
    assert "replicaOf" not in dump_streams(streams)


@pytest.mark.parametrize(
    ("replica", "line", "key", "words"),
    [
        (
            "      replicaOf:\n        offsets: identical\n",
            9,
            "replicaOf.cluster",
            "missing required key 'cluster'",
        ),
        (
            "      replicaOf:\n        cluster: east\n        offsets: copy\n",
            11,
            "replicaOf.offsets",
            "one of",
        ),
        ("      replicaOf:\n        cluster: west\n", 10, "replicaOf.cluster", "replica of itself"),
        ("      replicaOf:\n        cluster: 'e st'\n", 10, "replicaOf.cluster", "not a valid cluster id"),
        ("      replicaOf: [east]\n", 9, "replicaOf", "must be a mapping"),
        (
            "      replicaOf:\n        cluster: east\n        offsetSyncs: {location: origin}\n",
            11,
            "replicaOf.offsetSyncs.location",
            "source or target",
        ),
        (
            "      replicaOf:\n        cluster: east\n        topics: {a: 'b/c'}\n",
            11,
            'replicaOf.topics["a"]',
            "not a valid topic name",
        ),
        (
            "      replicaOf:\n        cluster: east\n        failover: maybe\n",
            11,
            "replicaOf.failover",
            "true or false",
        ),
    ],
)
def test_bad_declarations_name_file_line_and_key(replica: str, line: int, key: str, words: str) -> None:
    with pytest.raises(MetadataValidationError) as info:
        _parse(replica)
    err = info.value
    assert err.source == "streams.yaml"
    assert err.line == line
    assert err.key == f"[0].clusterMetadataList[1].{key}"
    assert words in str(err)


def test_two_streams_must_not_declare_different_replica_of() -> None:
    text = (
        BASE
        + "      replicaOf: {cluster: east}\n"
        + (
            "- streamId: more\n  clusterMetadataList:\n    - clusterId: west\n      bootstrapServers: west-1:9092\n"
            "      topics: [x]\n      replicaOf: {cluster: east, offsets: timestamp}\n"
        )
    )
    with pytest.raises(MetadataValidationError, match="different replicaOf"):
        parse_streams(text, source="s.yaml")
    # leaving it out in one stream is fine: the merged view has the declaration
    a = ClusterMetadata("west", "w:1", frozenset({"east.orders"}), replica_of=ReplicaOf("east"))
    b = ClusterMetadata("west", "w:1", frozenset({"x"}))
    merged = merge_stream_clusters([b, a])["west"]
    assert merged.replica_of == ReplicaOf("east") and merged.topics == {"x", "east.orders"}
    with pytest.raises(ValueError, match="replicaOf"):
        merge_stream_clusters(
            [a, ClusterMetadata("west", "w:1", frozenset({"x"}), replica_of=ReplicaOf("n"))]
        )


def test_dump_parses_back_equal() -> None:
    streams = parse_streams(
        BASE + "      replicaOf: {cluster: east, offsets: timestamp, topics: {east.orders: orders}, "
        "offsetSyncs: {location: target}, failover: true}\n",
        source="s.yaml",
    )
    text = dump_streams(streams)
    assert "replicaOf" in text
    assert parse_streams(text, source="again") == streams


def test_value_type_equality_hash_pickle_repr() -> None:
    a = ClusterMetadata("west", "w:1", frozenset({"t"}), {"k": "v"}, ReplicaOf("east", topics={"t": "u"}))
    b = ClusterMetadata("west", "w:1", frozenset({"t"}), {"k": "v"}, ReplicaOf("east", topics={"t": "u"}))
    c = ClusterMetadata("west", "w:1", frozenset({"t"}), {"k": "v"})
    assert a == b and hash(a) == hash(b) and a != c
    assert pickle.loads(pickle.dumps(a)) == a
    assert "replica_of=ReplicaOf(cluster='east'" in repr(a)
    assert "replica_of" not in repr(c)
    assert c == ClusterMetadata(
        "west", "w:1", frozenset({"t"}), {"k": "v"}
    )  # the old constructor still works


def test_validate_streams_checks_objects() -> None:
    bad = ClusterMetadata("west", "w:1", frozenset({"t"}), replica_of=ReplicaOf("west"))
    with pytest.raises(MetadataValidationError, match="replica of itself") as info:
        validate_streams([KafkaStream("s", {"west": bad})], source="static")
    assert info.value.key is not None and "replica_of.cluster" in info.value.key
    odd = ClusterMetadata("west", "w:1", frozenset({"t"}), replica_of=ReplicaOf("east", offsets="copy"))  # type: ignore[arg-type]
    with pytest.raises(MetadataValidationError, match="one of"):
        validate_streams([KafkaStream("s", {"west": odd})], source="static")


def test_topic_records_carry_replica_of() -> None:
    part = StreamPart("west", frozenset({"east.orders"}), ReplicaOf("east", "identical", failover=True))
    data = encode_value(part)
    assert b'"replicaOf":{"cluster":"east","failover":true,"offsets":"identical"}' in data
    assert decode_value(PartKey("s", 0), data) == part
    plain = StreamPart("west", frozenset({"t"}))
    assert decode_value(PartKey("s", 0), encode_value(plain)) == plain
    with pytest.raises(ValueError, match=r"replicaOf\.offsets"):
        decode_value(
            PartKey("s", 0),
            b'{"version":1,"clusterId":"west","topics":["t"],"replicaOf":{"cluster":"e","offsets":"x"}}',
        )


def test_a_published_stream_reads_back_with_its_replica_of() -> None:
    streams = parse_streams(
        BASE + "      replicaOf: {cluster: east, offsets: identical, offsetSyncs: {location: target}}\n",
        source="s.yaml",
    )
    plan = plan_publish(streams, current=MetadataSnapshot())
    log = MetadataLog()
    for offset, record in enumerate(plan.records):
        log.apply(record.key, record.value, offset)
    assert log.snapshot().stream_set() == streams
    # the same streams again: nothing to write; a changed declaration rewrites the stream
    assert not plan_publish(streams, current=log.snapshot()).streams_written
    changed = parse_streams(BASE + "      replicaOf: {cluster: east, failover: true}\n", source="s.yaml")
    assert list(plan_publish(changed, current=log.snapshot()).streams_written) == ["orders"]
