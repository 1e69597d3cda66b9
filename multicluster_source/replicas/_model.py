"""What a replica handover decided for one split (``status()["handovers"]`` entries)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

TranslationMode = Literal["exact", "conservative", "identical", "timestamp", "start"]
"""How a replica split's start was chosen: ``exact`` (a sync, or the copy of the last record returned, pins
it), ``conservative`` (MM2's rule: may repeat up to ``max_repeats`` records, never skips), ``identical`` (same
offset), ``timestamp`` (first offset at or after the last returned record's time), ``start`` (no origin
position: the source's starting offsets)."""


@dataclass(frozen=True)
class Translation:
    """Where a replica split starts, and how that was chosen.

    ``from_offset`` is the origin split's position (the next offset the caller had not received);
    ``to_offset`` the replica split's start. ``max_repeats`` bounds the records that may be delivered again
    (0 for ``exact`` and ``identical``; None where unknown, as for ``timestamp``). ``detail`` says why, for
    logs and ``status()`` (never a secret).
    """

    from_split: str
    to_split: str
    from_offset: int
    to_offset: int
    mode: TranslationMode
    max_repeats: int | None = 0
    detail: str = ""

    def to_status(self) -> dict[str, Any]:
        """The ``status()["handovers"]`` entry (API.md section 9)."""
        return {
            "from": self.from_split,
            "to": self.to_split,
            "from_offset": self.from_offset,
            "to_offset": self.to_offset,
            "mode": self.mode,
            "max_repeats": self.max_repeats,
            "detail": self.detail,
        }
