"""The command line on a large bounded read: ``multicluster-source consume`` of N records (default 1M).

Fills one topic (4 partitions, 100-byte values) on one cluster, then runs
``python -m multicluster_source consume --metadata streams.yaml --format value|json --progress`` as a user
would, stdout to ``/dev/null``, and reports the wall time, the rate, the lines written and the last line of
the progress bar the command drew on stderr (rate and ETA from ``tqdm``). Nothing is judged: the figures are
printed and written to ``results/cli.json``.

    python benchmarks/bench_cli.py                       # 1,000,000 records, raw values and JSON lines
    python benchmarks/bench_cli.py --records 200000 --formats value
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._brokers import REPO, RESULTS_DIR, add_broker_argument, machine_info, started_clusters
from benchmarks.bench_throughput import produce_records


def _consume(metadata: str, fmt: str, expected: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "multicluster_source", "consume", "--metadata", metadata]
    argv += ["--format", fmt, "--progress"]
    start = time.monotonic()
    with open(os.devnull, "wb") as sink:
        done = subprocess.run(argv, stdout=sink, stderr=subprocess.PIPE, text=True, env=env, check=False)
    elapsed = time.monotonic() - start
    bar = [part for part in done.stderr.replace("\r", "\n").splitlines() if "rec" in part]
    return {
        "format": fmt,
        "records": expected,
        "exit_code": done.returncode,
        "seconds": round(elapsed, 2),
        "records_per_s": round(expected / elapsed),
        "progress_updates": len(bar),
        "last_progress_line": bar[-1].strip() if bar else None,
        "stderr_tail": done.stderr[-500:] if done.returncode else "",
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--formats", default="value,json", help="comma-separated: value, json")
    add_broker_argument(parser)
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []
    with started_clusters(args.brokers, 1) as (cluster,):
        data = produce_records(cluster, args.records)
        metadata = RESULTS_DIR / "cli-streams.yaml"
        RESULTS_DIR.mkdir(exist_ok=True)
        metadata.write_text(
            f"- streamId: bench\n  clusterMetadataList:\n    - clusterId: {cluster.cluster_id}\n"
            f"      bootstrapServers: {cluster.bootstrap_servers}\n      topics: [{data.topic}]\n"
        )
        for fmt in args.formats.split(","):
            result = _consume(str(metadata), fmt.strip(), args.records)
            results.append(result)
            took = f"{result['records']:,} records in {result['seconds']} s"
            print(
                f"consume --format {result['format']}: {took} "
                f"({result['records_per_s']:,} rec/s), exit {result['exit_code']}, "
                f"{result['progress_updates']} progress updates; last: {result['last_progress_line']}"
            )
        metadata.unlink()
    out = {"machine": machine_info(args.brokers), "results": results}
    (RESULTS_DIR / "cli.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0 if all(r["exit_code"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
