"""The record format of the metadata topic, and the pure log state that applies its records in order.

The metadata topic is a single-partition, compacted Kafka topic used as a write-ahead log of stream metadata.
Keys are UTF-8 strings; values are UTF-8 JSON objects with a ``"version"`` field (1 here); a record with
no value (a tombstone) deletes what its key names. Three kinds of keys exist::

    cluster:<clusterId>             {"version": 1, "bootstrapServers": "h1:9092,h2:9092",
                                     "properties": {"security.protocol": "SASL_SSL", ...}}   (optional)
    stream:<streamId>:part:<i>      {"version": 1, "clusterId": "east", "topics": ["orders", ...]}
    commit:<streamId>               {"version": 1, "parts": 2}

- ``cluster:`` defines how a cluster is reached (servers and extra client properties, placeholders kept
  as written). It is applied as soon as it is read; streams that use the cluster follow it.
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

:class:`MetadataLog` is the reader's state machine, free of Kafka so that it can be tested record by record;
:func:`plan_publish` is the writer's diff against a :class:`MetadataSnapshot`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from multicluster_source.metadata._model import ClusterMetadata, KafkaStream
from multicluster_source.metadata._parser import _cluster_id_problem, topic_name_problem, validate_streams
from multicluster_source.metadata._placeholders import find_placeholder_errors

__all__ = [
    "RECORD_VERSION",
    "ClusterDefinition",
    "ClusterKey",
    "CommitKey",
    "MalformedRecord",
    "MetadataLog",
    "MetadataSnapshot",
    "PartKey",
    "PlannedRecord",
    "RecordFormatError",
    "RecordKey",
    "RecordValue",
    "StreamCommit",
    "StreamPart",
    "WritePlan",
    "cluster_key",
    "commit_key",
    "decode_value",
    "encode_value",
    "parse_key",
    "part_key",
    "plan_publish",
]

_log = logging.getLogger("multicluster_source.metadata")

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

    def with_topics(self, topics: Iterable[str]) -> ClusterMetadata:
        """This cluster as a stream's :class:`ClusterMetadata` reading ``topics``."""
        return ClusterMetadata(self.cluster_id, self.bootstrap_servers, frozenset(topics), self.properties)

    @classmethod
    def of(cls, cluster: ClusterMetadata) -> ClusterDefinition:
        """The connection part of ``cluster``."""
        return cls(cluster.cluster_id, cluster.bootstrap_servers, cluster.properties)


@dataclass(frozen=True)
class StreamPart:
    """One cluster part of a stream (value of a ``stream:<id>:part:<i>`` record)."""

    cluster_id: str
    topics: frozenset[str]

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
        problem = _cluster_id_problem(key.cluster_id, servers)
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
        return StreamPart(cluster_id, frozenset(topics))
    parts = obj.get("parts")
    if isinstance(parts, bool) or not isinstance(parts, int) or not 1 <= parts <= _MAX_PARTS:
        raise RecordFormatError(f"'parts' must be an integer from 1 to {_MAX_PARTS}")
    return StreamCommit(parts)


# --------------------------------------------------------------------------------------------- snapshot


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, eq=True)
class MetadataSnapshot:
    """A consistent, immutable view of the metadata topic up to (excluding) log ``offset``.

    - ``streams``: the streams in effect (stream id -> stream), each the last consistent version.
    - ``clusters``: every cluster definition in the topic (cluster id -> definition), used or not.
    - ``inconsistent``: ids of streams whose latest commit cannot be satisfied (see the module docs); a
      stream in it may still be in ``streams`` with its last consistent version.
    - ``stream_parts``: the parts of the commit each stream in ``streams`` was last applied from.
    - ``log``: the latest value of every known key in the topic (tombstoned keys are absent); the writer
      diffs against it.
    - ``offset``: the next log offset to read; everything before it is reflected.
    """

    streams: Mapping[str, KafkaStream] = field(default_factory=dict)
    clusters: Mapping[str, ClusterDefinition] = field(default_factory=dict)
    inconsistent: frozenset[str] = frozenset()
    stream_parts: Mapping[str, tuple[StreamPart, ...]] = field(default_factory=dict)
    log: Mapping[str, RecordValue] = field(default_factory=dict)
    offset: int = 0

    def __post_init__(self) -> None:
        for name in ("streams", "clusters", "stream_parts", "log"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))
        object.__setattr__(self, "inconsistent", frozenset(self.inconsistent))

    __hash__ = None  # type: ignore[assignment]

    def stream_set(self) -> set[KafkaStream]:
        """The streams in effect, as a set (what ``get_all_streams`` answers)."""
        return set(self.streams.values())

    def same_content(self, other: MetadataSnapshot) -> bool:
        """Whether both hold the same streams, clusters, inconsistencies and log (offsets may differ)."""
        return (
            self.streams == other.streams
            and self.clusters == other.clusters
            and self.inconsistent == other.inconsistent
            and self.stream_parts == other.stream_parts
            and self.log == other.log
        )


# --------------------------------------------------------------------------------------------- the log


class MetadataLog:
    """Applies the records of the metadata topic in log order; no Kafka here, not thread-safe.

    Feed it every record with :meth:`apply` (``key`` and ``value`` as bytes, ``value`` None for a
    tombstone) and the consumer position with :meth:`advance`; read the result with :meth:`snapshot`.
    ``version`` grows whenever the streams, clusters or inconsistencies in effect change.
    """

    def __init__(self, source: str = "metadata topic") -> None:
        self.source = source
        self.version = 0
        """Incremented whenever streams, cluster definitions or inconsistencies change."""
        self._offset = 0
        self._clusters: dict[str, ClusterDefinition] = {}
        self._committed: dict[str, tuple[StreamPart, ...]] = {}
        self._pending: dict[str, dict[int, StreamPart]] = {}
        self._bad_commits: dict[str, str] = {}  # stream id -> why its latest commit cannot be satisfied
        self._unresolved: dict[str, str] = {}  # stream id -> which clusters its parts name are undefined
        self._effective: dict[str, KafkaStream] = {}
        self._applied: dict[str, tuple[StreamPart, ...]] = {}  # the parts each effective stream came from
        self._latest: dict[str, RecordValue] = {}
        self._warned: set[str] = set()

    # ----------------------------------------------------------------------------------------- reading

    @property
    def offset(self) -> int:
        """The next offset to read."""
        return self._offset

    def inconsistent(self) -> dict[str, str]:
        """Stream id -> why its commit cannot be satisfied, for every inconsistent stream."""
        out = dict(self._unresolved)
        out.update(self._bad_commits)
        return out

    def snapshot(self) -> MetadataSnapshot:
        """A copy of the current state."""
        return MetadataSnapshot(
            streams=self._effective,
            clusters=self._clusters,
            inconsistent=frozenset(self._bad_commits) | frozenset(self._unresolved),
            stream_parts=self._applied,
            log=self._latest,
            offset=self._offset,
        )

    # ----------------------------------------------------------------------------------------- writing

    def advance(self, offset: int) -> None:
        """The consumer's position moved to ``offset`` (past transaction markers or aborted records)."""
        self._offset = max(self._offset, offset)

    def apply(self, key: bytes | str | None, value: bytes | None, offset: int) -> bool:
        """Apply one record read at ``offset``; returns whether the state in effect changed."""
        self._offset = max(self._offset, offset + 1)
        if key is None:
            self._warn_once(f"<no key>@{offset}", f"offset {offset}: record without a key skipped")
            return False
        if isinstance(key, bytes):
            try:
                text = key.decode("utf-8")
            except UnicodeDecodeError:
                self._warn_once(repr(key), f"offset {offset}: key {key!r} is not UTF-8; record skipped")
                return False
        else:
            text = key
        parsed = parse_key(text)
        if parsed is None:
            self._warn_once(
                text, f"offset {offset}: unknown key {text!r} skipped (written by a newer writer?)"
            )
            return False
        before = self.version
        if value is None:
            self._latest.pop(text, None)
            self._tombstone(parsed)
            return self.version != before
        try:
            decoded = decode_value(parsed, value)
        except RecordFormatError as exc:
            self._latest[text] = MalformedRecord(str(exc))
            self._warn_once(text, f"offset {offset}: key {text!r}: malformed value skipped: {exc}")
            return False
        self._latest[text] = decoded
        self._set(parsed, decoded, offset)
        return self.version != before

    # ----------------------------------------------------------------------------------------- internals

    def _warn_once(self, marker: str, message: str) -> None:
        if marker in self._warned:
            return
        self._warned.add(marker)
        _log.warning("%s: %s", self.source, message)

    def _changed(self) -> None:
        self.version += 1

    def _tombstone(self, key: RecordKey) -> None:
        if isinstance(key, ClusterKey):
            if self._clusters.pop(key.cluster_id, None) is not None:
                self._changed()
                self._rederive_users(key.cluster_id)
        elif isinstance(key, PartKey):
            pending = self._pending.get(key.stream_id)
            if pending is not None:
                pending.pop(key.index, None)
        else:
            sid = key.stream_id
            self._pending.pop(sid, None)
            self._committed.pop(sid, None)
            self._applied.pop(sid, None)
            gone = [
                self._effective.pop(sid, None),
                self._bad_commits.pop(sid, None),
                self._unresolved.pop(sid, None),
            ]
            if any(g is not None for g in gone):
                self._changed()

    def _set(self, key: RecordKey, value: RecordValue, offset: int) -> None:
        if isinstance(key, ClusterKey) and isinstance(value, ClusterDefinition):
            if self._clusters.get(key.cluster_id) != value:
                self._clusters[key.cluster_id] = value
                self._changed()
                self._rederive_users(key.cluster_id)
        elif isinstance(key, PartKey) and isinstance(value, StreamPart):
            self._pending.setdefault(key.stream_id, {})[key.index] = value
        elif isinstance(key, CommitKey) and isinstance(value, StreamCommit):
            self._commit(key.stream_id, value.parts, offset)

    def _commit(self, sid: str, count: int, offset: int) -> None:
        pending = self._pending.pop(sid, {})  # emptied whatever happens: the next commit needs fresh parts
        missing = [i for i in range(count) if i not in pending]
        parts = tuple(pending[i] for i in range(count) if i in pending)
        ids = [p.cluster_id for p in parts]
        duplicates = sorted({c for c in ids if ids.count(c) > 1})
        problem: str | None = None
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
            problem = f"the commit at offset {offset} names {count} parts but part(s) {shown} were not read"
        elif duplicates:
            problem = f"the commit at offset {offset} names cluster(s) {', '.join(duplicates)} twice"
        if problem is not None:
            _log.debug("%s: stream %r: %s", self.source, sid, problem)
            if sid not in self._bad_commits:
                self._changed()
            self._bad_commits[sid] = problem
            return
        if self._bad_commits.pop(sid, None) is not None:
            self._changed()
        self._committed[sid] = parts
        self._derive(sid)

    def _rederive_users(self, cluster_id: str) -> None:
        for sid, parts in self._committed.items():
            if any(p.cluster_id == cluster_id for p in parts):
                self._derive(sid)

    def _derive(self, sid: str) -> None:
        parts = self._committed[sid]
        undefined = sorted({p.cluster_id for p in parts if p.cluster_id not in self._clusters})
        if undefined:
            problem = f"its parts name cluster(s) {', '.join(undefined)} that have no cluster record"
            if self._unresolved.get(sid) != problem:
                self._unresolved[sid] = problem
                self._changed()
            return
        stream = KafkaStream(
            sid, {p.cluster_id: self._clusters[p.cluster_id].with_topics(p.topics) for p in parts}
        )
        if self._unresolved.pop(sid, None) is not None:
            self._changed()
        self._applied[sid] = parts
        if self._effective.get(sid) != stream:
            self._effective[sid] = stream
            self._changed()


# --------------------------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class PlannedRecord:
    """One record to write: ``value`` None is a tombstone."""

    key: str
    value: bytes | None


@dataclass(frozen=True)
class WritePlan:
    """What a publish writes, in order, in one transaction, and what it means.

    Order: changed cluster records; then for each written stream its parts, its commit, and tombstones of
    parts it no longer has; then each deleted stream's commit tombstone and part tombstones; cluster
    tombstones last.
    """

    records: tuple[PlannedRecord, ...] = ()
    clusters_written: tuple[str, ...] = ()
    clusters_deleted: tuple[str, ...] = ()
    streams_written: tuple[str, ...] = ()
    streams_deleted: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        """Whether there is nothing to write."""
        return not self.records


def plan_publish(
    streams: Iterable[KafkaStream], *, current: MetadataSnapshot, source: str = "streams"
) -> WritePlan:
    """Diff ``streams`` (the wanted metadata) against ``current`` (what the topic holds).

    A cluster record is written when its definition differs from the topic's; a stream's parts and commit
    are all written when the stream is inconsistent, its committed parts differ, or any of its part or
    commit records in the topic differs (a leftover part of an unfinished write must not survive
    compaction alone). Streams and clusters the topic has but ``streams`` lacks get tombstones.
    Raises :class:`~multicluster_source.exceptions.MetadataValidationError` (with ``source``) for streams
    that break the metadata rules.
    """
    wanted = list(streams)
    validate_streams(wanted, source=source)
    clusters: dict[str, ClusterDefinition] = {}
    parts: dict[str, tuple[StreamPart, ...]] = {}
    for stream in wanted:
        parts[stream.stream_id] = tuple(
            StreamPart(cid, stream.clusters[cid].topics) for cid in sorted(stream.clusters)
        )
        for cluster in stream.clusters.values():
            clusters[cluster.cluster_id] = ClusterDefinition.of(cluster)

    log = current.log
    present_parts: dict[str, set[int]] = {}
    present_commits: set[str] = set()
    present_clusters: set[str] = set()
    for text in log:
        parsed = parse_key(text)
        if isinstance(parsed, PartKey):
            present_parts.setdefault(parsed.stream_id, set()).add(parsed.index)
        elif isinstance(parsed, CommitKey):
            present_commits.add(parsed.stream_id)
        elif isinstance(parsed, ClusterKey):
            present_clusters.add(parsed.cluster_id)

    records: list[PlannedRecord] = []
    clusters_written = sorted(cid for cid, d in clusters.items() if log.get(cluster_key(cid)) != d)
    records += [PlannedRecord(cluster_key(c), encode_value(clusters[c])) for c in clusters_written]

    streams_written: list[str] = []
    for sid in sorted(parts):
        wanted_parts = parts[sid]
        count = len(wanted_parts)
        stale = sorted(i for i in present_parts.get(sid, ()) if i >= count)
        differs = (
            sid in current.inconsistent
            or current.stream_parts.get(sid) != wanted_parts
            or log.get(commit_key(sid)) != StreamCommit(count)
            or any(log.get(part_key(sid, i)) != p for i, p in enumerate(wanted_parts))
            or bool(stale)
        )
        if not differs:
            continue
        streams_written.append(sid)
        records += [PlannedRecord(part_key(sid, i), encode_value(p)) for i, p in enumerate(wanted_parts)]
        records.append(PlannedRecord(commit_key(sid), encode_value(StreamCommit(count))))
        records += [PlannedRecord(part_key(sid, i), None) for i in stale]

    known_streams = present_commits | set(present_parts) | set(current.streams) | set(current.inconsistent)
    streams_deleted = sorted(known_streams - set(parts))
    for sid in streams_deleted:
        records.append(PlannedRecord(commit_key(sid), None))
        records += [PlannedRecord(part_key(sid, i), None) for i in sorted(present_parts.get(sid, ()))]

    clusters_deleted = sorted((present_clusters | set(current.clusters)) - set(clusters))
    records += [PlannedRecord(cluster_key(c), None) for c in clusters_deleted]
    return WritePlan(
        records=tuple(records),
        clusters_written=tuple(clusters_written),
        clusters_deleted=tuple(clusters_deleted),
        streams_written=tuple(streams_written),
        streams_deleted=tuple(streams_deleted),
    )
