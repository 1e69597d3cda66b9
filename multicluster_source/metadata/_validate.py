"""The metadata rules for stream objects, and the name rules shared by the file parser and topic records.

:func:`validate_streams` applies the rules of the file format (see ``_parser``) to :class:`KafkaStream`
objects, which carry no lines; :func:`topic_name_problem` and :func:`cluster_id_problem` say why a topic
name or a cluster id is invalid.
"""

from __future__ import annotations

from collections.abc import Iterable

from multicluster_source.exceptions import MetadataValidationError
from multicluster_source.metadata._model import CLUSTER_ID_RE, TOPIC_RE, ClusterMetadata, KafkaStream
from multicluster_source.metadata._placeholders import find_placeholder_errors
from multicluster_source.metadata._replica_parse import replica_of_problem

__all__ = ["DEFAULT_ID_CHARS", "cluster_id_problem", "topic_name_problem", "validate_streams"]

# A defaulted cluster id is the bootstrap servers string; these characters keep split ids unambiguous.
DEFAULT_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:,[]")


def topic_name_problem(topic: str) -> str | None:
    """Why ``topic`` is not a valid Kafka topic name, or None when it is."""
    if topic in (".", ".."):
        return f"{topic!r} is not a valid topic name"
    if not TOPIC_RE.match(topic):
        return f"{topic!r} is not a valid topic name (1 to 249 of: ASCII letters, digits, '.', '_', '-')"
    return None


def cluster_id_problem(cluster_id: str, bootstrap_servers: str) -> str | None:
    """Why ``cluster_id`` (explicit, or defaulted to ``bootstrap_servers``) is invalid, or None when valid."""
    if CLUSTER_ID_RE.match(cluster_id):
        return None
    if cluster_id == bootstrap_servers and cluster_id and set(cluster_id) <= DEFAULT_ID_CHARS:
        return None
    return f"cluster id {cluster_id!r} is invalid: use letters, digits, '.', '_' and '-'"


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
            problem = cluster_id_problem(cid, cluster.bootstrap_servers)
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
            if cluster.replica_of is not None:
                found = replica_of_problem(cluster.replica_of, cid)
                if found is not None:
                    raise fail(found[0], f"{cpath}.replica_of{found[1]}")
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
            elif (
                None not in (known[0].replica_of, cluster.replica_of)
                and known[0].replica_of != cluster.replica_of
            ):
                raise fail(f"cluster {cid!r} has a different replica_of here and at {known[1]}", cpath)
