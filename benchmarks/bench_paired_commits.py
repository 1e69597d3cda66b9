"""Two checkouts of the package on the same throughput measurement, paired: is one slower than the other?

Issue #37's no-regression check ("the record and batch paths within 3 % of the previous commit, paired,
5M records, same run"). Give it two checkouts (``git worktree add /work/wt-base <commit>``), the base first::

    python benchmarks/bench_paired_commits.py /work/wt-base . --records 5000000 --repeats 5

It starts the brokers once and produces the records once (``bench_throughput.prepare``), then, for each repeat
and each kind (``--kinds``, default ``iterate-1,records-1,batches-1``: the ``for`` loop, ``poll`` and
``poll_batches`` with 1 reader; ``raw-1``, the raw client, is a control that should come out at 1), runs
one drain per checkout back to back, which one goes first alternating from repeat to repeat. Each drain
is a process of its own with ``PYTHONPATH`` at its checkout: it imports ``multicluster_source`` from there
(checked) and *this* checkout's ``bench_throughput`` (``run_kind``), so both sides run the same measuring
code and only the package differs.

Reported per kind: the median steady rate (from the first record, as ``bench_throughput --long``) of each
checkout, and the *paired* ratio second / first: each repeat's rate over the same repeat's other checkout,
median and lowest; the ratio of the open -> N-th rates; process CPU per record. ``--abba`` runs each
checkout twice a repeat and kind, mirrored (0 1 1 0, then 1 0 0 1): on a shared machine the second of two
back-to-back drains of the same code came out a few percent slower more often than not, which the mirror
cancels; a repeat's ratio is then the mean of its two drains a side. Nothing asserts: ``--goal`` (0.97) only
marks the lines below it.

``--dataset FILE`` measures an already produced dataset (brokers started elsewhere, e.g. by ``--serve FILE``,
which starts them, produces, writes FILE and waits for SIGINT or SIGTERM). Writes
``results/paired-commits.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_KINDS = ("iterate-1", "records-1", "batches-1")
DEFAULT_RECORDS = 5_000_000
GOAL = 0.97


def _checkout_id(path: Path) -> str:
    """``<short commit>`` of a git checkout, ``+dirty`` when its package differs from that commit."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, check=False)
        return done.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "?"
    dirty = git("status", "--porcelain", "--", "multicluster_source")
    return commit + ("+dirty" if dirty else "")


# ------------------------------------------------------------------------------------------------ worker


def worker(checkout: str, kind: str, dataset_file: str) -> dict[str, Any]:
    """One drain of ``kind`` with the package of ``checkout`` and this checkout's measuring code."""
    sys.path.insert(0, checkout)
    import multicluster_source  # first, from the checkout: later path changes cannot replace it

    where = Path(multicluster_source.__file__).resolve()
    if not where.is_relative_to(Path(checkout).resolve()):
        raise RuntimeError(f"multicluster_source came from {where}, not from {checkout}")
    sys.path.insert(0, str(HERE.parent))  # this checkout's benchmarks package (the other has one too)
    from benchmarks import bench_throughput as bt

    if not Path(bt.__file__).resolve().is_relative_to(HERE):
        raise RuntimeError(f"bench_throughput came from {bt.__file__}, not from {HERE}")
    dataset = load_dataset(dataset_file)
    m = bt.run_kind(kind, dataset, bt.VARIANTS["fast-refetch"])
    return {
        "kind": kind,
        "records": m.records,
        "expected": dataset.total,
        "seconds": m.seconds,
        "first_record_s": m.first_record_s,
        "rate": m.rate,
        "steady_rate": m.steady_rate,
        "cpu_ns_per_record": m.cpu_ns_per_record,
        "package": str(where.parent),
    }


def load_dataset(path: str) -> Any:
    from benchmarks.bench_throughput import Dataset, TopicData

    parts = json.loads(Path(path).read_text())
    return Dataset([TopicData(**{**p, "counts": {int(k): v for k, v in p["counts"].items()}}) for p in parts])


def dump_dataset(dataset: Any, path: Path) -> None:
    parts = [
        {"cluster_id": t.cluster_id, "bootstrap_servers": t.bootstrap_servers, "topic": t.topic}
        | {"counts": t.counts}
        for t in dataset.parts
    ]
    path.write_text(json.dumps(parts))


def run_one(checkout: Path, kind: str, dataset_file: Path) -> dict[str, Any]:
    """:func:`worker` in a process of its own, ``PYTHONPATH`` at ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(checkout), kind, str(dataset_file)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=str(checkout))
    if done.returncode != 0:
        raise RuntimeError(f"{kind} on {checkout} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["records"] != result["expected"]:
        raise RuntimeError(f"{kind} on {checkout}: {result['records']} records for {result['expected']}")
    return result


# ------------------------------------------------------------------------------------------------ driver


def order(repeat: int, abba: bool = False) -> list[int]:
    """Which checkout (0, 1) each drain of repeat ``repeat`` runs, in order: the first alternating from repeat
    to repeat; ``abba``: each twice, mirrored (0 1 1 0, then 1 0 0 1), so a drift over the repeat cancels."""
    pair = [0, 1] if repeat % 2 == 0 else [1, 0]
    return pair + pair[::-1] if abba else pair


def measure(
    checkouts: Sequence[Path],
    dataset_file: Path,
    kinds: Sequence[str],
    repeats: int,
    log: Callable[[str], None] = print,
    abba: bool = False,
) -> dict[str, list[list[dict[str, Any]]]]:
    """kind -> per checkout, the result of every drain (``repeat`` says of which repeat)."""
    runs: dict[str, list[list[dict[str, Any]]]] = {k: [[] for _ in checkouts] for k in kinds}
    for rep in range(repeats):
        for kind in kinds:
            for i in order(rep, abba):
                r = run_one(checkouts[i], kind, dataset_file) | {"repeat": rep}
                runs[kind][i].append(r)
                log(
                    f"  run {rep + 1}/{repeats} {kind:<10} {checkouts[i].name:<12} "
                    f"{r['steady_rate']:>11,.0f} records/s from the first record, {r['rate']:>11,.0f} from "
                    f"open, CPU {r['cpu_ns_per_record']:.0f} ns/record"
                )
    return runs


def _ratios(first: list[dict[str, Any]], second: list[dict[str, Any]], key: str) -> list[float]:
    """Per repeat, the mean ``key`` of the second's drains in it over the first's."""
    return [
        statistics.mean(r[key] for r in second if r["repeat"] == rep)
        / statistics.mean(r[key] for r in first if r["repeat"] == rep)
        for rep in sorted({r["repeat"] for r in first})
    ]


def summarize(runs: dict[str, list[list[dict[str, Any]]]]) -> dict[str, Any]:
    """Per kind: each checkout's median rates and CPU, and the paired ratios second / first: per repeat, the
    mean of the second's drains in it over the mean of the first's."""
    out: dict[str, Any] = {}
    for kind, (first, second) in runs.items():

        def med(rs: list[dict[str, Any]], key: str) -> float:
            return float(statistics.median(r[key] for r in rs))

        steady, whole = _ratios(first, second, "steady_rate"), _ratios(first, second, "rate")
        out[kind] = {
            "steady_records_per_second": [med(first, "steady_rate"), med(second, "steady_rate")],
            "records_per_second": [med(first, "rate"), med(second, "rate")],
            "cpu_ns_per_record": [med(first, "cpu_ns_per_record"), med(second, "cpu_ns_per_record")],
            "paired_steady": {"median": statistics.median(steady), "min": min(steady), "all": steady},
            "paired_from_open": {"median": statistics.median(whole), "min": min(whole), "all": whole},
        }
    return out


def format_summary(result: dict[str, Any], goal: float = GOAL) -> str:
    a, b = result["checkouts"]
    lines = [
        f"{result['config']['records']:,} records, {result['config']['clusters']} cluster(s), "
        f"{result['config']['repeats']} paired repeats; second / first = {b['id']} / {a['id']}",
        f"{'kind':<10} {'first k/s':>10} {'second k/s':>11} {'paired median':>14} {'lowest':>7} "
        f"{'from open':>10} {'CPU ns first/second':>20}",
    ]
    for kind, s in result["summary"].items():
        p, o, cpu = s["paired_steady"], s["paired_from_open"], s["cpu_ns_per_record"]
        mark = "" if p["median"] >= goal else f"  below {goal}"
        lines.append(
            f"{kind:<10} {s['steady_records_per_second'][0] / 1e3:>10,.0f} "
            f"{s['steady_records_per_second'][1] / 1e3:>11,.0f} {p['median']:>14.3f} {p['min']:>7.3f} "
            f"{o['median']:>10.3f} {cpu[0]:>10.0f}/{cpu[1]:<9.0f}{mark}"
        )
    return "\n".join(lines)


def serve(path: Path, records: int, clusters: int, brokers: str) -> None:
    """Start brokers, produce ``records``, write the dataset to ``path``, wait until interrupted."""
    sys.path.insert(0, str(HERE.parent))
    from benchmarks._brokers import started_clusters
    from benchmarks.bench_throughput import prepare

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # the brokers stop on the way out (a background job ignores SIGINT)

    signal.signal(signal.SIGTERM, stop)
    with started_clusters(brokers, clusters) as started:
        dump_dataset(prepare(started, records), path)
        print(f"dataset written to {path}; brokers up until interrupted (SIGINT, SIGTERM)", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["--worker"]:
        _flag, checkout, kind, dataset_arg = args_in
        print(json.dumps(worker(checkout, kind, dataset_arg)))
        return 0
    parser = argparse.ArgumentParser(description="Two checkouts on bench_throughput's measurement, paired.")
    parser.add_argument("first", nargs="?", help="the base checkout")
    parser.add_argument("second", nargs="?", help="the checkout compared with it")
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--kinds", default=",".join(DEFAULT_KINDS), help="bench_throughput kinds (%(default)s)"
    )
    parser.add_argument("--clusters", type=int, choices=(1, 2), default=1)
    parser.add_argument("--brokers", choices=("kafka", "tansu"), default="kafka")
    parser.add_argument("--dataset", type=Path, help="measure this dataset (brokers started elsewhere)")
    parser.add_argument("--serve", type=Path, help="start brokers, produce, write the dataset here, wait")
    parser.add_argument(
        "--abba", action="store_true", help="each checkout twice a repeat and kind, mirrored (0 1 1 0)"
    )
    parser.add_argument("--goal", type=float, default=GOAL)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "paired-commits.json")
    args = parser.parse_args(args_in)
    if args.serve is not None:
        serve(args.serve, args.records, args.clusters, args.brokers)
        return 0
    if not args.first or not args.second:
        parser.error("give two checkouts (or --serve FILE)")
    checkouts = [Path(args.first).resolve(), Path(args.second).resolve()]
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        dataset_file: Path
        if args.dataset is not None:
            dataset_file = args.dataset
            runs = measure(checkouts, dataset_file, kinds, args.repeats, abba=args.abba)
            records = sum(sum(p["counts"].values()) for p in json.loads(dataset_file.read_text()))
        else:
            sys.path.insert(0, str(HERE.parent))
            from benchmarks._brokers import started_clusters
            from benchmarks.bench_throughput import prepare

            dataset_file = Path(tmp) / "dataset.json"
            with started_clusters(args.brokers, args.clusters) as clusters:
                print(f"paired commits: producing {args.records:,} records on {len(clusters)} cluster(s)...")
                dump_dataset(prepare(clusters, args.records), dataset_file)
                runs = measure(checkouts, dataset_file, kinds, args.repeats, abba=args.abba)
            records = args.records
    result = {
        "benchmark": "paired-commits",
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "checkouts": [{"path": str(c), "id": _checkout_id(c)} for c in checkouts],
        "config": {
            "records": records,
            "clusters": args.clusters,
            "repeats": args.repeats,
            "kinds": kinds,
            "order": "per repeat and kind, the two checkouts back to back, the first alternating"
            + ("; each twice, mirrored (0 1 1 0, 1 0 0 1)" if args.abba else ""),
            "timed_from": "steady: the first record to the N-th; from open: open() / client creation",
        },
        "summary": summarize(runs),
        "runs": runs,
        "benchmark_seconds": time.perf_counter() - started,
    }
    print(format_summary(result, args.goal))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
