"""Odd records on a real broker (issue 8, part 2): null keys and values, 5 MB values, odd headers, and a
deserializer that raises under ``deserialization-error-policy=skip``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from harness.cluster import Cluster
from harness.scenario import builder, cluster_md, drain, settle, stream
from multicluster_source import RawRecord, SourceRecord

pytestmark = pytest.mark.integration

Headers = list[tuple[str, bytes | None]] | None


def _produce_exact(
    cluster: Cluster, topic: str, records: list[tuple[bytes | None, bytes | None, Headers]]
) -> None:
    """Produce ``(key, value, headers)`` in order to partition 0 (None stays None: no default value)."""
    producer = cluster.producer(**{"linger.ms": 0, "enable.idempotence": True})
    errors: list[Any] = []
    for key, value, headers in records:
        kwargs: dict[str, Any] = {"partition": 0, "key": key, "value": value}
        if headers is not None:
            kwargs["headers"] = headers
        producer.produce(topic, on_delivery=lambda err, _msg: errors.append(err) if err else None, **kwargs)
    assert producer.flush(30) == 0
    producer.close()
    assert errors == []


ODD_HEADERS: list[Headers] = [
    None,
    [("dup", b"1"), ("dup", b"2"), ("dup", b"1")],
    [("none", None), ("after-none", b"x")],
    [("bin", bytes(range(256)))],
    [("", b"empty name"), ("empty value", b"")],
    [("ключ", "значение".encode()), ("emoji-\U0001f600", b"\xf0\x9f\x98\x80")],
    [(f"h{i:03d}", str(i).encode()) for i in range(200)],
]


def test_null_keys_null_values_and_odd_headers_arrive_unchanged(kafka_cluster: Cluster) -> None:
    topic = kafka_cluster.create_topic("odd", partitions=1)
    sent: list[tuple[bytes | None, bytes | None, Headers]] = [
        (None, None, None),
        (b"k", None, None),
        (None, b"v", None),
        (b"", b"", None),
        (b"\x00\xff", b"\x00" * 10, None),
    ]
    sent += [(b"h", f"headers-{i}".encode(), headers) for i, headers in enumerate(ODD_HEADERS)]
    _produce_exact(kafka_cluster, topic, sent)
    md = [stream("s", cluster_md(kafka_cluster, topic))]
    seen_raw: list[RawRecord] = []

    def keep_raw(raw: RawRecord) -> RawRecord:
        seen_raw.append(raw)
        return raw

    with builder(md).build().open() as s:  # the default deserializer: the value bytes (or None)
        plain = drain(s, len(sent))
        plain += settle(s, 0.5)
    with builder(md).set_deserializer(keep_raw).build().open() as s:
        wrapped = drain(s, len(sent))
        wrapped += settle(s, 0.5)

    def fields(r: SourceRecord | RawRecord) -> tuple[bytes | None, bytes | None, Headers]:
        value = r.value.value if isinstance(r.value, RawRecord) else r.value
        return r.key, value, (list(r.headers) if r.headers is not None else None)

    assert [fields(r) for r in plain] == sent
    assert [fields(r) for r in wrapped] == sent
    assert [fields(r) for r in seen_raw] == sent
    assert [r.offset for r in plain] == list(range(len(sent)))


def test_five_megabyte_values_arrive_whole(kafka_cluster: Cluster) -> None:
    big = 5 * 1024 * 1024
    limit = str(big + 1024 * 1024)
    topic = kafka_cluster.create_topic("huge", partitions=1, config={"max.message.bytes": limit})
    values = [b"small-0", bytes([1]) * big, b"small-1", bytes(range(256)) * (big // 256), b"small-2"]
    producer = kafka_cluster.producer(**{"message.max.bytes": int(limit) + 1024, "linger.ms": 0})
    for value in values:
        producer.produce(topic, value, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0
    producer.close()
    md = [stream("s", cluster_md(kafka_cluster, topic))]
    registry = CollectorRegistry()
    with builder(md).build().open(registry=registry) as s:
        got = drain(s, len(values), timeout=90)
        got += settle(s, 0.5)
        consumed = registry.get_sample_value(
            "multicluster_source_bytes_consumed_total", {"cluster": kafka_cluster.cluster_id, "topic": topic}
        )
    digests = [hashlib.sha256(r.value).hexdigest() for r in got]
    assert digests == [hashlib.sha256(v).hexdigest() for v in values]
    assert consumed is not None and consumed >= sum(len(v) for v in values)


def test_deserializer_that_raises_with_policy_skip_counts_and_moves_past(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    topic = kafka_cluster.create_topic("deser-skip", partitions=2)
    good: list[tuple[int, int]] = []
    bad: list[tuple[int, int]] = []
    producer = kafka_cluster.producer(**{"linger.ms": 0})
    for p in range(2):
        for i in range(30):
            if i % 7 == 3:
                value: bytes | None = None  # json.loads(None): TypeError
            elif i % 5 == 4 or i == 29:  # every partition ends with a bad record
                value = f"not json {i}".encode()
            else:
                value = json.dumps({"p": p, "i": i}).encode()
            producer.produce(topic, value, partition=p)
            (good if value is not None and value.startswith(b"{") else bad).append((p, i))
    assert producer.flush(30) == 0
    producer.close()

    def as_json(raw: RawRecord) -> Any:
        return json.loads(raw.value)  # type: ignore[arg-type]  # None raises TypeError, on purpose

    md = [stream("s", cluster_md(kafka_cluster, topic))]
    ckpt = str(tmp_path / "ckpt")
    registry = CollectorRegistry()
    source = builder(md).set_deserializer(as_json).set_property("deserialization-error-policy", "skip")
    with source.build().open(checkpoint_dir=ckpt, registry=registry) as s:
        got = drain(s, len(good))
        got += settle(s, 1.0)
        skipped = registry.get_sample_value(
            "multicluster_source_deserialization_errors_total",
            {"cluster": kafka_cluster.cluster_id, "topic": topic},
        )
        s.checkpoint()
    assert sorted((r.value["p"], r.value["i"]) for r in got) == sorted(good)
    assert skipped == len(bad)
    # The checkpoint is past the skipped records too: a restore delivers only what comes next.
    kafka_cluster.produce(topic, [json.dumps({"p": 0, "i": 30}).encode()], partition=0)
    with source.build().open(checkpoint_dir=ckpt) as s:
        again = drain(s, 1)
        again += settle(s, 1.0)
    assert [r.value for r in again] == [{"p": 0, "i": 30}]
