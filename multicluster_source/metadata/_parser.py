"""Read and write the stream metadata file format.

The format is the one Flink's ``YamlFileMetadataService`` reads, plus an optional ``properties`` map per
cluster::

    - streamId: orders
      clusterMetadataList:
        - clusterId: east                  # optional: defaults to bootstrapServers
          bootstrapServers: kafka-east-1:9092
          topics: [orders, orders-retry]
          properties:                      # optional
            sasl.password: ${env:EAST_KAFKA_PASSWORD}

Decisions where the contract is silent:

- YAML or JSON is chosen by content: text whose first non-blank character is ``[`` or ``{`` is read as JSON;
  if it is not valid JSON but valid YAML (a YAML flow collection), the YAML reading is used, otherwise the
  JSON error is reported. Empty text, only comments, or ``null`` mean zero streams.
- The first problem found is raised; its ``line`` is 1-based (the line of the offending key or item) and its
  ``key`` is a path like ``[0].clusterMetadataList[1].topics[2]``.
- ``streamId``, ``clusterId``, ``bootstrapServers`` and topic names must be strings; unquoted numbers are
  taken as written (``2024`` is the topic ``"2024"``), booleans and nulls are rejected.
- An explicit ``clusterId`` must match ``[A-Za-z0-9._-]+``. A defaulted one is the ``bootstrapServers`` string
  as is, which may also hold ``:``, ``,``, ``[`` and ``]`` (host lists, IPv6); other characters (``/``,
  spaces, ...) would make split ids ambiguous, so they require an explicit ``clusterId``.
- A cluster id may appear in several streams only with the same ``bootstrapServers`` and ``properties``; it
  may appear at most once per stream. Duplicate topic names in one list are merged.
- Property values are scalars turned into text as written, except booleans, which become ``true`` or
  ``false``; null values are rejected. Placeholders are checked for syntax and kind (see ``_placeholders``).
- Mapping keys must be unique; YAML merge keys (``<<``) are not supported. Unknown keys are logged once per
  (source, key path) and ignored, so newer files still load.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from multicluster_source.exceptions import MetadataError, MetadataValidationError
from multicluster_source.metadata._model import CLUSTER_ID_RE, TOPIC_RE, ClusterMetadata, KafkaStream
from multicluster_source.metadata._placeholders import (
    find_placeholder_errors,
    warn_unresolvable_placeholders,
)

__all__ = [
    "compose_text",
    "dump_streams",
    "node_line",
    "parse_node",
    "parse_streams",
    "topic_name_problem",
    "validate_streams",
]

_log = logging.getLogger("multicluster_source.metadata")

_YAML = "tag:yaml.org,2002:"
STR_TAG = _YAML + "str"
_TAG_NAMES = {
    STR_TAG: "a string",
    _YAML + "int": "an integer",
    _YAML + "float": "a number",
    _YAML + "bool": "a boolean",
    _YAML + "null": "null",
    _YAML + "timestamp": "a timestamp",
    _YAML + "binary": "binary data",
}
_NUMBER_TAGS = frozenset({_YAML + "int", _YAML + "float"})
_BOOL_TRUE = frozenset({"yes", "true", "on"})

_STREAM_KEYS = frozenset({"streamId", "clusterMetadataList"})
_CLUSTER_KEYS = frozenset({"clusterId", "bootstrapServers", "topics", "properties"})

# A defaulted cluster id is the bootstrap servers string; these characters keep split ids unambiguous.
_DEFAULT_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:,[]")

_warned_unknown: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def node_line(node: Node | None) -> int | None:
    """The 1-based line where ``node`` starts, when the node carries a position."""
    mark = getattr(node, "start_mark", None)
    return None if mark is None else int(mark.line) + 1


def _describe(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    return _TAG_NAMES.get(node.tag, f"a value tagged {node.tag}")


def topic_name_problem(topic: str) -> str | None:
    """Why ``topic`` is not a valid Kafka topic name, or None when it is."""
    if topic in (".", ".."):
        return f"{topic!r} is not a valid topic name"
    if not TOPIC_RE.match(topic):
        return f"{topic!r} is not a valid topic name (1 to 249 of: ASCII letters, digits, '.', '_', '-')"
    return None


def _cluster_id_problem(cluster_id: str, bootstrap_servers: str) -> str | None:
    if CLUSTER_ID_RE.match(cluster_id):
        return None
    if cluster_id == bootstrap_servers and cluster_id and set(cluster_id) <= _DEFAULT_ID_CHARS:
        return None
    return f"cluster id {cluster_id!r} is invalid: use letters, digits, '.', '_' and '-'"


# --------------------------------------------------------------------------------------------- composing


def _json_to_node(value: Any) -> Node:
    """A position-less YAML node tree for a decoded JSON value (used only if PyYAML rejects valid JSON)."""
    if isinstance(value, dict):
        return MappingNode(
            _YAML + "map", [(ScalarNode(STR_TAG, str(k)), _json_to_node(v)) for k, v in value.items()]
        )
    if isinstance(value, list):
        return SequenceNode(_YAML + "seq", [_json_to_node(v) for v in value])
    if isinstance(value, bool):
        return ScalarNode(_YAML + "bool", "true" if value else "false")
    if value is None:
        return ScalarNode(_YAML + "null", "null")
    if isinstance(value, int):
        return ScalarNode(_YAML + "int", str(value))
    if isinstance(value, float):
        return ScalarNode(_YAML + "float", repr(value))
    return ScalarNode(STR_TAG, str(value))


def _yaml_error(exc: yaml.YAMLError, source: str) -> MetadataError:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        parts = [p for p in (exc.context, exc.problem) if p]
        return MetadataError(
            f"invalid YAML: {'; '.join(parts) or 'parse error'} (column {mark.column + 1})",
            source=source,
            line=mark.line + 1,
        )
    return MetadataError(f"invalid YAML: {exc}", source=source)


def _compose_yaml(text: str, source: str) -> Node | None:
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, source) from None
    except RecursionError:
        raise MetadataError("invalid YAML: nesting too deep", source=source) from None


def compose_text(text: str, *, source: str) -> Node | None:
    """Compose ``text`` (YAML, or JSON chosen by content) into a node tree; None for an empty document."""
    if text.startswith("\ufeff"):
        text = text[1:]
    stripped = text.lstrip(" \t\r\n")
    if not stripped.startswith(("[", "{")):
        return _compose_yaml(text, source)
    try:
        decoded = json.loads(text)
    except json.JSONDecodeError as exc:
        try:
            return yaml.compose(text, Loader=yaml.SafeLoader)
        except (yaml.YAMLError, RecursionError):
            pass
        raise MetadataError(
            f"invalid JSON: {exc.msg} (column {exc.colno})", source=source, line=exc.lineno
        ) from None
    except RecursionError:
        raise MetadataError("invalid JSON: nesting too deep", source=source) from None
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        raise MetadataError(f"invalid JSON: {exc}", source=source) from None
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, RecursionError):
        # Valid JSON that PyYAML (YAML 1.1) rejects, e.g. tab indentation: no line numbers then.
        return _json_to_node(decoded)


# --------------------------------------------------------------------------------------------- walking


@dataclass(frozen=True)
class _Place:
    path: str
    line: int | None

    def describe(self) -> str:
        return f"{self.path} (line {self.line})" if self.line is not None else self.path


class _Walker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, message: str, node: Node | None, path: str) -> MetadataValidationError:
        return MetadataValidationError(message, source=self.source, line=node_line(node), key=path or None)

    def mapping(self, node: Node, path: str, what: str) -> dict[str, tuple[ScalarNode, Node]]:
        if not isinstance(node, MappingNode):
            raise self.fail(f"{what} must be a mapping, got {_describe(node)}", node, path)
        out: dict[str, tuple[ScalarNode, Node]] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag == _YAML + "merge":
                raise self.fail("YAML merge keys (<<) are not supported", key_node, path)
            if not isinstance(key_node, ScalarNode) or key_node.tag != STR_TAG:
                raise self.fail(f"keys must be strings, got {_describe(key_node)}", key_node, path)
            name = key_node.value
            if name in out:
                first = node_line(out[name][0])
                also = f" (first at line {first})" if first is not None else ""
                raise self.fail(f"duplicate key {name!r}{also}", key_node, _join(path, name))
            out[name] = (key_node, value_node)
        return out

    def warn_unknown(
        self, entries: Mapping[str, tuple[ScalarNode, Node]], known: frozenset[str], path: str
    ) -> None:
        for name, (key_node, _) in entries.items():
            if name in known:
                continue
            marker = (self.source, _join(path, name))
            with _warned_lock:
                if marker in _warned_unknown:
                    continue
                _warned_unknown.add(marker)
            line = node_line(key_node)
            _log.warning(
                "%s%s: unknown key %r ignored (known keys: %s)",
                self.source,
                f", line {line}" if line is not None else "",
                _join(path, name),
                ", ".join(sorted(known)),
            )

    def text(self, key_node: Node, node: Node, path: str, what: str) -> str:
        if isinstance(node, ScalarNode) and (node.tag == STR_TAG or node.tag in _NUMBER_TAGS):
            if not node.value.strip():
                raise self.fail(f"{what} must not be empty", key_node, path)
            return str(node.value)
        raise self.fail(f"{what} must be a non-empty string, got {_describe(node)}", key_node, path)

    def required(
        self, entries: Mapping[str, tuple[ScalarNode, Node]], name: str, owner: Node, path: str
    ) -> tuple[ScalarNode, Node]:
        if name not in entries:
            raise self.fail(f"missing required key {name!r}", owner, _join(path, name))
        return entries[name]


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


class _FileParser:
    def __init__(self, source: str) -> None:
        self.w = _Walker(source)
        self.source = source
        self.stream_places: dict[str, _Place] = {}
        self.cluster_places: dict[str, tuple[ClusterMetadata, _Place]] = {}

    def parse(self, root: Node | None) -> set[KafkaStream]:
        if root is None or (isinstance(root, ScalarNode) and root.tag == _YAML + "null"):
            return set()
        if not isinstance(root, SequenceNode):
            raise self.w.fail(f"the top level must be a list of streams, got {_describe(root)}", root, "")
        streams = {self.stream(item, f"[{i}]") for i, item in enumerate(root.value)}
        for stream in streams:
            for cluster in stream.clusters.values():
                warn_unresolvable_placeholders(
                    cluster.properties, source=self.source, cluster_id=cluster.cluster_id
                )
        return streams

    def stream(self, node: Node, path: str) -> KafkaStream:
        entries = self.w.mapping(node, path, "a stream")
        self.w.warn_unknown(entries, _STREAM_KEYS, path)
        key_node, value = self.w.required(entries, "streamId", node, path)
        stream_id = self.w.text(key_node, value, _join(path, "streamId"), "streamId")
        place = _Place(path, node_line(key_node))
        if stream_id in self.stream_places:
            raise self.w.fail(
                f"duplicate streamId {stream_id!r}: "
                f"also defined at {self.stream_places[stream_id].describe()}",
                key_node,
                _join(path, "streamId"),
            )
        self.stream_places[stream_id] = place
        list_path = _join(path, "clusterMetadataList")
        key_node, value = self.w.required(entries, "clusterMetadataList", node, path)
        if not isinstance(value, SequenceNode):
            raise self.w.fail(
                f"clusterMetadataList must be a list, got {_describe(value)}", key_node, list_path
            )
        if not value.value:
            raise self.w.fail(f"stream {stream_id!r} has an empty clusterMetadataList", key_node, list_path)
        clusters: dict[str, ClusterMetadata] = {}
        seen_here: dict[str, _Place] = {}
        for i, item in enumerate(value.value):
            item_path = f"{list_path}[{i}]"
            cluster, id_node = self.cluster(item, item_path)
            item_place = _Place(item_path, node_line(id_node))
            if cluster.cluster_id in seen_here:
                raise self.w.fail(
                    f"cluster {cluster.cluster_id!r} appears twice in stream {stream_id!r}: "
                    f"also at {seen_here[cluster.cluster_id].describe()}",
                    id_node,
                    item_path,
                )
            seen_here[cluster.cluster_id] = item_place
            self.check_consistent(cluster, item_place, id_node)
            clusters[cluster.cluster_id] = cluster
        return KafkaStream(stream_id=stream_id, clusters=clusters)

    def check_consistent(self, cluster: ClusterMetadata, place: _Place, node: Node) -> None:
        known = self.cluster_places.get(cluster.cluster_id)
        if known is None:
            self.cluster_places[cluster.cluster_id] = (cluster, place)
            return
        first, first_place = known
        if first.bootstrap_servers != cluster.bootstrap_servers:
            raise self.w.fail(
                f"cluster {cluster.cluster_id!r} has bootstrapServers {cluster.bootstrap_servers!r} here but "
                f"{first.bootstrap_servers!r} at {first_place.describe()}",
                node,
                place.path,
            )
        if dict(first.properties) != dict(cluster.properties):
            differing = sorted(
                k
                for k in set(first.properties) | set(cluster.properties)
                if first.properties.get(k) != cluster.properties.get(k)
            )
            raise self.w.fail(
                f"cluster {cluster.cluster_id!r} has different properties here than at "
                f"{first_place.describe()} (keys differing: {', '.join(differing)})",
                node,
                place.path,
            )

    def cluster(self, node: Node, path: str) -> tuple[ClusterMetadata, Node]:
        w = self.w
        entries = w.mapping(node, path, "a cluster")
        w.warn_unknown(entries, _CLUSTER_KEYS, path)
        key_node, value = w.required(entries, "bootstrapServers", node, path)
        servers = w.text(key_node, value, _join(path, "bootstrapServers"), "bootstrapServers")
        id_node: Node = node
        if "clusterId" in entries:
            id_node, value = entries["clusterId"]
            cluster_id = w.text(id_node, value, _join(path, "clusterId"), "clusterId")
            if not CLUSTER_ID_RE.match(cluster_id):
                raise w.fail(
                    f"clusterId {cluster_id!r} is invalid: use letters, digits, '.', '_' and '-'",
                    id_node,
                    _join(path, "clusterId"),
                )
        else:
            cluster_id = servers
            if not set(servers) <= _DEFAULT_ID_CHARS:
                raise w.fail(
                    f"clusterId is missing and bootstrapServers {servers!r} cannot serve as one (it holds "
                    "characters other than letters, digits and . _ - : , [ ]); set clusterId",
                    node,
                    _join(path, "clusterId"),
                )
        topics = self.topics(entries, node, path)
        properties = self.properties(entries, path)
        return (
            ClusterMetadata(
                cluster_id=cluster_id, bootstrap_servers=servers, topics=topics, properties=properties
            ),
            id_node,
        )

    def topics(
        self, entries: Mapping[str, tuple[ScalarNode, Node]], owner: Node, path: str
    ) -> frozenset[str]:
        w = self.w
        topics_path = _join(path, "topics")
        key_node, value = w.required(entries, "topics", owner, path)
        if not isinstance(value, SequenceNode):
            raise w.fail(
                f"topics must be a list of topic names, got {_describe(value)}", key_node, topics_path
            )
        if not value.value:
            raise w.fail("topics must not be empty", key_node, topics_path)
        topics: set[str] = set()
        for i, item in enumerate(value.value):
            item_path = f"{topics_path}[{i}]"
            topic = w.text(item, item, item_path, "a topic name")
            problem = topic_name_problem(topic)
            if problem:
                raise w.fail(problem, item, item_path)
            topics.add(topic)
        return frozenset(topics)

    def properties(self, entries: Mapping[str, tuple[ScalarNode, Node]], path: str) -> dict[str, str]:
        w = self.w
        if "properties" not in entries:
            return {}
        value = entries["properties"][1]
        props_path = _join(path, "properties")
        if isinstance(value, ScalarNode) and value.tag == _YAML + "null":
            return {}
        props_entries = w.mapping(value, props_path, "properties")
        out: dict[str, str] = {}
        for name, (name_node, value_node) in props_entries.items():
            prop_path = f'{props_path}["{name}"]'
            if not name.strip():
                raise w.fail("property names must not be empty", name_node, prop_path)
            if not isinstance(value_node, ScalarNode):
                raise w.fail(
                    f"property values must be scalars, got {_describe(value_node)}", value_node, prop_path
                )
            if value_node.tag == _YAML + "null":
                raise w.fail("property values must not be null", name_node, prop_path)
            if value_node.tag == _YAML + "bool":
                text = "true" if str(value_node.value).lower() in _BOOL_TRUE else "false"
            else:
                text = str(value_node.value)
            for problem in find_placeholder_errors(text):
                raise w.fail(problem, value_node, prop_path)
            out[name] = text
        return out


def parse_streams(text: str, *, source: str) -> set[KafkaStream]:
    """Parse metadata ``text`` (YAML, or JSON chosen by content) into streams.

    Raises :class:`MetadataError` for text that is not YAML/JSON and :class:`MetadataValidationError` for
    content that breaks a rule; both carry ``source``, ``line`` (1-based, where known) and ``key``.
    """
    root = compose_text(text, source=source)
    return _FileParser(source).parse(root)


def parse_node(root: Node | None, *, source: str) -> set[KafkaStream]:
    """Like :func:`parse_streams` for an already composed node tree."""
    return _FileParser(source).parse(root)


# --------------------------------------------------------------------------------------------- objects


def validate_streams(streams: Iterable[KafkaStream], *, source: str) -> None:
    """Apply the file rules to stream objects (no lines): raises :class:`MetadataValidationError`."""
    stream_ids: dict[str, KafkaStream] = {}
    clusters: dict[str, tuple[ClusterMetadata, str]] = {}

    def fail(message: str, key: str) -> MetadataValidationError:
        return MetadataValidationError(message, source=source, key=key)

    for stream in streams:
        if not isinstance(stream, KafkaStream):
            raise fail(f"expected a KafkaStream, got {type(stream).__name__}", "streams")
        sid = stream.stream_id
        spath = f"streams[{sid!r}]"
        if not isinstance(sid, str) or not sid.strip():
            raise fail("stream ids must be non-empty strings", spath)
        if sid in stream_ids:
            raise fail(f"two different streams have the id {sid!r}", spath)
        stream_ids[sid] = stream
        if not stream.clusters:
            raise fail(f"stream {sid!r} has no clusters", f"{spath}.clusters")
        for cid, cluster in stream.clusters.items():
            cpath = f"{spath}.clusters[{cid!r}]"
            if cid != cluster.cluster_id:
                raise fail(f"mapped under {cid!r} but its cluster_id is {cluster.cluster_id!r}", cpath)
            if not isinstance(cluster.bootstrap_servers, str) or not cluster.bootstrap_servers.strip():
                raise fail("bootstrap_servers must be a non-empty string", f"{cpath}.bootstrap_servers")
            problem = _cluster_id_problem(cid, cluster.bootstrap_servers)
            if problem:
                raise fail(problem, cpath)
            if not cluster.topics:
                raise fail("topics must not be empty", f"{cpath}.topics")
            for topic in sorted(cluster.topics, key=str):
                problem = (
                    topic_name_problem(topic) if isinstance(topic, str) else "topic names must be strings"
                )
                if problem:
                    raise fail(problem, f"{cpath}.topics")
            for key, value in cluster.properties.items():
                if not isinstance(key, str) or not isinstance(value, str):
                    raise fail("property names and values must be strings", f"{cpath}.properties")
                for problem in find_placeholder_errors(value):
                    raise fail(problem, f"{cpath}.properties[{key!r}]")
            known = clusters.get(cid)
            if known is None:
                clusters[cid] = (cluster, cpath)
            elif not known[0].same_connection(cluster):
                what = (
                    "bootstrap servers"
                    if known[0].bootstrap_servers != cluster.bootstrap_servers
                    else "properties"
                )
                raise fail(f"cluster {cid!r} has different {what} here and at {known[1]}", cpath)


# --------------------------------------------------------------------------------------------- writing


def dump_streams(streams: Iterable[KafkaStream]) -> str:
    """Write ``streams`` in the file format (sorted, placeholders kept as written); parses back equal."""
    documents: list[dict[str, Any]] = []
    for stream in sorted(streams, key=lambda s: s.stream_id):
        entries: list[dict[str, Any]] = []
        for cid in sorted(stream.clusters):
            cluster = stream.clusters[cid]
            entry: dict[str, Any] = {}
            if cluster.cluster_id != cluster.bootstrap_servers:
                entry["clusterId"] = cluster.cluster_id
            entry["bootstrapServers"] = cluster.bootstrap_servers
            entry["topics"] = sorted(cluster.topics)
            if cluster.properties:
                entry["properties"] = {k: cluster.properties[k] for k in sorted(cluster.properties)}
            entries.append(entry)
        documents.append({"streamId": stream.stream_id, "clusterMetadataList": entries})
    return str(
        yaml.safe_dump(documents, sort_keys=False, default_flow_style=False, allow_unicode=True, width=4096)
    )
