"""The status document of a hybrid stream (``HybridStream.status()``), and the handover summaries in it.

Called from the caller's thread or the admin server's request threads; it only reads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from multicluster_source.hybrid._stage import HybridStage, StageHandover, StageReader
from multicluster_source.hybrid._state import HybridState

__all__ = ["hybrid_status", "log_switch", "mode_counts", "stage_secrets", "switch_summary"]

_log = logging.getLogger("multicluster_source.hybrid")


def log_switch(
    name: str, stage_names: Sequence[str], index: int, handover: StageHandover, summary: dict[str, Any]
) -> None:
    """The one log line of a switch from stage ``index`` to the next."""
    _log.info(
        "source=%s: hybrid switch from stage %d (%s) to stage %d (%s): %d splits handed over (%s)%s; "
        "opened in %.0f ms",
        name,
        index,
        stage_names[index],
        index + 1,
        stage_names[index + 1],
        len(handover.positions),
        ", ".join(f"{k}={v}" for k, v in summary["modes"].items()) or "none",
        "" if handover.timestamp_ms is None else f", others from timestamp {handover.timestamp_ms}",
        summary["open_ms"],
    )


def stage_secrets(stages: Sequence[HybridStage]) -> set[str]:
    """Values of secret-looking client properties of the Kafka stages."""
    out: set[str] = set()
    for stage in stages:
        source = getattr(stage, "source", None)
        if source is not None:
            out |= {v for k, v in source.client_properties.items() if "password" in k or "secret" in k}
    return out


def mode_counts(handover: StageHandover) -> dict[str, int]:
    """How many splits each handover mode chose (``{"exact": 4}``)."""
    out: dict[str, int] = {}
    for split_id in handover.positions:
        mode = handover.modes.get(split_id, "exact")
        out[mode] = out.get(mode, 0) + 1
    return dict(sorted(out.items()))


def switch_summary(index: int, handover: StageHandover) -> dict[str, Any]:
    """The state's ``switches`` entry for a switch from stage ``index`` (``open_ms`` and ``latency_ms`` are
    filled in once the next stage opened and returned its first record)."""
    return {
        "from": index,
        "to": index + 1,
        "modes": mode_counts(handover),
        "timestamp_ms": handover.timestamp_ms,
        "at_ms": int(time.time() * 1000),
        "latency_ms": None,
    }


def hybrid_status(
    *,
    name: str,
    state: HybridState,
    stages: Sequence[HybridStage],
    reader: StageReader | None,
    closed: bool,
    finished: bool,
    health: dict[str, Any],
    parallelism: int,
    assignments: dict[int, list[str]],
    restored_from: str | None,
    watermark: int | None,
) -> dict[str, Any]:
    """``{"source", "state", "health", ..., "hybrid": {...}}``: the current Kafka stage's own status when a
    Kafka stage runs, and always ``"hybrid"``."""
    index = state.stage
    stage_status: dict[str, Any] = {}
    if reader is not None and not closed:
        stage_status = reader.status()
    doc: dict[str, Any] = (
        dict(stage_status.get("source") or {}) if stage_status.get("kind") == "kafka" else {}
    )
    doc.update(
        source=name,
        state="closed" if closed else "finished" if finished else "running",
        health=health,
        parallelism=parallelism,
        checkpoint={"last_id": state.checkpoint_id or None, "restored_from": restored_from},
    )
    archived = stages[index].bounded and index < len(stages) - 1
    phase = "archived" if archived else "live"
    splits: set[str] = set()
    if reader is not None and not closed:
        splits |= set(reader.positions())
    splits |= {s for ids in assignments.values() for s in ids}
    handover = state.handover
    start_modes: dict[str, str] = dict(stage_status.get("start_modes") or {})
    if handover is not None:
        splits |= set(handover.positions)
        for split_id in handover.positions:
            start_modes.setdefault(split_id, handover.modes.get(split_id, "exact"))
    doc["hybrid"] = {
        "stage": index,
        "stages": len(stages),
        "stage_name": stages[index].name,
        "stage_names": [s.name for s in stages],
        "phase": phase,
        "handover": None
        if handover is None
        else {
            "modes": mode_counts(handover),
            "timestamp_ms": handover.timestamp_ms,
            "positions": dict(sorted(handover.positions.items())),
        },
        "splits": {
            s: {"phase": phase, **({"start": start_modes[s]} if s in start_modes else {})}
            for s in sorted(splits)
        },
        "switches": [dict(s) for s in state.switches],
        "watermark": watermark,
    }
    if stage_status.get("kind") != "kafka" and stage_status:
        doc["hybrid"]["stage_status"] = stage_status
    return doc
