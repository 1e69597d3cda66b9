"""The ``replicas`` section of the enumerator's checkpointed state (replica handovers), versioned.

Version 1 (JSON)::

    "replicas": {"version": 1,
                 "pending": [{"to": "west/east.orders/0", "from": "east/orders/0", "from_offset": 42,
                              "last_timestamp_ms": 1700000000000 | null, "origin_reachable": true}, ...],
                 "done": [{"from": ..., "to": ..., "from_offset": 42, "to_offset": 40, "mode": "exact",
                           "max_repeats": 0 | null, "detail": "..."}, ...],
                 "auto_failed": ["east"],
                 "last_times": {"east/orders/0": 1700000000000}}      # optional

``pending`` are handovers decided (the origin split was fenced at ``from_offset``) whose replica split has not
started yet: a restore translates them again from the same positions, so nothing is lost and nothing the
caller had before the checkpoint comes again. ``done`` is what ``status()["handovers"]`` shows.
``auto_failed`` are origins failed over after ``replica.failover.unreachable.ms``. ``last_times`` are the
timestamps of the last records returned from the splits a replica copies (the ``timestamp`` translation of a
handover decided after a restore, before any record came again). A state without the
section (older checkpoints) has none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from multicluster_source.exceptions import CheckpointError
from multicluster_source.replicas._model import OriginPosition, Translation

__all__ = ["REPLICA_STATE_VERSION", "PendingHandover", "ReplicaState"]

REPLICA_STATE_VERSION = 1
_MODES = frozenset({"exact", "conservative", "identical", "timestamp", "start"})


@dataclass(frozen=True)
class PendingHandover:
    """A handover decided and not started: replica split ``to_split`` takes over at ``origin``'s position."""

    to_split: str
    origin: OriginPosition
    origin_reachable: bool = True


@dataclass(frozen=True)
class ReplicaState:
    """Handovers pending, translations done, origins failed automatically."""

    pending: tuple[PendingHandover, ...] = ()
    done: tuple[Translation, ...] = ()
    auto_failed: frozenset[str] = frozenset()
    last_times: Mapping[str, int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.pending or self.done or self.auto_failed or self.last_times)

    def to_dict(self) -> dict[str, Any]:
        """The current JSON-ready form."""
        return {
            "version": REPLICA_STATE_VERSION,
            "pending": [
                {
                    "to": p.to_split,
                    "from": p.origin.split,
                    "from_offset": p.origin.offset,
                    "last_timestamp_ms": p.origin.last_timestamp_ms,
                    "origin_reachable": p.origin_reachable,
                }
                for p in sorted(self.pending, key=lambda p: p.to_split)
            ],
            "done": [t.to_status() for t in self.done],
            "auto_failed": sorted(self.auto_failed),
        } | ({"last_times": dict(sorted(self.last_times.items()))} if self.last_times else {})

    @staticmethod
    def from_dict(data: Any) -> ReplicaState:
        """Read any known version (None or a missing section: empty)."""
        if data is None:
            return ReplicaState()
        if not isinstance(data, dict):
            raise CheckpointError("the enumerator state's 'replicas' section must be an object")
        version = data.get("version")
        if version != 1:
            raise CheckpointError(
                f"unknown 'replicas' section version {version!r} (this library reads up to "
                f"{REPLICA_STATE_VERSION})"
            )
        try:
            pending = tuple(
                PendingHandover(
                    str(p["to"]),
                    OriginPosition(
                        str(p["from"]),
                        int(p["from_offset"]),
                        None if p.get("last_timestamp_ms") is None else int(p["last_timestamp_ms"]),
                    ),
                    bool(p.get("origin_reachable", True)),
                )
                for p in data.get("pending", [])
            )
            done = tuple(_translation(t) for t in data.get("done", []))
            auto_failed = frozenset(str(c) for c in data.get("auto_failed", []))
            last_times = {str(s): int(t) for s, t in (data.get("last_times") or {}).items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"malformed 'replicas' section: {exc}") from exc
        return ReplicaState(pending, done, auto_failed, last_times)


def _translation(t: Any) -> Translation:
    mode = str(t["mode"])
    if mode not in _MODES:
        raise ValueError(f"unknown handover mode {mode!r}")
    repeats = t.get("max_repeats")
    return Translation(
        str(t["from"]),
        str(t["to"]),
        int(t["from_offset"]),
        int(t["to_offset"]),
        mode,  # type: ignore[arg-type]
        None if repeats is None else int(repeats),
        str(t.get("detail", "")),
    )
