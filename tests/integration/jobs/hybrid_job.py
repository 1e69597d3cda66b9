"""A job for the hybrid crash test: an in-memory archive of the first ARCHIVED records of each partition,
then the live topic, with periodic checkpoints; appends ``<stage> <partition>:<offset>`` per record to a file.

With ``LOOP=for`` it reads with the ``for`` loop (a line per record, written before the next is taken,
so a checkpoint inside the loop never covers a record without its line). With ``PAUSE_AT`` set to a switch step (finished, written, closed, opened) the job writes ``<out>.paused``
at that step and sleeps there, so the test can ``kill -9`` it exactly between two steps of the switch.
Each poll's lines are written with one unbuffered ``os.write`` before the next poll (where the periodic
checkpoint happens), so a kill never loses a line for a record a checkpoint covers.
Usage: hybrid_job.py BOOTSTRAP TOPIC PARTITIONS ARCHIVED CHECKPOINT_DIR OUT_FILE
"""

from __future__ import annotations

import os
import sys
import time

from multicluster_source import (
    ClusterMetadata,
    HybridSource,
    KafkaStream,
    MultiClusterKafkaSource,
    OffsetsInitializer,
    StaticMetadataService,
)
from multicluster_source.testing import InMemoryArchiveStage


def main() -> None:
    bootstrap, topic, partitions, archived, checkpoint_dir, out = sys.argv[1:7]
    archive = InMemoryArchiveStage(
        {f"c/{topic}/{p}": [f"v{i}".encode() for i in range(int(archived))] for p in range(int(partitions))}
    )
    live = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(
            StaticMetadataService(
                [KafkaStream("s", {"c": ClusterMetadata("c", bootstrap, frozenset({topic}))})]
            )
        )
        .set_stream_ids(["s"])
        .set_group_id("hybrid-crash-job")
        .set_starting_offsets(OffsetsInitializer.earliest())
        .set_property("reader.batch.max.records", "50")
        .build()
    )
    hybrid = HybridSource.builder(archive).add_source(live).build()
    pause = os.environ.get("PAUSE_AT")

    def hook(step: str) -> None:
        if step == pause:
            with open(out + ".paused", "w") as fh:
                fh.write(step)
            time.sleep(3600)

    hybrid._switch_hook = hook
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with hybrid.open(parallelism=2, checkpoint_dir=checkpoint_dir, checkpoint_interval=0.05) as stream:
        if os.environ.get("LOOP") == "for":  # the for loop: one line per record, before the next is taken
            for r in stream:
                os.write(fd, f"{stream.stage} {r.partition}:{r.offset}\n".encode())
                time.sleep(0.001)
        while True:
            records = stream.poll(timeout=0.2, max_records=50)
            if records:
                stage = stream.stage
                os.write(fd, "".join(f"{stage} {r.partition}:{r.offset}\n" for r in records).encode())
                time.sleep(0.01)


if __name__ == "__main__":
    main()
