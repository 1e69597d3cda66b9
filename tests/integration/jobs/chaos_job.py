"""The job of the chaos soak (``harness.chaos``): reads stream ``s`` of a metadata file with periodic
checkpoints and appends every record it received to a file, one line per record
(``cluster<TAB>topic<TAB>partition<TAB>offset<TAB>value<TAB>time``, the wall-clock time of the poll), with one unbuffered write per poll before the
next poll (where the periodic checkpoint happens), so a ``kill -9`` loses no line a checkpoint covers.
Warnings (offset resets among them) go to stderr; ``SIGUSR1`` writes every thread's stack there (the soak
sends it before it ends a job whose partitions stand still, so that a stall shows where each thread was).
Usage: chaos_job.py METADATA_FILE CHECKPOINT_DIR OUT_FILE GROUP CHECKPOINT_INTERVAL
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import time

from multicluster_source import FileMetadataService, MultiClusterKafkaSource


def main() -> None:
    metadata, checkpoint_dir, out, group, interval = sys.argv[1:6]
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    source = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(FileMetadataService(metadata, poll_interval=0.5))
        .set_stream_ids(["s"])
        .set_group_id(group)
        .set_properties(
            {
                "stream-metadata-discovery-interval-ms": "500",
                "partition.discovery.interval.ms": "1000",
                # a dead broker is noticed within seconds, and a request to it times out after 5 s
                "socket.timeout.ms": "5000",
                "reconnect.backoff.max.ms": "1000",
            }
        )
        .build()
    )
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with source.open(parallelism=2, checkpoint_dir=checkpoint_dir, checkpoint_interval=float(interval)) as s:
        while True:
            records = s.poll(timeout=0.2, max_records=500)
            if records:
                now = f"{time.time():.3f}"
                lines = "".join(
                    f"{r.cluster_id}\t{r.topic}\t{r.partition}\t{r.offset}\t{(r.value or b'').decode()}\t{now}\n"
                    for r in records
                )
                os.write(fd, lines.encode())


if __name__ == "__main__":
    main()
