"""What a :class:`~._stream.SourceStream` opened with an exactly-once sink does around its transactions.

The stream commits on the caller's thread (inside ``poll``, iteration, ``checkpoint()`` and ``close()``);
these functions give it the positions to commit and the checkpoint to start from:

* :func:`sink_restored` (from :mod:`multicluster_source.runtime.core`, shared with the push driver): at open,
  the positions the sink read from its positions topic win over those of ``checkpoint_dir``; without a
  checkpoint they are the state the stream starts from.
* :func:`stream_positions`: every split the enumerator holds, assigned or retained after removal, at the
  position the caller reached, or, never read, at the offset it starts from ("read or not").
* :func:`rewound`: the checkpoint a stream restarts its readers from after an aborted transaction: the
  enumerator's state at the sink's committed positions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from multicluster_source.enumerator._state import EnumeratorState
from multicluster_source.exceptions import MultiClusterSourceError
from multicluster_source.framework._checkpoint import Checkpoint
from multicluster_source.runtime.core._handoff import PositionTracker
from multicluster_source.runtime.core._sink_state import sink_restored, state_of_positions
from multicluster_source.sink._transactions import TransactionAborted, TransactionalSink

__all__ = [
    "close_sink",
    "enumerator_state",
    "rewound",
    "sink_restored",
    "sink_status",
    "state_of_positions",
    "stream_positions",
]

_log = logging.getLogger("multicluster_source.sink")


def enumerator_state(coordinator: Any, enumerator: Any) -> EnumeratorState:
    """The enumerator's state: the one it published after its last change, else captured on its thread."""
    state = enumerator.published_state()
    if state is None:
        state = coordinator.call_sync(enumerator.capture_state)
    assert isinstance(state, EnumeratorState)
    return state


def stream_positions(coordinator: Any, enumerator: Any, tracker: PositionTracker) -> dict[str, int]:
    """Split id -> next offset of every split the enumerator holds (active, or retained after removal):
    where the caller got to, or where the split starts when none of it was returned."""
    state = enumerator_state(coordinator, enumerator)
    splits = [*state.splits, *(r.split for r in state.removed)]
    positions = {s.split_id: s.starting_offset for s in splits}
    positions.update(tracker.get(list(positions)))
    return positions


def rewound(
    name: str, checkpoint_id: int, state: EnumeratorState, committed: Mapping[str, int]
) -> Checkpoint:
    """The checkpoint to restart from after an aborted transaction: ``state``, every split at its committed
    position (a split never committed at the offset it started from)."""
    where = Path("(exactly-once sink rewind)")
    return Checkpoint(checkpoint_id, name, state.to_dict(), dict(committed), where)


def close_sink(
    name: str, sink: TransactionalSink, positions: Callable[[], dict[str, int]] | None, kafka_id: Any
) -> None:
    """At ``close()``: commit what was returned and produced (``positions`` None: the stream failed, nothing
    commits), then close the sink, which aborts anything still open: no transaction stays open."""
    try:
        if positions is not None:
            sink.commit(positions(), kafka_id)
    except TransactionAborted as exc:
        _log.warning("source=%s: the last sink transaction aborted at close: %s", name, exc)
    except MultiClusterSourceError as exc:
        _log.error("source=%s: the last sink transaction could not commit at close: %s", name, exc)
    finally:
        sink.close()


def sink_status(sink: TransactionalSink | None) -> dict[str, Any]:
    """The ``sink`` section of ``status()`` (nothing without a sink)."""
    return {} if sink is None else {"sink": sink.status()}
