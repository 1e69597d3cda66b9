"""The metadata topic's record format and the pure log state that applies it (no broker)."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Sequence

import pytest

from multicluster_source.exceptions import MetadataValidationError
from multicluster_source.metadata import ClusterMetadata, KafkaStream
from multicluster_source.metadata.topic._topic_log import MetadataLog, MetadataSnapshot
from multicluster_source.metadata.topic._topic_plan import plan_publish
from multicluster_source.metadata.topic._topic_records import (
    ClusterDefinition,
    ClusterKey,
    CommitKey,
    MalformedRecord,
    PartKey,
    RecordFormatError,
    RecordKey,
    StreamCommit,
    StreamPart,
    cluster_key,
    commit_key,
    decode_value,
    encode_value,
    parse_key,
    part_key,
)

EAST = ClusterDefinition("east", "east:9092")
WEST = ClusterDefinition("west", "west:9092", {"security.protocol": "SSL"})


def cluster_rec(d: ClusterDefinition) -> tuple[str, bytes]:
    return cluster_key(d.cluster_id), encode_value(d)


def part_rec(sid: str, i: int, cid: str, *topics: str) -> tuple[str, bytes]:
    return part_key(sid, i), encode_value(StreamPart(cid, frozenset(topics)))


def commit_rec(sid: str, n: int) -> tuple[str, bytes]:
    return commit_key(sid), encode_value(StreamCommit(n))


def feed(log: MetadataLog, records: Sequence[tuple[str, bytes | None]]) -> None:
    for key, value in records:
        log.apply(key.encode(), value, log.offset)


def kstream(sid: str, *parts: tuple[ClusterDefinition, tuple[str, ...]]) -> KafkaStream:
    return KafkaStream(sid, {d.cluster_id: d.with_topics(t) for d, t in parts})


# ------------------------------------------------------------------------------------------------ keys


@pytest.mark.parametrize(
    "sid",
    ["orders", "orders-eu", "a:b", "x:part:1", "stream:y", "with space", "ünïcode", "-", "a:part:"],
)
def test_stream_keys_round_trip_for_any_stream_id(sid: str) -> None:
    for i in (0, 1, 10, 123):
        assert parse_key(part_key(sid, i)) == PartKey(sid, i)
    assert parse_key(commit_key(sid)) == CommitKey(sid)


@pytest.mark.parametrize("cid", ["east", "east-1", "a.b_c", "h1:9092,h2:9092", "[::1]:9092"])
def test_cluster_keys_round_trip(cid: str) -> None:
    assert parse_key(cluster_key(cid)) == ClusterKey(cid)
    assert str(ClusterKey(cid)) == cluster_key(cid)


def test_key_texts_are_as_documented() -> None:
    assert cluster_key("east") == "cluster:east"
    assert part_key("orders", 2) == "stream:orders:part:2"
    assert commit_key("orders") == "commit:orders"
    with pytest.raises(ValueError):
        part_key("orders", -1)


@pytest.mark.parametrize(
    "key",
    [
        "",
        "cluster:",
        "commit:",
        "stream:",
        "stream:orders",
        "stream::part:0",
        "stream:orders:part:",
        "stream:orders:part:01",
        "stream:orders:part:-1",
        "stream:orders:part:1x",
        "connector-foo",
        "Cluster:east",
        "task-foo-1",
    ],
)
def test_unknown_and_non_canonical_keys(key: str) -> None:
    assert parse_key(key) is None


# ------------------------------------------------------------------------------------------------ values


def test_values_round_trip_and_are_canonical_json() -> None:
    cases: list[tuple[RecordKey, ClusterDefinition | StreamPart | StreamCommit]] = [
        (ClusterKey("east"), EAST),
        (ClusterKey("west"), WEST),
        (PartKey("s", 0), StreamPart("east", frozenset({"b", "a"}))),
        (CommitKey("s"), StreamCommit(3)),
    ]
    for key, value in cases:
        data = encode_value(value)
        assert decode_value(key, data) == value
        assert json.loads(data)["version"] == 1
    assert encode_value(StreamPart("east", frozenset({"b", "a"}))) == (
        b'{"clusterId":"east","topics":["a","b"],"version":1}'
    )
    assert encode_value(EAST) == b'{"bootstrapServers":"east:9092","version":1}'


def test_placeholders_are_kept_as_written() -> None:
    d = ClusterDefinition("east", "east:9092", {"sasl.password": "${env:EAST_PW}"})
    assert b"${env:EAST_PW}" in encode_value(d)
    assert decode_value(ClusterKey("east"), encode_value(d)) == d


def test_newer_versions_and_unknown_fields_are_read_for_what_version_1_knows() -> None:
    data = json.dumps({"version": 7, "parts": 2, "checksum": "x"}).encode()
    assert decode_value(CommitKey("s"), data) == StreamCommit(2)
    data = json.dumps({"version": 2, "clusterId": "east", "topics": ["t"], "weight": 3}).encode()
    assert decode_value(PartKey("s", 0), data) == StreamPart("east", frozenset({"t"}))


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        (CommitKey("s"), b"\xff", "UTF-8"),
        (CommitKey("s"), b"{", "not JSON"),
        (CommitKey("s"), b"[1]", "JSON object"),
        (CommitKey("s"), b'{"parts": 1}', "version"),
        (CommitKey("s"), b'{"version": true, "parts": 1}', "version"),
        (CommitKey("s"), b'{"version": 0, "parts": 1}', "version"),
        (CommitKey("s"), b'{"version": 1, "parts": 0}', "parts"),
        (CommitKey("s"), b'{"version": 1, "parts": "2"}', "parts"),
        (CommitKey("s"), b'{"version": 1, "parts": true}', "parts"),
        (PartKey("s", 0), b'{"version": 1, "topics": ["t"]}', "clusterId"),
        (PartKey("s", 0), b'{"version": 1, "clusterId": "e", "topics": []}', "topics"),
        (PartKey("s", 0), b'{"version": 1, "clusterId": "e", "topics": "t"}', "topics"),
        (PartKey("s", 0), b'{"version": 1, "clusterId": "e", "topics": ["a b"]}', "topic name"),
        (ClusterKey("e"), b'{"version": 1}', "bootstrapServers"),
        (ClusterKey("e"), b'{"version": 1, "bootstrapServers": "h:1", "properties": {"a": 1}}', "properties"),
        (ClusterKey("e"), b'{"version": 1, "bootstrapServers": "h:1", "properties": ["a"]}', "properties"),
        (
            ClusterKey("e"),
            b'{"version": 1, "bootstrapServers": "h:1", "properties": {"p": "${vault:x}"}}',
            "placeholder",
        ),
        (ClusterKey("e/x"), b'{"version": 1, "bootstrapServers": "h:1"}', "cluster id"),
    ],
)
def test_malformed_values_are_rejected(key: object, value: bytes, fragment: str) -> None:
    with pytest.raises(RecordFormatError, match=fragment):
        decode_value(key, value)  # type: ignore[arg-type]


def test_a_defaulted_cluster_id_equal_to_its_servers_is_valid() -> None:
    data = b'{"version": 1, "bootstrapServers": "h1:9092,h2:9092"}'
    assert decode_value(ClusterKey("h1:9092,h2:9092"), data).bootstrap_servers == "h1:9092,h2:9092"  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------------------ applying


def test_parts_change_nothing_until_the_commit_then_apply_atomically() -> None:
    log = MetadataLog()
    feed(log, [cluster_rec(EAST), cluster_rec(WEST)])
    before = log.version
    feed(log, [part_rec("orders", 0, "east", "o"), part_rec("orders", 1, "west", "o")])
    assert log.version == before
    assert log.snapshot().streams == {}
    changed = log.apply(b"commit:orders", encode_value(StreamCommit(2)), log.offset)
    assert changed
    snap = log.snapshot()
    assert snap.streams == {"orders": kstream("orders", (EAST, ("o",)), (WEST, ("o",)))}
    assert snap.inconsistent == frozenset()
    assert snap.offset == 5
    assert snap.stream_parts["orders"] == (
        StreamPart("east", frozenset({"o"})),
        StreamPart("west", frozenset({"o"})),
    )


def test_migration_update_keeps_the_old_version_until_the_new_commit() -> None:
    log = MetadataLog()
    feed(log, [cluster_rec(EAST), cluster_rec(WEST), part_rec("s", 0, "east", "t"), commit_rec("s", 1)])
    old = log.snapshot().streams["s"]
    feed(log, [part_rec("s", 0, "east", "t"), part_rec("s", 1, "west", "t")])
    assert log.snapshot().streams["s"] == old
    feed(log, [commit_rec("s", 2)])
    assert set(log.snapshot().streams["s"].clusters) == {"east", "west"}
    feed(log, [part_rec("s", 0, "west", "t"), commit_rec("s", 1), (part_key("s", 1), None)])
    assert set(log.snapshot().streams["s"].clusters) == {"west"}


# The seed's first example, with parts 0-based: write 1 = parts 0 and 1 + commit(2); write 2 = part 0 +
# commit(1). A compacted log lost the first part 0 (rewritten later) but kept the first commit.
FULL_LOG_1 = [
    cluster_rec(EAST),
    cluster_rec(WEST),
    part_rec("foo", 0, "east", "a"),
    part_rec("foo", 1, "west", "b"),
    commit_rec("foo", 2),
    part_rec("foo", 0, "east", "c"),
    commit_rec("foo", 1),
]
COMPACTED_LOG_1 = [FULL_LOG_1[0], FULL_LOG_1[1], FULL_LOG_1[3], FULL_LOG_1[4], FULL_LOG_1[5], FULL_LOG_1[6]]


def test_seed_example_1_compaction_makes_an_early_commit_inconsistent_until_the_next() -> None:
    full = MetadataLog()
    feed(full, FULL_LOG_1[:5])
    assert full.snapshot().streams["foo"] == kstream("foo", (EAST, ("a",)), (WEST, ("b",)))
    feed(full, FULL_LOG_1[5:])

    compacted = MetadataLog()
    feed(compacted, COMPACTED_LOG_1[:4])
    assert compacted.snapshot().inconsistent == {"foo"}
    assert "foo" not in compacted.snapshot().streams
    assert "part(s) 0" in compacted.inconsistent()["foo"]
    feed(compacted, COMPACTED_LOG_1[4:])
    for log in (full, compacted):
        snap = log.snapshot()
        assert snap.streams == {"foo": kstream("foo", (EAST, ("c",)))}
        assert snap.inconsistent == frozenset()


def test_seed_example_2_writer_died_mid_write_then_compaction() -> None:
    # write 1 = parts 0, 1 + commit(2); write 2 died after its part 0; compaction dropped the first part 0.
    full_log = [*FULL_LOG_1[:5], part_rec("foo", 0, "east", "c")]
    compacted_log = [full_log[0], full_log[1], full_log[3], full_log[4], full_log[5]]
    full, compacted = MetadataLog(), MetadataLog()
    feed(full, full_log)
    feed(compacted, compacted_log)
    # Readers of the whole log still use write 1 and are consistent; the dangling part is only buffered.
    assert full.snapshot().streams["foo"] == kstream("foo", (EAST, ("a",)), (WEST, ("b",)))
    assert full.snapshot().inconsistent == frozenset()
    # A reader of the compacted log has no consistent version at all and reports it.
    assert compacted.snapshot().streams == {}
    assert compacted.snapshot().inconsistent == {"foo"}
    # A later complete write resolves both.
    rewrite = [part_rec("foo", 0, "east", "d"), part_rec("foo", 1, "west", "e"), commit_rec("foo", 2)]
    for log in (full, compacted):
        feed(log, rewrite)
        assert log.snapshot().streams == {"foo": kstream("foo", (EAST, ("d",)), (WEST, ("e",)))}
        assert log.snapshot().inconsistent == frozenset()


def test_last_consistent_version_stays_in_effect_while_inconsistent() -> None:
    log = MetadataLog()
    feed(log, [cluster_rec(EAST), part_rec("s", 0, "east", "t1"), commit_rec("s", 1)])
    good = log.snapshot().streams["s"]
    feed(log, [part_rec("s", 1, "east", "t2"), commit_rec("s", 2)])  # part 0 missing
    snap = log.snapshot()
    assert snap.inconsistent == {"s"}
    assert snap.streams["s"] == good
    # the failed commit emptied the buffer: part 1 alone does not complete a later commit
    feed(log, [part_rec("s", 0, "east", "t3"), commit_rec("s", 2)])
    assert log.snapshot().inconsistent == {"s"}
    feed(log, [part_rec("s", 0, "east", "t3"), part_rec("s", 1, "east", "t4"), commit_rec("s", 2)])
    # two parts naming the same cluster cannot make a stream
    assert log.snapshot().inconsistent == {"s"}
    assert log.snapshot().streams["s"] == good
    assert "twice" in log.inconsistent()["s"]


def test_commit_tombstone_deletes_the_stream_and_its_inconsistency() -> None:
    log = MetadataLog()
    feed(log, [cluster_rec(EAST), part_rec("s", 0, "east", "t"), commit_rec("s", 1), commit_rec("s", 3)])
    assert log.snapshot().inconsistent == {"s"}
    feed(log, [(commit_key("s"), None), (part_key("s", 0), None)])
    snap = log.snapshot()
    assert snap.streams == {} and snap.inconsistent == frozenset()
    assert commit_key("s") not in snap.log and part_key("s", 0) not in snap.log


def test_part_tombstone_removes_a_buffered_part() -> None:
    log = MetadataLog()
    feed(
        log, [cluster_rec(EAST), part_rec("s", 0, "east", "t"), (part_key("s", 0), None), commit_rec("s", 1)]
    )
    assert log.snapshot().inconsistent == {"s"}


def test_cluster_records_apply_at_once_to_the_streams_using_them() -> None:
    log = MetadataLog()
    feed(log, [cluster_rec(EAST), part_rec("s", 0, "east", "t"), commit_rec("s", 1)])
    moved = ClusterDefinition("east", "east-new:9092", {"client.rack": "a"})
    feed(log, [cluster_rec(moved)])
    assert log.snapshot().streams["s"] == kstream("s", (moved, ("t",)))
    # a cluster deleted while a stream still uses it: the stream keeps its last version and is reported
    feed(log, [(cluster_key("east"), None)])
    snap = log.snapshot()
    assert snap.streams["s"] == kstream("s", (moved, ("t",)))
    assert snap.inconsistent == {"s"} and "east" not in snap.clusters
    feed(log, [cluster_rec(EAST)])
    assert log.snapshot().inconsistent == frozenset()
    assert log.snapshot().streams["s"] == kstream("s", (EAST, ("t",)))


def test_a_cluster_record_after_the_commit_resolves_the_stream() -> None:
    # compaction moves a rewritten cluster record behind the streams that use it
    log = MetadataLog()
    feed(log, [part_rec("s", 0, "east", "t"), commit_rec("s", 1)])
    assert log.snapshot().inconsistent == {"s"} and log.snapshot().streams == {}
    feed(log, [cluster_rec(EAST)])
    assert log.snapshot().streams == {"s": kstream("s", (EAST, ("t",)))}
    assert log.snapshot().inconsistent == frozenset()


def test_extra_parts_beyond_the_commit_count_are_ignored() -> None:
    log = MetadataLog()
    feed(log, [cluster_rec(EAST), part_rec("s", 0, "east", "t"), part_rec("s", 5, "east", "x")])
    feed(log, [commit_rec("s", 1)])
    assert log.snapshot().streams == {"s": kstream("s", (EAST, ("t",)))}


def test_unknown_keys_and_malformed_values_are_logged_once_and_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = MetadataLog("topic t")
    with caplog.at_level(logging.WARNING, logger="multicluster_source.metadata"):
        for _ in range(3):
            log.apply(b"connector-foo", b"{}", log.offset)
            log.apply(b"\xff\xfe", b"{}", log.offset)
            log.apply(None, b"{}", 7)
            log.apply(b"commit:s", b"not json", log.offset)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("connector-foo" in m for m in messages) == 1
    assert sum("not UTF-8" in m for m in messages) == 1
    assert sum("without a key" in m for m in messages) == 1
    assert sum("commit:s" in m and "malformed" in m for m in messages) == 1
    assert all(m.startswith("topic t: ") for m in messages)
    snap = log.snapshot()
    assert snap.streams == {} and snap.inconsistent == frozenset()
    assert isinstance(snap.log["commit:s"], MalformedRecord)
    assert "connector-foo" not in snap.log
    assert log.version == 0


def test_a_malformed_commit_leaves_the_parts_buffered() -> None:
    log = MetadataLog()
    feed(log, [cluster_rec(EAST), part_rec("s", 0, "east", "t"), (commit_key("s"), b'{"version":1}')])
    assert log.snapshot().streams == {}
    feed(log, [commit_rec("s", 1)])
    assert log.snapshot().streams == {"s": kstream("s", (EAST, ("t",)))}


def test_version_and_offset_tracking() -> None:
    log = MetadataLog()
    assert log.apply(b"cluster:east", encode_value(EAST), 0)
    assert not log.apply(b"cluster:east", encode_value(EAST), 1)  # same value: no change
    assert log.offset == 2
    log.advance(5)  # a transaction marker
    assert log.snapshot().offset == 5
    log.advance(3)
    assert log.offset == 5


def test_snapshots_are_immutable_copies() -> None:
    log = MetadataLog()
    feed(log, [cluster_rec(EAST), part_rec("s", 0, "east", "t"), commit_rec("s", 1)])
    snap = log.snapshot()
    feed(log, [(commit_key("s"), None)])
    assert "s" in snap.streams
    with pytest.raises(TypeError):
        snap.streams["x"] = snap.streams["s"]  # type: ignore[index]
    with pytest.raises(AttributeError):
        snap.offset = 3  # type: ignore[misc]
    assert snap == MetadataSnapshot(
        streams=dict(snap.streams),
        clusters=dict(snap.clusters),
        inconsistent=snap.inconsistent,
        stream_parts=dict(snap.stream_parts),
        log=dict(snap.log),
        offset=snap.offset,
    )


# ------------------------------------------------------------------------------------------------ planning


def apply_plan(log: MetadataLog, records: tuple[object, ...]) -> None:
    for record in records:
        log.apply(record.key.encode(), record.value, log.offset)  # type: ignore[attr-defined]


def cm(cid: str, *topics: str, servers: str | None = None, **props: str) -> ClusterMetadata:
    return ClusterMetadata(cid, servers or f"{cid}:9092", frozenset(topics), props)


def test_plan_on_an_empty_topic_writes_clusters_then_parts_then_commits() -> None:
    streams = {
        KafkaStream("b", {"east": cm("east", "t1"), "west": cm("west", "t2")}),
        KafkaStream("a", {"east": cm("east", "t3")}),
    }
    plan = plan_publish(streams, current=MetadataSnapshot())
    assert [r.key for r in plan.records] == [
        "cluster:east",
        "cluster:west",
        "stream:a:part:0",
        "commit:a",
        "stream:b:part:0",
        "stream:b:part:1",
        "commit:b",
    ]
    assert plan.streams_written == ("a", "b") and plan.clusters_written == ("east", "west")
    log = MetadataLog()
    apply_plan(log, plan.records)
    assert log.snapshot().stream_set() == streams
    assert plan_publish(streams, current=log.snapshot()).empty


def test_plan_writes_only_what_changed_and_tombstones_what_is_gone() -> None:
    v1 = {
        KafkaStream("keep", {"east": cm("east", "k")}),
        KafkaStream("move", {"east": cm("east", "m")}),
        KafkaStream("gone", {"old": cm("old", "g")}),
    }
    log = MetadataLog()
    apply_plan(log, plan_publish(v1, current=log.snapshot()).records)
    v2 = {
        KafkaStream("keep", {"east": cm("east", "k")}),
        KafkaStream("move", {"east": cm("east", "m"), "west": cm("west", "m")}),
    }
    plan = plan_publish(v2, current=log.snapshot())
    assert [(r.key, r.value is None) for r in plan.records] == [
        ("cluster:west", False),
        ("stream:move:part:0", False),
        ("stream:move:part:1", False),
        ("commit:move", False),
        ("commit:gone", True),
        ("stream:gone:part:0", True),
        ("cluster:old", True),
    ]
    apply_plan(log, plan.records)
    assert log.snapshot().stream_set() == v2
    # shrinking a stream tombstones its parts past the new count
    v3 = {KafkaStream("keep", {"east": cm("east", "k")}), KafkaStream("move", {"west": cm("west", "m")})}
    plan = plan_publish(v3, current=log.snapshot())
    assert [(r.key, r.value is None) for r in plan.records] == [
        ("stream:move:part:0", False),
        ("commit:move", False),
        ("stream:move:part:1", True),
    ]
    apply_plan(log, plan.records)
    assert log.snapshot().stream_set() == v3
    assert "stream:move:part:1" not in log.snapshot().log
    assert plan_publish(v3, current=log.snapshot()).empty


def test_plan_changes_only_the_cluster_record_when_only_servers_change() -> None:
    v1 = {KafkaStream("s", {"east": cm("east", "t")})}
    log = MetadataLog()
    apply_plan(log, plan_publish(v1, current=log.snapshot()).records)
    v2 = {KafkaStream("s", {"east": cm("east", "t", servers="east-2:9092", **{"client.rack": "r1"})})}
    plan = plan_publish(v2, current=log.snapshot())
    assert [r.key for r in plan.records] == ["cluster:east"]
    apply_plan(log, plan.records)
    assert log.snapshot().stream_set() == v2


def test_plan_rewrites_inconsistent_streams_and_leftover_parts() -> None:
    want = {KafkaStream("foo", {"east": cm("east", "c")})}
    compacted = MetadataLog()
    feed(compacted, [cluster_rec(EAST), part_rec("foo", 1, "west", "b"), commit_rec("foo", 2)])
    feed(compacted, [part_rec("foo", 0, "east", "c")])  # dangling part of a dead writer
    snap = compacted.snapshot()
    assert snap.inconsistent == {"foo"}
    plan = plan_publish(want, current=snap)
    assert plan.streams_written == ("foo",)
    apply_plan(compacted, plan.records)
    assert compacted.snapshot().stream_set() == want
    assert compacted.snapshot().inconsistent == frozenset()
    # committed and consistent, but a leftover part differs: it must not survive compaction alone
    feed(compacted, [part_rec("foo", 0, "east", "zzz")])
    plan = plan_publish(want, current=compacted.snapshot())
    assert plan.streams_written == ("foo",)


def test_plan_rewrites_malformed_records_and_leaves_unknown_keys_alone() -> None:
    want = {KafkaStream("s", {"east": cm("east", "t")})}
    log = MetadataLog()
    apply_plan(log, plan_publish(want, current=log.snapshot()).records)
    log.apply(b"cluster:east", b"garbage", log.offset)
    log.apply(b"future-kind:x", b"{}", log.offset)
    plan = plan_publish(want, current=log.snapshot())
    assert [r.key for r in plan.records] == ["cluster:east"]


def test_plan_validates_the_streams() -> None:
    bad = {
        KafkaStream("a", {"east": cm("east", "t")}),
        KafkaStream("b", {"east": cm("east", "t", servers="other:9092")}),
    }
    with pytest.raises(MetadataValidationError, match="east"):
        plan_publish(bad, current=MetadataSnapshot(), source="streams.yaml")


def test_random_publish_sequences_converge() -> None:
    rng = random.Random(4)
    clusters = ["east", "west", "central", "h1:9092,h2:9092"]
    reader = MetadataLog()
    for _ in range(60):
        streams = set()
        for sid in rng.sample(["a", "b-1", "c:d", "x:part:0"], rng.randint(0, 4)):
            chosen = rng.sample(clusters, rng.randint(1, 3))
            streams.add(
                KafkaStream(
                    sid,
                    {
                        c: cm(
                            c,
                            *rng.sample(["t1", "t2", "t3"], rng.randint(1, 2)),
                            servers=c if ":" in c else None,
                        )
                        for c in chosen
                    },
                )
            )
        plan = plan_publish(streams, current=reader.snapshot())
        apply_plan(reader, plan.records)
        snap = reader.snapshot()
        assert snap.stream_set() == streams
        assert snap.inconsistent == frozenset()
        assert set(snap.clusters) == {c for s in streams for c in s.clusters}
        assert plan_publish(streams, current=snap).empty
        # a fresh reader of the log as a compactor would leave it (latest value per key) agrees
        fresh = MetadataLog()
        apply_plan(fresh, plan_publish(streams, current=MetadataSnapshot()).records)
        assert fresh.snapshot().stream_set() == streams
