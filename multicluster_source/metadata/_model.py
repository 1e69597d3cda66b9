"""Metadata value types and the protocol every metadata service satisfies."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from multicluster_source.metadata._placeholders import redact_properties
from multicluster_source.metadata._replica import ReplicaOf

CLUSTER_ID_RE = re.compile(r"^[A-Za-z0-9._-]+$")
# Kafka's own rule for topic names: legal characters, at most 249, not "." or "..".
TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def _frozen_mapping(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


@dataclass(frozen=True)
class ClusterMetadata:
    """One Kafka cluster's part of a stream: where it is, which topics, and extra client properties.

    ``properties`` may hold unresolved placeholders (``${env:NAME}``, ``${file:PATH}``); they are resolved
    only when a client is created (see :func:`resolve_properties`) and never shown resolved.
    ``replica_of`` declares that some of the topics copy topics of another cluster (``replicaOf``, API.md
    section 9): while an origin topic is read, its copy here is not.
    """

    cluster_id: str
    bootstrap_servers: str
    topics: frozenset[str]
    properties: Mapping[str, str] = field(default_factory=dict)
    replica_of: ReplicaOf | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", frozenset(self.topics))
        object.__setattr__(self, "properties", _frozen_mapping(self.properties))

    def __repr__(self) -> str:
        # Never the values of secret-looking properties (placeholders are kept: they name a source).
        props = redact_properties(self.properties)
        replica = "" if self.replica_of is None else f", replica_of={self.replica_of!r}"
        return (
            f"ClusterMetadata(cluster_id={self.cluster_id!r}, bootstrap_servers={self.bootstrap_servers!r}, "
            f"topics={sorted(self.topics)!r}, properties={props!r}{replica})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # A mappingproxy cannot be pickled: runtimes carry metadata to other processes and machines.
        return (
            ClusterMetadata,
            (self.cluster_id, self.bootstrap_servers, self.topics, dict(self.properties), self.replica_of),
        )

    def __hash__(self) -> int:
        props = tuple(sorted(self.properties.items()))
        return hash((self.cluster_id, self.bootstrap_servers, self.topics, props, self.replica_of))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClusterMetadata):
            return NotImplemented
        return (
            self.cluster_id == other.cluster_id
            and self.bootstrap_servers == other.bootstrap_servers
            and self.topics == other.topics
            and dict(self.properties) == dict(other.properties)
            and self.replica_of == other.replica_of
        )

    def same_connection(self, other: ClusterMetadata) -> bool:
        """True when both describe the same cluster reached the same way (servers and properties)."""
        return self.bootstrap_servers == other.bootstrap_servers and dict(self.properties) == dict(
            other.properties
        )


@dataclass(frozen=True)
class KafkaStream:
    """One logical stream made of topics on one or more clusters."""

    stream_id: str
    clusters: Mapping[str, ClusterMetadata]

    def __post_init__(self) -> None:
        object.__setattr__(self, "clusters", MappingProxyType(dict(self.clusters)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (KafkaStream, (self.stream_id, dict(self.clusters)))

    def __hash__(self) -> int:
        return hash((self.stream_id, tuple(sorted(self.clusters.items(), key=lambda kv: kv[0]))))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KafkaStream):
            return NotImplemented
        return self.stream_id == other.stream_id and dict(self.clusters) == dict(other.clusters)


MetadataListener = Callable[[], None]
"""Called (from any thread) when a service's metadata may have changed; it must return quickly."""


@runtime_checkable
class KafkaMetadataService(Protocol):
    """What the enumerator asks about streams. Called from the enumerator's thread only.

    A service may also offer ``subscribe(listener) -> Callable[[], None]`` (see
    :class:`NotifyingMetadataService`) so that changes are applied at once instead of at the next poll.
    """

    def get_all_streams(self) -> set[KafkaStream]:
        """Every stream the service knows."""
        ...

    def describe_streams(self, stream_ids: Collection[str]) -> dict[str, KafkaStream]:
        """The named streams that exist; unknown ids are left out."""
        ...

    def is_cluster_active(self, cluster_id: str) -> bool:
        """Whether any stream currently uses the cluster."""
        ...

    def close(self) -> None:
        """Release watchers, clients and threads."""
        ...


@runtime_checkable
class NotifyingMetadataService(KafkaMetadataService, Protocol):
    """A metadata service that tells listeners when its metadata may have changed."""

    def subscribe(self, listener: MetadataListener) -> Callable[[], None]:
        """Register ``listener``; returns a function that unregisters it."""
        ...
