"""A job for the crash test: reads a topic with periodic checkpoints and appends what it received to a file.

Each poll's records are written with one unbuffered ``os.write`` before the next poll (which is where the
periodic checkpoint happens), so a ``kill -9`` never loses a line for a record a checkpoint covers. Each
poll then waits 10 ms, as a job doing work would: the test kills it mid-stream, after its first checkpoint,
and an idle loop reads the test's 6,000 records before that (0.2 s after start).
Usage: checkpointing_job.py BOOTSTRAP TOPIC CHECKPOINT_DIR OUT_FILE
"""

from __future__ import annotations

import os
import sys
import time

from multicluster_source import ClusterMetadata, KafkaStream, MultiClusterKafkaSource, StaticMetadataService


def main() -> None:
    bootstrap, topic, checkpoint_dir, out = sys.argv[1:5]
    stream = KafkaStream("s", {"c": ClusterMetadata("c", bootstrap, frozenset({topic}))})
    source = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([stream]))
        .set_stream_ids(["s"])
        .set_group_id("crash-job")
        .set_property("reader.batch.max.records", "50")
        .build()
    )
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with source.open(parallelism=2, checkpoint_dir=checkpoint_dir, checkpoint_interval=0.2) as s:
        while True:
            records = s.poll(timeout=0.2, max_records=100)
            if records:
                os.write(fd, "".join(f"{r.partition}:{r.offset}\n" for r in records).encode())
                time.sleep(0.01)


if __name__ == "__main__":
    main()
