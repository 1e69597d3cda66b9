"""The exact audit of a chaos run (a checker in the manner of Jepsen's Kafka workload, for this source).

Inputs: every record the producers had acknowledged (:class:`Record`: cluster, topic, partition, offset,
value), the records each run of the job delivered, in order (:class:`Run`, with the checkpoint positions the
run was restored from), the offset resets the job logged (:class:`Reset`), the records deleted on purpose
(``delete_records``: a partition's new log start) and, optionally, a way to ask the brokers which offsets are
still in their logs. :func:`audit` checks, per partition:

- **lost**: acknowledged and never delivered by any run; a *tail* when after the last offset any run
  delivered (the partition stopped), a *hole* otherwise (it was skipped); with whether it is still in the
  broker's log (when a reader is given); an undelivered record below a log start set by a deletion is
  counted as *deleted unread*, not lost (skipping it takes a logged reset: see gaps);
- **in-run duplicates**: one offset delivered twice by one run (never allowed);
- **duplicates across restores**: an offset a run delivers that an earlier run delivered too, allowed only
  at or after the position the later run was restored from (at-least-once); the others are reported with
  that bound;
- **gaps**: a run moving past offsets it never delivered (from its start position, or between two records)
  without a logged reset covering them;
- **conflicting values**: one offset with two different values (delivered, or delivered and acknowledged);
- **backwards**: a run delivering an offset below the one before it;
- **copies** (replica handovers, :mod:`harness.audit_copies`): a record of a copied topic (MirrorMaker 2's
  ``<origin>.<topic>`` on another cluster) counts as its origin record (found by its value), so an origin
  record delivered through its copy is not lost; an origin record delivered both from the origin and
  through the copy is a *repeat across a handover*, allowed only from the handover's position less the
  repeats its translation reported (``at most N may repeat``), and one copied twice by MM2 (two copy
  offsets, one value) is counted as such. A run may restart a partition at a logged handover's start
  (:attr:`Run.entries`): a jump there is no gap, a step back there no step back, and what comes again after
  it is judged against it as against a restored position.

A partition is *stuck* when records at its tail are lost. :meth:`AuditReport.summary` gives the totals and
then every partition's verdict (:meth:`PartitionAudit.verdict`), not only the first failure: missing records
as ranges, each a hole or the tail, with how many of them the broker's log still holds. Everything is plain
Python: no broker is needed (the log reader is the caller's: ``harness.chaos.read_log``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from harness.audit_copies import CopyRepeat, Handover, copied_deliveries, double_copies, judge_repeats

PartitionKey = tuple[str, str, int]
"""``(cluster, topic, partition)``."""

LogReader = Callable[[PartitionKey, Sequence[int]], set[int]]
"""Given a partition and offsets, the subset of those offsets still in the broker's log."""


@dataclass(frozen=True)
class Record:
    """One record: acknowledged by a producer, or delivered by the job."""

    cluster: str
    topic: str
    partition: int
    offset: int
    value: bytes

    @property
    def key(self) -> PartitionKey:
        """The record's partition."""
        return (self.cluster, self.topic, self.partition)


@dataclass(frozen=True)
class Run:
    """What one run of the job delivered, in order, and the positions it was restored from.

    ``restored_from`` is None for a run that did not restore a checkpoint; otherwise it maps every
    partition the checkpoint holds to its next offset (a partition it does not hold restarts from 0).
    """

    records: Sequence[Record]
    restored_from: Mapping[PartitionKey, int] | None = None
    entries: Mapping[PartitionKey, Sequence[int]] = field(default_factory=dict)
    """Partition -> the offsets this run (re)started it at on a logged replica handover, in order."""

    def start(self, key: PartitionKey) -> int:
        """The offset this run starts ``key`` at."""
        return 0 if self.restored_from is None else self.restored_from.get(key, 0)


@dataclass(frozen=True)
class Reset:
    """An offset reset the job logged: a partition moved from ``old`` to ``new``."""

    key: PartitionKey
    old: int
    new: int


@dataclass(frozen=True)
class Lost:
    """An acknowledged record no run delivered."""

    offset: int
    tail: bool
    in_log: bool | None  # None: not looked up


@dataclass(frozen=True)
class Duplicate:
    """An offset delivered again: by the same run, or by ``run`` after an earlier one (then ``bound`` is the
    position ``run`` was restored from: an offset at or after it may come again)."""

    offset: int
    run: int
    bound: int | None = None


@dataclass(frozen=True)
class Gap:
    """Offsets ``first``..``last`` a run moved past without delivering them or logging a reset."""

    run: int
    first: int
    last: int


@dataclass
class PartitionAudit:
    """The audit of one partition."""

    key: PartitionKey
    acknowledged: int = 0
    delivered: int = 0
    deleted_unread: int = 0
    last_delivered: int = -1  # the highest offset any run delivered (-1: none)
    lost: list[Lost] = field(default_factory=list)
    in_run_duplicates: list[Duplicate] = field(default_factory=list)
    allowed_duplicates: list[Duplicate] = field(default_factory=list)
    duplicates_beyond_bound: list[Duplicate] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    conflicting_values: list[int] = field(default_factory=list)
    backwards: list[tuple[int, int, int]] = field(default_factory=list)  # (run, previous, offset)
    via_copy: int = 0  # acknowledged records delivered only through a copy (a replica handover)
    seen_offsets: set[int] = field(default_factory=set, repr=False)  # offsets any run delivered
    copy_repeats: list[CopyRepeat] = field(default_factory=list)  # allowed: see harness.audit_copies
    copy_repeats_beyond: list[CopyRepeat] = field(default_factory=list)
    handover_skips: list[tuple[Handover, int]] = field(
        default_factory=list
    )  # and the copy's first origin offset

    @property
    def stuck(self) -> bool:
        """Whether records at the partition's tail were never delivered."""
        return any(lost.tail for lost in self.lost)

    @property
    def ok(self) -> bool:
        """Nothing lost, no duplicate the restores do not allow, no gap, conflict or step back."""
        return not (
            self.lost
            or self.in_run_duplicates
            or self.duplicates_beyond_bound
            or self.gaps
            or self.conflicting_values
            or self.backwards
            or self.copy_repeats_beyond
            or self.handover_skips
        )

    def verdict(self, examples: int = 5) -> str:
        """One line on this partition: ``OK`` with its counts, or every kind of finding it has, with missing
        records as *holes* (skipped: later offsets were delivered) and a *tail* (the partition stopped after
        its last delivered offset), each range with how much of it the broker's log still holds."""
        name = "/".join(map(str, self.key))
        delivered_offsets = self.acknowledged - self.deleted_unread - len(self.lost)
        counts = (
            f"{self.acknowledged} acknowledged, {self.delivered} delivered"
            + (f", {self.deleted_unread} deleted unread" if self.deleted_unread else "")
            + (f", {len(self.allowed_duplicates)} again after a restore" if self.allowed_duplicates else "")
            + (f", {self.via_copy} only through a copy" if self.via_copy else "")
            + (f", {len(self.copy_repeats)} again across a handover" if self.copy_repeats else "")
        )
        if self.ok:
            return f"{name}: OK ({counts})"
        findings = []
        holes = [x for x in self.lost if not x.tail]
        tail = [x for x in self.lost if x.tail]
        if tail:
            findings.append(
                f"STALLED after offset {self.last_delivered}: a tail of {len(tail)} never delivered, "
                f"{_missing_spans(tail, examples)}"
            )
        if holes:
            findings.append(f"{len(holes)} lost in holes {_missing_spans(holes, examples)}")
        if self.lost:
            findings.append(f"{max(delivered_offsets, 0)} of the acknowledged were delivered")
        if self.gaps:
            spans = [f"run {g.run}: {_span(g.first, g.last)}" for g in self.gaps]
            findings.append(f"{len(self.gaps)} gaps without a logged reset ({_listed(spans, examples)})")
        if self.in_run_duplicates:
            spans = [
                f"run {run}: {_span(a, b)}"
                for run in sorted({d.run for d in self.in_run_duplicates})
                for a, b in ranges(d.offset for d in self.in_run_duplicates if d.run == run)
            ]
            findings.append(
                f"{len(self.in_run_duplicates)} duplicates within one run, where nothing allows them "
                f"({_listed(spans, examples)})"
            )
        if self.duplicates_beyond_bound:
            spans = [
                f"run {run} (restored from {bound}): {_span(a, b)}"
                for run, bound in sorted({(d.run, d.bound or 0) for d in self.duplicates_beyond_bound})
                for a, b in ranges(
                    d.offset for d in self.duplicates_beyond_bound if (d.run, d.bound or 0) == (run, bound)
                )
            ]
            findings.append(
                f"{len(self.duplicates_beyond_bound)} duplicates before the restored position "
                f"({_listed(spans, examples)})"
            )
        if self.conflicting_values:
            shown = [_span(a, b) for a, b in ranges(self.conflicting_values)]
            findings.append(f"two values at offsets {_listed(shown, examples)}")
        if self.backwards:
            steps = [f"run {run}: {prev} -> {off}" for run, prev, off in self.backwards]
            findings.append(f"{len(self.backwards)} steps back ({_listed(steps, examples)})")
        if self.copy_repeats_beyond:
            shown = [_span(a, b) for a, b in ranges(r.offset for r in self.copy_repeats_beyond)]
            findings.append(
                f"{len(self.copy_repeats_beyond)} delivered both from the origin and through a copy, before "
                f"any handover's bound ({_listed(shown, examples)})"
            )
        if self.handover_skips:
            skips = [
                f"run {h.run}: left at {h.from_offset}, the copy began at {first}"
                for h, first in self.handover_skips
            ]
            findings.append(f"{len(skips)} handovers skipped records ({_listed(skips, examples)})")
        return f"{name}: FAILED ({counts}): " + "; ".join(findings)


@dataclass
class AuditReport:
    """The audit of every partition, with totals and a readable :meth:`summary`."""

    partitions: dict[PartitionKey, PartitionAudit]
    runs: int

    def _total(self, name: str) -> int:
        return sum(len(getattr(p, name)) for p in self.partitions.values())

    @property
    def acknowledged(self) -> int:
        """Records the producers had acknowledged."""
        return sum(p.acknowledged for p in self.partitions.values())

    @property
    def delivered(self) -> int:
        """Records the runs delivered (duplicates included)."""
        return sum(p.delivered for p in self.partitions.values())

    @property
    def lost(self) -> int:
        """Acknowledged records never delivered."""
        return self._total("lost")

    @property
    def deleted_unread(self) -> int:
        """Acknowledged records deleted on purpose before they were delivered."""
        return sum(p.deleted_unread for p in self.partitions.values())

    @property
    def in_run_duplicates(self) -> int:
        """Offsets delivered twice by one run."""
        return self._total("in_run_duplicates")

    @property
    def allowed_duplicates(self) -> int:
        """Offsets delivered again after a restore, at or after its position (at-least-once)."""
        return self._total("allowed_duplicates")

    @property
    def duplicates_beyond_bound(self) -> int:
        """Offsets delivered again after a restore, before its position."""
        return self._total("duplicates_beyond_bound")

    @property
    def gaps(self) -> int:
        """Stretches of offsets skipped without a logged reset."""
        return self._total("gaps")

    @property
    def conflicting_values(self) -> int:
        """Offsets seen with two different values."""
        return self._total("conflicting_values")

    @property
    def backwards(self) -> int:
        """Steps back within one run."""
        return self._total("backwards")

    @property
    def copy_repeats(self) -> int:
        """Origin records delivered again through a copy (or from the origin after one) within a handover's
        bound, or copied twice by MirrorMaker 2."""
        return self._total("copy_repeats")

    @property
    def copy_repeats_beyond(self) -> int:
        """Origin records delivered both from the origin and through a copy outside every handover's bound."""
        return self._total("copy_repeats_beyond")

    @property
    def handover_skips(self) -> int:
        """Handovers whose copy began after the origin's position (records passed over)."""
        return self._total("handover_skips")

    @property
    def stuck_partitions(self) -> list[PartitionKey]:
        """Partitions whose tail was never delivered."""
        return sorted(k for k, p in self.partitions.items() if p.stuck)

    @property
    def ok(self) -> bool:
        """Whether every partition audits clean."""
        return all(p.ok for p in self.partitions.values())

    def summary(self, examples: int = 5) -> str:
        """The totals, then every partition's verdict (:meth:`PartitionAudit.verdict`), failed ones first;
        at most ``examples`` ranges or findings of each kind are spelled out per partition."""
        lines = [
            f"audit of {len(self.partitions)} partitions, {self.runs} run(s): {self.acknowledged} acknowledged, "
            f"{self.delivered} delivered, {self.deleted_unread} deleted unread; lost {self.lost}, in-run duplicates {self.in_run_duplicates}, "
            f"duplicates after restores {self.allowed_duplicates} within bounds and "
            f"{self.duplicates_beyond_bound} beyond, gaps {self.gaps}, conflicting values "
            f"{self.conflicting_values}, backwards {self.backwards}, "
            + (
                f"repeats across handovers {self.copy_repeats} within bounds and {self.copy_repeats_beyond} "
                f"beyond, handovers that skipped {self.handover_skips}, "
                if self.copy_repeats or self.copy_repeats_beyond or self.handover_skips
                else ""
            )
            + "stuck partitions "
            f"{len(self.stuck_partitions)}: {'OK' if self.ok else 'FAILED'}"
        ]
        ordered = sorted(self.partitions.items(), key=lambda item: (item[1].ok, item[0]))
        lines += [f"  {p.verdict(examples)}" for _key, p in ordered]
        return "\n".join(lines)


def ranges(offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Offsets as inclusive runs of consecutive values: ``[3, 4, 5, 9]`` -> ``[(3, 5), (9, 9)]``."""
    spans: list[tuple[int, int]] = []
    for offset in sorted(set(offsets)):
        if spans and offset == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], offset)
        else:
            spans.append((offset, offset))
    return spans


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}..{last}"


def _listed(items: Sequence[str], examples: int) -> str:
    shown = ", ".join(items[:examples])
    return shown if len(items) <= examples else f"{shown} and {len(items) - examples} more"


def _missing_spans(lost: Sequence[Lost], examples: int) -> str:
    """Lost records as ranges, each with how many of them the broker's log still holds."""
    by_offset = {x.offset: x for x in lost}
    parts = []
    for first, last in ranges(by_offset):
        span = [by_offset[o] for o in range(first, last + 1)]
        looked_up = [x for x in span if x.in_log is not None]
        if not looked_up:
            where = "log not read"
        else:
            present = sum(x.in_log is True for x in looked_up)
            where = f"{present} of {len(span)} in the broker's log"
            if len(looked_up) < len(span):
                where += f", {len(span) - len(looked_up)} not looked up"
        parts.append(f"{_span(first, last)} ({where})")
    return _listed(parts, examples)


def audit(
    acknowledged: Iterable[Record],
    runs: Sequence[Run],
    *,
    resets: Iterable[Reset] = (),
    deleted: Mapping[PartitionKey, int] | None = None,
    read_log: LogReader | None = None,
    copies: Mapping[PartitionKey, PartitionKey] | None = None,
    handovers: Iterable[Handover] = (),
    copied_twice: Mapping[PartitionKey, set[bytes]] | None = None,
) -> AuditReport:
    """Audit ``runs`` (in the order they ran) against the ``acknowledged`` records; see the module docs.

    ``deleted`` maps a partition to the log start a ``delete_records`` set (the highest, if several).
    ``copies`` maps each copied partition to its origin partition, ``handovers`` are the handovers the job
    logged, ``copied_twice`` the values each copied partition holds at more than one offset
    (:mod:`harness.audit_copies`).

    Partitions that only the runs mention are audited too (for duplicates, gaps and order). ``read_log``
    is asked once per partition with lost records, for the offsets that are still in the broker's log.
    """
    acked: dict[PartitionKey, dict[int, bytes]] = defaultdict(dict)
    for record in acknowledged:
        acked[record.key][record.offset] = record.value
    reset_by_key: dict[PartitionKey, list[Reset]] = defaultdict(list)
    for reset in resets:
        reset_by_key[reset.key].append(reset)
    per_run: list[dict[PartitionKey, list[Record]]] = []
    for run in runs:
        by_key: dict[PartitionKey, list[Record]] = defaultdict(list)
        for record in run.records:
            by_key[record.key].append(record)
        per_run.append(by_key)
    keys = set(acked).union(*(set(by_key) for by_key in per_run))
    through = copied_deliveries(acked, runs, copies or {})
    partitions = {
        key: _audit_partition(
            key,
            acked.get(key, {}),
            runs,
            per_run,
            reset_by_key[key],
            (deleted or {}).get(key, 0),
            read_log,
            set(through.get(key, {})),
        )
        for key in keys
    }
    judge_repeats(
        partitions, through, list(handovers), double_copies(acked, copies or {}, copied_twice or {})
    )
    return AuditReport(partitions, len(runs))


def _covered(resets: Sequence[Reset], first: int, last: int) -> bool:
    """Whether a logged reset moved the partition over ``first``..``last``."""
    return any(r.old <= first and r.new > last for r in resets)


def _audit_partition(
    key: PartitionKey,
    acked: Mapping[int, bytes],
    runs: Sequence[Run],
    per_run: Sequence[Mapping[PartitionKey, list[Record]]],
    resets: Sequence[Reset],
    log_start: int,
    read_log: LogReader | None,
    via_copy: set[int],
) -> PartitionAudit:
    result = PartitionAudit(key, acknowledged=len(acked))
    values: dict[int, bytes] = dict(acked)
    conflicts: set[int] = set()
    seen_before: set[int] = set()  # offsets delivered by earlier runs (or earlier segments of this one)
    for index, (run, by_key) in enumerate(zip(runs, per_run, strict=True)):
        records = by_key.get(key, [])
        result.delivered += len(records)
        seen_here: set[int] = set()
        start = run.start(key)
        previous: int | None = None
        entries, used = list(run.entries.get(key, ())), 0
        for record in records:
            offset = record.offset
            if entries and (previous is None or offset != previous + 1) and offset in entries[used:]:
                # a logged handover (re)started the partition here: a new segment from this offset
                used = entries.index(offset, used) + 1
                start, previous = offset, None
                seen_before |= seen_here
                seen_here = set()
            known = values.setdefault(offset, record.value)
            if known != record.value:
                conflicts.add(offset)
            if previous is not None and offset < previous:
                result.backwards.append((index, previous, offset))
            if offset in seen_here:
                result.in_run_duplicates.append(Duplicate(offset, index))
            elif offset in seen_before:
                duplicate = Duplicate(offset, index, start)
                if offset >= start:
                    result.allowed_duplicates.append(duplicate)
                else:
                    result.duplicates_beyond_bound.append(duplicate)
            expected = start if previous is None else previous + 1
            if offset > expected and not _covered(resets, expected, offset - 1):
                result.gaps.append(Gap(index, expected, offset - 1))
            seen_here.add(offset)
            previous = offset if previous is None else max(previous, offset)
        seen_before |= seen_here
    result.conflicting_values = sorted(conflicts)
    result.seen_offsets = seen_before
    last_delivered = result.last_delivered = max(seen_before | via_copy, default=-1)
    result.via_copy = len((set(acked) & via_copy) - seen_before)
    undelivered = set(acked) - seen_before - via_copy
    missing = sorted(o for o in undelivered if o >= log_start)
    result.deleted_unread = len(undelivered) - len(missing)
    in_log = read_log(key, missing) if missing and read_log is not None else None
    result.lost = [
        Lost(o, tail=o > last_delivered, in_log=None if in_log is None else o in in_log) for o in missing
    ]
    return result
