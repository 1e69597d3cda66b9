r"""Publish a stream metadata file into the metadata topic read by ``KafkaTopicMetadataService``.

Usage::

    python -m multicluster_source.tools.publish_metadata --bootstrap-servers HOST:PORT --topic TOPIC \
        --file streams.yaml [--transactional-id ID] [--dry-run] [--property KEY=VALUE ...] \
        [--command-config FILE] [--no-create-topic] [--replication-factor N] [--timeout SECONDS] [-v]

The file is in the metadata file format (YAML or JSON, as ``FileMetadataService`` reads it). The tool:

1. creates the writer (a transactional producer; this fences any older writer with the same
   ``transactional.id`` and aborts its unfinished transaction),
2. reads the topic to its end (checking it, or creating it unless ``--no-create-topic``),
3. writes only what differs from the file, in one transaction (cluster records, each changed stream's parts
   and commit, tombstones for streams and clusters the file no longer has), and prints what it wrote,
4. reads the topic again up to its write and checks that the topic now holds exactly the file's streams.

``--dry-run`` prints what would be written and writes nothing (it neither creates the topic nor a producer).
Property values may use ``${env:NAME}`` and ``${file:/path}`` placeholders; cluster properties are published
as written (placeholders are resolved by the readers), and nothing secret is printed.

Exit codes: 0 published, nothing to change, or dry run; 1 the Kafka side failed (unreachable, invalid topic,
fenced by a newer writer, transaction aborted, verification failed); 2 usage error or invalid metadata file
(the message names the file and the line).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import TextIO

from confluent_kafka import KafkaException

from multicluster_source.exceptions import ConfigurationError, MetadataError, MetadataValidationError
from multicluster_source.metadata._file import decode_metadata, read_metadata_bytes
from multicluster_source.metadata._model import ClusterMetadata, KafkaStream
from multicluster_source.metadata._parser import parse_streams
from multicluster_source.metadata._placeholders import redact_properties
from multicluster_source.metadata.topic._kafka_topic import KafkaTopicMetadataService
from multicluster_source.metadata.topic._topic_client import check_metadata_topic
from multicluster_source.metadata.topic._topic_log import MetadataSnapshot
from multicluster_source.metadata.topic._topic_plan import WritePlan, plan_publish
from multicluster_source.metadata.topic._topic_writer import (
    KafkaTopicMetadataWriter,
    default_transactional_id,
)

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "main"]

EXIT_OK = 0
"""Published, nothing to change, or a dry run."""
EXIT_FAILED = 1
"""The Kafka side failed: unreachable, invalid topic, fenced, aborted, or verification failed."""
EXIT_USAGE = 2
"""Wrong arguments or an invalid metadata file."""


class _UsageError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m multicluster_source.tools.publish_metadata",
        description="Publish a stream metadata file (YAML/JSON) into a compacted metadata topic, "
        "writing only what changed, in one transaction.",
    )
    parser.add_argument("--bootstrap-servers", required=True, help="cluster holding the metadata topic")
    parser.add_argument("--topic", required=True, help="the metadata topic")
    parser.add_argument("--file", required=True, help="the metadata file to publish")
    parser.add_argument(
        "--transactional-id",
        help="transactional.id of the writer (default: multicluster-metadata-writer-<topic>); "
        "keep it stable so that a new writer fences an old one",
    )
    parser.add_argument("--dry-run", action="store_true", help="print what would be written; write nothing")
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="client property for the metadata cluster (repeatable)",
    )
    parser.add_argument(
        "--command-config", metavar="FILE", help="file of client properties (KEY=VALUE lines, # comments)"
    )
    parser.add_argument(
        "--no-create-topic", action="store_true", help="fail instead of creating an absent topic"
    )
    parser.add_argument("--replication-factor", type=int, default=1, help="for a topic created (default 1)")
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds for each Kafka step (default 30)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    return parser


def _split_property(text: str, where: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise _UsageError(f"{where}: expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _client_properties(args: argparse.Namespace) -> dict[str, str]:
    props: dict[str, str] = {}
    if args.command_config:
        try:
            with open(args.command_config, encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except OSError as exc:
            raise _UsageError(f"{args.command_config}: cannot read: {exc.strerror}") from None
        for number, line in enumerate(lines, 1):
            stripped = line.strip()
            if stripped and not stripped.startswith(("#", "!")):
                key, value = _split_property(stripped, f"{args.command_config}, line {number}")
                props[key] = value
    for item in args.property:
        key, value = _split_property(item, "--property")
        props[key] = value
    return props


def _read_streams(path: str) -> set[KafkaStream]:
    return parse_streams(decode_metadata(read_metadata_bytes(path), source=path), source=path)


def _replica_note(cluster: ClusterMetadata) -> str:
    r = cluster.replica_of
    if r is None:
        return ""
    return f" (replica of {r.cluster}, offsets {r.offsets}{', failover' if r.failover else ''})"


def _describe_plan(
    plan: WritePlan, streams: set[KafkaStream], current: MetadataSnapshot, out: TextIO
) -> None:
    by_id = {s.stream_id: s for s in streams}
    clusters = {c.cluster_id: c for s in streams for c in s.clusters.values()}
    for cid in plan.clusters_written:
        cluster = clusters[cid]
        props = redact_properties(cluster.properties)
        shown = ", ".join(f"{k}={v}" for k, v in sorted(props.items())) or "none"
        print(f"cluster {cid}: bootstrap servers {cluster.bootstrap_servers}; properties: {shown}", file=out)
    for sid in plan.streams_written:
        stream = by_id[sid]
        parts = "; ".join(
            f"{cid}: {', '.join(sorted(stream.clusters[cid].topics))}{_replica_note(stream.clusters[cid])}"
            for cid in sorted(stream.clusters)
        )
        note = " (was inconsistent)" if sid in current.inconsistent else ""
        print(f"stream {sid}: {len(stream.clusters)} part(s) + commit [{parts}]{note}", file=out)
    for sid in plan.streams_deleted:
        print(f"stream {sid}: deleted (tombstones)", file=out)
    for cid in plan.clusters_deleted:
        print(f"cluster {cid}: deleted (no stream uses it)", file=out)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    props = _client_properties(args)
    streams = _read_streams(args.file)
    tid = args.transactional_id or default_transactional_id(args.topic)
    if args.dry_run:
        exists = check_metadata_topic(
            args.bootstrap_servers, args.topic, client_properties=props, create=False, timeout=args.timeout
        )
        current = MetadataSnapshot()
        if exists:
            with KafkaTopicMetadataService(
                args.bootstrap_servers,
                args.topic,
                client_properties=props,
                create_topic=False,
                catch_up_timeout=args.timeout,
            ) as service:
                current = service.snapshot()
        else:
            print(f"topic {args.topic} does not exist; it would be created", file=out)
        plan = plan_publish(streams, current=current, source=args.file)
        if plan.empty:
            print(f"dry run: nothing to write; {args.topic} holds the metadata of {args.file}", file=out)
            return EXIT_OK
        print(f"dry run: would write {len(plan.records)} record(s) in one transaction:", file=out)
        _describe_plan(plan, streams, current, out)
        return EXIT_OK
    with (
        KafkaTopicMetadataWriter(
            args.bootstrap_servers,
            args.topic,
            transactional_id=tid,
            client_properties=props,
            timeout=args.timeout,
        ) as writer,
        KafkaTopicMetadataService(
            args.bootstrap_servers,
            args.topic,
            client_properties=props,
            create_topic=not args.no_create_topic,
            replication_factor=args.replication_factor,
            catch_up_timeout=args.timeout,
        ) as service,
    ):
        current = service.snapshot()
        summary = writer.publish(streams, current=current)
        if not summary.changed:
            print(
                f"nothing to write: {args.topic} already holds the metadata of {args.file} "
                f"({len(streams)} stream(s))",
                file=out,
            )
            return EXIT_OK
        _describe_plan(summary.plan, streams, current, out)
        print(
            f"published {summary.records} record(s) in one transaction "
            f"(transactional.id {tid}, last offset {summary.last_offset})",
            file=out,
        )
        after = service.wait_for_offset(summary.next_offset or 0, timeout=args.timeout)
    wanted = {s.stream_id for s in streams}
    if after.stream_set() != streams or after.inconsistent & wanted:
        print(
            f"error: verification failed: after the write the topic does not hold exactly the streams of "
            f"{args.file} (another writer?); run the tool again",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(f"verified: {args.topic} holds {len(streams)} stream(s) at offset {after.offset}", file=out)
    return EXIT_OK


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run the tool with ``argv`` (default: the command line); returns the exit code."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    stream = out if out is not None else sys.stdout
    try:
        return _run(args, stream)
    except (_UsageError, MetadataValidationError, ConfigurationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except MetadataError as exc:
        if getattr(exc, "source", None) == args.file:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KafkaException as exc:
        print(f"error: Kafka: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
