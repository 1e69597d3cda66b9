"""Where a stream with an exactly-once sink starts: the positions its sink read, over its checkpoint.

Shared by the pull stream (:mod:`multicluster_source.runtime.pull._sinking`) and the push driver; runs once,
on the thread that opens the stream or run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from multicluster_source.enumerator._state import EnumeratorState
from multicluster_source.framework._checkpoint import Checkpoint
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.sink._transactions import TransactionalSink

__all__ = ["sink_restored", "state_of_positions"]


def sink_restored(
    restored: Checkpoint | None, sink: TransactionalSink, name: str, bounded: bool
) -> Checkpoint | None:
    """``restored`` with the sink's committed positions in place of its own. Without a checkpoint (no
    ``checkpoint_dir``, or a first run with one), an unbounded stream starts from a state made of the sink's
    positions alone (:func:`state_of_positions`), so that what a checkpoint's state does at a restart, the
    positions topic does too: a split whose topic or cluster left the metadata is retired (and handed over
    to its replica, section 9), the others start at their positions. A bounded stream, whose splits need
    stopping offsets the positions do not hold, starts them through its starting offsets instead."""
    if restored is not None:
        return dataclasses.replace(restored, positions={**restored.positions, **sink.committed})
    if bounded or not sink.committed:
        return None
    state = state_of_positions(sink.committed)
    return Checkpoint(0, name, state.to_dict(), dict(sink.committed), Path(f"({sink.sink.positions_topic})"))


def state_of_positions(positions: Mapping[str, int]) -> EnumeratorState:
    """An enumerator state whose splits are those of ``positions``, each starting at its position; every
    topic named is seen (a partition found later starts at the earliest offset, as after a checkpoint)."""
    splits = []
    seen: dict[str, set[str]] = {}
    for sid, offset in positions.items():
        cluster, topic, partition = sid.rsplit("/", 2)
        splits.append(KafkaPartitionSplit(cluster, topic, int(partition), offset))
        seen.setdefault(cluster, set()).add(topic)
    return EnumeratorState(
        splits=tuple(sorted(splits, key=lambda s: s.split_id)),
        seen_topics={c: frozenset(t) for c, t in seen.items()},
    )
