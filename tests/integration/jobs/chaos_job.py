"""The job of the chaos soak (``harness.chaos``): reads stream ``s`` of a metadata file with periodic
checkpoints and appends every record it received to a file, one line per record
(``cluster<TAB>topic<TAB>partition<TAB>offset<TAB>value<TAB>time``, the wall-clock time of the poll), with one unbuffered write per poll before the
next poll (where the periodic checkpoint happens), so a ``kill -9`` loses no line a checkpoint covers.
Warnings (offset resets among them) and the enumerator's INFO lines (replica handovers among them) go to
stderr.

With HEALTH_FILE, the job appends JSON lines about its own process (``harness.leaks``): ``{"baseline": ...}``
before the source is built, ``{"t": <wall time>, "facts": ...}`` every 2 s, and, after a SIGTERM has ended
the poll loop and the stream is closed, ``{"closed": ..., "leaks": [...]}``.
``kill -USR1 <pid>`` writes every thread's Python stack to stderr (the run's log), to see where a stall sits.
Usage: chaos_job.py METADATA_FILE CHECKPOINT_DIR OUT_FILE GROUP CHECKPOINT_INTERVAL [HEALTH_FILE]
"""

from __future__ import annotations

import faulthandler
import gc
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the harness's leak checks

from harness.leaks import ProcessFacts, leaks_after_close, live_clients, settle_after_close
from multicluster_source import FileMetadataService, MultiClusterKafkaSource

SAMPLE_EVERY_S = 2.0


def _report(health: str | None, entry: dict[str, Any]) -> None:
    if health is not None:  # opened and closed each time: the job's own descriptors stay as they were
        with open(health, "a") as f:
            f.write(json.dumps(entry) + "\n")


def main() -> None:
    metadata, checkpoint_dir, out, group, interval = sys.argv[1:6]
    health = sys.argv[6] if len(sys.argv) > 6 else None
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    # the enumerator's INFO lines include each replica handover (where a copied split starts), for the audit
    logging.getLogger("multicluster_source.enumerator").setLevel(logging.INFO)
    stopping = False

    def stop(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    before = ProcessFacts.now()
    _report(health, {"baseline": before.as_dict()})
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
                # a partition its client no longer fetches (librdkafka #4804, seen after a broker pause) is
                # made again within 10 s, inside the soak's 20 s bound on a healthy cluster's gap
                "reader.stall.timeout.ms": "10000",
            }
        )
        .build()
    )
    sampled = float("-inf")
    with source.open(parallelism=2, checkpoint_dir=checkpoint_dir, checkpoint_interval=float(interval)) as s:
        while not stopping:
            if time.monotonic() - sampled >= SAMPLE_EVERY_S:
                sampled = time.monotonic()
                _report(health, {"t": time.time(), "facts": ProcessFacts.now().as_dict()})
            records = s.poll(timeout=0.2, max_records=500)
            if records:
                now = f"{time.time():.3f}"
                lines = "".join(
                    f"{r.cluster_id}\t{r.topic}\t{r.partition}\t{r.offset}\t{(r.value or b'').decode()}\t{now}\n"
                    for r in records
                )
                os.write(fd, lines.encode())
    os.close(fd)
    after = settle_after_close(before)
    leaks = leaks_after_close(before, after)
    if leaks:  # what holds them, and whether a garbage collection frees them
        leaks.append(f"live clients: {live_clients()}")
        gc.collect()
        leaks.append(
            f"after a garbage collection: {leaks_after_close(before, settle_after_close(before, 5.0))}"
        )
    _report(health, {"closed": after.as_dict(), "leaks": leaks})


if __name__ == "__main__":
    main()
