"""The one public surface: pinned, sorted, documented, and covering the contract's names."""

from __future__ import annotations

import inspect

import multicluster_source

CONTRACT = {
    "MultiClusterKafkaSource",
    "OffsetsInitializer",
    "KafkaStream",
    "ClusterMetadata",
    "KafkaMetadataService",
    "StaticMetadataService",
    "FileMetadataService",
    "ConfigMapMetadataService",
    "StreamSetSubscriber",
    "StreamPatternSubscriber",
    "SourceRecord",
    "SourceStream",
    "RawRecord",
    "RackAwareStandbyAssignor",
    "DefaultRackAwareStandbyAssignor",
    "MultiClusterSourceError",
    "ConfigurationError",
    "MetadataError",
    "DeserializationError",
}

CONTRACT.add("KafkaTopicMetadataService")
CONTRACT.add("MessageBatch")  # API.md section 8
CONTRACT.add("AsyncSourceStream")  # API.md section 8
CONTRACT.add("WatermarkStrategy")  # API.md section 8
CONTRACT.add("HybridSource")  # API.md section 9
CONTRACT.add("KafkaArchiveSource")  # API.md section 9

PINNED = [
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


def test_all_is_pinned_and_sorted() -> None:
    assert multicluster_source.__all__ == PINNED
    assert sorted(multicluster_source.__all__) == multicluster_source.__all__


def test_contract_names_are_importable() -> None:
    missing = {n for n in CONTRACT if not hasattr(multicluster_source, n)}
    assert not missing, missing


def test_every_public_name_has_a_docstring() -> None:
    for name in multicluster_source.__all__:
        obj = getattr(multicluster_source, name)
        assert inspect.getdoc(obj), name
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)):
                    assert inspect.getdoc(member), f"{name}.{attr}"


def test_public_names_live_in_private_modules_or_public_packages() -> None:
    for name in multicluster_source.__all__:
        module = getattr(multicluster_source, name).__module__
        parts = module.split(".")
        assert parts[0] == "multicluster_source"
        assert any(p.startswith("_") for p in parts[1:]) or module == "multicluster_source.exceptions", module
