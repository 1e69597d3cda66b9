"""A :class:`MultiClusterKafkaSource` as a hybrid stage: bounded (an old cluster read up to a point) or the
live source (last).

The stage opens its source with starting offsets made from the previous stage's handover: each split the
previous stage returned records of starts exactly at its handed-over position (checked against the
partition's earliest offset: a gap fails the source, or with ``gap_policy="warn"`` goes on from the earliest
offset), every other split at the source's own starting offsets, whatever they are, or at the handover's
timestamp when the previous stage handed over a time. The source keeps its own checkpoints in the stage's
work directory and restores from them: a hybrid checkpoint of this stage is a checkpoint of the source.

Threads: the hybrid stream calls every method on its caller's thread (only ``durable()`` of
:meth:`KafkaStageReader.capture` is called on the thread that writes the hybrid state); the source runs its
own threads (``mcs-...``) until :meth:`KafkaStageReader.close`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

from prometheus_client import CollectorRegistry

from multicluster_source.enumerator._offsets import OffsetsInitializer, handover_offsets
from multicluster_source.exceptions import ConfigurationError
from multicluster_source.framework._records import MessageBatch, SourceRecord
from multicluster_source.hybrid._stage import HandoverMode, StageHandover
from multicluster_source.runtime.pull._stream import capture_checkpoint, tracker_of

if TYPE_CHECKING:
    from multicluster_source._source import MultiClusterKafkaSource
    from multicluster_source.runtime.pull._stream import SourceStream

__all__ = ["GAP_POLICIES", "KafkaSourceStage", "KafkaStageReader", "starting_offsets"]

GAP_POLICIES = ("fail", "warn")


def starting_offsets(
    own: OffsetsInitializer, start: StageHandover | None, gap_policy: Literal["fail", "warn"]
) -> OffsetsInitializer:
    """The starting offsets of a Kafka stage handed ``start``: its positions exactly, the rest at the
    handover's timestamp or else at the source's ``own`` starting offsets."""
    if start is None:
        return own
    fallback = own if start.timestamp_ms is None else OffsetsInitializer.timestamp(start.timestamp_ms)
    return handover_offsets(start.positions, fallback, gap_policy)


def start_modes(start: StageHandover | None) -> tuple[dict[str, HandoverMode], HandoverMode]:
    """Split id -> how its start was chosen, and the mode of every split not named."""
    if start is None:
        return {}, "start"
    named = {s: start.modes.get(s, "exact") for s in start.positions}
    return named, "timestamp" if start.timestamp_ms is not None else "start"


class KafkaSourceStage:
    """Wraps a :class:`MultiClusterKafkaSource` as a stage (the builder does it for sources it is given)."""

    def __init__(
        self, source: MultiClusterKafkaSource, *, gap_policy: Literal["fail", "warn"] = "fail"
    ) -> None:
        if gap_policy not in GAP_POLICIES:
            raise ConfigurationError(f"gap_policy: one of {', '.join(GAP_POLICIES)}, got {gap_policy!r}")
        self.source = source
        self.gap_policy: Literal["fail", "warn"] = gap_policy

    @property
    def bounded(self) -> bool:
        """Whether the source is bounded (``set_bounded``)."""
        return self.source.bounded

    @property
    def name(self) -> str:
        """The source's name."""
        return self.source.name

    def with_start(self, start: StageHandover | None) -> MultiClusterKafkaSource:
        """A copy of the source whose starting offsets follow ``start``."""
        started = copy.copy(self.source)
        started.starting = starting_offsets(self.source.starting, start, self.gap_policy)
        return started

    def open_stage(
        self,
        *,
        parallelism: int,
        start: StageHandover | None,
        restored: Mapping[str, Any] | None,
        registry: CollectorRegistry | None,
        work_dir: str | None,
    ) -> KafkaStageReader:
        """Open the source (restoring from its own checkpoints in ``work_dir`` when there are some)."""
        stream = self.with_start(start).open(parallelism, checkpoint_dir=work_dir, registry=registry)
        return KafkaStageReader(stream, start, self.bounded)


class KafkaStageReader:
    """An opened :class:`KafkaSourceStage`: its source's stream seen through the stage protocol."""

    def __init__(self, stream: SourceStream, start: StageHandover | None, bounded: bool) -> None:
        self.stream = stream
        self._bounded = bounded
        self._modes, self._default_mode = start_modes(start)

    def poll(self, timeout: float, max_records: int) -> list[SourceRecord]:
        """The source's ``poll``."""
        return self.stream.poll(timeout, max_records)

    def poll_batches(self, timeout: float, max_records: int) -> list[MessageBatch]:
        """The source's ``poll_batches``."""
        return self.stream.poll_batches(timeout, max_records)

    def poll_arrow(self, timeout: float, max_records: int, headers: bool = False) -> list[Any]:
        """The source's ``poll_columns``: Arrow record batches (optional in the protocol)."""
        return self.stream.poll_columns(timeout, max_records, headers=headers)

    def iterate(self) -> Iterator[SourceRecord]:
        """The source's own iterator (optional in the protocol): one record at a time without a poll per
        record; a checkpoint between two records covers exactly those handed out."""
        return iter(self.stream)

    @property
    def finished(self) -> bool:
        """Bounded and read to its stopping offsets."""
        return self.stream.finished

    @property
    def watermark(self) -> int | None:
        """The source's watermark."""
        return self.stream.watermark

    def positions(self) -> dict[str, int]:
        """Split id -> the offset after the last record returned (the source's position tracker)."""
        return tracker_of(self.stream).snapshot()  # delivered positions, as checkpoints hold them

    def handover(self) -> StageHandover:
        """Exact positions: every offset is the record's own."""
        positions = self.positions()
        return StageHandover(positions=positions, modes=dict.fromkeys(positions, "exact"))

    def snapshot(self) -> dict[str, Any]:
        """Takes a checkpoint of the source (in the stage's work directory; offsets committed with a group
        id) and names it."""
        snapshot, durable = self.capture()
        durable()
        return snapshot

    def capture(self) -> tuple[dict[str, Any], Callable[[], object]]:
        """:meth:`snapshot` without waiting (optional in the protocol): the source's checkpoint is captured
        now, exact, by its :class:`Checkpointer`, whose thread writes and commits it; ``durable()`` waits for
        that (any thread) and raises what it raised."""
        checkpoint_id, done = capture_checkpoint(self.stream)
        return {"v": 1, "kind": "kafka", "checkpoint_id": checkpoint_id}, done.result

    def commit(self, snapshot_id: int) -> None:
        """Nothing more: the source's checkpoint committed its offsets already."""

    def status(self) -> dict[str, Any]:
        """The source's own status, plus per split how its start was chosen."""
        assigned = {s for splits in self.stream.assignments().values() for s in splits}
        seen = sorted(assigned | set(self.positions()))  # finished splits are no longer assigned
        return {
            "kind": "kafka",
            "source": self.stream.status(),
            "start_modes": {s: self._modes.get(s, self._default_mode) for s in seen},
        }

    def close(self) -> None:
        """Close the source's stream."""
        self.stream.close()
