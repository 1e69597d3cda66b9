"""The chaos soak (issue 33): three single-node Apache Kafka clusters behind Toxiproxy, a producer per
cluster, the job as a subprocess with periodic checkpoints, and a seeded schedule of faults (broker restarts
with SIGTERM and SIGKILL, pauses, latency, blackholes, network partitions, connection resets, a bandwidth
cap, a full disk, a topic removed and re-added, ``kill -9`` of the job and its restore, ``delete_records``
under a reader that lags) for ``MCS_CHAOS_SECONDS`` (default 600: the 10 minutes CI runs); then heal,
drain, the exact audit (``harness.chaos``, ``harness.audit``) and the job's leak checks (``harness.leaks``).

The seed comes from ``MCS_CHAOS_SEED`` (else a new one); it is printed and in every assertion message:
``MCS_CHAOS_SEED=<seed> MCS_CHAOS_SECONDS=<s> pytest tests/integration/test_chaos_soak.py`` replays the
schedule. ``MCS_CHAOS_TOPOLOGY=three-broker`` runs it on one three-broker cluster instead (replication 3,
``min.insync.replicas`` 2; broker faults hit the leader); ``MCS_CHAOS_KINDS=partition,pause`` limits the
fault kinds. Hour-long runs are this test with ``MCS_CHAOS_SECONDS=3600`` (docs/reliability.md, "Long
runs") or ``python benchmarks/bench_chaos.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness import ClusterPool, ClusterUnavailable
from harness.chaos import (
    KINDS_ENV,
    SECONDS_ENV,
    TOPOLOGIES,
    TOPOLOGY_ENV,
    ChaosSoak,
    SoakConfig,
    kinds_from_env,
    seed_from_env,
)

pytestmark = pytest.mark.integration

SECONDS = float(os.environ.get(SECONDS_ENV, "600"))
HEALTHY_GAP_S = 20.0
"""The longest a cluster not faulted may go without a delivery while another is: the issue's goal is < 1 s
(clean runs here: 0.0-0.8 s); a cluster still coming back from its own fault just before may take a broker
restart's time (up to 10 s seen), so this bound catches a stalled cluster, not a slow one."""
TOPOLOGY = os.environ.get(TOPOLOGY_ENV, "single-node")


@pytest.mark.timeout(int(SECONDS) + 900)
def test_mixed_faults_lose_nothing_repeat_nothing_and_leave_nothing_stuck(
    cluster_pool: ClusterPool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = seed_from_env()
    with capsys.disabled():
        print(f"\n[chaos] seed={seed} seconds={SECONDS:.0f} {TOPOLOGY} (replay: MCS_CHAOS_SEED={seed})")
    names, nodes = TOPOLOGIES[TOPOLOGY]
    try:
        clusters = cluster_pool.proxied(names, nodes=nodes)
    except ClusterUnavailable as exc:
        pytest.skip(str(exc))
    kinds = kinds_from_env()
    config = SoakConfig(seconds=SECONDS, seed=seed, kinds=kinds)

    def say(line: str) -> None:
        with capsys.disabled():
            print(line)

    result = ChaosSoak(clusters, cluster_pool.toxiproxy(), config, tmp_path / "soak", say=say).run()
    with capsys.disabled():
        print(result.summary())
    report = result.report
    only = "" if os.environ.get(KINDS_ENV) is None else f" {KINDS_ENV}={','.join(kinds)}"
    replay = (
        f"seed={seed} (replay: MCS_CHAOS_SEED={seed} {SECONDS_ENV}={SECONDS:.0f} {TOPOLOGY_ENV}={TOPOLOGY}{only})\n"
        f"{result.summary()}"
    )
    assert result.faults, f"no fault was injected: {replay}"
    assert report.acknowledged > 0, f"no record was acknowledged: {replay}"
    assert result.job_crashes == [], f"the job died by itself: {replay}"
    assert result.harness_problems() == [], f"the soak's own evidence is incomplete: {replay}"
    assert result.drained, f"acknowledged records still not delivered after the drain: {replay}"
    assert report.lost == 0, f"records lost: {replay}"
    assert report.stuck_partitions == [], f"stuck partitions: {replay}"
    assert report.in_run_duplicates == 0, f"records returned twice in one run: {replay}"
    assert report.duplicates_beyond_bound == 0, f"duplicates before a restored position: {replay}"
    assert (report.gaps, report.conflicting_values, report.backwards) == (0, 0, 0), replay
    assert (report.copy_repeats_beyond, report.handover_skips) == (0, 0), f"across handovers: {replay}"
    gap = result.healthy_gap_max()
    assert gap is None or gap < HEALTHY_GAP_S, (
        f"a cluster went {gap:.1f}s without a delivery while another was faulted (stalled?): {replay}"
    )
    # what a user would check after months of running: the stream closed, nothing of it left, memory level
    assert result.leaks is not None and result.leaks.problems == [], f"leaks: {replay}"


HANDOVER_SEED = 3
"""A schedule of replica handovers (one of them with a ``kill -9`` of the job while it reads the copy) and a
``kill -9`` of the job between them."""


@pytest.mark.timeout(900)
def test_replica_handovers_and_a_job_killed_while_it_reads_the_copy_deliver_every_record(
    cluster_pool: ClusterPool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        clusters = cluster_pool.proxied(TOPOLOGIES["single-node"][0])
    except ClusterUnavailable as exc:
        pytest.skip(str(exc))
    config = SoakConfig(seconds=75, seed=HANDOVER_SEED, kinds=("replica-handover", "job-kill-9"))

    def say(line: str) -> None:
        with capsys.disabled():
            print(line)

    result = ChaosSoak(clusters, cluster_pool.toxiproxy(), config, tmp_path / "soak", say=say).run()
    summary = result.summary()
    report = result.report
    handovers = [f for f in result.faults if f.kind == "replica-handover"]
    assert len(handovers) >= 2 and any(f.job_killed_at is not None for f in handovers), summary
    assert result.handovers, f"the job logged no handover: {summary}"
    origin = {h.origin for h in result.handovers}
    assert all(key[0] == "chaos-east" for key in origin), summary
    # what a user checks: every acknowledged record came, through the origin or its copy, and what came
    # twice came within the bounds the source reported (a restore's position, a handover's repeats)
    assert result.drained and report.lost == 0 and report.stuck_partitions == [], summary
    assert report.in_run_duplicates == 0 and report.duplicates_beyond_bound == 0, summary
    assert report.copy_repeats_beyond == 0 and report.handover_skips == 0, summary
    assert (report.gaps, report.conflicting_values, report.backwards) == (0, 0, 0), summary
    assert any(p.via_copy or p.copy_repeats for p in report.partitions.values()), (
        f"nothing was read from the copy: {summary}"
    )
    assert result.job_crashes == [] and result.leaks is not None and result.leaks.problems == [], summary
    assert result.harness_problems() == [], summary
