r"""``python -m multicluster_source`` (or ``multicluster-source``): look at a stream from a shell.

Commands::

    multicluster-source describe --metadata streams.yaml [--stream ID ...] [--group G] [--json]
    multicluster-source consume  --metadata streams.yaml [--stream ID ...] [--from earliest|latest|committed|
                                 timestamp --timestamp MS] [--follow] [--max-records N] [--format json|value]
                                 [--progress | --no-progress] [--group G]
    multicluster-source check    streams.yaml | configmap.yaml | /etc/streams/ [--key stream-metadata.yaml]

Metadata comes from ``--metadata FILE`` (the file format), ``--configmap PATH`` (a ConfigMap manifest or
mounted directory, ``--key``), or ``--metadata-topic TOPIC --metadata-bootstrap HOST:PORT`` (the
:class:`KafkaTopicMetadataService` topic). Client properties for every cluster: ``--property KEY=VALUE``
(repeatable) and ``--command-config FILE`` (``KEY=VALUE`` lines); placeholders work as in metadata files.

- ``describe`` prints each stream's clusters and topics, and per partition the first and end offsets and,
  with ``--group``, the committed offset and lag (``--json``: one JSON document) and, for a cluster that
  declares ``replicaOf`` an origin of the same stream, where a handover of the group's committed positions
  would start each replica partition, and how (before anyone switches).
- ``consume`` reads the stream to stdout; bounded (to the end offsets at start) unless ``--follow``; JSON
  lines, or raw values with ``--format value``. Nothing is committed. A bounded read shows a progress bar
  with rate and ETA on stderr when stderr is a terminal (``--progress`` forces it).
- ``check`` validates a metadata file or ConfigMap and prints every problem as ``FILE:LINE: key: reason``.

Exit codes: 0 done (``check``: valid); 1 Kafka or the source failed, or ``check`` found problems; 2 usage
error, bad metadata or configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from confluent_kafka import KafkaException

from multicluster_source._source import MultiClusterKafkaSource
from multicluster_source.enumerator._offsets import OffsetsInitializer
from multicluster_source.exceptions import ConfigurationError, MetadataError, MultiClusterSourceError
from multicluster_source.metadata import (
    ConfigMapMetadataService,
    FileMetadataService,
    KafkaMetadataService,
    KafkaStream,
    KafkaTopicMetadataService,
)
from multicluster_source.tools._check import check_path
from multicluster_source.tools._consume import Progress, consume_to, stdout_binary
from multicluster_source.tools._inspect import clusters_of, read_offsets, start_offsets
from multicluster_source.tools._replica_describe import replica_translations
from multicluster_source.tools.publish_metadata import EXIT_FAILED, EXIT_OK, EXIT_USAGE

__all__ = ["main"]


class _UsageError(Exception):
    pass


def _metadata_options(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--metadata", metavar="FILE", help="a stream metadata file (YAML or JSON)")
    where.add_argument("--configmap", metavar="PATH", help="a ConfigMap manifest or mounted directory")
    where.add_argument("--metadata-topic", metavar="TOPIC", help="a KafkaTopicMetadataService topic")
    p.add_argument("--key", default="stream-metadata.yaml", help="ConfigMap key (default %(default)s)")
    p.add_argument("--metadata-bootstrap", metavar="HOST:PORT", help="cluster of --metadata-topic")
    p.add_argument("--stream", action="append", default=[], metavar="ID", help="stream id (default: all)")
    p.add_argument("--group", help="consumer group: committed offsets and lag; --from committed")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE", help="client property")
    p.add_argument("--command-config", metavar="FILE", help="client properties, KEY=VALUE lines")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds for each Kafka call (default 30)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="multicluster-source",
        description="Look at multi-cluster Kafka streams: describe, consume, check.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    describe = sub.add_parser("describe", help="clusters, topics, partitions, offsets and lag of streams")
    _metadata_options(describe)
    describe.add_argument("--json", action="store_true", help="one JSON document instead of text")
    consume = sub.add_parser("consume", help="read a stream to stdout")
    _metadata_options(consume)
    consume.add_argument(
        "--from", dest="start", default="earliest", choices=["earliest", "latest", "committed", "timestamp"]
    )
    consume.add_argument("--timestamp", type=int, metavar="MS", help="epoch ms, with --from timestamp")
    consume.add_argument(
        "--follow", action="store_true", help="keep reading new records (default: stop at the end)"
    )
    consume.add_argument("--max-records", type=int, metavar="N", help="stop after N records")
    consume.add_argument(
        "--format", default="json", choices=["json", "value"], help="JSON lines or raw values"
    )
    consume.add_argument("--parallelism", type=int, default=1, help="readers (default 1)")
    bar = consume.add_mutually_exclusive_group()
    bar.add_argument("--progress", action="store_true", default=None, help="progress bar on stderr")
    bar.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    check = sub.add_parser("check", help="validate a metadata file or ConfigMap; list every problem")
    check.add_argument("path", help="metadata file, ConfigMap manifest or mounted ConfigMap directory")
    check.add_argument("--key", default=None, help="ConfigMap key (default stream-metadata.yaml)")
    return parser


def _client_properties(args: argparse.Namespace) -> dict[str, str]:
    lines = [(f"--property {p!r}", p) for p in args.property]
    if args.command_config:
        try:
            text = Path(args.command_config).read_text(encoding="utf-8")
        except OSError as exc:
            raise _UsageError(f"{args.command_config}: cannot read: {exc.strerror}") from None
        lines = [
            (f"{args.command_config}, line {n}", raw.strip())
            for n, raw in enumerate(text.splitlines(), 1)
            if raw.strip() and not raw.strip().startswith(("#", "!"))
        ] + lines
    props: dict[str, str] = {}
    for where, item in lines:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise _UsageError(f"{where}: expected KEY=VALUE")
        props[key.strip()] = value.strip()
    return props


def _service(args: argparse.Namespace, props: dict[str, str]) -> KafkaMetadataService:
    if args.metadata:
        return FileMetadataService(args.metadata, watch=False)
    if args.configmap:
        return ConfigMapMetadataService(args.configmap, args.key, watch=False)
    if not args.metadata_bootstrap:
        raise _UsageError("--metadata-topic needs --metadata-bootstrap")
    return KafkaTopicMetadataService(
        args.metadata_bootstrap, args.metadata_topic, client_properties=props, create_topic=False
    )


def _streams(service: KafkaMetadataService, wanted: list[str]) -> list[KafkaStream]:
    streams = {s.stream_id: s for s in service.get_all_streams()}
    missing = [sid for sid in wanted if sid not in streams]
    if missing:
        known = ", ".join(sorted(streams)) or "none"
        raise _UsageError(f"unknown stream(s) {', '.join(missing)} (streams in the metadata: {known})")
    return [streams[sid] for sid in (wanted or sorted(streams))]


def _describe(args: argparse.Namespace, out: TextIO) -> int:
    props = _client_properties(args)
    with _closing(_service(args, props)) as service:
        streams = _streams(service, args.stream)
    doc: dict[str, Any] = {"streams": {}}
    for stream in streams:
        clusters: dict[str, Any] = {}
        read = {cid: read_offsets(c, props, args.group, args.timeout) for cid, c in stream.clusters.items()}
        for cid, cluster in sorted(stream.clusters.items()):
            topics: dict[str, Any] = {
                t: [o.as_dict() for o in read[cid] if o.topic == t] for t in sorted(cluster.topics)
            }
            clusters[cid] = {"bootstrap_servers": cluster.bootstrap_servers, "topics": topics}
        doc["streams"][stream.stream_id] = {"clusters": clusters}
        if args.group:  # what a switch to a replica would start at (replicaOf), before anyone switches
            handovers = replica_translations(stream, read, props, args.group, args.timeout)
            if handovers:
                doc["streams"][stream.stream_id]["handovers"] = handovers
    if args.group:
        doc["group"] = args.group
    if args.json:
        print(json.dumps(doc, indent=2), file=out)
        return EXIT_OK
    for sid, s in doc["streams"].items():
        print(f"stream {sid}", file=out)
        for cid, c in s["clusters"].items():
            print(f"  cluster {cid} ({c['bootstrap_servers']})", file=out)
            for topic, parts in c["topics"].items():
                lag = sum(p["lag"] or 0 for p in parts) if args.group else None
                total = f", lag {lag}" if lag is not None else ""
                print(f"    topic {topic}: {len(parts)} partition(s){total}", file=out)
                print(
                    f"      {'partition':>9} {'start':>12} {'end':>12} {'committed':>12} {'lag':>10}",
                    file=out,
                )
                for p in parts:
                    committed = "-" if p["committed"] is None else p["committed"]
                    plag = "-" if p["lag"] is None else p["lag"]
                    row = f"{p['partition']:>9} {p['start']:>12} {p['end']:>12}"
                    print(f"      {row} {committed!s:>12} {plag!s:>10}", file=out)
        for h in s.get("handovers", []):
            bound = "" if h["max_repeats"] in (0, None) else f", at most {h['max_repeats']} may repeat"
            print(
                f"  handover {h['from']}@{h['from_offset']} -> {h['to']}@{h['to_offset']} "
                f"({h['mode']}{bound}): {h['detail']}",
                file=out,
            )
    return EXIT_OK


def _starting(args: argparse.Namespace) -> OffsetsInitializer:
    if args.start == "timestamp":
        if args.timestamp is None:
            raise _UsageError("--from timestamp needs --timestamp MS")
        return OffsetsInitializer.timestamp(args.timestamp)
    if args.start == "committed":
        if not args.group:
            raise _UsageError("--from committed needs --group")
        return OffsetsInitializer.committed(reset="earliest")
    return OffsetsInitializer.earliest() if args.start == "earliest" else OffsetsInitializer.latest()


def _consume(args: argparse.Namespace, err: TextIO) -> int:
    props = _client_properties(args)
    starting = _starting(args)
    if args.max_records is not None and args.max_records < 0:
        raise _UsageError("--max-records must be >= 0")
    service = _service(args, props)
    streams = _streams(service, args.stream)
    builder = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(service)
        .set_stream_ids([s.stream_id for s in streams])
        .set_starting_offsets(starting)
        .set_properties(props)
        .set_name("multicluster-source-cli")
        .set_property("topic.tracking.enable", "false")
    )
    if args.group:
        builder.set_group_id(args.group)
    if not args.follow:
        builder.set_bounded(OffsetsInitializer.latest())
    source = builder.build()
    show = args.progress if args.progress is not None else (not args.follow and err.isatty())
    progress = None
    if show and not args.follow:
        total = _bounded_total(streams, props, args)
        progress = Progress(total if args.max_records is None else min(total, args.max_records), err)
    if threading.current_thread() is threading.main_thread():
        signal.signal(
            signal.SIGTERM, _interrupt
        )  # stop like Ctrl-C: close the clients, flush what was written
    with source.open(parallelism=args.parallelism) as stream:
        consume_to(
            stream,
            stdout_binary(),
            raw=args.format == "value",
            max_records=args.max_records,
            progress=progress,
        )
    return EXIT_OK


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _bounded_total(streams: list[KafkaStream], props: dict[str, str], args: argparse.Namespace) -> int:
    total = 0
    for cluster in clusters_of(streams).values():
        offsets = read_offsets(cluster, props, args.group, args.timeout)
        starts = start_offsets(cluster, offsets, props, args.start, args.timestamp, args.timeout)
        total += sum(max(0, o.end - starts.get((o.topic, o.partition), o.start)) for o in offsets)
    return total


class _closing:
    def __init__(self, service: KafkaMetadataService) -> None:
        self._service = service

    def __enter__(self) -> KafkaMetadataService:
        return self._service

    def __exit__(self, *exc: object) -> None:
        self._service.close()


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the command line; returns the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    args = _parser().parse_args(argv)
    try:
        if args.command == "check":
            return check_path(args.path, args.key, out)
        if args.command == "describe":
            return _describe(args, out)
        return _consume(args, err)
    except (_UsageError, ConfigurationError, MetadataError) as exc:
        print(f"error: {exc}", file=err)
        return EXIT_USAGE
    except (KafkaException, MultiClusterSourceError) as exc:
        print(f"failed: {exc}", file=err)
        return EXIT_FAILED
    except BrokenPipeError:  # e.g. piped into head: stop quietly, and keep Python from complaining at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
