"""The hybrid source's own checkpoint: which stage runs, what it was handed, and the stage's snapshot.

Files ``hybrid-<seq:012d>.json`` in the checkpoint directory, written atomically (write, fsync, rename,
fsync the directory), the last three kept; the newest that reads cleanly wins. Version 2 (1 is read too:
it had no ``skip``)::

    {"v": 2, "seq": 12, "checkpoint_id": 7, "stages": ["archive", "live"], "stage": 1,
     "handover": <StageHandover.to_dict() handed to this stage, or null for the first stage>,
     "snapshot": <the stage's StageReader.snapshot(), or null before its first checkpoint>,
     "watermark": <ms or null: the watermark the caller had seen, which never goes back>,
     "switches": [{"from": 0, "to": 1, "modes": {"exact": 4}, "at_ms": ..., "latency_ms": ...}],
     "skip": {"<split id>": <offset>, ...}}   # records below it were handed out already (see _held.py)

A stage that keeps files of its own (the Kafka stage keeps its source's checkpoints) gets the sub-directory
``stage-<i>`` of the checkpoint directory. The switch writes ``stage: i+1, handover: H, snapshot: null``
durably before stage i+1 is opened, so a crash at any step restores either stage i from its last snapshot
(its records after that come again, then the same switch) or stage i+1 from H (or from its own newer state).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from multicluster_source.exceptions import CheckpointError
from multicluster_source.hybrid._stage import StageHandover

__all__ = ["HybridState", "HybridStateStore", "checked_restore", "write_state"]

_NAME = re.compile(r"^hybrid-(\d{12})\.json$")
_log = logging.getLogger("multicluster_source.hybrid")


@dataclass(frozen=True)
class HybridState:
    """One hybrid checkpoint (see the module docstring for the file format)."""

    stages: tuple[str, ...]
    stage: int = 0
    handover: StageHandover | None = None
    snapshot: dict[str, Any] | None = None
    checkpoint_id: int = 0
    watermark: int | None = None
    switches: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    skip: Mapping[str, int] = field(default_factory=dict)
    """Split id -> offset: after a restore, the stage's records of that split below it were handed out
    already (a checkpoint inside the ``for`` loop, mid-batch: see :mod:`._held`). Since version 2."""

    def to_dict(self, seq: int) -> dict[str, Any]:
        """JSON-ready form, versioned."""
        return {
            "v": 2,
            "seq": seq,
            "checkpoint_id": self.checkpoint_id,
            "stages": list(self.stages),
            "stage": self.stage,
            "handover": None if self.handover is None else self.handover.to_dict(),
            "snapshot": self.snapshot,
            "watermark": self.watermark,
            "switches": list(self.switches),
            "skip": dict(sorted(self.skip.items())),
        }

    @staticmethod
    def from_dict(doc: Any, where: str) -> HybridState:
        """Read any known version (1, 2); ``where`` names the file in errors."""
        if not isinstance(doc, dict):
            raise CheckpointError(f"hybrid checkpoint {where}: not a JSON object")
        if doc.get("v") not in (1, 2):
            raise CheckpointError(
                f"hybrid checkpoint {where}: unknown version {doc.get('v')!r} (this library reads 1 and 2)"
            )
        try:
            handover = doc.get("handover")
            snapshot = doc.get("snapshot")
            watermark = doc.get("watermark")
            return HybridState(
                stages=tuple(str(s) for s in doc["stages"]),
                stage=int(doc["stage"]),
                handover=None if handover is None else StageHandover.from_dict(handover),
                snapshot=None if snapshot is None else dict(snapshot),
                checkpoint_id=int(doc.get("checkpoint_id", 0)),
                watermark=None if watermark is None else int(watermark),
                switches=tuple(dict(s) for s in doc.get("switches", [])),
                skip={str(k): int(v) for k, v in doc.get("skip", {}).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"hybrid checkpoint {where}: malformed: {exc}") from exc

    def with_changes(self, **changes: Any) -> HybridState:
        """A copy with ``changes``."""
        return replace(self, **changes)


class HybridStateStore:
    """Writes and reads the hybrid checkpoints of one directory (one thread at a time: the stream's, or a
    periodic checkpoint's background write, ``mcs-hybrid-checkpoint-<source>`` or the asyncio stream's
    executor, while no switch runs)."""

    def __init__(self, directory: str | os.PathLike[str], *, keep: int = 3) -> None:
        self.directory = Path(directory)
        self.keep = max(2, keep)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._seq = max((seq for seq, _ in self._files()), default=0)

    def _files(self) -> list[tuple[int, Path]]:
        found = []
        for entry in self.directory.iterdir():
            m = _NAME.match(entry.name)
            if m:
                found.append((int(m.group(1)), entry))
        return sorted(found)

    def stage_dir(self, stage: int) -> str:
        """The sub-directory stage ``stage`` keeps its own files in."""
        return str(self.directory / f"stage-{stage}")

    def write(self, state: HybridState) -> Path:
        """Write ``state`` durably; returns its path. Older files beyond ``keep`` are deleted."""
        self._seq += 1
        final = self.directory / f"hybrid-{self._seq:012d}.json"
        tmp = self.directory / f".hybrid-{self._seq:012d}.json.tmp"
        try:
            with open(tmp, "wb") as fh:
                fh.write(json.dumps(state.to_dict(self._seq), separators=(",", ":")).encode("utf-8"))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise CheckpointError(f"cannot write hybrid checkpoint {final}: {exc}") from exc
        for _seq, old in self._files()[: -self.keep]:
            try:
                old.unlink()
            except OSError as exc:
                _log.warning("cannot delete old hybrid checkpoint %s: %s", old, exc)
        return final

    def latest(self) -> tuple[HybridState, Path] | None:
        """The newest hybrid checkpoint that reads cleanly (a damaged newer one is skipped with a warning)."""
        for _seq, path in reversed(self._files()):
            try:
                doc = json.loads(path.read_bytes().decode("utf-8"))
                return HybridState.from_dict(doc, str(path)), path
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                _log.warning("skipping damaged hybrid checkpoint %s: %s", path, exc)
            except CheckpointError as exc:
                if "unknown version" in str(exc):
                    raise
                _log.warning("skipping damaged hybrid checkpoint: %s", exc)
        return None


def checked_restore(state: HybridState, path: str, names: tuple[str, ...], source: str) -> HybridState:
    """``state`` read from ``path``, checked against this source's chain of stage ``names`` (logged)."""
    if len(state.stages) != len(names) or state.stage >= len(names):
        raise CheckpointError(
            f"hybrid checkpoint {path}: written for stages {list(state.stages)}, this source has "
            f"{list(names)}; use a new checkpoint_dir for a different chain of stages"
        )
    _log.info(
        "source=%s: restoring from %s: stage %d/%d (%s)%s",
        source,
        path,
        state.stage + 1,
        len(names),
        names[state.stage],
        "" if state.snapshot is not None else ", from its start or handover",
    )
    return state


def write_state(durable: Callable[[], object], store: HybridStateStore | None, state: HybridState) -> None:
    """A captured checkpoint's ``write`` (see :meth:`HybridStream.capture_checkpoint`): wait until the stage's
    own part of it is durable (``durable()`` raises what writing that raised), then write ``state``."""
    durable()
    if store is not None:
        store.write(state)
