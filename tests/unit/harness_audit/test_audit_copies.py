"""The chaos audit across replica handovers (``harness.audit_copies``) on made-up histories: a copy's records
count as their origin's, and what comes twice across a handover is judged against the handover's bound."""

from __future__ import annotations

from collections.abc import Iterable

from harness.audit import PartitionKey, Record, Run, audit
from harness.audit_copies import Handover, entries_of, parse_handovers

P: PartitionKey = ("east", "t", 0)
C: PartitionKey = ("west", "east.t", 0)  # MM2's copy of P on west: copy offset c holds P's offset c + 2
SHIFT = 2


def origin(offsets: Iterable[int]) -> list[Record]:
    return [Record(*P, o, f"v{o}".encode()) for o in offsets]


def copied(origin_offsets: Iterable[int], shift: int = SHIFT) -> list[Record]:
    return [Record(*C, o - shift, f"v{o}".encode()) for o in origin_offsets]


def handover(from_offset: int, to_offset: int, mode: str = "exact", repeats: int | None = 0) -> Handover:
    return Handover(0, P, C, from_offset, to_offset, mode, repeats)


def run_with(records: list[Record], *handovers: Handover) -> Run:
    return Run(records, entries=entries_of(handovers, 0))


def test_an_exact_handover_delivers_every_record_once_across_origin_and_copy() -> None:
    h = handover(5, 3)
    report = audit(
        origin(range(10)),
        [run_with(origin(range(5)) + copied(range(5, 10)), h)],
        copies={C: P},
        handovers=[h],
    )
    assert report.ok, report.summary()
    assert (report.lost, report.copy_repeats, report.gaps) == (0, 0, 0)
    assert report.partitions[P].via_copy == 5
    assert "5 only through a copy" in report.partitions[P].verdict()


def test_repeats_within_the_reported_bound_are_allowed_and_below_it_reported() -> None:
    within = handover(5, 1, "conservative", 2)  # copy offset 1 is origin 3: 3 and 4 again, as reported
    report = audit(
        origin(range(10)),
        [run_with(origin(range(5)) + copied(range(3, 10)), within)],
        copies={C: P},
        handovers=[within],
    )
    assert report.ok, report.summary()
    assert [r.offset for r in report.partitions[P].copy_repeats] == [3, 4]
    assert "repeats across handovers 2 within bounds and 0 beyond" in report.summary()

    beyond = handover(5, 0, "conservative", 1)  # it said at most 1 (from 4), but 2 and 3 came again too
    report = audit(
        origin(range(10)),
        [run_with(origin(range(5)) + copied(range(2, 10)), beyond)],
        copies={C: P},
        handovers=[beyond],
    )
    part = report.partitions[P]
    assert [r.offset for r in part.copy_repeats] == [4]
    assert [(r.offset, r.bound) for r in part.copy_repeats_beyond] == [(2, 4), (3, 4)]
    assert not report.ok
    assert (
        "2 delivered both from the origin and through a copy, before any handover's bound (2..3)"
        in part.verdict()
    )


def test_a_failed_translation_gives_no_bound_so_its_repeats_are_reported() -> None:
    h = handover(5, 0, "start", None)
    report = audit(
        origin(range(10)),
        [run_with(origin(range(5)) + copied(range(2, 10)), h)],
        copies={C: P},
        handovers=[h],
    )
    assert [r.offset for r in report.partitions[P].copy_repeats_beyond] == [2, 3, 4]


def test_the_origin_coming_back_at_its_retained_position_repeats_what_the_copy_gave_within_the_bound() -> (
    None
):
    h = handover(5, 3)
    records = origin(range(5)) + copied(range(5, 9)) + origin(range(5, 12))
    report = audit(origin(range(12)), [run_with(records, h)], copies={C: P}, handovers=[h])
    assert report.ok, report.summary()
    assert [r.offset for r in report.partitions[P].copy_repeats] == [5, 6, 7, 8]
    assert report.partitions[P].via_copy == 0, "each came from the origin too"


def test_a_record_the_copy_skipped_is_lost_and_the_origin_after_it_does_not_hide_it() -> None:
    h = handover(5, 3)
    records = origin(range(5)) + copied([5, 6, 8, 9])
    report = audit(origin(range(10)), [run_with(records, h)], copies={C: P}, handovers=[h])
    assert [(x.offset, x.tail) for x in report.partitions[P].lost] == [(7, False)]
    assert [(g.first, g.last) for g in report.partitions[C].gaps] == [(5, 5)], "the copy's own gap too"


def test_a_copy_started_at_a_logged_entry_has_no_gap_and_a_second_entry_may_step_back() -> None:
    first, second = handover(5, 3), handover(7, 5)
    # the copy read origin 5..9 (copy 3..7), the origin came back at 5 and read 5..6, then the copy again
    # from copy 5 (origin 7): copy offsets 5..7 come twice in one run, after the second entry
    records = origin(range(5)) + copied(range(5, 10)) + origin(range(5, 7)) + copied(range(7, 12))
    run = run_with(records, first, second)
    report = audit(origin(range(12)), [run], copies={C: P}, handovers=[first, second])
    assert report.ok, report.summary()
    assert [d.offset for d in report.partitions[C].allowed_duplicates] == [5, 6, 7]
    unlogged = audit(origin(range(12)), [Run(records)], copies={C: P}, handovers=[first, second])
    copy = unlogged.partitions[C]
    assert [(g.first, g.last) for g in copy.gaps] == [(0, 2)], "a copy started without a logged entry"
    assert copy.backwards[0] == (0, 7, 5) and [d.offset for d in copy.in_run_duplicates] == [5, 6, 7]


def test_a_record_mirrormaker_copied_twice_is_counted_not_judged() -> None:
    h = handover(0, 0)
    twice = [*copied(range(4), shift=0), Record(*C, 4, b"v3"), *copied(range(4, 6), shift=-1)]
    report = audit(origin(range(6)), [run_with(twice, h)], copies={C: P}, handovers=[h])
    assert report.ok, report.summary()
    [repeat] = report.partitions[P].copy_repeats
    assert (repeat.offset, repeat.from_origin, repeat.copies) == (3, False, ((C, 3), (C, 4)))


def test_the_handover_lines_the_source_logs_are_parsed() -> None:
    log = (
        "2026-12-05 21:00:00,001 multicluster_source.enumerator cluster=west: west/east.t/0 starts at offset "
        "42: handed over from east/t/0 offset 50, mode conservative, at most 3 record(s) may repeat (sync)\n"
        "2026-12-05 21:00:01,002 multicluster_source.enumerator cluster=west: west/east.t/1 starts at offset "
        "7: handed over from east/t/1 offset 9, mode exact\n"
    )
    assert parse_handovers(2, log) == [
        Handover(2, P, C, 50, 42, "conservative", 3),
        Handover(2, ("east", "t", 1), ("west", "east.t", 1), 9, 7, "exact", 0),
    ]


def test_a_handover_that_starts_the_copy_past_the_origins_position_is_a_skip_even_if_the_origin_rereads_it() -> (
    None
):
    h = handover(5, 5)  # copy offset 5 is origin 7: origin 5 and 6 passed over
    records = origin(range(5)) + copied(range(7, 9)) + origin(range(5, 10))  # the origin came back at 5
    report = audit(origin(range(10)), [run_with(records, h)], copies={C: P}, handovers=[h])
    assert report.lost == 0, "the origin's return read them"
    assert report.partitions[P].handover_skips == [(h, 7)] and not report.ok
    assert (
        "1 handovers skipped records (run 0: left at 5, the copy began at 7)"
        in report.partitions[P].verdict()
    )
    assert "handovers that skipped 1" in report.summary()


def test_a_record_the_copy_holds_twice_may_come_from_the_origin_and_from_its_second_copy() -> None:
    # the origin delivered 0..4; MM2 copied 3 and 4 again after copying them (copy 0..4, then 5, 6 = 3, 4),
    # so a translation from 5 by the last sync (origin 4 -> copy 4) starts at copy 5: 3 and 4 come again
    h = handover(5, 5, "conservative", 0)
    records = origin(range(5)) + copied([3, 4], shift=-2) + copied(range(5, 8), shift=-2)
    twice = {C: {b"v3", b"v4"}}
    report = audit(origin(range(8)), [run_with(records, h)], copies={C: P}, handovers=[h], copied_twice=twice)
    assert report.ok, report.summary()
    assert [(r.offset, r.from_origin) for r in report.partitions[P].copy_repeats] == [(3, True), (4, True)]
    judged = audit(origin(range(8)), [run_with(records, h)], copies={C: P}, handovers=[h])
    assert [r.offset for r in judged.partitions[P].copy_repeats_beyond] == [3, 4], "without the copy's log"
