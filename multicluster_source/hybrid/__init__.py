"""Hybrid sources: bounded stages (archives, an old cluster read up to a point) followed by live clusters,
with the position of each split handed from one stage to the next. See API.md section 9, "Hybrid sources".

:mod:`._stage` is the protocol every stage satisfies (documented for users' own archives).
"""

from __future__ import annotations

from multicluster_source.hybrid._archive import KafkaArchiveSource
from multicluster_source.hybrid._archive_layout import ArchiveError
from multicluster_source.hybrid._iceberg import KafkaIcebergSource
from multicluster_source.hybrid._stage import HandoverMode, HybridStage, StageHandover, StageReader

__all__ = [
    "ArchiveError",
    "HandoverMode",
    "HybridStage",
    "KafkaArchiveSource",
    "KafkaIcebergSource",
    "StageHandover",
    "StageReader",
]
