"""Inputs shared by the fuzz targets and the hypothesis tests: valid seeds and the checks every input must pass.

The checks are the contract of each parser for *any* input:

- :func:`check_metadata_text` / :func:`check_metadata_bytes`: ``parse_streams`` (after UTF-8 decoding) returns
  streams or raises :class:`MetadataError` (a subclass included); what parses survives a dump/parse round trip.
- :func:`check_configmap_file`: :class:`ConfigMapMetadataService` on a manifest (or anything else in the file)
  returns streams or raises :class:`MetadataError`.
- :func:`check_topic_records`: ``parse_key`` never raises; ``decode_value`` returns a value or raises
  ``RecordFormatError``; :class:`MetadataLog` applies any sequence of records without raising, and a record it
  cannot decode changes nothing in effect (the documented skip).

Anything else escaping (``TypeError``, ``RecursionError``, ``AttributeError`` ...) is a bug.
"""

from __future__ import annotations

import json
import logging
import os
import random
from pathlib import Path

import yaml

from multicluster_source.exceptions import MetadataError
from multicluster_source.metadata import ConfigMapMetadataService, dump_streams, parse_streams
from multicluster_source.metadata._file import decode_metadata
from multicluster_source.metadata.topic._topic_log import MetadataLog
from multicluster_source.metadata.topic._topic_records import (
    RecordFormatError,
    decode_value,
    parse_key,
)

SEEDS_DIR = Path(__file__).with_name("seeds")

METADATA_SEEDS: tuple[str, ...] = (
    """- streamId: orders
  clusterMetadataList:
    - clusterId: east
      bootstrapServers: kafka-east-1:9092,kafka-east-2:9092
      topics: [orders, orders-retry]
      properties:
        security.protocol: SASL_SSL
        sasl.password: ${env:MCS_FUZZ_UNSET}
    - clusterId: west
      bootstrapServers: kafka-west-1:9092
      topics: [orders]
""",
    """- streamId: a
  clusterMetadataList:
  - {bootstrapServers: 'h:1', topics: [t1, t2]}
- streamId: b
  clusterMetadataList:
  - {clusterId: c.d-e_f, bootstrapServers: 'h:2', topics: [x], properties: {client.rack: r1}}
""",
    json.dumps(
        [
            {
                "streamId": "j",
                "clusterMetadataList": [
                    {"clusterId": "c1", "bootstrapServers": "h:1", "topics": ["t"]},
                    {"clusterId": "c2", "bootstrapServers": "h:2", "topics": ["t", "u"]},
                ],
            }
        ]
    ),
    "[]\n",
)


def quiet_logs() -> None:
    """Silence the parsers' warnings (unset placeholders, skipped records): fuzz targets only."""
    logging.getLogger("multicluster_source").setLevel(logging.CRITICAL)


def configmap_manifest(metadata_text: str, key: str = "stream-metadata.yaml") -> str:
    """A ConfigMap manifest holding ``metadata_text`` under ``data[key]``, as a `|` block."""
    indented = "".join(f"    {line}\n" for line in metadata_text.splitlines())
    return (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stream-metadata\ndata:\n  {key}: |\n{indented}"
    )


CONFIGMAP_SEEDS: tuple[str, ...] = (
    *(configmap_manifest(text) for text in METADATA_SEEDS[:2]),
    "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\n" + configmap_manifest(METADATA_SEEDS[1]),
    "kind: ConfigMap\ndata: {other.yaml: x}\n",
)

RECORD_SEPARATOR = b"\x1e"
KEY_SEPARATOR = b"\x00"

RECORD_SEEDS: tuple[bytes, ...] = (
    RECORD_SEPARATOR.join(
        [
            b'cluster:east\x00{"version":1,"bootstrapServers":"e:9092"}',
            b'cluster:west\x00{"version":1,"bootstrapServers":"w:9092","properties":{"client.rack":"a"}}',
            b'stream:s:part:0\x00{"version":1,"clusterId":"east","topics":["orders"]}',
            b'stream:s:part:1\x00{"version":1,"clusterId":"west","topics":["orders","x"]}',
            b'commit:s\x00{"version":1,"parts":2}',
        ]
    ),
    RECORD_SEPARATOR.join(
        [
            b'cluster:h:1,h:2\x00{"version":2,"bootstrapServers":"h:1,h:2","future":true}',
            b'stream:a:part:b:part:0\x00{"version":1,"clusterId":"h:1,h:2","topics":["t"]}',
            b'commit:a:part:b\x00{"version":1,"parts":1}',
            b"commit:a:part:b\x00",
            b"cluster:h:1,h:2\x00",
        ]
    ),
)


def check_metadata_text(text: str) -> None:
    """``parse_streams(text)``: streams that round-trip, or a MetadataError."""
    try:
        result = parse_streams(text, source="fuzz")
    except MetadataError:
        return
    assert isinstance(result, set)
    assert parse_streams(dump_streams(result), source="roundtrip") == result


def check_metadata_bytes(data: bytes) -> None:
    """The bytes of a metadata file, decoded as the file service does, then :func:`check_metadata_text`."""
    try:
        text = decode_metadata(data, source="fuzz")
    except MetadataError:
        return
    check_metadata_text(text)


def check_configmap_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` and read it with a non-watching :class:`ConfigMapMetadataService`."""
    path.write_bytes(data)
    service = ConfigMapMetadataService(path, watch=False, poll_interval=0)
    try:
        streams = service.get_all_streams()
    except MetadataError:
        return
    finally:
        service.close()
    assert isinstance(streams, set)


def split_records(data: bytes) -> list[tuple[bytes, bytes | None]]:
    """``key\\x00value`` records separated by ``\\x1e``; a record without ``\\x00`` is a tombstone."""
    out: list[tuple[bytes, bytes | None]] = []
    for chunk in data.split(RECORD_SEPARATOR):
        key, sep, value = chunk.partition(KEY_SEPARATOR)
        out.append((key, value if sep and value else None))
    return out


def check_topic_records(records: list[tuple[bytes, bytes | None]]) -> None:
    """Feed ``records`` to the codec and to a :class:`MetadataLog`; see the module docs for the contract."""
    log = MetadataLog("fuzz")
    for offset, (key, value) in enumerate(records):
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        parsed = parse_key(text) if text is not None else None
        malformed = False
        if parsed is not None and value is not None:
            try:
                decode_value(parsed, value)
            except RecordFormatError:
                malformed = True
        before = log.snapshot()
        changed = log.apply(key, value, offset)
        assert isinstance(changed, bool)
        after = log.snapshot()
        assert after.offset == offset + 1
        if parsed is None or malformed:
            # Skipped: nothing in effect moved (a malformed value is only remembered in the log view).
            assert not changed
            assert after.streams == before.streams and after.clusters == before.clusters
            assert after.inconsistent == before.inconsistent


def random_mutation(rng: random.Random, seed: bytes, max_ops: int = 4) -> bytes:
    """``seed`` with 1..``max_ops`` random byte flips, insertions, deletions or truncations."""
    data = bytearray(seed)
    for _ in range(rng.randint(1, max_ops)):
        pos = rng.randrange(len(data) + 1)
        op = rng.choice(("flip", "insert", "delete", "truncate"))
        if op == "flip" and data:
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif op == "insert":
            data[pos:pos] = rng.choice((b"- ", b": ", b"[", b"{", b"\t", b"'", b"${", b"\xff", b"&a ", b"*a"))
        elif op == "delete":
            del data[pos : pos + rng.randint(1, 20)]
        elif op == "truncate":
            del data[pos:]
    return bytes(data)


def write_seed_files() -> None:
    """(Re)write the seed corpora under ``seeds/`` from the constants above (run by hand after editing)."""
    for name, seeds in (
        ("metadata", [s.encode() for s in METADATA_SEEDS]),
        ("configmap", [s.encode() for s in CONFIGMAP_SEEDS]),
        ("records", list(RECORD_SEEDS)),
    ):
        directory = SEEDS_DIR / name
        directory.mkdir(parents=True, exist_ok=True)
        for i, seed in enumerate(seeds):
            (directory / f"seed-{i}").write_bytes(seed)


def yaml_dump(value: object) -> str:
    """``yaml.safe_dump`` that returns text whatever the input (used by the property tests)."""
    return str(yaml.safe_dump(value, allow_unicode=True))


if __name__ == "__main__":  # pragma: no cover - a maintenance helper
    write_seed_files()
    print(f"seeds written under {os.fspath(SEEDS_DIR)}")
