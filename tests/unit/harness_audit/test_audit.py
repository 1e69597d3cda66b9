"""The chaos audit (``harness.audit``) on made-up acknowledgements and deliveries: each kind of finding is
reported where it is, and nothing is reported for a clean history."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from harness.audit import PartitionKey, Record, Reset, Run, audit, ranges

P: PartitionKey = ("east", "t", 0)
Q: PartitionKey = ("west", "t", 1)


def recs(key: PartitionKey, offsets: Iterable[int], value: str = "v") -> list[Record]:
    return [Record(*key, o, f"{value}{o}".encode()) for o in offsets]


def acked(key: PartitionKey, n: int) -> list[Record]:
    return recs(key, range(n))


def read_log_holding(offsets_in_log: set[int]):
    asked: list[tuple[PartitionKey, Sequence[int]]] = []

    def read(key: PartitionKey, offsets: Sequence[int]) -> set[int]:
        asked.append((key, list(offsets)))
        return set(offsets) & offsets_in_log

    return read, asked


def test_a_clean_history_over_two_partitions_and_a_restore_is_ok() -> None:
    first = Run(recs(P, range(6)) + recs(Q, range(3)))
    # restored from positions 4 and 3: offsets 4 and 5 of P come again, allowed
    second = Run(recs(P, range(4, 10)) + recs(Q, range(3, 5)), restored_from={P: 4, Q: 3})
    report = audit(acked(P, 10) + acked(Q, 5), [first, second])
    assert report.ok, report.summary()
    assert (report.lost, report.in_run_duplicates, report.duplicates_beyond_bound) == (0, 0, 0)
    assert report.allowed_duplicates == 2
    assert report.acknowledged == 15 and report.delivered == 17
    assert "OK" in report.summary()


def test_lost_records_are_told_apart_as_tail_or_hole_and_looked_up_in_the_log() -> None:
    delivered = [*range(0, 3), *range(5, 8)]  # 3 and 4 skipped (with a gap), 8 and 9 never came
    read, asked = read_log_holding({3, 4, 8})
    report = audit(acked(P, 10), [Run(recs(P, delivered))], read_log=read)
    lost = {x.offset: (x.tail, x.in_log) for x in report.partitions[P].lost}
    assert lost == {3: (False, True), 4: (False, True), 8: (True, True), 9: (True, False)}
    assert asked == [(P, [3, 4, 8, 9])], "the log is asked once, for the lost offsets only"
    assert report.stuck_partitions == [P]
    assert [(g.first, g.last) for g in report.partitions[P].gaps] == [(3, 4)]
    assert not report.ok
    verdict = report.partitions[P].verdict()
    assert "STALLED after offset 7: a tail of 2 never delivered, 8..9 (1 of 2 in the broker's log)" in verdict
    assert "2 lost in holes 3..4 (2 of 2 in the broker's log)" in verdict
    assert verdict in report.summary()


def test_lost_records_without_a_log_reader_are_not_looked_up() -> None:
    report = audit(acked(P, 3), [Run(recs(P, range(2)))])
    assert [(x.offset, x.tail, x.in_log) for x in report.partitions[P].lost] == [(2, True, None)]


def test_a_record_delivered_twice_in_one_run_is_an_in_run_duplicate_even_after_a_restore() -> None:
    first = Run(recs(P, range(3)))
    second = Run(recs(P, [3, 4, 4, 5]), restored_from={P: 3})
    report = audit(acked(P, 6), [first, second])
    assert [(d.run, d.offset) for d in report.partitions[P].in_run_duplicates] == [(1, 4)]
    assert report.partitions[P].backwards == [], "the same offset again is a duplicate, not a step back"
    assert not report.ok


def test_duplicates_across_a_restore_are_judged_against_the_restored_position() -> None:
    first = Run(recs(P, range(8)))
    # restored from 5, but the run starts at 2: 2, 3, 4 come again before the bound
    second = Run(recs(P, range(2, 10)), restored_from={P: 5})
    report = audit(acked(P, 10), [first, second])
    part = report.partitions[P]
    assert [(d.offset, d.bound) for d in part.duplicates_beyond_bound] == [(2, 5), (3, 5), (4, 5)]
    assert [d.offset for d in part.allowed_duplicates] == [5, 6, 7]
    assert "3 duplicates before the restored position (run 1 (restored from 5): 2..4)" in report.summary()


def test_a_partition_missing_from_the_checkpoint_may_restart_from_the_beginning() -> None:
    first = Run(recs(P, range(2)))
    second = Run(recs(P, range(4)), restored_from={Q: 0})
    report = audit(acked(P, 4), [first, second])
    assert report.ok, report.summary()
    assert report.allowed_duplicates == 2


def test_a_run_that_starts_after_its_restored_position_has_a_gap_unless_a_reset_was_logged() -> None:
    first = Run(recs(P, range(3)))
    second = Run(recs(P, range(6, 8)), restored_from={P: 3})
    report = audit(recs(P, range(6, 8)), [first, second])
    assert [(g.run, g.first, g.last) for g in report.partitions[P].gaps] == [(1, 3, 5)]
    excused = audit(recs(P, range(6, 8)), [first, second], resets=[Reset(P, 3, 6)])
    assert excused.ok, excused.summary()


def test_a_reset_on_another_partition_or_too_short_does_not_excuse_a_gap() -> None:
    run = Run(recs(P, [0, 1, 5]))
    for reset in (Reset(Q, 2, 5), Reset(P, 2, 4)):
        assert audit(recs(P, [0, 1, 5]), [run], resets=[reset]).gaps == 1


def test_an_offset_with_two_values_is_reported_delivered_or_acknowledged() -> None:
    first = Run(recs(P, range(3)))
    second = Run([*recs(P, [1]), Record(*P, 2, b"other")], restored_from={P: 1})
    report = audit(acked(P, 3), [first, second])
    assert report.partitions[P].conflicting_values == [2]
    against_ack = audit([Record(*P, 0, b"sent")], [Run(recs(P, [0]))])
    assert against_ack.partitions[P].conflicting_values == [0]


def test_offsets_going_backwards_within_one_run_are_reported() -> None:
    report = audit(acked(P, 5), [Run(recs(P, [0, 1, 2, 3, 4, 1]))])
    part = report.partitions[P]
    assert part.backwards == [(0, 4, 1)]
    assert [d.offset for d in part.in_run_duplicates] == [1]


def test_partitions_only_delivered_are_audited_and_an_empty_history_is_ok() -> None:
    assert audit([], []).ok
    report = audit([], [Run(recs(Q, [0, 0]))])
    assert report.in_run_duplicates == 1 and report.acknowledged == 0


def test_records_deleted_before_they_were_read_are_not_lost_when_a_reset_skipped_them() -> None:
    key_deleted = {P: 6}
    run = Run(recs(P, [0, 1, 2, 6, 7]))  # 3..5 deleted under the reader: a reset from 3 to 6
    report = audit(acked(P, 8), [run], resets=[Reset(P, 3, 6)], deleted=key_deleted)
    assert report.ok, report.summary()
    assert (report.deleted_unread, report.lost) == (3, 0)
    silent = audit(acked(P, 8), [run], deleted=key_deleted)
    assert [(g.first, g.last) for g in silent.partitions[P].gaps] == [(3, 5)], "no reset logged: a gap"
    beyond = audit(acked(P, 9), [run], resets=[Reset(P, 3, 6)], deleted=key_deleted)
    assert [x.offset for x in beyond.partitions[P].lost] == [8], "records after the log start stay owed"


def test_ranges_join_consecutive_offsets() -> None:
    assert ranges([9, 3, 5, 4, 4, 11, 10]) == [(3, 5), (9, 11)]
    assert ranges([]) == []


def test_the_summary_gives_every_partitions_verdict_failed_ones_first_not_only_the_first_failure() -> None:
    r: PartitionKey = ("central", "u", 2)
    run = Run(recs(P, [0, 1, 2, 2]) + recs(Q, [0, 1, 3]) + recs(r, range(3)))
    report = audit(acked(P, 3) + acked(Q, 6) + acked(r, 3), [run])
    lines = report.summary().splitlines()
    assert lines[0].endswith("FAILED")
    assert [line.split(":")[0].strip() for line in lines[1:]] == ["east/t/0", "west/t/1", "central/u/2"]
    assert lines[1] == (
        "  east/t/0: FAILED (3 acknowledged, 4 delivered): 1 duplicates within one run, where nothing "
        "allows them (run 0: 2)"
    )
    assert "STALLED after offset 3: a tail of 2 never delivered, 4..5 (log not read)" in lines[2]
    assert "1 lost in holes 2 (log not read)" in lines[2]
    assert "3 of the acknowledged were delivered" in lines[2]
    assert "1 gaps without a logged reset (run 0: 2)" in lines[2]
    assert lines[3] == "  central/u/2: OK (3 acknowledged, 3 delivered)"


def test_a_stall_and_a_skip_are_told_apart_with_the_log_per_range_and_long_lists_are_cut() -> None:
    delivered = [o for o in range(100) if o % 10 != 5]  # ten holes of one record each, then the tail
    read, _asked = read_log_holding(set(range(100, 150)))
    report = audit(acked(P, 200), [Run(recs(P, delivered))], read_log=read)
    verdict = report.partitions[P].verdict(examples=3)
    assert (
        "STALLED after offset 99: a tail of 100 never delivered, 100..199 (50 of 100 in the broker's log)"
        in verdict
    )
    assert "10 lost in holes 5 (1 of 1 in the broker's log)" not in verdict, (
        "records not in the log are said so"
    )
    assert (
        "10 lost in holes 5 (0 of 1 in the broker's log), 15 (0 of 1 in the broker's log), 25 (0 of 1 in the broker's log) and 7 more"
        in verdict
    )
    skip_only = audit(acked(P, 10), [Run(recs(P, [0, 1, 2, 3, 9]))]).partitions[P]
    assert not skip_only.stuck and "STALLED" not in skip_only.verdict()
    assert "5 lost in holes 4..8" in skip_only.verdict()
