"""Split values (one Kafka partition of one cluster) and their versioned serialization.

A split id is ``"<cluster_id>/<topic>/<partition>"``: cluster ids and topic names cannot contain ``/``, so
the id is unambiguous (Flink's ``cluster-topic-partition`` is not: both names may contain ``-``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from multicluster_source.exceptions import CheckpointError

SPLIT_FORMAT_VERSION = 1


def make_split_id(cluster_id: str, topic: str, partition: int) -> str:
    """The split id of a partition of a topic on a cluster."""
    return f"{cluster_id}/{topic}/{partition}"


def parse_split_id(split_id: str) -> tuple[str, str, int]:
    """Inverse of :func:`make_split_id`; raises ValueError on a malformed id."""
    parts = split_id.split("/")
    if len(parts) != 3 or not parts[0] or not parts[1] or not parts[2].isdigit():
        raise ValueError(f"not a split id (cluster/topic/partition): {split_id!r}")
    return parts[0], parts[1], int(parts[2])


@dataclass(frozen=True, slots=True)
class KafkaPartitionSplit:
    """One partition of one topic on one cluster, with where reading starts and (bounded) stops.

    ``starting_offset`` is always a concrete offset (the enumerator resolves initializers before it creates a
    split); ``stopping_offset`` is exclusive, None when unbounded.
    """

    cluster_id: str
    topic: str
    partition: int
    starting_offset: int
    stopping_offset: int | None = None

    @property
    def split_id(self) -> str:
        """``"<cluster_id>/<topic>/<partition>"``."""
        return make_split_id(self.cluster_id, self.topic, self.partition)

    @property
    def topic_partition(self) -> tuple[str, int]:
        """``(topic, partition)``, unique within one cluster."""
        return (self.topic, self.partition)

    def is_finished_at(self, offset: int) -> bool:
        """True when a bounded split has nothing left to read from ``offset`` on."""
        return self.stopping_offset is not None and offset >= self.stopping_offset

    def starting_at(self, offset: int) -> KafkaPartitionSplit:
        """A copy of this split that starts at ``offset``."""
        return replace(self, starting_offset=offset)


def split_to_dict(split: KafkaPartitionSplit) -> dict[str, Any]:
    """The current serialized form of a split (a JSON-ready dict with a version)."""
    out: dict[str, Any] = {
        "v": SPLIT_FORMAT_VERSION,
        "cluster": split.cluster_id,
        "topic": split.topic,
        "partition": split.partition,
        "start": split.starting_offset,
    }
    if split.stopping_offset is not None:
        out["stop"] = split.stopping_offset
    return out


def split_from_dict(data: Any) -> KafkaPartitionSplit:
    """Read a serialized split of any known version; raises CheckpointError naming what is wrong."""
    if not isinstance(data, dict):
        raise CheckpointError(f"a split must be an object, got {type(data).__name__}")
    version = data.get("v")
    if version != 1:
        raise CheckpointError(f"unknown split format version {version!r} (this library reads 1)")
    try:
        stop = data.get("stop")
        return KafkaPartitionSplit(
            cluster_id=str(data["cluster"]),
            topic=str(data["topic"]),
            partition=int(data["partition"]),
            starting_offset=int(data["start"]),
            stopping_offset=None if stop is None else int(stop),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"malformed split {data!r}: {exc}") from exc
