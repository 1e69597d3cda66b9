"""FLIP-246 scenarios on real, independent Apache Kafka clusters, with live metadata changes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from harness.cluster import Cluster
from harness.scenario import (
    builder,
    cluster_md,
    drain,
    keys,
    samples_with_label,
    settle,
    stream,
    values,
    wait_for,
)
from multicluster_source import ConfigMapMetadataService, FileMetadataService, StaticMetadataService
from multicluster_source.testing import make_configmap_volume, update_configmap_volume, write_metadata_file

pytestmark = pytest.mark.integration


def test_reads_one_stream_from_two_clusters_exactly_once(kafka_clusters) -> None:
    east, west = kafka_clusters(2)
    t_east = east.create_topic("orders", partitions=2)
    t_west = west.create_topic("orders", partitions=3)
    east.produce_n(t_east, 300, partitions=2, prefix="e")
    west.produce_n(t_west, 300, partitions=3, prefix="w")
    md = [stream("orders", cluster_md(east, t_east), cluster_md(west, t_west))]
    registry = CollectorRegistry()
    with builder(md).build().open(parallelism=2, registry=registry) as s:
        got = drain(s, 600)
        got += settle(s, 1.0)
        active = registry.get_sample_value("multicluster_source_active_clusters")
    assert len(got) == 600 and len(keys(got)) == 600
    assert {r.cluster_id for r in got} == {east.cluster_id, west.cluster_id}
    expected = [f"{prefix}-{i}".encode() for prefix in ("e", "w") for i in range(300)]
    assert sorted(r.value for r in got) == sorted(expected)
    assert active == 2.0


class _Producer:
    """Produces numbered records to one topic on one cluster until stopped."""

    def __init__(self, cluster: Cluster, topic: str, prefix: str) -> None:
        self.cluster, self.topic, self.prefix = cluster, topic, prefix
        self.sent: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"test-produce-{prefix}", daemon=True)

    def _run(self) -> None:
        producer = self.cluster.producer(**{"linger.ms": 5})
        i = 0
        while not self._stop.is_set():
            value = f"{self.prefix}-{i}".encode()
            producer.produce(self.topic, value)
            self.sent.append(value)
            i += 1
            producer.poll(0)
            time.sleep(0.002)
        assert producer.flush(30) == 0

    def __enter__(self) -> _Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def test_migration_east_to_west_via_file_loses_and_duplicates_nothing(kafka_clusters, tmp_path: Path) -> None:
    east, west = kafka_clusters(2)
    t_east = east.create_topic("mig", partitions=2)
    t_west = west.create_topic("mig", partitions=2)
    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream("orders", cluster_md(east, t_east))])
    service = FileMetadataService(path)
    source = builder(service, stream_ids=["orders"]).build()
    got = []
    with source.open(parallelism=2) as s:
        with _Producer(east, t_east, "e") as pe:
            got += drain(s, 0, timeout=3, until=lambda g: len(g) > 50)
            # Phase 2: both clusters, while east keeps producing.
            write_metadata_file(path, [stream("orders", cluster_md(east, t_east), cluster_md(west, t_west))])
            with _Producer(west, t_west, "w") as pw:
                got += drain(
                    s, 0, timeout=30, until=lambda g: any(r.cluster_id == west.cluster_id for r in g)
                )
                # East stops producing before it is removed: everything it sent must still arrive.
                pe.__exit__()
                got += drain(s, 0, timeout=30, until=lambda g: _all_arrived(got + g, pe.sent))
                write_metadata_file(path, [stream("orders", cluster_md(west, t_west))])
                got += settle(s, 2.0)
            got += drain(s, 0, timeout=30, until=lambda g: _all_arrived(got + g, pw.sent))
        east_after = east.produce_n(t_east, 10, partitions=2, prefix="late-east")
        got += settle(s, 2.0)
    counts = values(got)
    assert all(counts[v] == 1 for v in pe.sent), "an east record was lost or duplicated"
    assert all(counts[v] == 1 for v in pw.sent), "a west record was lost or duplicated"
    assert not any(counts[v] for _p, v in east_after), "east was read after its removal"
    assert sum(counts.values()) == len(pe.sent) + len(pw.sent)


def _all_arrived(got, sent: list[bytes]) -> bool:
    have = {r.value for r in got}
    return all(v in have for v in sent)


def test_topic_removed_and_readded_resumes_without_rereading(kafka_clusters, tmp_path: Path) -> None:
    (east,) = kafka_clusters(1)
    keep = east.create_topic("keep", partitions=1)
    flip = east.create_topic("flip", partitions=2)
    east.produce_n(flip, 40, partitions=2, prefix="first")
    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream("s", cluster_md(east, keep, flip))])
    registry = CollectorRegistry()
    with builder(FileMetadataService(path), stream_ids=["s"]).build().open(registry=registry) as s:
        first = drain(s, 40)
        write_metadata_file(path, [stream("s", cluster_md(east, keep))])
        assert wait_for(lambda: not any(flip in sid for ids in s.assignments().values() for sid in ids), 10)
        east.produce_n(flip, 20, partitions=2, prefix="while-removed")
        east.produce(keep, [b"keep-1"])
        during = drain(s, 1, timeout=20)
        during += settle(s, 1.0)
        write_metadata_file(path, [stream("s", cluster_md(east, keep, flip))])
        after = drain(s, 20, timeout=30)
        after += settle(s, 1.5)
    assert sorted(r.value for r in first) == sorted(f"first-{i}".encode() for i in range(40))
    assert [r.value for r in during] == [b"keep-1"], "a removed topic must not be read"
    assert sorted(r.value for r in after) == sorted(f"while-removed-{i}".encode() for i in range(20))


def test_topic_added_while_running_delivers_each_of_its_records_once(kafka_clusters, tmp_path: Path) -> None:
    east, west = kafka_clusters(2)
    keep_e = east.create_topic("keep", partitions=1)
    keep_w = west.create_topic("keep", partitions=1)
    added = east.create_topic("added", partitions=3)
    before = east.produce_n(added, 60, partitions=3, prefix="before")  # written before the topic is added
    east.produce_n(keep_e, 10, partitions=1, prefix="keep-e")
    west.produce_n(keep_w, 10, partitions=1, prefix="keep-w")
    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream("s", cluster_md(east, keep_e), cluster_md(west, keep_w))])
    with builder(FileMetadataService(path), stream_ids=["s"]).build().open(parallelism=2) as s:
        got = drain(s, 20)
        with _Producer(east, added, "live") as live:
            time.sleep(0.3)  # some records of the topic are written before the change, some after
            write_metadata_file(
                path, [stream("s", cluster_md(east, keep_e, added), cluster_md(west, keep_w))]
            )
            time.sleep(1.0)
        expected_added = [value for _p, value in before] + live.sent
        need = len(expected_added)
        got += drain(s, need, timeout=60, until=lambda rs: sum(r.topic == added for r in got + rs) >= need)
        got += settle(s, 1.0)
        readers = [ids for ids in s.assignments().values() if any(f"/{added}/" in sid for sid in ids)]
    of_added = [r for r in got if r.topic == added]
    assert all(r.cluster_id == east.cluster_id for r in of_added)
    counts = values(of_added)
    assert max(counts.values()) == 1, "a record of the added topic arrived twice"
    assert sorted(counts) == sorted(expected_added), "every record of the added topic arrives"
    assert sorted(r.value for r in got if r.topic != added) == sorted(
        [f"keep-e-{i}".encode() for i in range(10)] + [f"keep-w-{i}".encode() for i in range(10)]
    )
    assert readers, "the added topic's splits are assigned"


def test_partitions_added_to_a_read_topic_deliver_each_of_their_records_once(kafka_clusters) -> None:
    from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]

    (east,) = kafka_clusters(1)
    topic = east.create_topic("grows", partitions=1)
    east.produce_n(topic, 10, partitions=1, prefix="p0")
    with builder([stream("s", cluster_md(east, topic))]).build().open(parallelism=2) as s:
        got = drain(s, 10)
        east.admin().create_partitions([NewPartitions(topic, 3)])[topic].result(30)
        assert wait_for(
            lambda: len(east.admin().list_topics(topic, timeout=10).topics[topic].partitions) == 3
        )
        producer = east.producer()  # a new client: it knows the new partitions
        for partition in (1, 2):
            for i in range(20):
                producer.produce(topic, f"p{partition}-{i}".encode(), partition=partition)
        assert producer.flush(30) == 0
        got += drain(s, 40, timeout=60)
        got += settle(s, 1.0)
    counts = values(got)
    assert max(counts.values()) == 1, "a record arrived twice"
    expected = [f"p0-{i}".encode() for i in range(10)] + [
        f"p{p}-{i}".encode() for p in (1, 2) for i in range(20)
    ]
    assert sorted(counts) == sorted(expected)
    assert {r.partition for r in got} == {0, 1, 2}


def test_pattern_subscriber_picks_up_a_new_stream(kafka_clusters, tmp_path: Path) -> None:
    east, west = kafka_clusters(2)
    t1 = east.create_topic("p1", partitions=1)
    t2 = west.create_topic("p2", partitions=1)
    east.produce(t1, [b"one"])
    west.produce(t2, [b"two"])
    path = tmp_path / "streams.yaml"
    write_metadata_file(
        path, [stream("orders-eu", cluster_md(east, t1)), stream("payments", cluster_md(west, t2))]
    )
    source = builder(FileMetadataService(path)).set_stream_pattern(r"^orders-").build()
    with source.open() as s:
        got = drain(s, 1)
        got += settle(s, 1.0)
        write_metadata_file(
            path,
            [
                stream("orders-eu", cluster_md(east, t1)),
                stream("orders-us", cluster_md(west, t2)),
                stream("payments", cluster_md(west, t2)),
            ],
        )
        got += drain(s, 1, timeout=30)
    assert [r.value for r in got] == [b"one", b"two"]


def test_removed_cluster_leaves_no_metric_label_sets(kafka_clusters, tmp_path: Path) -> None:
    east, west = kafka_clusters(2)
    te = east.create_topic("m", partitions=2)
    tw = west.create_topic("m", partitions=2)
    east.produce_n(te, 20, partitions=2)
    west.produce_n(tw, 20, partitions=2)
    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream("s", cluster_md(east, te), cluster_md(west, tw))])
    registry = CollectorRegistry()
    with (
        builder(FileMetadataService(path), stream_ids=["s"])
        .build()
        .open(parallelism=2, registry=registry) as s
    ):
        drain(s, 40)
        settle(s, 1.5)  # let lag gauges be reported
        assert samples_with_label(registry, "cluster", west.cluster_id)
        reconciliations = registry.get_sample_value("multicluster_source_reconciliations_total")
        assert reconciliations is not None
        write_metadata_file(path, [stream("s", cluster_md(east, te))])
        assert wait_for(lambda: not samples_with_label(registry, "cluster", west.cluster_id), 10)
        settle(s, 1.5)
        assert samples_with_label(registry, "cluster", west.cluster_id) == []
        assert samples_with_label(registry, "cluster", east.cluster_id)
        assert registry.get_sample_value("multicluster_source_active_clusters") == 1.0
        assert registry.get_sample_value("multicluster_source_reconciliations_total") == reconciliations + 1
    assert not [f for f in registry.collect() if f.name.startswith("multicluster_source_") and f.samples]


def test_restore_after_cluster_removed_then_readd_resumes(kafka_clusters, tmp_path: Path) -> None:
    east, west = kafka_clusters(2)
    te = east.create_topic("r", partitions=1)
    tw = west.create_topic("r", partitions=1)
    east.produce_n(te, 10, partitions=1, prefix="e1")
    west.produce_n(tw, 10, partitions=1, prefix="w1")
    path = tmp_path / "streams.yaml"
    ckpt = str(tmp_path / "ckpt")
    both = [stream("s", cluster_md(east, te), cluster_md(west, tw))]
    write_metadata_file(path, both)
    with builder(FileMetadataService(path), stream_ids=["s"]).build().open(checkpoint_dir=ckpt) as s:
        assert len(drain(s, 20)) == 20
        write_metadata_file(path, [stream("s", cluster_md(east, te))])
        assert wait_for(lambda: west.cluster_id not in str(s.assignments()), 10)
        s.checkpoint()
    west.produce_n(tw, 5, partitions=1, prefix="w2")
    with builder(FileMetadataService(path), stream_ids=["s"]).build().open(checkpoint_dir=ckpt) as s:
        assert settle(s, 1.0) == []
        write_metadata_file(path, both)
        got = drain(s, 5, timeout=30)
        got += settle(s, 1.0)
    assert sorted(r.value for r in got) == sorted(f"w2-{i}".encode() for i in range(5))


def test_global_mode_balances_splits_across_readers(kafka_clusters) -> None:
    east, west = kafka_clusters(2)
    te = east.create_topic("g", partitions=5)
    tw = west.create_topic("g", partitions=4)
    md = [stream("s", cluster_md(east, te), cluster_md(west, tw))]
    source = builder(md).set_property("stream-enumerator-mode", "global").build()
    with source.open(parallelism=4) as s:
        assert wait_for(lambda: sum(len(v) for v in s.assignments().values()) == 9, 30)
        loads = [len(v) for v in s.assignments().values()]
    assert max(loads) - min(loads) <= 1, loads


def test_property_only_change_reconnects_that_cluster_alone(kafka_clusters, tmp_path: Path) -> None:
    east, west = kafka_clusters(2)
    te = east.create_topic("prop", partitions=1)
    tw = west.create_topic("prop", partitions=1)
    path = tmp_path / "streams.yaml"
    write_metadata_file(path, [stream("s", cluster_md(east, te), cluster_md(west, tw))])
    registry = CollectorRegistry()
    got = []
    with builder(FileMetadataService(path), stream_ids=["s"]).build().open(registry=registry) as s:
        with _Producer(east, te, "e") as pe, _Producer(west, tw, "w") as pw:
            got += drain(s, 0, timeout=30, until=lambda g: len({r.cluster_id for r in g}) == 2)
            east_threads = {t.ident for t in threading.enumerate() if t.name.endswith(f"-{east.cluster_id}")}
            write_metadata_file(
                path,
                [stream("s", cluster_md(east, te), cluster_md(west, tw, **{"fetch.wait.max.ms": "50"}))],
            )
            assert wait_for(
                lambda: (
                    registry.get_sample_value(
                        "multicluster_source_reader_restarts_total", {"cluster": west.cluster_id}
                    )
                    == 1.0
                ),
                10,
            )
            got += settle(s, 1.0)
        got += drain(s, 0, timeout=30, until=lambda g: _all_arrived(got + g, pe.sent + pw.sent))
        east_threads_after = {
            t.ident for t in threading.enumerate() if t.name.endswith(f"-{east.cluster_id}")
        }
        east_restarts = registry.get_sample_value(
            "multicluster_source_reader_restarts_total", {"cluster": east.cluster_id}
        )
    counts = values(got)
    assert all(counts[v] == 1 for v in pe.sent + pw.sent)
    assert east_restarts in (None, 0.0)
    assert east_threads and east_threads == east_threads_after, "east's fetcher must not be restarted"


def test_configmap_data_swap_is_followed(kafka_clusters, tmp_path: Path) -> None:
    east, west = kafka_clusters(2)
    te = east.create_topic("cm", partitions=1)
    tw = west.create_topic("cm", partitions=1)
    east.produce(te, [b"from-east"])
    west.produce(tw, [b"from-west"])
    from multicluster_source.metadata import dump_streams

    volume = tmp_path / "volume"
    make_configmap_volume(volume, {"stream-metadata.yaml": dump_streams([stream("s", cluster_md(east, te))])})
    source = builder(ConfigMapMetadataService(str(volume)), stream_ids=["s"]).build()
    with source.open() as s:
        got = drain(s, 1)
        update_configmap_volume(
            volume, {"stream-metadata.yaml": dump_streams([stream("s", cluster_md(west, tw))])}
        )
        got += drain(s, 1, timeout=30)
    assert [r.value for r in got] == [b"from-east", b"from-west"]


BAD_FILES = {
    "invalid-yaml": "- streamId: s\n  clusterMetadataList: [\n",
    "wrong-types": "- streamId: s\n  clusterMetadataList: 7\n",
    "duplicate-cluster": (
        "- streamId: a\n  clusterMetadataList:\n  - {clusterId: c, bootstrapServers: 'h1:1', topics: [t]}\n"
        "- streamId: b\n  clusterMetadataList:\n  - {clusterId: c, bootstrapServers: 'h2:1', topics: [t]}\n"
    ),
    "empty-topics": "- streamId: s\n  clusterMetadataList:\n  - {clusterId: c, bootstrapServers: 'h:1', topics: []}\n",
    "invalid-topic": (
        "- streamId: s\n  clusterMetadataList:\n  - {clusterId: c, bootstrapServers: 'h:1', topics: ['bad topic']}\n"
    ),
    "unknown-placeholder": (
        "- streamId: s\n  clusterMetadataList:\n  - clusterId: c\n    bootstrapServers: 'h:1'\n"
        "    topics: [t]\n    properties: {sasl.password: '${vault:x}'}\n"
    ),
}


def _failures(registry: CollectorRegistry) -> float:
    return registry.get_sample_value("multicluster_source_metadata_failures_total") or 0.0


def test_bad_metadata_files_keep_the_source_running_and_are_counted(kafka_clusters, tmp_path: Path) -> None:
    (east,) = kafka_clusters(1)
    topic = east.create_topic("bad", partitions=1)
    path = tmp_path / "streams.yaml"
    good = [stream("s", cluster_md(east, topic))]
    write_metadata_file(path, good)
    registry = CollectorRegistry()
    with builder(FileMetadataService(path), stream_ids=["s"]).build().open(registry=registry) as s:
        east.produce(topic, [b"before"])
        got = drain(s, 1)
        for i, text in enumerate(BAD_FILES.values(), start=1):
            path.write_text(text)
            counted = i

            def seen(n: int = counted) -> bool:
                return _failures(registry) >= n

            assert wait_for(seen, 10), f"bad file {i} was not counted"
            east.produce(topic, [f"during-{i}".encode()])
            got += drain(s, 1, timeout=20)
        write_metadata_file(path, good)
        east.produce(topic, [b"after"])
        got += drain(s, 1, timeout=20)
    assert [r.value for r in got] == [b"before", *[f"during-{i}".encode() for i in range(1, 7)], b"after"]


def test_static_service_with_no_matching_stream_reads_nothing(kafka_cluster) -> None:
    source = builder(StaticMetadataService([]), stream_ids=["missing"]).build()
    with source.open() as s:
        assert settle(s, 0.5) == []
        assert s.assignments() == {0: []}
