"""multicluster_source: read one logical stream from topics on many Kafka clusters, live.

Everything a user needs is importable from here; implementation modules are private (``_``-prefixed) and the
subpackages ``metadata``, ``enumerator`` and ``reader`` hold the roles. See the README for the quick start.
"""

from __future__ import annotations

from ._offsets import OffsetsInitializer
from ._push import RunControl, RunResult
from ._records import RawRecord, SourceRecord
from ._source import MultiClusterKafkaSource, MultiClusterKafkaSourceBuilder
from ._standby import DefaultRackAwareStandbyAssignor, RackAwareStandbyAssignor
from ._storage import (
    CheckpointStorage,
    DirectoryCheckpointStorage,
    ObjectStore,
    ObjectStoreCheckpointStorage,
)
from ._stream import SourceStream
from ._tracking import (
    KafkaTopicStatusStore,
    LocalTopicStatusStore,
    TopicStatusStore,
    TopicTrackingDisabledError,
)
from .exceptions import (
    CheckpointError,
    ConfigurationError,
    DeserializationError,
    MetadataError,
    MetadataValidationError,
    MultiClusterSourceError,
    OffsetOutOfRangeError,
    SourceFailedError,
)
from .metadata import (
    ClusterMetadata,
    ConfigMapMetadataService,
    FileMetadataService,
    KafkaMetadataService,
    KafkaStream,
    KafkaStreamSubscriber,
    KafkaTopicMetadataService,
    NotifyingMetadataService,
    StaticMetadataService,
    StreamPatternSubscriber,
    StreamSetSubscriber,
)
from .metadata._kafka_topic import KafkaTopicMetadataWriter, MetadataWriterFencedError

__version__ = "0.1.0"

__all__ = [
    "CheckpointError",
    "CheckpointStorage",
    "ClusterMetadata",
    "ConfigMapMetadataService",
    "ConfigurationError",
    "DefaultRackAwareStandbyAssignor",
    "DeserializationError",
    "DirectoryCheckpointStorage",
    "FileMetadataService",
    "KafkaMetadataService",
    "KafkaStream",
    "KafkaStreamSubscriber",
    "KafkaTopicMetadataService",
    "KafkaTopicMetadataWriter",
    "KafkaTopicStatusStore",
    "LocalTopicStatusStore",
    "MetadataError",
    "MetadataValidationError",
    "MetadataWriterFencedError",
    "MultiClusterKafkaSource",
    "MultiClusterKafkaSourceBuilder",
    "MultiClusterSourceError",
    "NotifyingMetadataService",
    "ObjectStore",
    "ObjectStoreCheckpointStorage",
    "OffsetOutOfRangeError",
    "OffsetsInitializer",
    "RackAwareStandbyAssignor",
    "RawRecord",
    "RunControl",
    "RunResult",
    "SourceFailedError",
    "SourceRecord",
    "SourceStream",
    "StaticMetadataService",
    "StreamPatternSubscriber",
    "StreamSetSubscriber",
    "TopicStatusStore",
    "TopicTrackingDisabledError",
]
