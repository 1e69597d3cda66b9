"""A metadata service over a fixed set of streams."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from multicluster_source.metadata._model import KafkaStream
from multicluster_source.metadata._validate import validate_streams

__all__ = ["StaticMetadataService"]


class StaticMetadataService:
    """Serves streams given up front; they never change.

    The streams are checked like a metadata file (valid cluster ids and topic names, non-empty topic lists,
    unique stream ids, one connection per cluster id); a violation raises
    :class:`~multicluster_source.exceptions.MetadataValidationError` with ``source="static"``.
    """

    def __init__(self, streams: Iterable[KafkaStream]) -> None:
        materialized = list(streams)
        validate_streams(materialized, source="static")
        self._streams = frozenset(materialized)

    def get_all_streams(self) -> set[KafkaStream]:
        """Every stream given to the constructor."""
        return set(self._streams)

    def describe_streams(self, stream_ids: Collection[str]) -> dict[str, KafkaStream]:
        """The named streams; unknown ids are left out."""
        wanted = set(stream_ids)
        return {s.stream_id: s for s in self._streams if s.stream_id in wanted}

    def is_cluster_active(self, cluster_id: str) -> bool:
        """Whether any stream uses ``cluster_id``."""
        return any(cluster_id in s.clusters for s in self._streams)

    def close(self) -> None:
        """Nothing to release."""

    def __repr__(self) -> str:
        return f"StaticMetadataService({sorted(s.stream_id for s in self._streams)!r})"
