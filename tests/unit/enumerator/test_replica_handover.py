"""Replica handovers in the enumerator, without brokers: the "replica not read while its origin is" rule, the
decisions a metadata change makes (fence, positions, translation off the coordinator thread), failover,
translator lifecycle, checkpoints taken mid-handover, and the runtime's fence of undelivered records."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import Message
from prometheus_client import CollectorRegistry
from unit.enumerator.test_enumerator_reconcile import FakeAdmin, Handle, SyncContext

from multicluster_source import ClusterMetadata, KafkaStream, OffsetsInitializer
from multicluster_source.enumerator._copies import effective_metadata, replica_splits_of
from multicluster_source.enumerator._multicluster import MultiClusterEnumerator
from multicluster_source.enumerator._replica_state import ReplicaState
from multicluster_source.enumerator._settings import EnumeratorSettings
from multicluster_source.enumerator._state import EnumeratorState
from multicluster_source.framework._events import GetMetadataUpdateEvent
from multicluster_source.framework._interfaces import RecordBatch
from multicluster_source.metadata import StreamSetSubscriber
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.ops._metrics import SourceMetrics
from multicluster_source.reader._records import RecordMaker
from multicluster_source.replicas import OriginPosition, Translation
from multicluster_source.runtime.core._delivery import Delivery, part_positions
from multicluster_source.runtime.core._handoff import Handoff, PositionTracker
from multicluster_source.testing import InMemoryMetadataService

TOPICS = {"east": {"orders": 2}, "west": {"orders": 1, "east.orders": 2}}


class FencingContext(SyncContext):
    """The synchronous context with the runtime's fence; ``hold_async`` keeps translations for later."""

    def __init__(self) -> None:
        super().__init__(parallelism=2)
        self.tracker = PositionTracker()
        self.hold_async = False
        self.held: list[Callable[[], None]] = []

    def call_async(
        self, call: Callable[[], Any], handler: Any, *, initial_delay: float = 0.0, period: Any = None
    ) -> Handle:
        if not self.hold_async:
            return super().call_async(call, handler, initial_delay=initial_delay, period=period)

        def run() -> None:
            try:
                result, error = call(), None
            except Exception as exc:
                result, error = None, exc
            handler(result, error)

        self.held.append(run)
        return Handle()

    def delivered_positions(self, split_ids: Sequence[str]) -> dict[str, int]:
        return self.tracker.get(split_ids)

    def forget_positions(self, split_ids: Sequence[str]) -> None:
        self.tracker.forget(split_ids)

    def fence_positions(self, split_ids: Sequence[str]) -> dict[str, tuple[int, int | None]]:
        return self.tracker.fence(split_ids)

    def unfence_positions(self, split_ids: Sequence[str]) -> None:
        self.tracker.unfence(split_ids)

    def watch_positions(self, split_ids: Sequence[str]) -> None:
        self.tracker.watch(split_ids)

    def watched_times(self) -> dict[str, int]:
        return self.tracker.watched_times()


class RecordingTranslator:
    """Identical offsets, minus ``shift``; records every call."""

    made: list[RecordingTranslator] = []

    def __init__(self, replica_of: ReplicaOf, origin: ClusterMetadata, replica: ClusterMetadata, **kw: Any):
        self.replica_of, self.origin, self.replica, self.kw = replica_of, origin, replica, kw
        self.calls: list[tuple[list[tuple[OriginPosition, str]], bool, float]] = []
        self.started = self.closed = False
        RecordingTranslator.made.append(self)

    def start(self) -> None:
        self.started = True

    def translate(
        self, handovers: Sequence[tuple[OriginPosition, str]], *, origin_reachable: bool, wait_s: float
    ) -> list[Translation]:
        self.calls.append((list(handovers), origin_reachable, wait_s))
        return [Translation(p.split, to, p.offset, p.offset, "identical") for p, to in handovers]

    def close(self) -> None:
        self.closed = True


def west(*topics: str, **replica: Any) -> ClusterMetadata:
    return ClusterMetadata(
        "west", "west:9092", frozenset(topics), replica_of=ReplicaOf("east", "identical", **replica)
    )


def east(*topics: str) -> ClusterMetadata:
    return ClusterMetadata("east", "east:9092", frozenset(topics))


def streams(*clusters: ClusterMetadata) -> list[KafkaStream]:
    return [KafkaStream("s", {c.cluster_id: c for c in clusters})]


def make(
    service: InMemoryMetadataService,
    restored: EnumeratorState | None = None,
    ctx: FencingContext | None = None,
    factory: Any = RecordingTranslator,
) -> tuple[MultiClusterEnumerator, FencingContext, CollectorRegistry]:
    ctx = ctx or FencingContext()
    registry = CollectorRegistry()

    def admin_factory(conf: Mapping[str, Any]) -> FakeAdmin:
        return FakeAdmin(conf, TOPICS[str(conf["client.id"]).split("-")[1]])

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
        failure_threshold=-1,
        removed_retention_ms=60_000,
        partition_discovery_interval_s=30.0,
        commit_offsets=True,
        mode="per_cluster",
        metrics=SourceMetrics(registry, "src"),
        admin_factory=admin_factory,
        debounce_s=0.0,
        translator_factory=factory,
        replica_sync_wait_s=2.5,
    )
    enumerator = MultiClusterEnumerator(ctx, settings, restored)
    enumerator.start()
    enumerator.handle_reader_event(0, GetMetadataUpdateEvent())
    enumerator.handle_reader_event(1, GetMetadataUpdateEvent())
    return enumerator, ctx, registry


def assigned(ctx: SyncContext) -> dict[str, int]:
    return {s.split_id: s.starting_offset for splits in ctx.assigned.values() for s in splits}


# ------------------------------------------------------------------------------------------- the rule


def test_effective_metadata_leaves_out_copies_of_read_topics_and_failed_origins() -> None:
    declared = {"east": east("orders", "audit"), "west": west("orders", "east.orders")}
    assert effective_metadata(declared)["west"].topics == {"orders"}
    assert effective_metadata(declared)["east"].topics == {"orders", "audit"}
    without_origin = {"west": declared["west"]}
    assert effective_metadata(without_origin)["west"].topics == {"orders", "east.orders"}
    failed = effective_metadata(declared, {"east"})
    assert failed["east"].topics == {"audit"} and failed["west"].topics == {"orders", "east.orders"}
    only_copy = {"east": east("orders"), "west": west("east.orders")}
    assert set(effective_metadata(only_copy)) == {"east"}  # a cluster without topics to read is left out
    assert replica_splits_of("east", "orders", 1, declared) == [
        ("west/east.orders/1", declared["west"].replica_of)
    ]


def test_replica_is_not_read_while_its_origin_is() -> None:
    RecordingTranslator.made.clear()
    service = InMemoryMetadataService(streams(east("orders"), west("orders", "east.orders")))
    enumerator, ctx, _ = make(service)
    assert set(assigned(ctx)) == {"east/orders/0", "east/orders/1", "west/orders/0"}
    status = enumerator.status()
    assert status["handovers"] == [] and status["replica_topics_held"] == {"west": ["east.orders"]}
    [translator] = RecordingTranslator.made
    assert translator.started and translator.origin.bootstrap_servers == "east:9092"
    assert translator.kw == {"group_id": "g", "properties": {}}
    # the origin's splits are watched (last delivered timestamps kept for the timestamp mode)
    assert ctx.tracker.watched == {"east/orders/0", "east/orders/1"}


# ------------------------------------------------------------------------------------------ switchover


def test_switchover_fences_the_origin_and_starts_the_replica_at_the_translation() -> None:
    RecordingTranslator.made.clear()
    service = InMemoryMetadataService(streams(east("orders"), west("orders", "east.orders")))
    enumerator, ctx, registry = make(service)
    ctx.tracker.advance({"east/orders/0": 5, "east/orders/1": 7}, {"east/orders/0": 1234})
    service.set_streams(streams(west("orders", "east.orders")))
    enumerator.refresh()
    # the origin's records no longer count (and are dropped by the taker)
    assert ctx.tracker.advance({"east/orders/0": 6}) == {"east/orders/0"}
    [translator] = RecordingTranslator.made
    [(asks, reachable, wait_s)] = translator.calls
    assert asks == [
        (OriginPosition("east/orders/0", 5, 1234), "west/east.orders/0"),
        (OriginPosition("east/orders/1", 7, None), "west/east.orders/1"),
    ]
    assert reachable and wait_s == 2.5
    starts = assigned(ctx)
    assert starts["west/east.orders/0"] == 5 and starts["west/east.orders/1"] == 7
    status = enumerator.status()
    assert [
        (h["from"], h["to"], h["from_offset"], h["to_offset"], h["mode"]) for h in status["handovers"]
    ] == [
        ("east/orders/0", "west/east.orders/0", 5, 5, "identical"),
        ("east/orders/1", "west/east.orders/1", 7, 7, "identical"),
    ]
    assert registry.get_sample_value("multicluster_source_handovers_total", {"mode": "identical"}) == 2
    assert status["replica_topics_held"] == {}


def test_an_origin_split_without_delivered_records_hands_over_its_start() -> None:
    RecordingTranslator.made.clear()
    service = InMemoryMetadataService(streams(east("orders"), west("orders", "east.orders")))
    enumerator, _ctx, _ = make(service)
    service.set_streams(streams(west("orders", "east.orders")))
    enumerator.refresh()
    [(asks, _r, _w)] = RecordingTranslator.made[0].calls
    assert [p.offset for p, _ in asks] == [0, 0]  # the origin splits' starting offsets (FakeAdmin: 0)


def test_a_replica_without_origin_position_starts_at_the_starting_offsets() -> None:
    RecordingTranslator.made.clear()
    service = InMemoryMetadataService(streams(west("orders", "east.orders")))
    enumerator, ctx, _ = make(service)
    assert set(assigned(ctx)) == {"west/orders/0", "west/east.orders/0", "west/east.orders/1"}
    assert RecordingTranslator.made[0].calls == [] and enumerator.status()["handovers"] == []


def test_failover_translates_without_the_origin_and_stops_reading_it() -> None:
    RecordingTranslator.made.clear()
    service = InMemoryMetadataService(streams(east("orders"), west("orders", "east.orders")))
    enumerator, ctx, _ = make(service)
    ctx.tracker.advance({"east/orders/0": 3})
    service.set_streams(streams(east("orders"), west("orders", "east.orders", failover=True)))
    enumerator.refresh()
    # the same translator serves the failover (its history of syncs is kept)
    [translator] = RecordingTranslator.made
    [(asks, reachable, _w)] = translator.calls
    assert not reachable and asks[0] == (OriginPosition("east/orders/0", 3, None), "west/east.orders/0")
    status = enumerator.status()
    assert "east" not in status["clusters"]  # its only topic is copied: nothing left to read there
    assert "west/east.orders/0" in status["splits"]


def test_unreachable_origin_fails_over_after_the_option() -> None:
    RecordingTranslator.made.clear()
    service = InMemoryMetadataService(streams(east("orders"), west("orders", "east.orders")))
    enumerator, _ctx, _ = make(service)
    handovers = enumerator._handovers
    assert not handovers.check_reachability({"east": None}, 0)
    assert handovers.check_reachability({"east": "Broker transport failure"}, 0)
    assert handovers.auto_failed == {"east"}
    enumerator._apply(enumerator._last_read, initial=False)
    [(_asks, reachable, _w)] = RecordingTranslator.made[0].calls
    assert not reachable and handovers.state().auto_failed == {"east"}


def test_translator_closed_when_the_declaration_goes_and_on_close() -> None:
    RecordingTranslator.made.clear()
    service = InMemoryMetadataService(streams(east("orders"), west("orders", "east.orders")))
    enumerator, _ctx, _ = make(service)
    service.set_streams(streams(east("orders"), ClusterMetadata("west", "west:9092", frozenset({"orders"}))))
    enumerator.refresh()
    assert RecordingTranslator.made[0].closed
    service.set_streams(streams(east("orders"), west("orders", "east.orders", topics={"x": "orders"})))
    enumerator.refresh()
    assert len(RecordingTranslator.made) == 2 and not RecordingTranslator.made[1].closed
    enumerator.close()
    assert RecordingTranslator.made[1].closed


def test_a_failed_translation_starts_at_the_starting_offsets() -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no MM2 here")

    service = InMemoryMetadataService(streams(east("orders"), west("orders", "east.orders")))
    enumerator, ctx, _ = make(service, factory=broken)
    ctx.tracker.advance({"east/orders/0": 9})
    service.set_streams(streams(west("orders", "east.orders")))
    enumerator.refresh()
    modes = {h["to"]: (h["mode"], h["to_offset"]) for h in enumerator.status()["handovers"]}
    assert modes["west/east.orders/0"] == ("start", 0)
    assert assigned(ctx)["west/east.orders/0"] == 0


# ------------------------------------------------------------------------------------------ checkpoints


def test_a_checkpoint_mid_handover_translates_again_from_the_same_positions() -> None:
    RecordingTranslator.made.clear()
    service = InMemoryMetadataService(streams(east("orders"), west("orders", "east.orders")))
    ctx = FencingContext()
    enumerator, ctx, _ = make(service, ctx=ctx)
    ctx.tracker.advance({"east/orders/0": 11, "east/orders/1": 4})
    ctx.hold_async = True
    service.set_streams(streams(west("orders", "east.orders")))
    enumerator.refresh()
    assert "west/east.orders/0" not in assigned(ctx)  # translation under way
    state = enumerator.snapshot_state(1)
    assert state["replicas"]["version"] == 1
    assert [(p["to"], p["from_offset"]) for p in state["replicas"]["pending"]] == [
        ("west/east.orders/0", 11),
        ("west/east.orders/1", 4),
    ]
    # restore from it: the same positions are translated again, and the replica starts there
    restored = EnumeratorState.from_dict(state).with_positions(ctx.tracker.snapshot())
    again, ctx2, _ = make(service, restored)
    starts = assigned(ctx2)
    assert starts["west/east.orders/0"] == 11 and starts["west/east.orders/1"] == 4
    assert "east/orders/0" not in starts
    # the origin left the metadata before the restart: its connection is unknown, so it is not contacted
    assert RecordingTranslator.made[-1].calls[0][1] is False
    assert again.snapshot_state(2)["replicas"]["pending"] == []
    assert [h["to_offset"] for h in again.status()["handovers"]] == [11, 4]


def test_replica_state_round_trip_and_older_states() -> None:
    state = ReplicaState(
        pending=(),
        done=(Translation("east/orders/0", "west/east.orders/0", 5, 4, "conservative", 1, "sync at 3"),),
        auto_failed=frozenset({"east"}),
    )
    assert ReplicaState.from_dict(state.to_dict()) == state
    assert ReplicaState.from_dict(None) == ReplicaState() and not ReplicaState()
    v1_without = {"version": 1, "splits": [], "finished": [], "removed": [], "seen_topics": {}}
    assert EnumeratorState.from_dict(v1_without).replicas is None
    assert "replicas" not in EnumeratorState.from_dict(v1_without).to_dict()


# ------------------------------------------------------------------------------------------- the fence


def _msg(partition: int, offset: int, ts: int) -> Any:
    return Message(topic="orders", partition=partition, offset=offset, value=b"v", timestamp=(1, ts))


def test_records_fetched_before_the_fence_are_never_handed_out_after_it() -> None:
    tracker = PositionTracker()
    tracker.watch(["east/orders/0"])
    handoff = Handoff(4)
    first = [_msg(0, 0, 100), _msg(0, 1, 101), _msg(1, 0, 200)]
    second = [_msg(0, 2, 102), _msg(1, 1, 201)]
    for messages in (first, second):
        assert handoff.put(RecordBatch("east", messages, part_positions("east", messages)), lambda: False)
    delivery = Delivery(handoff, RecordMaker(None), tracker)
    got = delivery.records(0.1, 3, lambda: True)
    assert [(r.partition, r.offset) for r in got] == [(0, 0), (0, 1), (1, 0)]
    assert tracker.fence(["east/orders/0"]) == {"east/orders/0": (2, 101)}
    rest = delivery.records(0.1, 10, lambda: True)
    assert [(r.partition, r.offset) for r in rest] == [(1, 1)]  # east/orders/0@2 was fenced
    assert tracker.get(["east/orders/0", "east/orders/1"]) == {"east/orders/0": 2, "east/orders/1": 2}
    tracker.unfence(["east/orders/0"])
    assert tracker.advance({"east/orders/0": 3}) == frozenset()


def test_poll_batches_drops_fenced_messages_too() -> None:
    tracker = PositionTracker()
    handoff = Handoff(2)
    messages = [_msg(0, 0, 1), _msg(1, 0, 1)]
    assert handoff.put(RecordBatch("east", messages, part_positions("east", messages)), lambda: False)
    tracker.fence(["east/orders/0"])
    [batch] = Delivery(handoff, RecordMaker(None), tracker).batches(0.1, 10, lambda: True)
    assert [(m.partition(), m.offset()) for m in batch.messages] == [(1, 0)]


def test_last_returned_timestamps_survive_a_restore_for_the_timestamp_translation() -> None:
    RecordingTranslator.made.clear()
    service = InMemoryMetadataService(streams(east("orders"), west("orders", "east.orders")))
    enumerator, ctx, _ = make(service)
    ctx.tracker.advance({"east/orders/0": 8}, {"east/orders/0": 4242})
    state = enumerator.snapshot_state(1)
    assert state["replicas"]["last_times"] == {"east/orders/0": 4242}
    restored = EnumeratorState.from_dict(state).with_positions(ctx.tracker.snapshot())
    fresh = FencingContext()
    fresh.tracker = PositionTracker(ctx.tracker.snapshot())  # as a restored stream's tracker
    again, _ctx2, _ = make(service, restored, ctx=fresh)
    service.set_streams(streams(west("orders", "east.orders")))
    again.refresh()
    asks = RecordingTranslator.made[-1].calls[0][0]
    assert asks[0][0] == OriginPosition("east/orders/0", 8, 4242)


def test_the_for_loop_skips_fenced_records_of_batches_taken_after_the_fence() -> None:
    tracker = PositionTracker()
    handoff = Handoff(4)
    for messages in ([_msg(0, 0, 1), _msg(1, 0, 1)], [_msg(0, 1, 2), _msg(1, 1, 2)]):
        assert handoff.put(RecordBatch("east", messages, part_positions("east", messages)), lambda: False)
    delivery = Delivery(handoff, RecordMaker(None), tracker)
    first = delivery.iterate(0.1, lambda: True)
    assert first is not None
    assert [(r.partition, r.offset) for r in first] == [(0, 0), (1, 0)]
    delivery.settle()
    assert tracker.fence(["east/orders/0"]) == {"east/orders/0": (1, None)}
    second = delivery.iterate(0.1, lambda: True)
    assert second is not None
    assert [(r.partition, r.offset) for r in second] == [(1, 1)]
    delivery.settle()
    assert tracker.get(["east/orders/0", "east/orders/1"]) == {"east/orders/0": 1, "east/orders/1": 2}


def test_the_translator_is_made_again_once_its_origin_becomes_known() -> None:
    RecordingTranslator.made.clear()
    service = InMemoryMetadataService(streams(west("orders", "east.orders")))
    enumerator, _ctx, _ = make(service)
    [first] = RecordingTranslator.made
    assert first.origin.bootstrap_servers == ""  # not in the metadata: unknown
    service.set_streams(streams(east("orders"), west("orders", "east.orders")))
    enumerator.refresh()
    assert first.closed and RecordingTranslator.made[-1].origin.bootstrap_servers == "east:9092"
    service.set_streams(streams(west("orders", "east.orders")))  # the origin leaves: same translator
    enumerator.refresh()
    assert len(RecordingTranslator.made) == 2 and not RecordingTranslator.made[-1].closed
