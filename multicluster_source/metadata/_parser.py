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
  ``key`` is a path like ``[0].clusterMetadataList[1].topics[2]``. Parsing goes on past a bad stream or
  cluster entry, and the raised error's ``problems`` lists every problem found (the first one first).
- ``streamId``, ``clusterId``, ``bootstrapServers`` and topic names must be strings; unquoted numbers are
  taken as written (``2024`` is the topic ``"2024"``), booleans and nulls are rejected.
- An explicit ``clusterId`` must match ``[A-Za-z0-9._-]+``. A defaulted one is the ``bootstrapServers`` string
  as is, which may also hold ``:``, ``,``, ``[`` and ``]`` (host lists, IPv6); other characters (``/``,
  spaces, ...) would make split ids ambiguous, so they require an explicit ``clusterId``.
- A cluster id may appear in several streams only with the same ``bootstrapServers`` and ``properties``; it
  may appear at most once per stream. Duplicate topic names in one list are merged.
- Property values are scalars turned into text as written, except booleans, which become ``true`` or
  ``false``; null values are rejected. Placeholders are checked for syntax and kind (see ``_placeholders``).
- ``replicaOf`` (a cluster's topics copy another cluster's; keys in ``_replica_parse``) may differ between
  streams only where one of them leaves it out.
- Mapping keys must be unique; YAML merge keys (``<<``) are not supported. Unknown keys are logged once per
  (source, key path) and ignored, so newer files still load.

Here: walking the node tree into streams (:func:`parse_streams`) and writing the format
(:func:`dump_streams`). Turning text into that tree is in ``_compose``; the same rules applied to stream
objects (:func:`validate_streams`) and the name rules are in ``_validate``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from multicluster_source.exceptions import MetadataValidationError
from multicluster_source.metadata._compose import STR_TAG, YAML_TAG, compose_text, describe_node, node_line
from multicluster_source.metadata._model import CLUSTER_ID_RE, ClusterMetadata, KafkaStream
from multicluster_source.metadata._placeholders import (
    find_placeholder_errors,
    warn_unresolvable_placeholders,
)
from multicluster_source.metadata._replica_parse import parse_replica_node, replica_of_to_obj
from multicluster_source.metadata._validate import DEFAULT_ID_CHARS, topic_name_problem

__all__ = ["dump_streams", "parse_node", "parse_streams"]

_log = logging.getLogger("multicluster_source.metadata")

_NUMBER_TAGS = frozenset({YAML_TAG + "int", YAML_TAG + "float"})
_BOOL_TRUE = frozenset({"yes", "true", "on"})

_STREAM_KEYS = frozenset({"streamId", "clusterMetadataList"})
_CLUSTER_KEYS = frozenset({"clusterId", "bootstrapServers", "topics", "properties", "replicaOf"})

_warned_unknown: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


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
            raise self.fail(f"{what} must be a mapping, got {describe_node(node)}", node, path)
        out: dict[str, tuple[ScalarNode, Node]] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag == YAML_TAG + "merge":
                raise self.fail("YAML merge keys (<<) are not supported", key_node, path)
            if not isinstance(key_node, ScalarNode) or key_node.tag != STR_TAG:
                raise self.fail(f"keys must be strings, got {describe_node(key_node)}", key_node, path)
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
        raise self.fail(f"{what} must be a non-empty string, got {describe_node(node)}", key_node, path)

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
        self.problems: list[MetadataValidationError] = []

    def parse(self, root: Node | None) -> set[KafkaStream]:
        if root is None or (isinstance(root, ScalarNode) and root.tag == YAML_TAG + "null"):
            return set()
        if not isinstance(root, SequenceNode):
            raise self.w.fail(f"the top level must be a list of streams, got {describe_node(root)}", root, "")
        streams: set[KafkaStream] = set()
        for i, item in enumerate(root.value):
            try:
                streams.add(self.stream(item, f"[{i}]"))
            except MetadataValidationError as exc:
                self.problems.append(exc)
        if self.problems:
            first = self.problems[0]
            first.problems = list(self.problems)
            raise first
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
                f"clusterMetadataList must be a list, got {describe_node(value)}", key_node, list_path
            )
        if not value.value:
            raise self.w.fail(f"stream {stream_id!r} has an empty clusterMetadataList", key_node, list_path)
        clusters: dict[str, ClusterMetadata] = {}
        seen_here: dict[str, _Place] = {}
        failed = 0
        for i, item in enumerate(value.value):
            item_path = f"{list_path}[{i}]"
            try:
                cluster, id_node = self.cluster(item, item_path)
            except MetadataValidationError as exc:  # go on to find the other entries' problems
                self.problems.append(exc)
                failed += 1
                continue
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
        if failed:
            raise self.problems.pop()  # parse() records it again: the stream is left out
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
        if (
            first.replica_of is not None
            and cluster.replica_of is not None
            and first.replica_of != cluster.replica_of
        ):
            raise self.w.fail(
                f"cluster {cluster.cluster_id!r} has a different replicaOf here than at "
                f"{first_place.describe()}",
                node,
                _join(place.path, "replicaOf"),
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
            if not set(servers) <= DEFAULT_ID_CHARS:
                raise w.fail(
                    f"clusterId is missing and bootstrapServers {servers!r} cannot serve as one (it holds "
                    "characters other than letters, digits and . _ - : , [ ]); set clusterId",
                    node,
                    _join(path, "clusterId"),
                )
        topics = self.topics(entries, node, path)
        properties = self.properties(entries, path)
        replica_of = None
        if "replicaOf" in entries:
            key_node, value = entries["replicaOf"]
            replica_of = parse_replica_node(w, key_node, value, _join(path, "replicaOf"), cluster_id)
        cluster = ClusterMetadata(cluster_id, servers, topics, properties, replica_of)
        return cluster, id_node

    def topics(
        self, entries: Mapping[str, tuple[ScalarNode, Node]], owner: Node, path: str
    ) -> frozenset[str]:
        w = self.w
        topics_path = _join(path, "topics")
        key_node, value = w.required(entries, "topics", owner, path)
        if not isinstance(value, SequenceNode):
            raise w.fail(
                f"topics must be a list of topic names, got {describe_node(value)}", key_node, topics_path
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
        if isinstance(value, ScalarNode) and value.tag == YAML_TAG + "null":
            return {}
        props_entries = w.mapping(value, props_path, "properties")
        out: dict[str, str] = {}
        for name, (name_node, value_node) in props_entries.items():
            prop_path = f'{props_path}["{name}"]'
            if not name.strip():
                raise w.fail("property names must not be empty", name_node, prop_path)
            if not isinstance(value_node, ScalarNode):
                raise w.fail(
                    f"property values must be scalars, got {describe_node(value_node)}", value_node, prop_path
                )
            if value_node.tag == YAML_TAG + "null":
                raise w.fail("property values must not be null", name_node, prop_path)
            if value_node.tag == YAML_TAG + "bool":
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
            if cluster.replica_of is not None:
                entry["replicaOf"] = replica_of_to_obj(cluster.replica_of)
            entries.append(entry)
        documents.append({"streamId": stream.stream_id, "clusterMetadataList": entries})
    return str(
        yaml.safe_dump(documents, sort_keys=False, default_flow_style=False, allow_unicode=True, width=4096)
    )
