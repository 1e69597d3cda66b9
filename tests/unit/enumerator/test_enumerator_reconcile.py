"""The multi-cluster enumerator's reconciliation, without brokers: a fake admin and a synchronous context."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from multicluster_source import ClusterMetadata, KafkaStream, MetadataError, OffsetsInitializer
from multicluster_source.enumerator._multicluster import MultiClusterEnumerator
from multicluster_source.enumerator._settings import EnumeratorSettings
from multicluster_source.enumerator._state import EnumeratorState
from multicluster_source.framework._events import GetMetadataUpdateEvent, MetadataUpdateEvent, SourceEvent
from multicluster_source.framework._split import KafkaPartitionSplit
from multicluster_source.metadata import StreamSetSubscriber
from multicluster_source.ops._metrics import SourceMetrics
from multicluster_source.testing import InMemoryMetadataService


class FakeAdmin:
    """Answers describe_topics and list_offsets from a dict topic -> partition count; offsets are 0."""

    created: list[FakeAdmin] = []

    def __init__(self, conf: Mapping[str, Any], topics: dict[str, int]) -> None:
        self.conf = dict(conf)
        self.topics = topics
        self.not_ready: set[tuple[str, int]] = set()  # partitions whose offsets fail (leader not available)
        FakeAdmin.created.append(self)

    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(
            topics={
                t: SimpleNamespace(
                    error=None, partitions={p: SimpleNamespace(leader=p % 3) for p in range(n)}
                )
                for t, n in self.topics.items()
            }
        )

    def describe_topics(self, topics: Any, request_timeout: float) -> dict[str, Future[Any]]:
        from confluent_kafka import KafkaError, KafkaException

        out: dict[str, Future[Any]] = {}
        for topic in topics.topic_names:
            fut: Future[Any] = Future()
            if topic in self.topics:
                partitions = [
                    SimpleNamespace(id=p, leader=SimpleNamespace(id=p % 3)) for p in range(self.topics[topic])
                ]
                fut.set_result(SimpleNamespace(partitions=partitions))
            else:
                fut.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
            out[topic] = fut
        return out

    def describe_cluster(self, request_timeout: float) -> Future[Any]:
        fut: Future[Any] = Future()
        fut.set_result(SimpleNamespace(nodes=[SimpleNamespace(id=i, rack="abc"[i]) for i in range(3)]))
        return fut

    def list_offsets(
        self, request: Mapping[Any, Any], request_timeout: float, isolation_level: Any = None
    ) -> dict[Any, Future[Any]]:
        from confluent_kafka import KafkaError, KafkaException

        out: dict[Any, Future[Any]] = {}
        for tp in request:
            fut: Future[Any] = Future()
            if (tp.topic, tp.partition) in self.not_ready:
                fut.set_exception(KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE)))  # as answered
            else:
                fut.set_result(SimpleNamespace(offset=0))
            out[tp] = fut
        return out


class Handle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class SyncContext:
    """Runs async calls at once when due now; later ones are kept and run by ``tick()``."""

    def __init__(self, parallelism: int = 2, racks: Mapping[int, str | None] | None = None) -> None:
        self.parallelism = parallelism
        self.reader_racks: Mapping[int, str | None] = dict(racks or {})
        self.assigned: dict[int, list[KafkaPartitionSplit]] = {}
        self.events: list[tuple[int, SourceEvent]] = []
        self.later: list[tuple[Handle, Callable[[], None]]] = []
        self.failed: list[BaseException] = []
        self.positions: dict[str, int] = {}

    def assign_splits(self, assignment: Mapping[int, Sequence[KafkaPartitionSplit]]) -> None:
        for reader, splits in assignment.items():
            self.assigned.setdefault(reader, []).extend(splits)

    def send_event_to_reader(self, reader: int, event: SourceEvent) -> None:
        self.events.append((reader, event))

    def signal_no_more_splits(self, reader: int) -> None:
        self.events.append((reader, SourceEvent()))

    def run_in_coordinator(self, fn: Callable[[], None], *, delay: float = 0.0) -> Handle:
        handle = Handle()
        if delay > 0:
            self.later.append((handle, fn))
        else:
            fn()
        return handle

    def call_async(
        self, call: Callable[[], Any], handler: Any, *, initial_delay: float = 0.0, period: Any = None
    ) -> Handle:
        def run() -> None:
            try:
                result, error = call(), None
            except Exception as exc:
                result, error = None, exc
            handler(result, error)

        return self.run_in_coordinator(run, delay=initial_delay)

    def delivered_positions(self, split_ids: Sequence[str]) -> dict[str, int]:
        return {s: self.positions[s] for s in split_ids if s in self.positions}

    def forget_positions(self, split_ids: Sequence[str]) -> None:
        for s in split_ids:
            self.positions.pop(s, None)

    def fail(self, error: BaseException) -> None:
        self.failed.append(error)


TOPICS = {"east": {"orders": 2, "audit": 1}, "west": {"orders": 3}, "central": {"orders": 1}}


def cluster(cid: str, *topics: str, servers: str | None = None, **props: str) -> ClusterMetadata:
    return ClusterMetadata(cid, servers or f"{cid}:9092", frozenset(topics), props)


def make(
    service: InMemoryMetadataService, restored: EnumeratorState | None = None, **overrides: Any
) -> tuple[MultiClusterEnumerator, SyncContext, CollectorRegistry]:
    ctx = SyncContext(overrides.pop("parallelism", 2), overrides.pop("racks", None))
    registry = CollectorRegistry()

    def admin_factory(conf: Mapping[str, Any]) -> FakeAdmin:
        cid = str(conf["client.id"]).split("-")[1]
        return FakeAdmin(conf, TOPICS[cid])

    settings = EnumeratorSettings(
        source_name="src",
        service=service,
        subscriber=StreamSetSubscriber(["s"]),
        group_id="g",
        starting=OffsetsInitializer.earliest(),
        stopping=None,
        client_properties={},
        client_id_prefix="src",
        metadata_interval_s=30.0,
        failure_threshold=overrides.pop("failure_threshold", -1),
        removed_retention_ms=overrides.pop("retention", 60_000),
        partition_discovery_interval_s=30.0,
        commit_offsets=True,
        mode=overrides.pop("mode", "per_cluster"),
        metrics=SourceMetrics(registry, "src"),
        admin_factory=admin_factory,
        debounce_s=0.0,
        **overrides,
    )
    enumerator = MultiClusterEnumerator(ctx, settings, restored)
    return enumerator, ctx, registry


def assigned_ids(ctx: SyncContext) -> set[str]:
    return {s.split_id for splits in ctx.assigned.values() for s in splits}


def test_start_discovers_and_assigns_after_readers_register() -> None:
    service = InMemoryMetadataService([KafkaStream("s", {"east": cluster("east", "orders")})])
    enumerator, ctx, _ = make(service)
    enumerator.start()
    assert ctx.assigned == {}, "no reader has registered yet"
    enumerator.handle_reader_event(0, GetMetadataUpdateEvent())
    enumerator.handle_reader_event(1, GetMetadataUpdateEvent())
    assert assigned_ids(ctx) == {"east/orders/0", "east/orders/1"}
    assert isinstance(ctx.events[0][1], MetadataUpdateEvent)


def test_only_changed_clusters_get_new_enumerators() -> None:
    FakeAdmin.created.clear()
    service = InMemoryMetadataService(
        [KafkaStream("s", {"east": cluster("east", "orders"), "west": cluster("west", "orders")})]
    )
    enumerator, ctx, registry = make(service)
    enumerator.start()
    enumerator.add_reader(0)
    enumerator.add_reader(1)
    admins = {a.conf["bootstrap.servers"] for a in FakeAdmin.created}
    assert admins == {"east:9092", "west:9092"}
    FakeAdmin.created.clear()

    # west's properties change, east untouched, central added.
    service.set_streams(
        [
            KafkaStream(
                "s",
                {
                    "east": cluster("east", "orders"),
                    "west": cluster("west", "orders", **{"fetch.wait.max.ms": "50"}),
                    "central": cluster("central", "orders"),
                },
            )
        ]
    )
    assert sorted(a.conf["bootstrap.servers"] for a in FakeAdmin.created) == ["central:9092", "west:9092"]
    change = enumerator.last_reconciliation
    assert change is not None
    assert change["added"] == ["central"] and change["reconnected"] == ["west"] and change["removed"] == []
    # west's splits were not rediscovered as new: no duplicate assignment.
    ids = [s.split_id for splits in ctx.assigned.values() for s in splits]
    assert len(ids) == len(set(ids)) == 2 + 3 + 1
    assert registry.get_sample_value("multicluster_source_reconciliations_total") == 2.0


def test_removed_topic_is_retained_and_readded_at_its_position() -> None:
    service = InMemoryMetadataService([KafkaStream("s", {"east": cluster("east", "orders", "audit")})])
    enumerator, ctx, _ = make(service)
    enumerator.start()
    enumerator.add_reader(0)
    enumerator.add_reader(1)
    assert "east/audit/0" in assigned_ids(ctx)
    ctx.positions["east/audit/0"] = 77
    service.set_streams([KafkaStream("s", {"east": cluster("east", "orders")})])
    state = EnumeratorState.from_dict(enumerator.snapshot_state(1))
    assert [r.split.split_id for r in state.removed] == ["east/audit/0"]
    assert all(s.topic == "orders" for s in state.splits)
    ctx.assigned.clear()
    service.set_streams([KafkaStream("s", {"east": cluster("east", "orders", "audit")})])
    (readded,) = [s for v in ctx.assigned.values() for s in v]
    assert readded.split_id == "east/audit/0" and readded.starting_offset == 77


def test_retention_zero_forgets_and_restarts_from_the_starting_offsets() -> None:
    service = InMemoryMetadataService([KafkaStream("s", {"east": cluster("east", "orders", "audit")})])
    enumerator, ctx, _ = make(service, retention=0)
    enumerator.start()
    enumerator.add_reader(0)
    enumerator.add_reader(1)
    ctx.positions["east/audit/0"] = 77
    service.set_streams([KafkaStream("s", {"east": cluster("east", "orders")})])
    ctx.assigned.clear()
    service.set_streams([KafkaStream("s", {"east": cluster("east", "orders", "audit")})])
    (readded,) = [s for v in ctx.assigned.values() for s in v]
    assert readded.starting_offset == 0
    assert "east/audit/0" not in ctx.positions


def test_bad_metadata_keeps_the_last_good_and_threshold_fails() -> None:
    service = InMemoryMetadataService([KafkaStream("s", {"east": cluster("east", "orders")})])
    enumerator, ctx, registry = make(service, failure_threshold=3)
    enumerator.start()
    service.fail_next(3)
    for _ in range(2):
        enumerator.refresh()
    assert ctx.failed == []
    assert enumerator.status()["clusters"].keys() == {"east"}
    enumerator.refresh()
    assert len(ctx.failed) == 1 and isinstance(ctx.failed[0], MetadataError)
    assert registry.get_sample_value("multicluster_source_metadata_failures_total") == 3.0


def test_conflicting_cluster_definitions_across_streams_are_a_metadata_failure() -> None:
    service = InMemoryMetadataService([KafkaStream("s", {"east": cluster("east", "orders")})], validate=False)
    enumerator, _ctx, registry = make(service)
    enumerator.start()
    service.set_streams(
        [
            KafkaStream("s", {"east": cluster("east", "orders")}),
            KafkaStream("s2", {"east": cluster("east", "x", servers="other:1")}),
        ]
    )
    # s2 is not subscribed, so there is no conflict yet; subscribe to both.
    enumerator._s = enumerator._s.__class__(
        **{**enumerator._s.__dict__, "subscriber": StreamSetSubscriber(["s", "s2"])}
    )
    enumerator.refresh()
    assert registry.get_sample_value("multicluster_source_metadata_failures_total") == 1.0
    assert enumerator.status()["clusters"]["east"]["topics"] == ["orders"]


def test_start_with_bad_metadata_raises() -> None:
    service = InMemoryMetadataService([])
    service.fail_next(1)
    enumerator, _ctx, _ = make(service)
    with pytest.raises(MetadataError):
        enumerator.start()


def test_global_mode_balances_within_one() -> None:
    service = InMemoryMetadataService(
        [KafkaStream("s", {c: cluster(c, *TOPICS[c]) for c in ("east", "west", "central")})]
    )
    enumerator, ctx, _ = make(service, mode="global", parallelism=4)
    enumerator.start()
    for r in range(4):
        enumerator.add_reader(r)
    loads = [len(ctx.assigned.get(r, [])) for r in range(4)]
    assert sum(loads) == 7 and max(loads) - min(loads) <= 1


def test_restore_retires_splits_of_clusters_that_are_gone() -> None:
    restored = EnumeratorState(
        splits=(KafkaPartitionSplit("east", "orders", 0, 5), KafkaPartitionSplit("gone", "t", 0, 9)),
    )
    service = InMemoryMetadataService([KafkaStream("s", {"east": cluster("east", "orders")})])
    enumerator, ctx, _ = make(service, restored)
    enumerator.start()
    enumerator.add_reader(0)
    enumerator.add_reader(1)
    splits = {s.split_id: s for v in ctx.assigned.values() for s in v}
    assert splits["east/orders/0"].starting_offset == 5
    assert "east/orders/1" in splits and "gone/t/0" not in splits
    state = EnumeratorState.from_dict(enumerator.snapshot_state(2))
    assert [r.split.split_id for r in state.removed] == ["gone/t/0"]


def test_reader_failure_moves_splits_at_delivered_positions_and_counts() -> None:
    service = InMemoryMetadataService([KafkaStream("s", {"east": cluster("east", "orders")})])
    enumerator, ctx, registry = make(service, parallelism=2)
    enumerator.start()
    enumerator.add_reader(0)
    enumerator.add_reader(1)
    lost = [s.split_id for s in ctx.assigned[1]]
    assert lost
    for sid in lost:
        ctx.positions[sid] = 42
    ctx.assigned.clear()
    enumerator.reader_failed(1)
    moved = ctx.assigned[0]
    assert sorted(s.split_id for s in moved) == sorted(lost)
    assert all(s.starting_offset == 42 for s in moved)
    assert registry.get_sample_value("multicluster_source_failovers_total", {"cluster": "east"}) == 1.0
    enumerator.reader_failed(1)  # reported twice: counted once
    assert registry.get_sample_value("multicluster_source_failovers_total", {"cluster": "east"}) == 1.0
    enumerator.reader_failed(0)
    assert ctx.failed and "every reader failed" in str(ctx.failed[0])


def test_leader_racks_steer_assignment() -> None:
    service = InMemoryMetadataService([KafkaStream("s", {"west": cluster("west", "orders")})])
    enumerator, ctx, _ = make(service, parallelism=3, racks={0: "a", 1: "b", 2: "c"})
    enumerator.start()
    for r in range(3):
        enumerator.add_reader(r)
    # FakeAdmin: partition p is led by node p % 3, whose rack is "abc"[p % 3].
    for reader, splits in ctx.assigned.items():
        assert all("abc"[s.partition % 3] == "abc"[reader] for s in splits)
    placement = enumerator.status()["placement"]
    assert all(e["reason"].startswith("leader rack") for e in placement.values())


def test_subscribed_ids_missing_from_the_metadata_are_warned_once_per_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = InMemoryMetadataService([KafkaStream("t", {"east": cluster("east", "orders")})])
    enumerator, _ctx, _ = make(service)
    with caplog.at_level(logging.WARNING, logger="multicluster_source.enumerator"):
        enumerator.start()
        enumerator.refresh()  # the same answer again: no second warning
    warnings = [r.getMessage() for r in caplog.records if "not in the metadata" in r.getMessage()]
    assert len(warnings) == 1 and "src" in warnings[0] and ": s (it contains: t)" in warnings[0]
    assert enumerator.status()["missing_streams"] == ["s"]
    service.set_streams([KafkaStream("s", {"east": cluster("east", "orders")})])
    enumerator.refresh()
    assert enumerator.status()["missing_streams"] == []


class _AuthError:
    def name(self) -> str:
        return "_AUTHENTICATION"

    def str(self) -> str:
        return "SASL authentication error: Authentication failed"


def test_a_cluster_client_error_is_logged_and_shown_until_discovery_works_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = InMemoryMetadataService(
        [KafkaStream("s", {"east": cluster("east", "orders"), "west": cluster("west", "orders")})]
    )
    enumerator, _ctx, _ = make(service)
    enumerator.start()
    east = next(a for a in FakeAdmin.created[::-1] if "east" in str(a.conf["client.id"]))
    pending: list[Any] = [_AuthError()]

    def poll(timeout: float) -> None:  # like AdminClient.poll: serves the queued error callbacks
        for error in pending:
            east.conf["error_cb"](error)

    east.poll = poll  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="multicluster_source"):
        clusters = enumerator.status()["clusters"]
    pending.clear()
    assert clusters["east"]["error"] == "_AUTHENTICATION: SASL authentication error: Authentication failed"
    assert clusters["west"]["error"] is None, "only the failing cluster shows an error"
    assert any(
        "cluster=east" in r.getMessage() and "_AUTHENTICATION" in r.getMessage() for r in caplog.records
    )
    enumerator._clusters.enumerators()["east"].discover_now()  # a round that works clears it
    assert enumerator.status()["clusters"]["east"]["error"] is None


@pytest.mark.parametrize(
    ("props", "read_committed"),
    [
        ({}, True),
        ({"isolation.level": "read_committed"}, True),
        ({"isolation.level": "read_uncommitted"}, False),
    ],
)
def test_the_readers_isolation_level_decides_which_end_latest_means(
    props: dict[str, str], read_committed: bool
) -> None:
    service = InMemoryMetadataService([KafkaStream("s", {"east": cluster("east", "orders", **props)})])
    enumerator, _ctx, _ = make(service)
    config = enumerator._clusters.config(cluster("east", "orders", **props))
    assert config.read_committed is read_committed
    assert "isolation.level" not in config.client_properties  # a consumer property: not the admin client's


def test_a_change_touching_one_cluster_walks_only_that_clusters_splits(monkeypatch: Any) -> None:
    """Among many clusters, a change to one costs what that cluster holds: the split table is never walked
    whole (a walk raises here); splits and gauges of the clusters that did not change stay as they were."""
    service = InMemoryMetadataService(
        [KafkaStream("s", {"east": cluster("east", "orders", "audit"), "west": cluster("west", "orders")})]
    )
    enumerator, _ctx, registry = make(service)
    enumerator.start()
    enumerator.add_reader(0)
    enumerator.add_reader(1)

    def walk(*_args: Any) -> Any:
        raise AssertionError("the whole split table was walked")

    table = enumerator._splits
    for name in ("values", "items", "keys"):
        monkeypatch.setattr(table, name, walk)
    # Publishing the state for checkpoints copies every reference (in C, about a millisecond at 100,000
    # splits; see test_published_state.py): left out here.
    monkeypatch.setattr(enumerator._published, "publish", lambda: None)

    def gauge(cid: str) -> float | None:
        return registry.get_sample_value("multicluster_source_assigned_splits", {"cluster": cid})

    west_before = gauge("west")
    # east loses a topic, central is added; west is untouched.
    service.set_streams(
        [
            KafkaStream(
                "s",
                {
                    "east": cluster("east", "orders"),
                    "west": cluster("west", "orders"),
                    "central": cluster("central", "orders"),
                },
            )
        ]
    )
    ids = sorted(table._splits)
    assert ids == [
        "central/orders/0",
        "east/orders/0",
        "east/orders/1",
        "west/orders/0",
        "west/orders/1",
        "west/orders/2",
    ]
    assert (gauge("east"), gauge("west"), gauge("central")) == (2.0, west_before, 1.0)
    assert west_before == 3.0
    service.set_streams(
        [KafkaStream("s", {"east": cluster("east", "orders"), "west": cluster("west", "orders")})]
    )
    assert sorted(table.cluster_ids()) == ["east", "west"]


def test_partitions_whose_leaders_are_not_ready_do_not_hold_up_the_others() -> None:
    """One partition the cluster cannot give an offset for yet (leader not available): the others are
    assigned at once, and it follows once a later round can resolve it."""
    FakeAdmin.created.clear()
    service = InMemoryMetadataService([KafkaStream("s", {"west": cluster("west", "orders")})])
    enumerator, ctx, _ = make(service)
    original = FakeAdmin.__init__

    def not_ready(self: FakeAdmin, conf: Mapping[str, Any], topics: dict[str, int]) -> None:
        original(self, conf, topics)
        self.not_ready = {("orders", 1)}

    FakeAdmin.__init__ = not_ready  # type: ignore[method-assign]
    try:
        enumerator.start()
    finally:
        FakeAdmin.__init__ = original  # type: ignore[method-assign]
    enumerator.add_reader(0)
    enumerator.add_reader(1)
    assert assigned_ids(ctx) == {"west/orders/0", "west/orders/2"}
    (admin,) = FakeAdmin.created
    admin.not_ready.clear()  # its leader is elected
    due, ctx.later = ctx.later, []
    for handle, fn in due:  # the rounds scheduled since (the retry comes after a second, not 30)
        if not handle.cancelled:
            fn()
    assert assigned_ids(ctx) == {"west/orders/0", "west/orders/1", "west/orders/2"}
