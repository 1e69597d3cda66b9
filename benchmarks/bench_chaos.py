"""The chaos soak of issue 33 for a long time: three single-node Apache Kafka clusters behind Toxiproxy, the
job as a subprocess, a seeded schedule of mixed faults, then heal, drain and the exact audit
(``tests/harness/chaos.py``; the CI variant is ``tests/integration/test_chaos_soak.py``).

Prints the faults injected by kind, the records, lost, duplicates against their bounds and the recovery
times (p50/p99: from each heal until every record acknowledged before it was delivered), and writes them to
``benchmarks/results/chaos-<topology>.json`` (``--no-save``: not). ``--topology three-broker``: one
three-broker cluster (replication 3, ``min.insync.replicas`` 2) whose partition leader the broker faults
hit. Exit status 1 when the audit is not clean.

    python benchmarks/bench_chaos.py --seconds 3600 [--seed N]
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._brokers import RESULTS_DIR, machine_info


def format_table(described: dict[str, Any]) -> str:
    """The result of :func:`harness.chaos.describe` as a few readable lines."""
    faults = ", ".join(f"{kind} {n}" for kind, n in sorted(described["faults"].items())) or "none"

    modes = ", ".join(f"{m} {n}" for m, n in sorted(described.get("handover_modes", {}).items()))

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} s"

    return "\n".join(
        [
            f"chaos soak: seed {described['seed']}, {described['seconds']:.0f} s, "
            f"{described['runs']} job run(s), {described['job_crashes']} crash(es)",
            f"faults injected: {sum(described['faults'].values())} ({faults})",
            f"records: {described['acknowledged']} acknowledged, {described['delivered']} delivered, "
            f"{described['deleted_unread']} deleted by delete_records before they were read",
            f"lost: {described['lost']} (stuck partitions {described['stuck_partitions']})",
            f"duplicates: {described['in_run_duplicates']} in one run, "
            f"{described['duplicates_within_bounds']} after restores within their bounds, "
            f"{described['duplicates_beyond_bounds']} beyond",
            f"gaps {described['gaps']}, conflicting values {described['conflicting_values']}, "
            f"backwards {described['backwards']}",
            f"replica handovers: {described.get('handovers', 0)} ({modes or '-'}); "
            f"repeats across them {described.get('repeats_across_handovers', 0)} within bounds, "
            f"{described.get('repeats_across_handovers_beyond_bounds', 0)} beyond",
            f"recovery after heal: p50 {seconds(described['recovery_p50_s'])}, "
            f"p99 {seconds(described['recovery_p99_s'])}; drained {described['drained']} in "
            f"{described['drain_seconds']:.1f} s",
            f"healthy clusters' longest gap in delivery while another was faulted: "
            f"{seconds(described['healthy_gap_max_s'])}",
            "leaks: "
            + (
                "not checked"
                if described.get("leaks") is None
                else "; ".join(described["leaks"]) or "none (threads, clients, descriptors, memory)"
            )
            + f"; job RSS peak per fault window (MB): {described.get('rss_peak_per_window_mb') or '-'}",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Chaos soak with an exact audit (issue 33).")
    parser.add_argument("--seconds", type=float, default=3600.0, help="how long faults are injected")
    parser.add_argument("--seed", type=int, default=None, help="the schedule's seed (default: a new one)")
    parser.add_argument("--rate", type=float, default=40.0, help="records per second per cluster")
    parser.add_argument(
        "--topology",
        choices=("single-node", "three-broker"),
        default="single-node",
        help="three single-node clusters (default) or one three-broker cluster (replication 3)",
    )
    parser.add_argument(
        "--kinds",
        default=None,
        help="comma-separated fault kinds to draw from (default: $MCS_CHAOS_KINDS, else every kind)",
    )
    parser.add_argument(
        "--no-save", action="store_true", help="do not write benchmarks/results/chaos-<topology>.json"
    )
    args = parser.parse_args(argv)
    harness: Any = importlib.import_module("harness")
    chaos: Any = importlib.import_module("harness.chaos")
    seed = args.seed if args.seed is not None else chaos.seed_from_env()
    print(
        f"chaos soak: seed {seed} (replay with --seed {seed}), {args.seconds:.0f} s, {args.topology}",
        flush=True,
    )
    pool = harness.ClusterPool("kafka")
    workdir = Path(tempfile.mkdtemp(prefix="mcs-chaos-bench-"))
    try:
        names, nodes = chaos.TOPOLOGIES[args.topology]
        clusters = pool.proxied(names, nodes=nodes)
        kinds = chaos.kinds_from_env(None if args.kinds is None else {chaos.KINDS_ENV: args.kinds})
        config = chaos.SoakConfig(seconds=args.seconds, seed=seed, rate=args.rate, kinds=kinds)
        soak = chaos.ChaosSoak(
            clusters, pool.toxiproxy(), config, workdir, say=lambda s: print(s, flush=True)
        )
        result = soak.run()
    finally:
        pool.stop_all()
    described = chaos.describe(result)
    print(result.summary())
    print(format_table(described))
    if not args.no_save:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        out = {"generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **described}
        out["machine"] = machine_info("kafka")
        (RESULTS_DIR / f"chaos-{args.topology}.json").write_text(json.dumps(out, indent=2) + "\n")
    leaked = result.leaks is None or bool(result.leaks.problems)
    complete = not result.harness_problems()
    if result.report.ok and not result.job_crashes and result.drained and not leaked and complete:
        soak.cleanup()
        return 0
    print(f"files kept in {workdir}")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
