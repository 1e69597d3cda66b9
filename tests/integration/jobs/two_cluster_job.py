"""A job over two clusters for the commit-fault tests: reads one topic of each with periodic checkpoints and a
group id, and appends ``cluster:partition:offset`` of every record it received to a file (one unbuffered write
per poll), so that the test can kill one cluster's broker under the checkpoints' offset commits and see
whether the process survives and keeps delivering.
Usage: two_cluster_job.py CHECKPOINT_DIR OUT_FILE GROUP ID=BOOTSTRAP/TOPIC [ID=BOOTSTRAP/TOPIC ...]
"""

from __future__ import annotations

import os
import sys

from multicluster_source import ClusterMetadata, KafkaStream, MultiClusterKafkaSource, StaticMetadataService


def main() -> None:
    checkpoint_dir, out, group = sys.argv[1:4]
    clusters = {}
    for spec in sys.argv[4:]:
        cid, rest = spec.split("=", 1)
        bootstrap, topic = rest.rsplit("/", 1)
        clusters[cid] = ClusterMetadata(cid, bootstrap, frozenset({topic}))
    source = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([KafkaStream("s", clusters)]))
        .set_stream_ids(["s"])
        .set_group_id(group)
        # a dead broker is noticed within seconds, and a request to it times out after 5 s
        .set_properties({"socket.timeout.ms": "5000", "reconnect.backoff.max.ms": "1000"})
        .build()
    )
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with source.open(parallelism=2, checkpoint_dir=checkpoint_dir, checkpoint_interval=0.5) as s:
        while True:
            records = s.poll(timeout=0.2, max_records=500)
            if records:
                os.write(fd, "".join(f"{r.cluster_id}:{r.partition}:{r.offset}\n" for r in records).encode())


if __name__ == "__main__":
    main()
