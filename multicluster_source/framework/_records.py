"""Record values handed to deserializers and to the caller.

Both are immutable ``NamedTuple``s rather than frozen dataclasses: they are built once per record on the hot
path, and a tuple is built several times faster than a frozen dataclass while being just as immutable.
"""

from __future__ import annotations

from typing import Any, NamedTuple

Headers = list[tuple[str, bytes | None]] | None


class RawRecord(NamedTuple):
    """A record as read from Kafka, before deserialization (what a deserializer receives)."""

    cluster_id: str
    topic: str
    partition: int
    offset: int
    timestamp: int | None
    """Milliseconds since the epoch, or None when the record has none."""
    key: bytes | None
    value: bytes | None
    headers: Headers

    @property
    def split_id(self) -> str:
        """The split this record belongs to: ``"<cluster_id>/<topic>/<partition>"``."""
        return f"{self.cluster_id}/{self.topic}/{self.partition}"


class SourceRecord(NamedTuple):
    """A record returned by :class:`SourceStream`; ``value`` is what the deserializer returned."""

    cluster_id: str
    topic: str
    partition: int
    offset: int
    timestamp: int | None
    """Milliseconds since the epoch, or None when the record has none."""
    key: bytes | None
    value: Any
    headers: Headers

    @property
    def split_id(self) -> str:
        """The split this record belongs to: ``"<cluster_id>/<topic>/<partition>"``."""
        return f"{self.cluster_id}/{self.topic}/{self.partition}"
