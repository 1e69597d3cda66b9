"""Reading and writing the ``replicaOf`` declaration of a cluster (API.md section 9)::

    replicaOf:
      cluster: east                 # required: the origin cluster's id
      offsets: mirrormaker2         # mirrormaker2 (default) | identical | timestamp
      topics: {east.orders: orders} # optional: replica topic -> origin topic (default "<origin>.<topic>")
      offsetSyncs:                  # optional: where MirrorMaker 2 writes its offset syncs
        location: source            # source (MM2's default: on the origin) | target (on this cluster)
        topic: mm2-offset-syncs.west.internal
      checkpointsTopic: east.checkpoints.internal   # optional (on this cluster)
      failover: false               # true: the origin has failed; its copied topics are not read, and
                                    # positions are translated without contacting it

Three readers share the rules: the file parser (YAML nodes, with lines: :func:`parse_replica_node`), the
metadata topic's records and other plain values (:func:`replica_of_from_obj`), and the validation of
stream objects (:func:`replica_of_problem`). :func:`replica_of_to_obj` writes the form read back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from yaml.nodes import Node, ScalarNode

from multicluster_source.metadata._compose import YAML_TAG, describe_node
from multicluster_source.metadata._model import CLUSTER_ID_RE, TOPIC_RE
from multicluster_source.metadata._replica import ReplicaOf

__all__ = [
    "OFFSETS_MODES",
    "REPLICA_KEYS",
    "parse_replica_node",
    "replica_of_from_obj",
    "replica_of_problem",
    "replica_of_to_obj",
]

OFFSETS_MODES = ("mirrormaker2", "identical", "timestamp")
"""The values of ``replicaOf.offsets``."""
_LOCATIONS = ("source", "target")
REPLICA_KEYS = frozenset({"cluster", "offsets", "topics", "offsetSyncs", "checkpointsTopic", "failover"})
"""The keys of a ``replicaOf`` mapping."""
_SYNC_KEYS = frozenset({"location", "topic"})


def _topic_problem(topic: str) -> str | None:
    """Why ``topic`` is not a valid Kafka topic name (``_validate``'s rule; it imports this module)."""
    if topic in (".", "..") or not TOPIC_RE.match(topic):
        return f"{topic!r} is not a valid topic name (1 to 249 of: ASCII letters, digits, '.', '_', '-')"
    return None


Fail = Callable[[str, str], Exception]
"""``fail(message, key suffix)``: the error to raise (the suffix is appended to ``replicaOf``'s path)."""


def _check(values: Mapping[str, Any], own_cluster: str, fail: Fail) -> ReplicaOf:
    """A :class:`ReplicaOf` of already typed values (strings, a dict, a bool), every rule checked."""
    cluster = values["cluster"]
    if not CLUSTER_ID_RE.match(cluster):
        raise fail(
            f"cluster {cluster!r} is not a valid cluster id (letters, digits, '.', '_', '-')", ".cluster"
        )
    if cluster == own_cluster:
        raise fail(f"a cluster cannot be a replica of itself ({cluster!r})", ".cluster")
    offsets = values.get("offsets", "mirrormaker2")
    if offsets not in OFFSETS_MODES:
        raise fail(f"offsets must be one of {', '.join(OFFSETS_MODES)}, got {offsets!r}", ".offsets")
    topics: dict[str, str] = values.get("topics") or {}
    for replica_topic, origin_topic in topics.items():
        for topic in (replica_topic, origin_topic):
            problem = _topic_problem(topic)
            if problem:
                raise fail(problem, f'.topics["{replica_topic}"]')
    location = values.get("location", "source")
    if location not in _LOCATIONS:
        raise fail(f"location must be source or target, got {location!r}", ".offsetSyncs.location")
    for name, key in (("syncs_topic", ".offsetSyncs.topic"), ("checkpoints_topic", ".checkpointsTopic")):
        named = values.get(name)
        if named is not None:
            problem = _topic_problem(named)
            if problem:
                raise fail(problem, key)
    return ReplicaOf(
        cluster=cluster,
        offsets=offsets,
        topics=topics,
        syncs_location=location,
        syncs_topic=values.get("syncs_topic"),
        checkpoints_topic=values.get("checkpoints_topic"),
        failover=bool(values.get("failover", False)),
    )


# ------------------------------------------------------------------------------------------ plain values


def replica_of_from_obj(obj: Any, *, own_cluster: str, fail: Fail) -> ReplicaOf:
    """Read a ``replicaOf`` value given as plain JSON-like data (the metadata topic's records)."""
    if not isinstance(obj, dict):
        raise fail(f"replicaOf must be a mapping, got {type(obj).__name__}", "")
    unknown = sorted(set(obj) - REPLICA_KEYS)
    if unknown:
        raise fail(
            f"unknown keys {', '.join(map(repr, unknown))} (known: {', '.join(sorted(REPLICA_KEYS))})", ""
        )
    values: dict[str, Any] = {}
    for key in ("cluster", "offsets", "checkpointsTopic"):
        if key in obj:
            if not isinstance(obj[key], str) or not obj[key].strip():
                raise fail(f"{key} must be a non-empty string", f".{key}")
            values["checkpoints_topic" if key == "checkpointsTopic" else key] = obj[key]
    if "cluster" not in values:
        raise fail("missing required key 'cluster'", ".cluster")
    topics = obj.get("topics") or {}
    if not isinstance(topics, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in topics.items()
    ):
        raise fail("topics must map replica topic names to origin topic names", ".topics")
    values["topics"] = topics
    syncs = obj.get("offsetSyncs") or {}
    if not isinstance(syncs, dict) or set(syncs) - _SYNC_KEYS:
        raise fail("offsetSyncs must be a mapping with 'location' and/or 'topic'", ".offsetSyncs")
    for key, name in (("location", "location"), ("topic", "syncs_topic")):
        if key in syncs:
            if not isinstance(syncs[key], str) or not syncs[key].strip():
                raise fail(f"{key} must be a non-empty string", f".offsetSyncs.{key}")
            values[name] = syncs[key]
    failover = obj.get("failover", False)
    if not isinstance(failover, bool):
        raise fail(f"failover must be true or false, got {failover!r}", ".failover")
    values["failover"] = failover
    return _check(values, own_cluster, fail)


def replica_of_to_obj(replica_of: ReplicaOf) -> dict[str, Any]:
    """The written form (defaults left out); :func:`replica_of_from_obj` and the file parser read it back."""
    out: dict[str, Any] = {"cluster": replica_of.cluster, "offsets": replica_of.offsets}
    if replica_of.topics:
        out["topics"] = {k: replica_of.topics[k] for k in sorted(replica_of.topics)}
    syncs: dict[str, str] = {}
    if replica_of.syncs_location != "source":
        syncs["location"] = replica_of.syncs_location
    if replica_of.syncs_topic:
        syncs["topic"] = replica_of.syncs_topic
    if syncs:
        out["offsetSyncs"] = syncs
    if replica_of.checkpoints_topic:
        out["checkpointsTopic"] = replica_of.checkpoints_topic
    if replica_of.failover:
        out["failover"] = True
    return out


def replica_of_problem(replica_of: Any, own_cluster: str) -> tuple[str, str] | None:
    """``(message, key suffix)`` when a :class:`ReplicaOf` object breaks a rule, else None."""
    if not isinstance(replica_of, ReplicaOf):
        return (f"replica_of must be a ReplicaOf, got {type(replica_of).__name__}", "")
    problems: list[tuple[str, str]] = []

    def fail(message: str, key: str) -> Exception:
        problems.append((message, key))
        return ValueError(message)

    try:
        replica_of_from_obj(replica_of_to_obj(replica_of), own_cluster=own_cluster, fail=fail)
    except ValueError:
        return problems[0]
    return None


# ------------------------------------------------------------------------------------------- YAML nodes


def parse_replica_node(walker: Any, key_node: Node, node: Node, path: str, own_cluster: str) -> ReplicaOf:
    """Read a ``replicaOf`` node of a metadata file; ``walker`` is the parser's (``fail``, ``mapping``,
    ``text``, ``warn_unknown``): errors name the file, the line and the key."""
    lines: dict[str, Node] = {"": key_node}

    def fail(message: str, suffix: str) -> Exception:
        at = lines.get(suffix, lines.get(suffix.split("[")[0], key_node))
        error: Exception = walker.fail(f"replicaOf: {message}" if not suffix else message, at, path + suffix)
        return error

    entries = walker.mapping(node, path, "replicaOf")
    walker.warn_unknown(entries, REPLICA_KEYS, path)
    values: dict[str, Any] = {}
    if "cluster" not in entries:
        raise walker.fail("missing required key 'cluster'", key_node, f"{path}.cluster")
    for key, name in (
        ("cluster", "cluster"),
        ("offsets", "offsets"),
        ("checkpointsTopic", "checkpoints_topic"),
    ):
        if key in entries:
            k_node, v_node = entries[key]
            lines[f".{key}"] = k_node
            values[name] = walker.text(k_node, v_node, f"{path}.{key}", key)
    if "topics" in entries:
        k_node, v_node = entries["topics"]
        lines[".topics"] = k_node
        topics: dict[str, str] = {}
        if not _is_null(v_node):
            for name, (t_key, t_value) in walker.mapping(v_node, f"{path}.topics", "topics").items():
                lines[f'.topics["{name}"]'] = t_key
                topics[name] = walker.text(t_key, t_value, f'{path}.topics["{name}"]', "an origin topic name")
        values["topics"] = topics
    if "offsetSyncs" in entries:
        k_node, v_node = entries["offsetSyncs"]
        lines[".offsetSyncs"] = k_node
        syncs = walker.mapping(v_node, f"{path}.offsetSyncs", "offsetSyncs")
        walker.warn_unknown(syncs, _SYNC_KEYS, f"{path}.offsetSyncs")
        for key, name in (("location", "location"), ("topic", "syncs_topic")):
            if key in syncs:
                s_key, s_value = syncs[key]
                lines[f".offsetSyncs.{key}"] = s_key
                values[name] = walker.text(s_key, s_value, f"{path}.offsetSyncs.{key}", key)
    if "failover" in entries:
        k_node, v_node = entries["failover"]
        lines[".failover"] = k_node
        if not (isinstance(v_node, ScalarNode) and v_node.tag == YAML_TAG + "bool"):
            raise walker.fail(
                f"failover must be true or false, got {describe_node(v_node)}", k_node, f"{path}.failover"
            )
        values["failover"] = str(v_node.value).lower() in {"true", "yes", "on"}
    return _check(values, own_cluster, fail)


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == YAML_TAG + "null"
