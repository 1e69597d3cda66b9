"""Replica handovers in the chaos audit (:mod:`harness.audit`): records read from a copy credited to their
origin records, and origin records delivered twice across a handover judged against its bound.

A copy (MirrorMaker 2's ``<origin id>.<topic>`` on another cluster) holds the origin's records at other
offsets, with the same values; the soak's values are unique, so a copy's record is matched to its origin
record by its value among the acknowledged ones (a copy of a record whose acknowledgement never came is left
out: it is owed nowhere).

An origin record delivered both from the origin and through the copy (in any order) is a *repeat across a
handover*. The source allows it in two places: the copy starts at the translation of the origin position,
which may repeat up to the ``max_repeats`` the translation reported (0 when ``exact``); and an origin that
comes back while its copy is read resumes at its retained position, which is the handover's position, so
what was read from the copy meanwhile comes again. Both repeat offsets at or after the handover's position
less its ``max_repeats``: that is each handover's bound, and a repeat below every bound of its partition is
reported. A record MirrorMaker 2 copied twice (two copy offsets, one value; MM2 copies at least once, for
instance again after its target restarted) is counted, not judged: the translation's bound assumes one copy
per record (the guide says so), so the second copy of a record the origin delivered comes again whatever
the bound. Which records the copy holds twice is read from the copy's log (``double``), since the job may
have read only one of the two copies.

A handover must not skip either: the copy's record at the offset a handover started it at must be a copy of
an origin record at or before the handover's position (a later one means the records between were passed
over; an origin that comes back re-reads them, which would hide the skip from the lost count, so it is
checked on its own).

Everything is plain Python: no broker is needed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.audit import PartitionAudit, Run

PartitionKey = tuple[str, str, int]
CopyOffset = tuple[PartitionKey, int]  # (copied partition, offset there)

HANDOVER_LINE = re.compile(
    r"(\S+) starts at offset (\d+): handed over from (\S+) offset (-?\d+), mode (\w+)"
    r"(?:, at most (\d+) record\(s\) may repeat)?"
)
"""The line the source logs (``multicluster_source.enumerator``, INFO) when a copied split starts."""


@dataclass(frozen=True)
class Handover:
    """A handover a run of the job logged: ``origin`` left at ``from_offset`` (the next offset the job had
    not received), ``copy`` started at ``to_offset``; ``mode`` and ``max_repeats`` as the translation
    reported (``max_repeats`` None: none given, 0 for ``exact``)."""

    run: int
    origin: PartitionKey
    copy: PartitionKey
    from_offset: int
    to_offset: int
    mode: str
    max_repeats: int | None = None

    @property
    def bound(self) -> int | None:
        """The lowest origin offset that may be delivered twice across this handover; None when its
        translation gave no bound (mode ``start``: the copy started at the starting offsets)."""
        if self.mode in ("exact", "identical"):
            return self.from_offset
        if self.max_repeats is not None:
            return self.from_offset - self.max_repeats
        return None


@dataclass(frozen=True)
class CopyRepeat:
    """An origin record delivered more than once through copies or from both sides: ``copies`` are the
    copy offsets it came from, ``from_origin`` whether the origin delivered it too, ``bound`` the handover
    bound it was judged against (None: MM2 copied it twice and the origin did not deliver it)."""

    offset: int
    copies: tuple[CopyOffset, ...]
    from_origin: bool
    bound: int | None = None


def split_key(split_id: str) -> PartitionKey:
    """``cluster/topic/partition`` as a partition key."""
    cluster, topic, partition = split_id.split("/")
    return (cluster, topic, int(partition))


def parse_handovers(run: int, text: str) -> list[Handover]:
    """The handovers logged in ``text`` (one run's log), in order."""
    found = []
    for copy, start, origin, offset, mode, repeats in HANDOVER_LINE.findall(text):
        found.append(
            Handover(
                run,
                split_key(origin),
                split_key(copy),
                int(offset),
                int(start),
                mode,
                int(repeats) if repeats else (0 if mode in ("exact", "identical") else None),
            )
        )
    return found


def entries_of(handovers: Iterable[Handover], run: int) -> dict[PartitionKey, list[int]]:
    """Copied partition -> the offsets run ``run`` started it at (for :attr:`harness.audit.Run.entries`)."""
    entries: dict[PartitionKey, list[int]] = defaultdict(list)
    for h in handovers:
        if h.run == run:
            entries[h.copy].append(h.to_offset)
    return dict(entries)


def copied_deliveries(
    acked: Mapping[PartitionKey, Mapping[int, bytes]],
    runs: Sequence[Run],
    copies: Mapping[PartitionKey, PartitionKey],
) -> dict[PartitionKey, dict[int, set[CopyOffset]]]:
    """Origin partition -> origin offset -> the copy offsets its record was delivered from (any run)."""
    if not copies:
        return {}
    index = {
        origin: {value: offset for offset, value in acked.get(origin, {}).items()}
        for origin in set(copies.values())
    }
    through: dict[PartitionKey, dict[int, set[CopyOffset]]] = defaultdict(lambda: defaultdict(set))
    for run in runs:
        for record in run.records:
            origin = copies.get(record.key)
            if origin is None:
                continue
            offset = index[origin].get(record.value)
            if offset is not None:
                through[origin][offset].add((record.key, record.offset))
    return {key: dict(by_offset) for key, by_offset in through.items()}


def double_copies(
    acked: Mapping[PartitionKey, Mapping[int, bytes]],
    copies: Mapping[PartitionKey, PartitionKey],
    copied_twice: Mapping[PartitionKey, set[bytes]],
) -> dict[PartitionKey, set[int]]:
    """Origin partition -> the offsets of its acknowledged records that a copy holds more than once."""
    out: dict[PartitionKey, set[int]] = defaultdict(set)
    for copy, values in copied_twice.items():
        origin = copies.get(copy)
        if origin is not None and values:
            out[origin] |= {offset for offset, value in acked.get(origin, {}).items() if value in values}
    return dict(out)


def judge_repeats(
    partitions: Mapping[PartitionKey, PartitionAudit],
    through: Mapping[PartitionKey, Mapping[int, set[CopyOffset]]],
    handovers: Sequence[Handover],
    double: Mapping[PartitionKey, set[int]] | None = None,
) -> None:
    """Fill each origin partition's ``copy_repeats``, ``copy_repeats_beyond`` and ``handover_skips`` (see
    the module docs)."""
    origin_of = {
        where: offset for by_offset in through.values() for offset, at in by_offset.items() for where in at
    }
    for h in handovers:
        first = origin_of.get((h.copy, h.to_offset))
        part = partitions.get(h.origin)
        if first is not None and part is not None and first > h.from_offset:
            part.handover_skips.append((h, first))
    for key, by_offset in through.items():
        part = partitions.get(key)
        if part is None:
            continue
        bounds = [b for h in handovers if h.origin == key and (b := h.bound) is not None]
        for offset, copied in sorted(by_offset.items()):
            from_origin = offset in part.seen_offsets
            if not from_origin and len(copied) < 2:
                continue
            where = tuple(sorted(copied))
            if not from_origin or offset in (double or {}).get(key, ()):  # MM2 copied it twice
                part.copy_repeats.append(CopyRepeat(offset, where, from_origin))
                continue
            fitting = [b for b in bounds if offset >= b]
            repeat = CopyRepeat(offset, where, True, max(fitting) if fitting else min(bounds, default=None))
            (part.copy_repeats if fitting else part.copy_repeats_beyond).append(repeat)
