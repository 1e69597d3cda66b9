"""The record format of the metadata topic, and the pure log state that applies its records in order.

The metadata topic is a single-partition, compacted Kafka topic used as a write-ahead log of stream metadata.
Keys are UTF-8 strings; values are UTF-8 JSON objects with a ``"version"`` field (1 here); a record with
no value (a tombstone) deletes what its key names. Three kinds of keys exist::

    cluster:<clusterId>             {"version": 1, "bootstrapServers": "h1:9092,h2:9092",
                                     "properties": {"security.protocol": "SASL_SSL", ...}}   (optional)
    stream:<streamId>:part:<i>      {"version": 1, "clusterId": "east", "topics": ["orders", ...],
                                     "replicaOf": {"cluster": "west", ...}}                  (optional)
    commit:<streamId>               {"version": 1, "parts": 2}

- ``cluster:`` defines how a cluster is reached (servers and extra client properties, placeholders kept
  as written). It is applied as soon as it is read; streams that use the cluster follow it.
- ``replicaOf`` is the cluster's declaration in that stream that its topics copy another cluster's (the
  file format's key, same fields; see ``_replica_parse``): applied with the stream's commit, so a switchover
  to a replica is one atomic change.
- ``stream:...:part:<i>`` is the ``i``-th cluster part of a stream (``i`` is ``0`` or a decimal number
  without leading zeros). Parts are *buffered*: they change nothing on their own.
- ``commit:`` says a stream is made of parts ``0..parts-1``. When it is read and every one of those parts
  was read since the stream's previous commit, the stream is replaced by them at once; otherwise the
  commit cannot be satisfied (parts lost to compaction, or a writer that died mid-write), the stream is
  reported *inconsistent* and its last consistent version stays in effect until a later complete write.
  Either way the buffer of the stream is emptied. A tombstone on ``commit:`` deletes the stream.

Keys are unambiguous for any id: the id is the last field of ``cluster:`` and ``commit:`` keys, and a part
key ends with ``:part:<digits>``, which an id followed by that suffix cannot be confused with (the stream id
is everything between ``stream:`` and the last ``:part:``). Cluster ids may thus be defaulted bootstrap
server lists holding ``:``, and stream ids may hold any character.

Compatibility: unknown keys, undecodable keys and malformed values are logged once per key and skipped,
so older readers survive newer writers; unknown fields of a value are ignored, and a value whose version is
newer than 1 is read for the fields version 1 defines.

Here: the keys (:func:`parse_key`, :func:`cluster_key`, ...), the values and their codec
(:func:`encode_value`, :func:`decode_value`). The reader's state machine that applies records in log order
(:class:`MetadataLog`, free of Kafka so that it can be tested record by record) is in ``_topic_log``; the
writer's diff against a :class:`MetadataSnapshot` (:func:`plan_publish`) is in ``_topic_plan``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from multicluster_source.metadata._model import ClusterMetadata
from multicluster_source.metadata._placeholders import find_placeholder_errors
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.metadata._replica_parse import replica_of_from_obj, replica_of_to_obj
from multicluster_source.metadata._validate import cluster_id_problem, topic_name_problem

__all__ = [
    "RECORD_VERSION",
    "ClusterDefinition",
    "ClusterKey",
    "CommitKey",
    "MalformedRecord",
    "PartKey",
    "RecordFormatError",
    "RecordKey",
    "RecordValue",
    "StreamCommit",
    "StreamPart",
    "cluster_key",
    "commit_key",
    "decode_value",
    "encode_value",
    "parse_key",
    "part_key",
]

RECORD_VERSION = 1
"""The version written in every value by this library."""

_CLUSTER = "cluster:"
_STREAM = "stream:"
_PART = ":part:"
_COMMIT = "commit:"
_PART_RE = re.compile(r"^stream:(?P<stream>.+):part:(?P<index>0|[1-9][0-9]*)$", re.DOTALL)
_MAX_PARTS = 100_000


class RecordFormatError(ValueError):
    """A record value of the metadata topic is not valid for its key."""


# --------------------------------------------------------------------------------------------- values


@dataclass(frozen=True)
class ClusterDefinition:
    """How a cluster is reached (value of a ``cluster:`` record); topics come from the stream parts."""

    cluster_id: str
    bootstrap_servers: str
    properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", MappingProxyType(dict(self.properties)))

    def __hash__(self) -> int:
        return hash((self.cluster_id, self.bootstrap_servers, tuple(sorted(self.properties.items()))))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClusterDefinition):
            return NotImplemented
        return (
            self.cluster_id == other.cluster_id
            and self.bootstrap_servers == other.bootstrap_servers
            and dict(self.properties) == dict(other.properties)
        )

    def with_topics(self, topics: Iterable[str], replica_of: ReplicaOf | None = None) -> ClusterMetadata:
        """This cluster as a stream's :class:`ClusterMetadata` reading ``topics``."""
        return ClusterMetadata(
            self.cluster_id, self.bootstrap_servers, frozenset(topics), self.properties, replica_of
        )

    @classmethod
    def of(cls, cluster: ClusterMetadata) -> ClusterDefinition:
        """The connection part of ``cluster``."""
        return cls(cluster.cluster_id, cluster.bootstrap_servers, cluster.properties)


@dataclass(frozen=True)
class StreamPart:
    """One cluster part of a stream (value of a ``stream:<id>:part:<i>`` record)."""

    cluster_id: str
    topics: frozenset[str]
    replica_of: ReplicaOf | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", frozenset(self.topics))


@dataclass(frozen=True)
class StreamCommit:
    """The commit of a stream (value of a ``commit:<id>`` record): it is made of parts ``0..parts-1``."""

    parts: int


@dataclass(frozen=True)
class MalformedRecord:
    """The latest value of a known key could not be decoded (``reason`` says why); it was skipped."""

    reason: str


RecordValue = ClusterDefinition | StreamPart | StreamCommit | MalformedRecord
"""The latest value of one key of the topic, as a :class:`MetadataSnapshot` holds it."""


# --------------------------------------------------------------------------------------------- keys


@dataclass(frozen=True)
class ClusterKey:
    """A ``cluster:<clusterId>`` key."""

    cluster_id: str

    def __str__(self) -> str:
        return cluster_key(self.cluster_id)


@dataclass(frozen=True)
class PartKey:
    """A ``stream:<streamId>:part:<index>`` key."""

    stream_id: str
    index: int

    def __str__(self) -> str:
        return part_key(self.stream_id, self.index)


@dataclass(frozen=True)
class CommitKey:
    """A ``commit:<streamId>`` key."""

    stream_id: str

    def __str__(self) -> str:
        return commit_key(self.stream_id)


RecordKey = ClusterKey | PartKey | CommitKey


def cluster_key(cluster_id: str) -> str:
    """The key of the record defining ``cluster_id``."""
    return _CLUSTER + cluster_id


def part_key(stream_id: str, index: int) -> str:
    """The key of part ``index`` (0-based) of ``stream_id``."""
    if index < 0:
        raise ValueError(f"part indexes start at 0, got {index}")
    return f"{_STREAM}{stream_id}{_PART}{index}"


def commit_key(stream_id: str) -> str:
    """The key of the commit record of ``stream_id``."""
    return _COMMIT + stream_id


def parse_key(key: str) -> RecordKey | None:
    """The key's kind and ids, or None for a key this version does not know."""
    if key.startswith(_CLUSTER):
        cluster_id = key[len(_CLUSTER) :]
        return ClusterKey(cluster_id) if cluster_id else None
    if key.startswith(_COMMIT):
        stream_id = key[len(_COMMIT) :]
        return CommitKey(stream_id) if stream_id else None
    match = _PART_RE.match(key)
    if match is not None:
        return PartKey(match.group("stream"), int(match.group("index")))
    return None


# --------------------------------------------------------------------------------------------- codec


def encode_value(value: ClusterDefinition | StreamPart | StreamCommit) -> bytes:
    """The JSON value of a record (keys sorted, compact, topics sorted)."""
    obj: dict[str, Any] = {"version": RECORD_VERSION}
    if isinstance(value, ClusterDefinition):
        obj["bootstrapServers"] = value.bootstrap_servers
        if value.properties:
            obj["properties"] = dict(sorted(value.properties.items()))
    elif isinstance(value, StreamPart):
        obj["clusterId"] = value.cluster_id
        obj["topics"] = sorted(value.topics)
        if value.replica_of is not None:
            obj["replicaOf"] = replica_of_to_obj(value.replica_of)
    elif isinstance(value, StreamCommit):
        obj["parts"] = value.parts
    else:
        raise TypeError(f"cannot encode {type(value).__name__}")
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _text(obj: Mapping[str, Any], name: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str) or not value.strip():
        raise RecordFormatError(f"{name!r} must be a non-empty string")
    return value


def _object(data: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise RecordFormatError(f"value is not UTF-8 (byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, or a number beyond the digit limit
        raise RecordFormatError(f"value is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise RecordFormatError(f"value must be a JSON object, got {type(obj).__name__}")
    version = obj.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise RecordFormatError("'version' must be an integer >= 1")
    return obj


def decode_value(key: RecordKey, data: bytes) -> ClusterDefinition | StreamPart | StreamCommit:
    """Decode the value of a record with ``key``; raises :class:`RecordFormatError` when it is invalid."""
    obj = _object(data)
    if isinstance(key, ClusterKey):
        servers = _text(obj, "bootstrapServers")
        problem = cluster_id_problem(key.cluster_id, servers)
        if problem:
            raise RecordFormatError(problem)
        raw = obj.get("properties", {})
        if raw is None:
            raw = {}
        if not isinstance(raw, dict) or not all(
            isinstance(k, str) and k.strip() and isinstance(v, str) for k, v in raw.items()
        ):
            raise RecordFormatError("'properties' must map non-empty names to string values")
        for name, value in raw.items():
            for problem in find_placeholder_errors(value):
                raise RecordFormatError(f"property {name!r}: {problem}")
        return ClusterDefinition(key.cluster_id, servers, raw)
    if isinstance(key, PartKey):
        cluster_id = _text(obj, "clusterId")
        topics = obj.get("topics")
        if not isinstance(topics, list) or not topics or not all(isinstance(t, str) for t in topics):
            raise RecordFormatError("'topics' must be a non-empty list of topic names")
        for topic in topics:
            problem = topic_name_problem(topic)
            if problem:
                raise RecordFormatError(problem)
        replica_of = None
        if obj.get("replicaOf") is not None:

            def fail(message: str, key: str) -> Exception:
                return RecordFormatError(f"'replicaOf{key}': {message}")

            replica_of = replica_of_from_obj(obj["replicaOf"], own_cluster=cluster_id, fail=fail)
        return StreamPart(cluster_id, frozenset(topics), replica_of)
    parts = obj.get("parts")
    if isinstance(parts, bool) or not isinstance(parts, int) or not 1 <= parts <= _MAX_PARTS:
        raise RecordFormatError(f"'parts' must be an integer from 1 to {_MAX_PARTS}")
    return StreamCommit(parts)
