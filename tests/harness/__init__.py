"""Test harness: Kafka clusters (Apache Kafka from Maven Central, tansu, or external) and their helpers."""

from .kafka import (
    KAFKA_VERSION,
    Cluster,
    ClusterPool,
    ClusterUnavailable,
    ExternalCluster,
    KafkaCluster,
    TansuCluster,
    ensure_kafka_libs,
    free_port,
    parse_external,
    unique_name,
)

__all__ = [
    "KAFKA_VERSION",
    "Cluster",
    "ClusterPool",
    "ClusterUnavailable",
    "ExternalCluster",
    "KafkaCluster",
    "TansuCluster",
    "ensure_kafka_libs",
    "free_port",
    "parse_external",
    "unique_name",
]
