"""A consume-transform-produce job for the exactly-once crash tests: reads one topic of each source cluster and
writes ``out:<value>`` for every record to OUT_TOPIC on the sink cluster, then exits once nothing came for
IDLE seconds.

Usage: eos_job.py MODE SINK_BOOTSTRAP TXN_ID OUT_TOPIC CHECKPOINT_DIR CRASH IDLE ID=BOOTSTRAP/TOPIC ...

MODE ``sink`` writes through an ExactlyOnceKafkaSink (transactional id TXN_ID); MODE ``run`` does the same
with the push API (``source.run(handler, 2, sink=...)``, two worker threads, the handler returning the
results); MODE ``plain`` writes with a plain producer and checkpoints to CHECKPOINT_DIR (at-least-once: the
control). CRASH is ``none``, or
``STEP@N``: the process ends at once (``os._exit``, as a ``kill -9``) the Nth time the sink reaches STEP
(see ``multicluster_source.sink._transactions.step_hook``); ``committing@N`` ends it 2 ms into the commit.
In ``plain`` mode, ``produced@N`` ends it after the Nth poll's results were flushed, before its checkpoint.
The job prints ``READY`` once open, then one line ``DONE <n>`` with the records it handled.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from confluent_kafka import Producer

from multicluster_source import (
    ClusterMetadata,
    ExactlyOnceKafkaSink,
    KafkaStream,
    MultiClusterKafkaSource,
    RunControl,
    StaticMetadataService,
)
from multicluster_source.sink import _transactions

_PACE_S = 0.1
"""Per poll of 50 records: the input takes a few seconds, so several transactions commit before the end."""


def _crash_hook(step: str, at: int) -> None:
    seen = {"n": 0}

    def hook(name: str) -> None:
        if name != step:
            return
        seen["n"] += 1
        if seen["n"] < at:
            return
        if name == "committing":  # end it while commit_transaction runs
            threading.Timer(0.002, lambda: os._exit(9)).start()
            return
        os._exit(9)

    _transactions.step_hook = hook


def main() -> None:
    mode, sink_bootstrap, txn_id, out_topic, checkpoint_dir, crash, idle = sys.argv[1:8]
    clusters = {}
    for spec in sys.argv[8:]:
        cid, rest = spec.split("=", 1)
        bootstrap, topic = rest.rsplit("/", 1)
        clusters[cid] = ClusterMetadata(cid, bootstrap, frozenset({topic}))
    source = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(StaticMetadataService([KafkaStream("s", clusters)]))
        .set_stream_ids(["s"])
        .set_group_id(f"eos-job-{txn_id}")
        .set_property("reader.batch.max.records", "50")
        .build()
    )
    step, _, at = crash.partition("@")
    handled = 0
    if mode == "sink":
        if crash != "none":
            _crash_hook(step, int(at))
        sink = ExactlyOnceKafkaSink(
            {"bootstrap.servers": sink_bootstrap},
            transactional_id=txn_id,
            positions_topic=f"{txn_id}.positions",
        )
        with source.open(sink=sink, checkpoint_interval=0.3, checkpoint_dir=checkpoint_dir) as stream:
            print("READY", flush=True)
            last = time.monotonic()
            while time.monotonic() - last < float(idle):
                records = stream.poll(timeout=0.2, max_records=50)
                if records:
                    last = time.monotonic()
                    time.sleep(_PACE_S)
                for record in records:
                    stream.produce(out_topic, value=b"out:" + (record.value or b""))
                    handled += 1
    elif mode == "run":
        if crash != "none":
            _crash_hook(step, int(at))
        handled = _push_job(source, sink_bootstrap, txn_id, out_topic, checkpoint_dir, float(idle))
    else:
        producer = Producer({"bootstrap.servers": sink_bootstrap})
        polls = 0
        with source.open(checkpoint_dir=checkpoint_dir) as stream:
            print("READY", flush=True)
            last = time.monotonic()
            while time.monotonic() - last < float(idle):
                records = stream.poll(timeout=0.2, max_records=50)
                if not records:
                    continue
                time.sleep(_PACE_S)
                last = time.monotonic()
                for record in records:
                    producer.produce(out_topic, value=b"out:" + (record.value or b""))
                    handled += 1
                producer.flush(30)
                polls += 1
                if step == "produced" and polls == int(at):
                    os._exit(9)
                stream.checkpoint()
    print(f"DONE {handled}", flush=True)


def _push_job(
    source: MultiClusterKafkaSource,
    bootstrap: str,
    txn_id: str,
    out_topic: str,
    checkpoint_dir: str,
    idle: float,
) -> int:
    """``source.run`` with two worker threads into the sink; stopped once nothing came for ``idle`` seconds
    after the first records."""
    sink = ExactlyOnceKafkaSink(
        {"bootstrap.servers": bootstrap}, transactional_id=txn_id, positions_topic=f"{txn_id}.positions"
    )
    control = RunControl()
    lock = threading.Lock()
    seen = {"last": 0.0, "n": 0.0}

    def handler(records: list[Any]) -> list[tuple[str, bytes]]:
        time.sleep(_PACE_S)
        with lock:
            seen["last"] = time.monotonic()
            seen["n"] += len(records)
        return [(out_topic, b"out:" + (r.value or b"")) for r in records]

    def stop_when_idle() -> None:
        while not control.wait_done(0.2):
            with lock:
                last = seen["last"]
            if last and time.monotonic() - last >= idle:
                control.stop()
                return

    threading.Thread(target=stop_when_idle, name="eos-job-idle", daemon=True).start()
    print("READY", flush=True)
    source.run(handler, 2, sink=sink, checkpoint_interval=0.3, checkpoint_dir=checkpoint_dir, control=control)
    return int(seen["n"])


if __name__ == "__main__":
    main()
