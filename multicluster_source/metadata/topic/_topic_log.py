"""The reader's state of the metadata topic: :class:`MetadataLog` applies its records in log order.

The record format, and what a commit, a tombstone and an inconsistent stream are, is described in
``_topic_records``. :class:`MetadataLog` is free of Kafka so that it can be tested record by record and is
not thread-safe: the service's reader thread alone feeds it. It hands out immutable
:class:`MetadataSnapshot` copies, which any thread may read and the writer diffs against.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from multicluster_source.metadata._model import KafkaStream
from multicluster_source.metadata.topic._topic_records import (
    ClusterDefinition,
    ClusterKey,
    CommitKey,
    MalformedRecord,
    PartKey,
    RecordFormatError,
    RecordKey,
    RecordValue,
    StreamCommit,
    StreamPart,
    decode_value,
    parse_key,
)

__all__ = ["MetadataLog", "MetadataSnapshot"]

_log = logging.getLogger("multicluster_source.metadata")


# --------------------------------------------------------------------------------------------- snapshot


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, eq=True)
class MetadataSnapshot:
    """A consistent, immutable view of the metadata topic up to (excluding) log ``offset``.

    - ``streams``: the streams in effect (stream id -> stream), each the last consistent version.
    - ``clusters``: every cluster definition in the topic (cluster id -> definition), used or not.
    - ``inconsistent``: ids of streams whose latest commit cannot be satisfied (see ``_topic_records``); a
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
            sid,
            {p.cluster_id: self._clusters[p.cluster_id].with_topics(p.topics, p.replica_of) for p in parts},
        )
        if self._unresolved.pop(sid, None) is not None:
            self._changed()
        self._applied[sid] = parts
        if self._effective.get(sid) != stream:
            self._effective[sid] = stream
            self._changed()
