"""Durable checkpoints in a directory: written atomically (write, fsync, rename, fsync dir), last few kept.

File ``chk-<id:012d>.json``, version 1::

    {"version": 1, "checkpoint_id": 7, "source": "<name>", "created_ms": 1700000000000,
     "enumerator": <enumerator state>, "positions": {"<split id>": <next offset>, ...}}

``positions`` hold, for each split, the offset after the last record the caller had received when the
checkpoint was taken. The newest file that reads cleanly wins; a damaged newer file is skipped with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from multicluster_source.exceptions import CheckpointError

CHECKPOINT_VERSION = 1
_NAME = re.compile(r"^chk-(\d{12})\.json$")
_log = logging.getLogger("multicluster_source.checkpoint")


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint as read back."""

    checkpoint_id: int
    source: str
    enumerator: dict[str, Any]
    positions: dict[str, int]
    path: Path


def encode_checkpoint(
    checkpoint_id: int,
    source: str,
    enumerator: dict[str, Any],
    positions: dict[str, int],
    *,
    enumerator_json: bytes | None = None,
) -> bytes:
    """A checkpoint document (the current version) as UTF-8 JSON bytes, as every storage writes it.
    ``enumerator_json``: ``enumerator`` already encoded (a state that did not change since the last write
    is not encoded again)."""
    head = {
        "version": CHECKPOINT_VERSION,
        "checkpoint_id": checkpoint_id,
        "source": source,
        "created_ms": int(time.time() * 1000),
    }
    out = [_dumps(head)[:-1], b',"enumerator":']
    if enumerator_json is not None:
        out.append(enumerator_json)
    else:
        _encode(enumerator, out)
    out.append(b',"positions":')
    _encode(positions, out)
    out.append(b"}")
    return b"".join(out)


_SLICE = 2000
"""Items encoded by one ``json.dumps`` call: the call holds the GIL for its whole run, so a large checkpoint
is encoded a slice at a time and the caller's thread runs in between (about 2 ms a slice)."""


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _large(value: Any) -> bool:
    return isinstance(value, (dict, list)) and len(value) > _SLICE


def encode_json(value: Any) -> bytes:
    """``value`` as compact JSON, the same bytes as one ``json.dumps``, encoded a slice at a time."""
    out: list[bytes] = []
    _encode(value, out)
    return b"".join(out)


def _encode(value: Any, out: list[bytes]) -> None:
    if isinstance(value, dict) and any(_large(v) for v in value.values()):
        out.append(b"{")
        for i, (key, item) in enumerate(value.items()):
            out.append(b',"' if i else b'"')
            out.append(_dumps(str(key))[1:] + b":")
            _encode(item, out)
        out.append(b"}")
    elif isinstance(value, dict) and len(value) > _SLICE:
        # islice over the items: no list of 100,000 tuples for the garbage collector to count and walk
        items = iter(value.items())
        out.append(b"{")
        for start in range(0, len(value), _SLICE):
            out.append(b"," if start else b"")
            out.append(_dumps(dict(islice(items, _SLICE)))[1:-1])
        out.append(b"}")
    elif isinstance(value, list) and len(value) > _SLICE:
        out.append(b"[")
        for start in range(0, len(value), _SLICE):
            out.append(b"," if start else b"")
            out.append(_dumps(value[start : start + _SLICE])[1:-1])
        out.append(b"]")
    else:
        out.append(_dumps(value))


def decode_checkpoint(data: bytes, path: Path) -> Checkpoint:
    """Read a checkpoint document of any known version; ``path`` names where it came from (a file, or an
    object key) in errors and in the result."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
    if not isinstance(doc, dict):
        raise CheckpointError(f"checkpoint {path}: not a JSON object")
    version = doc.get("version")
    if version != 1:
        raise CheckpointError(f"checkpoint {path}: unknown version {version!r} (this library reads 1)")
    try:
        positions = {str(k): int(v) for k, v in doc.get("positions", {}).items()}
        return Checkpoint(
            checkpoint_id=int(doc["checkpoint_id"]),
            source=str(doc.get("source", "")),
            enumerator=dict(doc["enumerator"]),
            positions=positions,
            path=path,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"checkpoint {path}: malformed: {exc}") from exc


class CheckpointStore:
    """Writes and reads checkpoints of one source in one directory."""

    def __init__(self, directory: str | os.PathLike[str], *, keep: int = 3) -> None:
        self.directory = Path(directory)
        self.keep = max(1, keep)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._encoded: tuple[dict[str, Any], bytes] | None = None  # the last enumerator state and its JSON

    def _files(self) -> list[tuple[int, Path]]:
        found = []
        for entry in self.directory.iterdir():
            m = _NAME.match(entry.name)
            if m:
                found.append((int(m.group(1)), entry))
        return sorted(found)

    def write(
        self, checkpoint_id: int, source: str, enumerator: dict[str, Any], positions: dict[str, int]
    ) -> Path:
        """Write a checkpoint durably; returns its path. Older ones beyond ``keep`` are deleted."""
        final = self.directory / f"chk-{checkpoint_id:012d}.json"
        tmp = self.directory / f".chk-{checkpoint_id:012d}.json.tmp"
        try:
            with open(tmp, "wb") as fh:
                fh.write(self._encode(checkpoint_id, source, enumerator, positions))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise CheckpointError(f"cannot write checkpoint {final}: {exc}") from exc
        for _cid, old in self._files()[: -self.keep]:
            try:
                old.unlink()
            except OSError as exc:
                _log.warning("cannot delete old checkpoint %s: %s", old, exc)
        return final

    def _encode(
        self, checkpoint_id: int, source: str, enumerator: dict[str, Any], positions: dict[str, int]
    ) -> bytes:
        """The document; the enumerator state is encoded again only when it is another object than the last
        one written (a checkpointer hands the same, never changed, object while the state is unchanged)."""
        cached = self._encoded
        if cached is None or cached[0] is not enumerator:
            cached = self._encoded = (enumerator, encode_json(enumerator))
        return encode_checkpoint(checkpoint_id, source, enumerator, positions, enumerator_json=cached[1])

    def read(self, path: Path) -> Checkpoint:
        """Read one checkpoint file of any known version."""
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
        return decode_checkpoint(data, path)

    def latest(self) -> Checkpoint | None:
        """The newest checkpoint that reads cleanly, or None when there is none."""
        for _cid, path in reversed(self._files()):
            try:
                return self.read(path)
            except CheckpointError as exc:
                _log.warning("skipping damaged checkpoint: %s", exc)
        return None
