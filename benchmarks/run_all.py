"""Run every benchmark on one set of brokers, print the tables, write the JSON results and RESULTS.md.

``./dev bench`` runs this. Options: ``--brokers kafka|tansu`` (default kafka), ``--quick`` (100k records,
2 reconciliation cycles), ``--profile`` (also profile one record-path and one batch-path drain into
results/profile-record-path.txt and results/profile-batch-path.txt),
``--no-two-clusters`` (skip the 2-cluster throughput variant). Nothing here fails on speed: the benchmarks
report numbers, the reader judges them (see README.md).

The reliability suite adds ``--soak-seconds S`` (default 600, ``--quick`` 60; 0 skips the soak) and
``--scale-partitions N`` (default 10000, ``--quick`` 1000; 0 skips; Apache Kafka only), run after the others
on brokers of their own (see the section at the end of this file).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import bench_reconciliation, bench_scale, bench_soak, bench_throughput
from benchmarks._brokers import RESULTS_DIR, add_broker_argument, machine_info, started_clusters

RESULTS_MD = Path(__file__).resolve().parent / "RESULTS.md"


def _throughput_md(result: dict[str, Any]) -> list[str]:
    cfg = result["config"]
    lines = [
        f"{cfg['records']:,} records of {cfg['value_bytes']} B on {cfg['clusters']} cluster(s), "
        f"{cfg['partitions_per_topic']} partitions per topic; {cfg['repeats']} runs of each, alternating "
        f"({', '.join(bench_throughput.KINDS)} per variant). Records per second, median [min-max]; *batches* "
        f"is the source's batch path (`poll_batches`, `msg.value()` of every message), *records* its record "
        f"path (`poll`, `record.value`), *iterate* the record path by iteration (`for record in stream`, "
        f"`record.value`); *open -> N-th* counts from client creation / `source.open()` to the "
        f"last record, *1st -> N-th* from the first record on.",
        "",
        "| client variant | readers | timed | raw confluent-kafka (reference) | batches | records | iterate "
        "| batches / raw | records / raw | iterate / raw |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    paths = bench_throughput.PATHS
    for variant, readers, timed, raw, cells, ratios in bench_throughput.table_rows(result):
        lines.append(
            f"| {variant} | {readers} | {timed} | {raw} | "
            + " | ".join(cells.get(p, "-") for p in paths)
            + " | "
            + " | ".join(f"**{ratios[p]:.2f}**" if p in ratios else "-" for p in paths)
            + " |"
        )
    lines.append("")
    for variant, vr in result["variants"].items():
        f = vr["first_record_seconds"]
        props = vr["client_properties"] or "none (librdkafka's defaults; the source's own)"
        firsts = ", ".join(f"{kind} {f[kind]['median']:.3f}" for kind in bench_throughput.KINDS if kind in f)
        lines.append(f"- `{variant}`: client properties {props}; first record after (median s): {firsts}")
        for of_variant, readers, pairs in bench_throughput.paired_rows(result):
            if of_variant == variant:
                lines.append(
                    f"- `{variant}`, {readers} reader(s): median of each repeat's ratio (open -> N-th, kinds "
                    "run back to back) " + ", ".join(f"{p} / raw **{ratio:.2f}**" for p, ratio in pairs)
                )
        for of_variant, readers, raw_ns, cpu in bench_throughput.cpu_rows(result):
            if of_variant != variant:
                continue
            lines.append(
                f"- `{variant}`, {readers} reader(s): process CPU per record (every thread, median) raw "
                f"{raw_ns:.0f} ns, "
                + ", ".join(f"{p} {ns:.0f} ns" for p, ns, _ratio in cpu)
                + "; "
                + ", ".join(f"raw / {p} **{ratio:.2f}**" for p, _ns, ratio in cpu)
            )
    if "profile" in result:
        profile = result["profile"]
        lines.append(
            f"- profiles of one drain each ({profile['variant']}, parallelism 1): record path "
            f"`{profile['records_path']}`, batch path `{profile['batches_path']}`"
        )
    return lines


def _reconciliation_md(result: dict[str, Any]) -> list[str]:
    cfg = result["config"]
    west = cfg["clusters"][1]
    lines = [
        f"{cfg['cycles']} cycles of *add {west}*, *add topic* (a second topic of {west}), *remove topic*, "
        f"*remove {west}* on a `FileMetadataService` file while {cfg['clusters'][0]} keeps flowing (a record "
        f"every {cfg['produce_interval_s'] * 1000:.0f} ms per topic); "
        f"`stream-metadata-discovery-interval-ms` = {cfg['stream-metadata-discovery-interval-ms']}. "
        "Seconds from the file write; gaps and latencies of "
        f"the unchanged cluster within +-{cfg['window_s']:.0f} s of each change, against a quiet "
        f"{result['baseline']['window_s']:.0f} s baseline.",
        "",
        "| figure | median | max | reference | ratio median / max |",
        "|---|---|---|---|---|",
    ]
    for title, med, mx, ref, ratio in bench_reconciliation.table_rows(result):
        lines.append(f"| {title} | {med} | {mx} | {ref} | **{ratio}** |")
    lines += [
        "",
        "Gaps between consecutive records of the unchanged cluster (seconds):",
        "",
        "| where | p50 | p99 | max |",
        "|---|---|---|---|",
    ]
    for where, p50, p99, mx in bench_reconciliation.gap_rows(result):
        lines.append(f"| {where} | {p50} | **{p99}** | {mx} |")
    lines += [
        "",
        f"- reconciliations counted by the source: {result['reconciliations_total']} (the start plus one per "
        f"change); producer ticks more than 10 ms late: {result['producer_ticks_late']} of "
        f"{result['produced_per_cluster']}",
    ]
    return lines


def write_results_md(
    path: Path, brokers: str, argv: Sequence[str], results: dict[str, dict[str, Any]], elapsed: float
) -> None:
    info = machine_info(brokers)
    lines = [
        "<!-- Generated by benchmarks/run_all.py: do not edit by hand, run `./dev bench` again. -->",
        "# Benchmark results",
        "",
        f"Generated by `benchmarks/run_all.py` ({' '.join(['./dev bench', *argv]).strip()}) on "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')} in {elapsed:.0f} s. How to read them: `benchmarks/README.md`.",
        "",
        "| machine | |",
        "|---|---|",
        f"| cores | {info['cores']} |",
        f"| platform | {info['platform']} |",
        f"| Python | {info['python']} |",
        f"| confluent-kafka / librdkafka | {info['confluent_kafka']} / {info['librdkafka']} |",
        f"| brokers | {info['broker_description']} |",
        "",
    ]
    titles = {
        "throughput": "Throughput: batch and record paths against raw confluent-kafka, 1 cluster",
        "throughput-2clusters": "Throughput: batch and record paths against raw confluent-kafka, 2 clusters",
        "reconciliation": "Reconciliation: metadata file changes",
    }
    for key, title in titles.items():
        if key not in results:
            continue
        lines += [f"## {title}", ""]
        body = _reconciliation_md(results[key]) if key == "reconciliation" else _throughput_md(results[key])
        lines += [*body, ""]
    lines += reliability_md(results)
    path.write_text("\n".join(lines))


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description="Run every benchmark; write results/*.json and RESULTS.md.")
    add_broker_argument(parser)
    parser.add_argument("--quick", action="store_true", help="100k records, 2 reconciliation cycles")
    parser.add_argument(
        "--profile", action="store_true", help="profile one record-path and one batch-path drain too"
    )
    parser.add_argument("--no-two-clusters", action="store_true", help="skip the 2-cluster throughput run")
    parser.add_argument(
        "--repeats", type=int, default=5, help="throughput runs of each kind, alternating (default 5)"
    )
    parser.add_argument(
        "--results", type=Path, default=RESULTS_MD, help="where to write the Markdown summary"
    )
    add_reliability_arguments(parser)
    args = parser.parse_args(args_list)
    records = bench_throughput.QUICK_RECORDS if args.quick else bench_throughput.DEFAULT_RECORDS
    cycles = bench_reconciliation.QUICK_CYCLES if args.quick else bench_reconciliation.DEFAULT_CYCLES
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    print(f"== starting two {args.brokers} clusters", flush=True)
    with started_clusters(args.brokers, 2) as clusters:
        print(f"== clusters up after {time.perf_counter() - started:.0f} s", flush=True)
        results["throughput"] = bench_throughput.run(
            clusters[:1], records=records, repeats=args.repeats, brokers=args.brokers, profile=args.profile
        )
        bench_throughput.write_result(results["throughput"], bench_throughput.result_name(1))
        print(bench_throughput.format_table(results["throughput"]), flush=True)
        if not args.no_two_clusters:
            results["throughput-2clusters"] = bench_throughput.run(
                clusters, records=records, repeats=args.repeats, brokers=args.brokers
            )
            bench_throughput.write_result(results["throughput-2clusters"], bench_throughput.result_name(2))
            print(bench_throughput.format_table(results["throughput-2clusters"]), flush=True)
        results["reconciliation"] = bench_reconciliation.run(clusters, cycles=cycles, brokers=args.brokers)
        bench_reconciliation.write_result(results["reconciliation"])
        print(bench_reconciliation.format_table(results["reconciliation"]), flush=True)
    run_reliability(args, results)
    elapsed = time.perf_counter() - started
    write_results_md(args.results, args.brokers, args_list, results, elapsed)
    print(f"== done in {elapsed:.0f} s; written {args.results} and {RESULTS_DIR}/*.json")
    return 0


# ---------------------------------------------------------------------------------------------------------
# Reliability suite (issue 8): the soak and scale benchmarks, their options, and their RESULTS.md sections.
# Kept apart from the code above: it only adds options, runs after the other benchmarks on brokers of its
# own, and appends sections.

RELIABILITY_TITLES = {
    "soak": "Soak: metadata changing every few seconds, exact audit, leaks",
    "scale": "Scale: 10 logical clusters, 10,000 splits",
}


def add_reliability_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--soak-seconds",
        type=float,
        default=None,
        help=f"soak length (default {bench_soak.DEFAULT_SECONDS:.0f}, --quick 60; 0 skips the soak)",
    )
    parser.add_argument(
        "--scale-partitions",
        type=int,
        default=None,
        help=f"scale benchmark splits (default {bench_scale.DEFAULT_PARTITIONS}, --quick 1000; 0 skips)",
    )


def run_reliability(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    soak_seconds = args.soak_seconds if args.soak_seconds is not None else 60.0 if args.quick else None
    soak_seconds = bench_soak.DEFAULT_SECONDS if soak_seconds is None else soak_seconds
    partitions = args.scale_partitions
    if partitions is None:
        partitions = 1000 if args.quick else bench_scale.DEFAULT_PARTITIONS
    if soak_seconds > 0:
        print(f"== soak: {soak_seconds:.0f} s on two {args.brokers} clusters", flush=True)
        with started_clusters(args.brokers, 2) as clusters:
            results["soak"] = bench_soak.run(
                clusters, bench_soak.SoakConfig(seconds=soak_seconds), brokers=args.brokers
            )
        bench_soak.write_result(results["soak"])
        print(bench_soak.format_table(results["soak"]), flush=True)
    if partitions > 0 and args.brokers == "kafka":
        print(f"== scale: {partitions} splits on two Apache Kafka brokers of its own", flush=True)
        results["scale"] = bench_scale.run(partitions)
        bench_scale.write_result(results["scale"])
        print(bench_scale.format_table(results["scale"]), flush=True)


def reliability_md(results: dict[str, dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for key, title in RELIABILITY_TITLES.items():
        if key not in results:
            continue
        if key == "scale":
            partitions = results[key]["config"]["partitions"]
            title = (
                f"Scale: {results[key]['config']['logical_clusters']} logical clusters, {partitions:,} splits"
            )
        body = bench_soak.markdown(results[key]) if key == "soak" else bench_scale.markdown(results[key])
        lines += [f"## {title}", "", *body, ""]
    return lines


if __name__ == "__main__":
    sys.exit(main())
