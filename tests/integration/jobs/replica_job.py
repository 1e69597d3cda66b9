"""A job for the replica handover crash test: reads the stream of a metadata file with periodic checkpoints
and appends what it received to a file, one ``split offset value`` line per record.

Each poll's records are written with one unbuffered ``os.write`` before the next poll (where the periodic
checkpoint happens), so a ``kill -9`` never loses a line for a record a checkpoint covers.
Usage: replica_job.py METADATA_FILE CHECKPOINT_DIR OUT_FILE GROUP
"""

from __future__ import annotations

import os
import sys

from multicluster_source import FileMetadataService, MultiClusterKafkaSource, OffsetsInitializer


def main() -> None:
    metadata, checkpoint_dir, out, group = sys.argv[1:5]
    source = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(FileMetadataService(metadata))
        .set_stream_ids(["orders"])
        .set_group_id(group)
        .set_starting_offsets(OffsetsInitializer.earliest())
        .set_property("reader.batch.max.records", "20")
        .set_property("replica.sync.wait.ms", "120000")
        .build()
    )
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with source.open(parallelism=1, checkpoint_dir=checkpoint_dir, checkpoint_interval=0.2) as s:
        while True:
            records = s.poll(timeout=0.2, max_records=20)
            if records:
                lines = (f"{r.cluster_id}/{r.topic}/{r.partition} {r.offset} {r.value!r}\n" for r in records)
                os.write(fd, "".join(lines).encode())


if __name__ == "__main__":
    main()
