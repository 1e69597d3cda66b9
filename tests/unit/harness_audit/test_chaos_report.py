"""The chaos soak's report (``harness.chaos``) and the benchmark's table on made-up results: no brokers."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from benchmarks import bench_chaos
from harness.audit import Record, Run, audit
from harness.chaos import (
    FAULT_KINDS,
    Fault,
    SoakConfig,
    SoakResult,
    _Producer,
    describe,
    healthy_gaps,
    kinds_from_env,
    seed_from_env,
)


def _result(recoveries: list[float | None]) -> SoakResult:
    records = [Record("east", "t", 0, o, b"v") for o in range(4)]
    report = audit(records, [Run(records[:3]), Run(records[2:], restored_from={("east", "t", 0): 2})])
    faults = [Fault("pause", "east", 10.0 * i, 10.0 * i + 5, r, 0.5) for i, r in enumerate(recoveries)]
    faults.append(Fault("job-kill-9", "job", 50.0, 55.0, 1.0))
    return SoakResult(
        7, SoakConfig(seconds=60, seed=7), faults, report, runs=2, drained=True, drain_seconds=3
    )


def test_the_summary_names_the_seed_the_faults_by_kind_and_the_audit() -> None:
    result = _result([2.0, None])
    result.producer_errors, result.producer_error_kinds = 3, {"_MSG_TIMED_OUT": 2, "_FATAL": 1}
    text = result.summary()
    assert "producer errors 3 (_FATAL 1, _MSG_TIMED_OUT 2), not acknowledged" in text
    assert "seed=7" in text
    assert "job-kill-9 1, pause 2" in text
    assert "not recovered 1" in text
    assert "duplicates after restores 1 within bounds and 0 beyond" in text


def test_recovery_percentiles_over_the_recovered_faults() -> None:
    p50, p99 = _result([float(i) for i in range(1, 100)]).recovery_percentiles()
    assert p50 == 49.5  # 1..99 and the job fault's 1.0
    assert p99 is not None and 97.0 < p99 <= 99.0
    empty = SoakResult(1, SoakConfig(), [], audit([], []), runs=1)
    assert empty.recovery_percentiles() == (None, None)


def test_the_benchmark_table_shows_records_lost_and_duplicates_against_their_bounds() -> None:
    table = bench_chaos.format_table(describe(_result([2.0, 4.0])))
    assert "faults injected: 3 (job-kill-9 1, pause 2)" in table
    assert "records: 4 acknowledged, 5 delivered, 0 deleted by delete_records" in table
    assert "lost: 0 (stuck partitions 0)" in table
    assert "1 after restores within their bounds, 0 beyond" in table
    assert "longest gap in delivery while another was faulted: 0.5 s" in table
    assert "leaks: not checked; job RSS peak per fault window (MB): -" in table


def test_a_healthy_clusters_longest_gap_is_taken_within_each_cluster_fault() -> None:
    faults = [Fault("pause", "east", 10.0, 20.0), Fault("job-kill-9", "job", 30.0, 35.0)]
    times = {"east": [], "west": [1000.0 + t for t in (5.0, 11.0, 12.0, 18.5, 40.0)]}
    healthy_gaps(faults, times, 1000.0, ["east", "west"])
    assert faults[0].healthy_gap == 6.5  # 12.0 -> 18.5; east's own silence does not count
    assert faults[1].healthy_gap is None, "the job's own faults stop every cluster"


def test_the_seed_comes_from_the_environment_or_is_new() -> None:
    assert seed_from_env({"MCS_CHAOS_SEED": "42"}) == 42
    assert isinstance(seed_from_env({}), int)


def test_the_fault_kinds_come_from_the_environment_or_are_all_of_them() -> None:
    assert kinds_from_env({}) == FAULT_KINDS
    assert "partition" in FAULT_KINDS
    assert kinds_from_env({"MCS_CHAOS_KINDS": "partition, pause"}) == ("partition", "pause")
    with pytest.raises(ValueError, match=r"unknown fault kinds \['partiton'\]"):
        kinds_from_env({"MCS_CHAOS_KINDS": "partiton"})


class _Delivered:
    """A delivery report's message: what ``_Producer._delivered`` reads of it."""

    def __init__(self, partition: int, offset: int | None, value: bytes) -> None:
        self._partition, self._offset, self._value = partition, offset, value

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int | None:
        return self._offset

    def value(self) -> bytes:
        return self._value


def test_a_record_acknowledged_without_an_offset_waits_to_be_placed_and_stops_nothing() -> None:
    cluster = SimpleNamespace(cluster_id="east")
    producer = _Producer(cluster, {"t": 2}, rate=1.0, stop=threading.Event())  # type: ignore[arg-type]
    producer._delivered(None, _Delivered(1, 7, b"seven"))  # type: ignore[arg-type]
    # librdkafka's idempotent producer: a retried batch written already is delivered, its offset unknown
    producer._delivered(None, _Delivered(0, None, b"unknown"))  # type: ignore[arg-type]
    assert producer.snapshot() == [Record("east", "t", 1, 7, b"seven")]
    assert producer.unplaced == [(("east", "t", 0), b"unknown")]
    assert producer.index.lookup(b"seven") == (("east", "t", 1), 7)
    assert producer.index.lookup(b"unknown") is None


def test_the_summary_counts_records_placed_by_value_and_names_what_the_soak_missed() -> None:
    result = _result([2.0])
    assert result.harness_problems() == []
    assert "acknowledged without an offset" not in result.summary()
    result.acked_without_offset = 2
    result.acked_not_in_log = ["east/t/0: b'gone'"]
    result.producer_failures = ["AssertionError: a delivery report without a partition for b'x'"]
    text = result.summary()
    assert "acknowledged without an offset 2 (placed by value)" in text
    assert "harness: acknowledged, not in the log: east/t/0: b'gone'" in text
    assert "harness: producer: AssertionError" in text
    assert describe(result)["harness_problems"] == result.harness_problems()
    assert len(result.harness_problems()) == 2
