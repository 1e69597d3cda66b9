"""Test harness: Kafka clusters (Apache Kafka from Maven Central, tansu, or external) and their helpers.

``cluster`` (the :class:`Cluster` interface and its client helpers), ``kafka`` (Apache Kafka KRaft, one node
or rack clusters), ``secured`` (Apache Kafka with a SASL_SSL or mutual-TLS listener; certificates from
``tls``), ``tansu``, ``external``, ``pool`` (the session's clusters), ``maven`` (fetching Kafka's
jars), ``processes`` (ports and broker processes); ``scenario`` and ``runtimes`` help the source's tests,
``fake_consumer`` its unit tests of fetchers and readers; ``chromium`` runs headless Chromium for the tests
of pages (the status page, the documentation site); ``toxiproxy`` (a Toxiproxy server, built with Go and
cached), ``chaos`` (the chaos soak over proxied clusters), ``chaos_copies`` (its MirrorMaker 2 copy for
replica handovers), ``audit`` (its exact audit) and ``audit_copies`` (the audit across replica handovers)
serve the chaos tests.
"""

from .cluster import Cluster, unique_name
from .external import ExternalCluster
from .kafka import KafkaCluster
from .maven import KAFKA_VERSION, ensure_kafka_libs
from .pool import ClusterPool, ClusterUnavailable, parse_external
from .processes import free_port
from .tansu import TansuCluster

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
