"""Client configuration for one cluster: source-wide properties, the cluster's own, and the source's."""

from __future__ import annotations

from collections.abc import Mapping

from multicluster_source.framework._javaprops import translate_java_properties
from multicluster_source.metadata._connection import CONNECTION_DEFAULTS, with_connection_defaults
from multicluster_source.metadata._model import ClusterMetadata
from multicluster_source.metadata._placeholders import resolve_properties

DEFAULT_RECONNECT_BACKOFF_MS = CONNECTION_DEFAULTS["reconnect.backoff.ms"]
"""The source's default for librdkafka's ``reconnect.backoff.ms`` in every client of a cluster."""


def cluster_client_config(
    cluster: ClusterMetadata,
    base: Mapping[str, str],
    *,
    client_id: str,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The resolved client configuration for ``cluster``: ``base`` (``set_properties``), overridden by the
    cluster's own properties (placeholders resolved here, and only here; one-to-one Java names renamed),
    then bootstrap servers, client id and ``extra`` (what the source itself must set). Contains secrets:
    never log it."""
    conf = translate_java_properties(
        resolve_properties(base, source="set_properties"), where="set_properties"
    )
    where = f"cluster {cluster.cluster_id} properties"
    conf.update(translate_java_properties(resolve_properties(cluster.properties, source=where), where=where))
    conf["bootstrap.servers"] = cluster.bootstrap_servers
    conf.setdefault("client.id", client_id)
    # librdkafka drops its bootstrap connection once it knows the brokers, and the first request of a new
    # client then waits out half of reconnect.backoff.ms (default 100) before it goes to a broker: 57 ms for
    # a first metadata request on loopback, 17 ms with 10 (an added cluster's admin client and consumers each
    # pay it). metadata.recovery.strategy=none keeps the broker handles of a cluster that is down, so their
    # backoff grows up to reconnect.backoff.max.ms instead of starting over (see metadata._connection).
    conf = with_connection_defaults(conf)
    if extra:
        conf.update(extra)
    return conf


def merge_stream_clusters(streams_clusters: list[ClusterMetadata]) -> dict[str, ClusterMetadata]:
    """Union of clusters over several streams: one entry per cluster id with the topics merged.

    Raises ValueError naming the cluster when two streams disagree on its servers or properties, or declare
    different ``replicaOf`` (a stream that leaves it out takes the other's).
    """
    merged: dict[str, ClusterMetadata] = {}
    for cluster in streams_clusters:
        seen = merged.get(cluster.cluster_id)
        if seen is None:
            merged[cluster.cluster_id] = cluster
            continue
        if not seen.same_connection(cluster):
            raise ValueError(
                f"cluster {cluster.cluster_id!r} appears in two streams with different bootstrap servers "
                "or properties"
            )
        replica_of = seen.replica_of or cluster.replica_of
        if cluster.replica_of is not None and cluster.replica_of != replica_of:
            raise ValueError(
                f"cluster {cluster.cluster_id!r} appears in two streams with different replicaOf"
            )
        merged[cluster.cluster_id] = ClusterMetadata(
            cluster.cluster_id,
            seen.bootstrap_servers,
            seen.topics | cluster.topics,
            seen.properties,
            replica_of,
        )
    return merged


# Consumer-only librdkafka properties: an admin client ignores them with a CONFWARN line each time it is
# created, so the enumerator's admin clients do not get them.
_CONSUMER_ONLY_PREFIXES = ("fetch.", "queued.", "enable.auto.", "auto.commit.", "group.", "consume.")
_CONSUMER_ONLY_KEYS = frozenset(
    {
        "auto.offset.reset",
        "isolation.level",
        "check.crcs",
        "partition.assignment.strategy",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "enable.partition.eof",
        "coordinator.query.interval.ms",
        "offset.store.method",
    }
)


def admin_properties(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` without the consumer-only properties (for admin clients)."""
    return {
        k: v
        for k, v in conf.items()
        if k not in _CONSUMER_ONLY_KEYS and not k.startswith(_CONSUMER_ONLY_PREFIXES)
    }
