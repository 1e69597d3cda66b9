"""Hybrid sources: bounded stages (archives, an old cluster read up to a point) followed by live clusters,
with the position of each split handed from one stage to the next. See API.md section 9, "Hybrid sources".

:mod:`._stage` is the protocol every stage satisfies (documented for users' own archives);
:class:`HybridSource` chains stages; :class:`KafkaSourceStage` is a Kafka source as a stage.

Here: the source and its builder (``_source``), the running stream (``_stream``, ``_async``, ``_held``,
``_columns``, ``_periodic``, ``_state``, ``_status``, ``_metrics``) and ``run()`` (``_run``), the stage
protocol (``_stage``) and the stages that are not archives (``_kafka_stage``, ``_memory``).
:mod:`.archive` holds the archive stages (Kafka Connect's storage sinks, Iceberg tables).
"""

from __future__ import annotations

from multicluster_source.hybrid._async import AsyncHybridStream
from multicluster_source.hybrid._kafka_stage import KafkaSourceStage
from multicluster_source.hybrid._memory import InMemoryArchiveStage
from multicluster_source.hybrid._source import HybridSource, HybridSourceBuilder
from multicluster_source.hybrid._stage import HandoverMode, HybridStage, StageHandover, StageReader
from multicluster_source.hybrid._stream import HybridStream
from multicluster_source.hybrid.archive._archive import KafkaArchiveSource
from multicluster_source.hybrid.archive._archive_layout import ArchiveError
from multicluster_source.hybrid.archive._archive_pieces import ArchivedColumns
from multicluster_source.hybrid.archive._iceberg import KafkaIcebergSource

__all__ = [
    "ArchiveError",
    "ArchivedColumns",
    "AsyncHybridStream",
    "HandoverMode",
    "HybridSource",
    "HybridSourceBuilder",
    "HybridStage",
    "HybridStream",
    "InMemoryArchiveStage",
    "KafkaArchiveSource",
    "KafkaIcebergSource",
    "KafkaSourceStage",
    "StageHandover",
    "StageReader",
]
