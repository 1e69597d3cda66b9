"""multicluster_source: read one logical stream from topics on many Kafka clusters, live.

The names of the public contract (API.md sections 1, 8, 9 and 11) are importable from here; every other
public name lives in its subpackage's ``__all__``: :mod:`multicluster_source.metadata` (services, metadata
values, the metadata-topic writer), :mod:`multicluster_source.hybrid` (stages and hybrid streams),
:mod:`multicluster_source.framework` (checkpoint storage), :mod:`multicluster_source.ops` (topic tracking),
:mod:`multicluster_source.runtime.push` (``RunResult``), :mod:`multicluster_source.exceptions` (every
exception), :mod:`multicluster_source.replicas` (what a replica handover decided),
:mod:`multicluster_source.testing`, :mod:`multicluster_source.spark` and :mod:`multicluster_source.sink` (the
exactly-once sink). See docs/getting-started.md to begin.

Modules here: ``_source`` (:class:`MultiClusterKafkaSource`, a thin factory with ``open``, ``open_async`` and
``run``, and :class:`MultiClusterKafkaSourceBuilder`), ``_builder`` (the builder's setters and checks, the one
place options are validated) and ``_clock`` (the one clock of the periodic work, below every layer); the
public modules :mod:`.exceptions` and :mod:`.testing`. The roles live in the subpackages ``metadata``,
``enumerator``, ``reader``, ``runtime``, ``framework``, ``ops``, ``replicas``, ``hybrid``, ``spark``,
``sink`` and ``tools``.

The names that left this surface in 0.4.0 still import from here, with a :class:`DeprecationWarning` that
names their home (``_MOVED``).
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from multicluster_source._source import MultiClusterKafkaSource, MultiClusterKafkaSourceBuilder
from multicluster_source.enumerator._offsets import OffsetsInitializer
from multicluster_source.enumerator._standby import DefaultRackAwareStandbyAssignor, RackAwareStandbyAssignor
from multicluster_source.exceptions import (
    CheckpointError,
    ConfigurationError,
    DeserializationError,
    MetadataError,
    MultiClusterSourceError,
    ProducerFencedError,
)
from multicluster_source.framework._records import MessageBatch, RawRecord, SourceRecord
from multicluster_source.framework._watermarks import WatermarkStrategy
from multicluster_source.hybrid import HybridSource, KafkaArchiveSource
from multicluster_source.metadata import (
    ClusterMetadata,
    ConfigMapMetadataService,
    FileMetadataService,
    KafkaMetadataService,
    KafkaStream,
    KafkaTopicMetadataService,
    StaticMetadataService,
    StreamPatternSubscriber,
    StreamSetSubscriber,
)
from multicluster_source.runtime.pull._async import AsyncSourceStream
from multicluster_source.runtime.pull._stream import SourceStream
from multicluster_source.runtime.push import RunControl
from multicluster_source.sink import ExactlyOnceKafkaSink

# The moved names for type checkers (``X as X`` re-exports them); at run time ``__getattr__`` gives them.
if TYPE_CHECKING:
    from multicluster_source.exceptions import (
        HandoverGapError as HandoverGapError,
    )
    from multicluster_source.exceptions import (
        MetadataValidationError as MetadataValidationError,
    )
    from multicluster_source.exceptions import (
        OffsetOutOfRangeError as OffsetOutOfRangeError,
    )
    from multicluster_source.exceptions import (
        SourceFailedError as SourceFailedError,
    )
    from multicluster_source.exceptions import (
        StreamClosedError as StreamClosedError,
    )
    from multicluster_source.framework import (
        CheckpointStorage as CheckpointStorage,
    )
    from multicluster_source.framework import (
        DirectoryCheckpointStorage as DirectoryCheckpointStorage,
    )
    from multicluster_source.framework import (
        ObjectStore as ObjectStore,
    )
    from multicluster_source.framework import (
        ObjectStoreCheckpointStorage as ObjectStoreCheckpointStorage,
    )
    from multicluster_source.hybrid import (
        ArchiveError as ArchiveError,
    )
    from multicluster_source.hybrid import (
        AsyncHybridStream as AsyncHybridStream,
    )
    from multicluster_source.hybrid import (
        HybridSourceBuilder as HybridSourceBuilder,
    )
    from multicluster_source.hybrid import (
        HybridStage as HybridStage,
    )
    from multicluster_source.hybrid import (
        HybridStream as HybridStream,
    )
    from multicluster_source.hybrid import (
        KafkaIcebergSource as KafkaIcebergSource,
    )
    from multicluster_source.hybrid import (
        StageHandover as StageHandover,
    )
    from multicluster_source.hybrid import (
        StageReader as StageReader,
    )
    from multicluster_source.metadata import (
        KafkaStreamSubscriber as KafkaStreamSubscriber,
    )
    from multicluster_source.metadata import (
        KafkaTopicMetadataWriter as KafkaTopicMetadataWriter,
    )
    from multicluster_source.metadata import (
        MetadataWriterFencedError as MetadataWriterFencedError,
    )
    from multicluster_source.metadata import (
        NotifyingMetadataService as NotifyingMetadataService,
    )
    from multicluster_source.metadata import (
        ReplicaOf as ReplicaOf,
    )
    from multicluster_source.ops import (
        KafkaTopicStatusStore as KafkaTopicStatusStore,
    )
    from multicluster_source.ops import (
        LocalTopicStatusStore as LocalTopicStatusStore,
    )
    from multicluster_source.ops import (
        TopicStatusStore as TopicStatusStore,
    )
    from multicluster_source.ops import (
        TopicTrackingDisabledError as TopicTrackingDisabledError,
    )
    from multicluster_source.runtime.push import RunResult as RunResult

__version__ = "0.3.0"

__all__ = [
    "AsyncSourceStream",
    "CheckpointError",
    "ClusterMetadata",
    "ConfigMapMetadataService",
    "ConfigurationError",
    "DefaultRackAwareStandbyAssignor",
    "DeserializationError",
    "ExactlyOnceKafkaSink",
    "FileMetadataService",
    "HybridSource",
    "KafkaArchiveSource",
    "KafkaMetadataService",
    "KafkaStream",
    "KafkaTopicMetadataService",
    "MessageBatch",
    "MetadataError",
    "MultiClusterKafkaSource",
    "MultiClusterKafkaSourceBuilder",
    "MultiClusterSourceError",
    "OffsetsInitializer",
    "ProducerFencedError",
    "RackAwareStandbyAssignor",
    "RawRecord",
    "RunControl",
    "SourceRecord",
    "SourceStream",
    "StaticMetadataService",
    "StreamPatternSubscriber",
    "StreamSetSubscriber",
    "WatermarkStrategy",
]

# Names exported here up to 0.3, and where each lives now (each is in that module's ``__all__``).
_MOVED: dict[str, str] = {
    "ArchiveError": "multicluster_source.hybrid",
    "AsyncHybridStream": "multicluster_source.hybrid",
    "CheckpointStorage": "multicluster_source.framework",
    "DirectoryCheckpointStorage": "multicluster_source.framework",
    "HandoverGapError": "multicluster_source.exceptions",
    "HybridSourceBuilder": "multicluster_source.hybrid",
    "HybridStage": "multicluster_source.hybrid",
    "HybridStream": "multicluster_source.hybrid",
    "KafkaIcebergSource": "multicluster_source.hybrid",
    "KafkaStreamSubscriber": "multicluster_source.metadata",
    "KafkaTopicMetadataWriter": "multicluster_source.metadata",
    "KafkaTopicStatusStore": "multicluster_source.ops",
    "LocalTopicStatusStore": "multicluster_source.ops",
    "MetadataValidationError": "multicluster_source.exceptions",
    "MetadataWriterFencedError": "multicluster_source.metadata",
    "NotifyingMetadataService": "multicluster_source.metadata",
    "ObjectStore": "multicluster_source.framework",
    "ObjectStoreCheckpointStorage": "multicluster_source.framework",
    "OffsetOutOfRangeError": "multicluster_source.exceptions",
    "ReplicaOf": "multicluster_source.metadata",
    "RunResult": "multicluster_source.runtime.push",
    "SourceFailedError": "multicluster_source.exceptions",
    "StageHandover": "multicluster_source.hybrid",
    "StageReader": "multicluster_source.hybrid",
    "StreamClosedError": "multicluster_source.exceptions",
    "TopicStatusStore": "multicluster_source.ops",
    "TopicTrackingDisabledError": "multicluster_source.ops",
}

if not TYPE_CHECKING:  # hidden from type checkers, so that a misspelt import stays an error for them

    def __getattr__(name: str) -> Any:
        """A name that left this surface in 0.4.0, from its new home, with a :class:`DeprecationWarning`."""
        home = _MOVED.get(name)
        if home is None:
            raise AttributeError(f"module 'multicluster_source' has no attribute {name!r}")
        warnings.warn(
            f"multicluster_source.{name} is deprecated since 0.4.0 (not part of the top-level contract): "
            f"import it from {home}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)
