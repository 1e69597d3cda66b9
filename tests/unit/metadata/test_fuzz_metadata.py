"""Bad input, property-based (issue 8, part 2): the metadata parsers never crash or hang on any input, raise
only their documented errors, and a bad read leaves the last good metadata in effect.

Complements ``tests/unit/metadata/test_metadata_fuzz.py`` (inputs *generated* from YAML fragments): here inputs
are *mutations* of valid documents (bit flips, insertions, deletions, truncations, duplications), which reach
deep into the format checks, and the services and the enumerator are exercised, not only ``parse_streams``.
The checks themselves live in ``tests/fuzz/inputs.py`` and are shared with the atheris targets.
Hangs: every example runs under hypothesis' deadline, the whole module under pytest-timeout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pytest
from fuzz.inputs import (
    CONFIGMAP_SEEDS,
    METADATA_SEEDS,
    RECORD_SEEDS,
    check_configmap_file,
    check_metadata_bytes,
    check_topic_records,
    configmap_manifest,
    split_records,
)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from unit.enumerator.test_enumerator_reconcile import make

from multicluster_source import ClusterMetadata, KafkaStream
from multicluster_source.exceptions import MetadataError
from multicluster_source.metadata import (
    ConfigMapMetadataService,
    FileMetadataService,
    dump_streams,
    parse_streams,
)
from multicluster_source.metadata.topic._topic_log import MetadataLog
from multicluster_source.metadata.topic._topic_records import (
    ClusterDefinition,
    StreamCommit,
    StreamPart,
    cluster_key,
    commit_key,
    encode_value,
    part_key,
)
from multicluster_source.testing import make_configmap_volume, update_configmap_volume

FAST = settings(
    max_examples=300,
    deadline=2000,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

FRAGMENTS: tuple[bytes, ...] = (
    b"- ",
    b": ",
    b"\n",
    b"  ",
    b"[",
    b"]",
    b"{",
    b"}",
    b",",
    b"'",
    b'"',
    b"&a ",
    b"*a",
    b"<<: ",
    b"!!binary ",
    b"!!python/object ",
    b"|",
    b">",
    b"#",
    b"---\n",
    b"...\n",
    b"~",
    b"null",
    b"${env:",
    b"${file:/etc/hostname}",
    b"${",
    b"}",
    b"\t",
    b"\x00",
    b"\xff",
    b"\xef\xbb\xbf",
    b"\xc3",
    b"clusterId",
    b"bootstrapServers",
    b"topics",
    b"streamId",
    b"kind: ConfigMap\n",
    b"data:",
    b"stream-metadata.yaml",
    b"version",
    b"parts",
    b"1e309",
    b"-1",
    b"99999999999999999999",
    b"/",
    b":part:",
)

_ops = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 16), st.integers(0, 255)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 16), st.sampled_from(FRAGMENTS) | st.binary(max_size=6)),
    st.tuples(st.just("delete"), st.integers(0, 1 << 16), st.integers(1, 40)),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 16), st.just(0)),
    st.tuples(st.just("duplicate"), st.integers(0, 1 << 16), st.integers(1, 200)),
)


def mutate(seed: bytes, ops: list[tuple[str, int, Any]]) -> bytes:
    """Apply mutation operations (positions taken modulo the current length) to ``seed``."""
    data = bytearray(seed)
    for op, raw_pos, arg in ops:
        pos = raw_pos % (len(data) + 1)
        if op == "flip" and data:
            data[min(pos, len(data) - 1)] = arg
        elif op == "insert":
            data[pos:pos] = arg
        elif op == "delete":
            del data[pos : pos + arg]
        elif op == "truncate":
            del data[pos:]
        elif op == "duplicate":
            data[pos:pos] = data[pos : pos + arg]
    return bytes(data)


def mutated(seeds: tuple[bytes, ...]) -> st.SearchStrategy[bytes]:
    """Mutations of one of ``seeds`` (the unmutated seeds included)."""
    return st.builds(mutate, st.sampled_from(seeds), st.lists(_ops, max_size=8))


METADATA_BYTES = tuple(s.encode() for s in METADATA_SEEDS)
CONFIGMAP_BYTES = tuple(s.encode() for s in CONFIGMAP_SEEDS)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


# -------------------------------------------------------------------------------------- metadata files


@FAST
@given(mutated(METADATA_BYTES))
def test_mutated_metadata_file_parses_or_raises_metadata_error(data: bytes) -> None:
    check_metadata_bytes(data)


@settings(FAST, max_examples=150)
@given(mutated(METADATA_BYTES))
def test_file_service_on_mutated_file_returns_streams_or_raises_metadata_error(
    workdir: Path, data: bytes
) -> None:
    path = workdir / "streams.yaml"
    path.write_bytes(data)
    service = FileMetadataService(path, watch=False, poll_interval=0)
    try:
        streams = service.get_all_streams()
    except MetadataError as exc:
        assert str(path) in str(exc), "the error names the file"
        return
    finally:
        service.close()
    assert streams == parse_streams(data.decode("utf-8-sig"), source="again")


# ----------------------------------------------------------------------------------------- ConfigMaps


@FAST
@given(mutated(CONFIGMAP_BYTES))
def test_mutated_configmap_manifest_reads_or_raises_metadata_error(workdir: Path, data: bytes) -> None:
    check_configmap_file(workdir / "configmap.yaml", data)


@settings(FAST, max_examples=200)
@given(mutated(METADATA_BYTES))
def test_valid_manifest_with_mutated_payload_reads_or_raises_metadata_error(
    workdir: Path, data: bytes
) -> None:
    try:
        payload = data.decode("utf-8")
    except UnicodeDecodeError:
        payload = data.decode("latin-1")
    check_configmap_file(workdir / "wrapped.yaml", configmap_manifest(payload).encode("utf-8"))


@settings(FAST, max_examples=60)
@given(mutated(METADATA_BYTES))
def test_configmap_volume_with_mutated_payload(workdir: Path, data: bytes) -> None:
    volume = workdir / "volume"
    if volume.exists():
        update_configmap_volume(volume, {"stream-metadata.yaml": data})
    else:
        make_configmap_volume(volume, {"stream-metadata.yaml": data})
    service = ConfigMapMetadataService(volume, watch=False, poll_interval=0)
    try:
        service.get_all_streams()
    except MetadataError:
        pass
    finally:
        service.close()


# ------------------------------------------------------------------------------------- topic records

_KEYS = st.one_of(
    st.sampled_from(["cluster:east", "cluster:west", "stream:s:part:0", "stream:s:part:1", "commit:s"]),
    st.builds(lambda k, s: f"{k}{s}", st.sampled_from(["cluster:", "stream:", "commit:", ""]), st.text()),
).map(lambda k: k.encode("utf-8", errors="surrogatepass"))

_json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["version", "bootstrapServers", "properties", "clusterId", "topics", "parts", "x"]
            ),
            inner,
            max_size=6,
        )
    ),
    max_leaves=20,
)
_VALUES = st.one_of(
    st.none(),
    st.binary(max_size=64),
    _json_values.map(lambda v: json.dumps(v).encode()),
    st.builds(
        lambda base, extra: json.dumps({"version": 1, **base, **extra}).encode(),
        st.sampled_from(
            [
                {"bootstrapServers": "h:1"},
                {"clusterId": "east", "topics": ["t"]},
                {"parts": 1},
            ]
        ),
        st.dictionaries(st.sampled_from(["version", "properties", "topics", "parts"]), _json_values),
    ),
)


@FAST
@given(st.lists(st.tuples(_KEYS, _VALUES), max_size=12))
def test_topic_records_decode_or_are_skipped(records: list[tuple[bytes, bytes | None]]) -> None:
    check_topic_records(records)


@FAST
@given(mutated(RECORD_SEEDS))
def test_mutated_topic_record_logs(data: bytes) -> None:
    check_topic_records(split_records(data))


@settings(FAST, max_examples=200)
@given(st.lists(st.tuples(_KEYS, _VALUES), max_size=12) | mutated(RECORD_SEEDS).map(split_records))
def test_a_complete_write_after_any_garbage_is_in_effect(records: list[tuple[bytes, bytes | None]]) -> None:
    log = MetadataLog("fuzz")
    for offset, (key, value) in enumerate(records):
        log.apply(key, value, offset)
    east = ClusterDefinition("east", "e:9092")
    complete = [
        (cluster_key("east"), encode_value(east)),
        (part_key("s", 0), encode_value(StreamPart("east", frozenset({"orders"})))),
        (commit_key("s"), encode_value(StreamCommit(1))),
    ]
    for text, encoded in complete:
        log.apply(text.encode(), encoded, log.offset)
    snapshot = log.snapshot()
    assert snapshot.streams["s"] == KafkaStream("s", {"east": east.with_topics({"orders"})})
    assert "s" not in snapshot.inconsistent


def test_pathological_record_values_are_format_errors() -> None:
    deep = b"[" * 100_000
    check_topic_records(
        [(b"cluster:east", deep), (b"commit:s", b'{"version":1,"parts":' + b"9" * 5000 + b"}")]
    )
    check_topic_records([(b"stream:s:part:0", b'{"version":1,"clusterId":"c","topics":' + deep + b"}")])


def test_pathological_metadata_files_are_metadata_errors() -> None:
    # Python refuses int() of more than 4300 digits with a plain ValueError: json.loads does it too.
    check_metadata_bytes(b'[{"streamId": "s", "clusterMetadataList": [], "x": ' + b"9" * 5000 + b"}]")
    check_metadata_bytes(b"[" + b"1" * 5000 + b"]")
    check_metadata_bytes(b"- streamId: " + b"9" * 5000 + b"\n")
    check_metadata_bytes(b"[" * 100_000)


def test_pathological_manifests_do_not_crash(workdir: Path) -> None:
    path = workdir / "pathological.yaml"
    for text in (
        "kind: ConfigMap\ndata:\n  stream-metadata.yaml: " + "[" * 5000,
        "kind: ConfigMap\ndata: " + "{a: " * 3000,
        "kind: ConfigMap\n" + "---\nkind: ConfigMap\n" * 2000,
        configmap_manifest("- " * 3000 + "x"),
        "kind: &k ConfigMap\ndata: &d {stream-metadata.yaml: *k}\n",
        configmap_manifest('[{"streamId": ' + "9" * 5000 + "}]"),
    ):
        check_configmap_file(path, text.encode())


# ------------------------------------------------------------------- the last good metadata stays

CLUSTERS = {cid: ClusterMetadata(cid, f"{cid}:9092", frozenset()) for cid in ("east", "west", "central")}
GOOD: tuple[dict[str, frozenset[str]], ...] = (
    {"east": frozenset({"orders"})},
    {"east": frozenset({"orders", "audit"}), "west": frozenset({"orders"})},
    {"west": frozenset({"orders"}), "central": frozenset({"orders"})},
)


def good_text(index: int) -> str:
    clusters = {
        cid: ClusterMetadata(cid, CLUSTERS[cid].bootstrap_servers, topics)
        for cid, topics in GOOD[index].items()
    }
    return dump_streams([KafkaStream("s", clusters)])


def is_bad(data: bytes) -> bool:
    try:
        parse_streams(data.decode("utf-8-sig"), source="probe")
    except (MetadataError, UnicodeDecodeError):
        return True
    return False


_steps = st.lists(
    st.one_of(
        st.integers(0, len(GOOD) - 1),
        mutated(tuple(good_text(i).encode() for i in range(len(GOOD)))),
    ),
    min_size=1,
    max_size=10,
)


@settings(FAST, max_examples=80)
@given(_steps)
def test_enumerator_keeps_the_last_good_metadata_after_bad_reads(
    workdir: Path, steps: list[int | bytes]
) -> None:
    path = workdir / "enumerated.yaml"
    path.write_text(good_text(0))
    service = FileMetadataService(path, watch=False, poll_interval=0)
    enumerator, ctx, registry = make(cast(Any, service))
    try:
        enumerator.start()
        enumerator.add_reader(0)
        enumerator.add_reader(1)
        last_good: Mapping[str, frozenset[str]] = GOOD[0]
        bad_reads = 0
        for step in steps:
            if isinstance(step, int):
                path.write_text(good_text(step))
                last_good = GOOD[step]
            else:
                assume(is_bad(step) or step in {good_text(i).encode() for i in range(len(GOOD))})
                path.write_bytes(step)
                if is_bad(step):
                    bad_reads += 1
                else:
                    last_good = GOOD[[good_text(i).encode() for i in range(len(GOOD))].index(step)]
            enumerator.refresh()
            clusters = enumerator.status()["clusters"]
            assert {cid: frozenset(c["topics"]) for cid, c in clusters.items()} == last_good
        assert ctx.failed == [], "the default threshold (-1) never fails the source"
        failures = registry.get_sample_value("multicluster_source_metadata_failures_total") or 0.0
        assert failures == bad_reads
    finally:
        enumerator.close()
        service.close()
