"""multicluster_source: read one logical stream from topics on many Kafka clusters, live.

Everything a user needs is importable from here; implementation modules are private (``_``-prefixed) and the
subpackages ``metadata``, ``enumerator`` and ``reader`` hold the roles. See docs/getting-started.md to begin.
"""

from __future__ import annotations

from multicluster_source._source import MultiClusterKafkaSource, MultiClusterKafkaSourceBuilder
from multicluster_source.enumerator._offsets import OffsetsInitializer
from multicluster_source.enumerator._standby import DefaultRackAwareStandbyAssignor, RackAwareStandbyAssignor
from multicluster_source.exceptions import (
    CheckpointError,
    ConfigurationError,
    DeserializationError,
    HandoverGapError,
    MetadataError,
    MetadataValidationError,
    MultiClusterSourceError,
    OffsetOutOfRangeError,
    SourceFailedError,
    StreamClosedError,
)
from multicluster_source.framework._columns import column_schema
from multicluster_source.framework._records import MessageBatch, RawRecord, SourceRecord
from multicluster_source.framework._storage import (
    CheckpointStorage,
    DirectoryCheckpointStorage,
    ObjectStore,
    ObjectStoreCheckpointStorage,
)
from multicluster_source.framework._watermarks import WatermarkStrategy
from multicluster_source.hybrid import (
    ArchiveError,
    AsyncHybridStream,
    HybridSource,
    HybridSourceBuilder,
    HybridStage,
    HybridStream,
    KafkaArchiveSource,
    KafkaIcebergSource,
    StageHandover,
    StageReader,
)
from multicluster_source.metadata import (
    ClusterMetadata,
    ConfigMapMetadataService,
    FileMetadataService,
    KafkaMetadataService,
    KafkaStream,
    KafkaStreamSubscriber,
    KafkaTopicMetadataService,
    NotifyingMetadataService,
    ReplicaOf,
    StaticMetadataService,
    StreamPatternSubscriber,
    StreamSetSubscriber,
)
from multicluster_source.metadata.topic._topic_writer import (
    KafkaTopicMetadataWriter,
    MetadataWriterFencedError,
)
from multicluster_source.ops._topic_stores import (
    KafkaTopicStatusStore,
    LocalTopicStatusStore,
    TopicStatusStore,
)
from multicluster_source.ops._tracking import TopicTrackingDisabledError
from multicluster_source.runtime.pull._async import AsyncSourceStream
from multicluster_source.runtime.pull._stream import SourceStream
from multicluster_source.runtime.push._control import RunControl, RunResult

__version__ = "0.3.0"

__all__ = [
    "ArchiveError",
    "AsyncHybridStream",
    "AsyncSourceStream",
    "CheckpointError",
    "CheckpointStorage",
    "ClusterMetadata",
    "ConfigMapMetadataService",
    "ConfigurationError",
    "DefaultRackAwareStandbyAssignor",
    "DeserializationError",
    "DirectoryCheckpointStorage",
    "FileMetadataService",
    "HandoverGapError",
    "HybridSource",
    "HybridSourceBuilder",
    "HybridStage",
    "HybridStream",
    "KafkaArchiveSource",
    "KafkaIcebergSource",
    "KafkaMetadataService",
    "KafkaStream",
    "KafkaStreamSubscriber",
    "KafkaTopicMetadataService",
    "KafkaTopicMetadataWriter",
    "KafkaTopicStatusStore",
    "LocalTopicStatusStore",
    "MessageBatch",
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
    "ReplicaOf",
    "RunControl",
    "RunResult",
    "SourceFailedError",
    "SourceRecord",
    "SourceStream",
    "StageHandover",
    "StageReader",
    "StaticMetadataService",
    "StreamClosedError",
    "StreamPatternSubscriber",
    "StreamSetSubscriber",
    "TopicStatusStore",
    "TopicTrackingDisabledError",
    "WatermarkStrategy",
    "column_schema",
]
