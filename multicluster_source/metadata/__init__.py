"""Stream metadata: the value types, the service protocol, the services that ship, and subscribers.

A *stream* is one logical stream made of topics on one or more Kafka clusters
(:class:`KafkaStream` of :class:`ClusterMetadata`). A :class:`KafkaMetadataService` tells the source which
streams exist; a :class:`KafkaStreamSubscriber` chooses the ones it reads.

Services that ship: :class:`StaticMetadataService` (fixed), :class:`FileMetadataService` (a YAML/JSON file
in Flink's format, watched), :class:`ConfigMapMetadataService` (a Kubernetes ConfigMap volume or manifest).
A cluster may declare that its topics copy another cluster's (:class:`ReplicaOf`, the ``replicaOf`` key).
Property values may hold ``${env:NAME}`` and ``${file:/path}`` placeholders, resolved only when a client is
created (:func:`resolve_properties`); log properties only through :func:`redact_properties`.

The modules: ``_model`` (the value types and the service protocol), ``_static``, ``_file`` and
``_configmap`` (the services; ``_watch`` is their change watcher for files and ConfigMap volumes),
``_subscriber`` (the subscribers), ``_parser`` (the file format, read and written; ``_compose`` turns text
into a YAML node tree, YAML or JSON by content, syntax errors with their line), ``_validate`` (the metadata
and name rules), ``_replica`` and ``_replica_parse`` (the ``replicaOf`` declaration and its text),
``_placeholders`` (placeholders resolved and redacted) and ``_connection`` (how every client the source
creates connects, and how its librdkafka log lines reach Python logging).

:mod:`.topic` holds the metadata kept in a compacted Kafka topic (:class:`KafkaTopicMetadataService`, its
record format, reader and writer :class:`KafkaTopicMetadataWriter`).
"""

from __future__ import annotations

from multicluster_source.metadata._configmap import ConfigMapMetadataService
from multicluster_source.metadata._file import FileMetadataService
from multicluster_source.metadata._model import (
    ClusterMetadata,
    KafkaMetadataService,
    KafkaStream,
    MetadataListener,
    NotifyingMetadataService,
)
from multicluster_source.metadata._parser import dump_streams, parse_streams
from multicluster_source.metadata._placeholders import redact_properties, resolve_properties
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.metadata._static import StaticMetadataService
from multicluster_source.metadata._subscriber import (
    KafkaStreamSubscriber,
    StreamPatternSubscriber,
    StreamSetSubscriber,
)
from multicluster_source.metadata._validate import validate_streams
from multicluster_source.metadata.topic._kafka_topic import KafkaTopicMetadataService
from multicluster_source.metadata.topic._topic_writer import (
    KafkaTopicMetadataWriter,
    MetadataWriterFencedError,
)

__all__ = [
    "ClusterMetadata",
    "ConfigMapMetadataService",
    "FileMetadataService",
    "KafkaMetadataService",
    "KafkaStream",
    "KafkaStreamSubscriber",
    "KafkaTopicMetadataService",
    "KafkaTopicMetadataWriter",
    "MetadataListener",
    "MetadataWriterFencedError",
    "NotifyingMetadataService",
    "ReplicaOf",
    "StaticMetadataService",
    "StreamPatternSubscriber",
    "StreamSetSubscriber",
    "dump_streams",
    "parse_streams",
    "redact_properties",
    "resolve_properties",
    "validate_streams",
]
