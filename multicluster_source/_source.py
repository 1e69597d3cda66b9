"""The source (a thin factory) and its builder (the one way in, validating in one place).

The builder's setters and checks live in :mod:`multicluster_source._builder`; here
:class:`MultiClusterKafkaSourceBuilder` adds ``build()``, which makes the source.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from multicluster_source._builder import Deserializer, RackIdSupplier, SourceBuilderBase
from multicluster_source.enumerator._identity import ClusterIdentities
from multicluster_source.enumerator._multicluster import MultiClusterEnumerator
from multicluster_source.enumerator._offsets import OffsetsInitializer, handover_offsets
from multicluster_source.enumerator._settings import EnumeratorSettings
from multicluster_source.enumerator._standby import RackAwareStandbyAssignor
from multicluster_source.enumerator._state import EnumeratorState
from multicluster_source.exceptions import ConfigurationError
from multicluster_source.framework._events import SourceEvent
from multicluster_source.framework._interfaces import ReaderContext, SplitEnumeratorContext
from multicluster_source.framework._options import SourceOptions
from multicluster_source.framework._records import MessageBatch, SourceRecord
from multicluster_source.framework._watermarks import WatermarkStrategy, fetch_event_times
from multicluster_source.metadata._model import KafkaMetadataService
from multicluster_source.metadata._subscriber import KafkaStreamSubscriber
from multicluster_source.ops._topic_stores import (
    InMemoryTopicStatusStore,
    LocalTopicStatusStore,
    TopicStatusStore,
)
from multicluster_source.ops._tracking import TopicTracker
from multicluster_source.reader._multicluster import MultiClusterReader
from multicluster_source.reader._settings import FetchSettings, ReaderSettings
from multicluster_source.runtime.core._factory import validate_reader_racks
from multicluster_source.runtime.pull._async import AsyncSourceStream
from multicluster_source.runtime.pull._stream import SourceStream
from multicluster_source.sink._sink import ExactlyOnceKafkaSink
from multicluster_source.sink._transactions import TransactionalSink

if TYPE_CHECKING:
    from multicluster_source.runtime.push._control import RunResult

_log = logging.getLogger("multicluster_source")

__all__ = ["MultiClusterKafkaSource", "MultiClusterKafkaSourceBuilder"]


def default_rack_id(cluster_id: str, reader_rack: str | None) -> str | None:
    """The default rack-id supplier: every cluster's ``client.rack`` is the reader's own rack."""
    return reader_rack


def _ms_to_s(ms: int) -> float | None:
    return None if ms < 0 else ms / 1000.0


class MultiClusterKafkaSource:
    """Reads one logical stream from topics on many Kafka clusters, following metadata changes live.

    Build it with :meth:`builder`; run it with :meth:`open`::

        source = (MultiClusterKafkaSource.builder()
            .set_kafka_metadata_service(FileMetadataService("streams.yaml"))
            .set_stream_ids(["orders"])
            .set_group_id("billing")
            .build())
        with source.open(parallelism=2, checkpoint_dir="ckpt/") as stream:
            for record in stream:
                handle(record)
    """

    def __init__(
        self,
        *,
        name: str,
        metadata_service: KafkaMetadataService,
        subscriber: KafkaStreamSubscriber,
        group_id: str | None,
        deserializer: Deserializer | None,
        starting: OffsetsInitializer,
        stopping: OffsetsInitializer | None,
        options: SourceOptions,
        client_properties: Mapping[str, str],
        client_id_prefix: str,
        topic_status_store: TopicStatusStore | None = None,
        rack_id_supplier: RackIdSupplier | None = None,
        standby_assignor: RackAwareStandbyAssignor | None = None,
        watermark_strategy: WatermarkStrategy | None = None,
    ) -> None:
        self.name = name
        self.watermark_strategy = watermark_strategy or WatermarkStrategy.no_watermarks()
        """Event time and watermarks (``set_watermark_strategy``)."""
        self.rack_id_supplier: RackIdSupplier = rack_id_supplier or default_rack_id
        """``(cluster_id, reader_rack) -> client.rack`` for each reader's consumer of each cluster."""
        self.standby_assignor = standby_assignor
        """Places standbys when ``num.standby.replicas`` > 0 (default: DefaultRackAwareStandbyAssignor)."""
        self.metadata_service = metadata_service
        self.subscriber = subscriber
        self.group_id = group_id
        self.deserializer = deserializer
        self.starting = starting
        self.stopping = stopping
        self.options = options
        self.client_properties = dict(client_properties)
        self.client_id_prefix = client_id_prefix
        self.identities: ClusterIdentities | None = None
        """Set on the copy an exactly-once sink opens: the Kafka cluster ids the per-cluster enumerators
        learn and check (see :mod:`multicluster_source.enumerator._identity`)."""
        self.topic_status_store = topic_status_store
        """The store set on the builder; None: the default (see ``create_topic_tracker``)."""

    @staticmethod
    def builder() -> MultiClusterKafkaSourceBuilder:
        """A new builder."""
        return MultiClusterKafkaSourceBuilder()

    @property
    def bounded(self) -> bool:
        """Whether the source stops at stopping offsets (``set_bounded``)."""
        return self.stopping is not None

    def open(
        self,
        parallelism: int = 1,
        *,
        checkpoint_dir: str | None = None,
        checkpoint_interval: float | None = None,
        reader_racks: Mapping[int, str] | Sequence[str | None] | None = None,
        admin_address: str | None = None,
        registry: Any = None,
        admin_token: str | None = None,
        sink: ExactlyOnceKafkaSink | None = None,
    ) -> SourceStream:
        """Start reading with ``parallelism`` readers; restores from the newest checkpoint in
        ``checkpoint_dir``. Raises :class:`MetadataError` when no good metadata can be read at start.

        ``admin_address`` (``"127.0.0.1:0"`` picks a free port) starts the admin HTTP server
        (``SourceStream.admin_url``); an address that is not loopback needs ``admin_token``, a bearer token
        every request but ``/health`` must carry.

        ``sink`` (an :class:`ExactlyOnceKafkaSink`) makes the job's results exactly once: what
        ``stream.produce(...)`` sends commits in one transaction with the positions of the records returned,
        every ``checkpoint_interval`` seconds, at ``checkpoint()`` and at ``close()``; the stream starts
        from the positions the sink committed (they win over ``checkpoint_dir``, which is optional then).
        See docs/guides/exactly-once.md."""
        racks = self._check_open(parallelism, checkpoint_dir, checkpoint_interval, reader_racks, sink)
        if self.options.num_standby_replicas > 0 and len(set(racks.values())) < 2:
            _log.warning(
                "source=%s: num.standby.replicas=%d but readers are not spread over two racks or more; "
                "standbys share their active's rack",
                self.name,
                self.options.num_standby_replicas,
            )
        session = None if sink is None else TransactionalSink(sink, self.name)
        if session is not None:
            session.open(checkpoint_interval)  # fences an earlier instance, reads the committed positions
        try:
            return SourceStream(
                self if session is None else self._with_sink_positions(session),
                parallelism=parallelism,
                checkpoint_dir=checkpoint_dir,
                checkpoint_interval=checkpoint_interval,
                registry=registry,
                admin_address=admin_address,
                admin_token=admin_token,
                reader_racks=racks,
                sink=session,
            )
        except BaseException:
            if session is not None:
                session.close()
            raise

    def _with_sink_positions(self, session: TransactionalSink) -> MultiClusterKafkaSource:
        """A copy of this source that starts the splits the sink holds at their committed positions (the
        others as this source would) and checks that each cluster id is still the Kafka cluster those
        positions were written for."""
        started = copy.copy(self)
        if session.committed:
            started.starting = handover_offsets(session.committed, self.starting, gap_policy="warn")
        started.identities = ClusterIdentities(
            session.expected_identities(), what=f"positions in {session.sink.positions_topic}"
        )
        return started

    def open_async(
        self,
        parallelism: int = 1,
        *,
        checkpoint_dir: str | None = None,
        checkpoint_interval: float | None = None,
        reader_racks: Mapping[int, str] | Sequence[str | None] | None = None,
        admin_address: str | None = None,
        registry: Any = None,
        admin_token: str | None = None,
        sink: ExactlyOnceKafkaSink | None = None,
    ) -> AsyncSourceStream:
        """:meth:`open` for asyncio code (same arguments): ``async with source.open_async(...) as stream``
        (or ``stream = await source.open_async(...)``) starts the source without blocking the event loop and
        gives an :class:`AsyncSourceStream`. Bad arguments raise :class:`ConfigurationError` here, at once."""
        self._check_open(parallelism, checkpoint_dir, checkpoint_interval, reader_racks, sink)
        if sink is not None:
            sink.check_interval(checkpoint_interval)

        def opener() -> SourceStream:
            return self.open(
                parallelism,
                checkpoint_dir=checkpoint_dir,
                reader_racks=reader_racks,
                admin_address=admin_address,
                registry=registry,
                admin_token=admin_token,
                sink=sink,  # its periodic commits are the asyncio stream's, in the executor (not in poll)
            )

        return AsyncSourceStream(opener, checkpoint_interval, sink=sink is not None)

    def _check_open(
        self,
        parallelism: int,
        checkpoint_dir: str | None,
        checkpoint_interval: float | None,
        reader_racks: Mapping[int, str] | Sequence[str | None] | None,
        sink: ExactlyOnceKafkaSink | None = None,
    ) -> dict[int, str | None]:
        if not isinstance(parallelism, int) or parallelism < 1:
            raise ConfigurationError(f"open(parallelism=...): must be an int >= 1, got {parallelism!r}")
        if sink is not None and not isinstance(sink, ExactlyOnceKafkaSink):
            raise ConfigurationError(f"open(sink=...): an ExactlyOnceKafkaSink, got {type(sink).__name__}")
        if checkpoint_interval is not None:
            if checkpoint_dir is None and sink is None:
                raise ConfigurationError("open(checkpoint_interval=...) needs checkpoint_dir")
            if checkpoint_interval <= 0:
                raise ConfigurationError(
                    f"open(checkpoint_interval=...): must be > 0 seconds, got {checkpoint_interval!r}"
                )
        return validate_reader_racks(reader_racks, parallelism)

    # ---------------------------------------------------------------- factories used by the runtime

    def create_enumerator(
        self,
        context: SplitEnumeratorContext,
        restored: dict[str, Any] | None,
        positions: dict[str, int] | None,
        metrics: Any,
        subscriber: KafkaStreamSubscriber | None = None,
    ) -> MultiClusterEnumerator:
        """The multi-cluster enumerator, restored from a checkpoint's state when given (``subscriber``
        replaces the source's own, e.g. with a wrapper that records what it returned)."""
        opts = self.options
        state = None
        if restored is not None:
            state = EnumeratorState.from_dict(restored).with_positions(positions or {})
        settings = EnumeratorSettings(
            source_name=self.name,
            service=self.metadata_service,
            subscriber=subscriber or self.subscriber,
            group_id=self.group_id,
            starting=self.starting,
            stopping=self.stopping,
            client_properties=self.client_properties,
            client_id_prefix=self.client_id_prefix,
            metadata_interval_s=None
            if self.bounded
            else _ms_to_s(opts.stream_metadata_discovery_interval_ms),
            failure_threshold=opts.stream_metadata_discovery_failure_threshold,
            removed_retention_ms=opts.stream_metadata_removed_retention_ms,
            partition_discovery_interval_s=_ms_to_s(opts.partition_discovery_interval_ms),
            commit_offsets=opts.commits_offsets(self.group_id),
            commit_wait_s=opts.checkpoint_commit_wait_ms / 1000.0,
            mode=opts.enumerator_mode,
            metrics=metrics,
            debounce_s=opts.metadata_change_debounce_ms / 1000.0,
            num_standby=opts.num_standby_replicas,
            standby_assignor=self.standby_assignor,
            replica_sync_wait_s=opts.replica_sync_wait_ms / 1000.0,
            replica_failover_unreachable_ms=opts.replica_failover_unreachable_ms,
            identities=self.identities,
        )
        return MultiClusterEnumerator(context, settings, state)

    def create_reader(
        self,
        context: ReaderContext,
        metrics: Any,
        on_topic_read: Callable[[str, str, int], None] | None = None,
    ) -> MultiClusterReader:
        """A reader for the runtime slot ``context``; ``on_topic_read(cluster, topic, reader)`` is called
        from fetch threads after each batch handed on, once per topic in it (topic tracking)."""
        fetch = FetchSettings(
            source_name=self.name,
            reader_index=context.index,
            batch_max_records=self.options.reader_batch_max_records,
            metrics=metrics,
            stall_timeout_s=_ms_to_s(self.options.reader_stall_timeout_ms),
            on_topic_read=on_topic_read,
            event_times=fetch_event_times(self.watermark_strategy),
            watermark_bound_ms=self.watermark_strategy.out_of_orderness_ms,
            aligned=self.watermark_strategy.alignment is not None
            and fetch_event_times(self.watermark_strategy) is not None,
        )
        settings = ReaderSettings(
            group_id=self.group_id or f"{self.name}-no-group",
            client_properties=self.client_properties,
            client_id_prefix=self.client_id_prefix,
            bounded=self.bounded,
            fetch=fetch,
            rack=context.rack,
            rack_id_supplier=self.rack_id_supplier,
        )
        return MultiClusterReader(context, settings)

    def create_topic_tracker(self, checkpoint_dir: str | os.PathLike[str] | None) -> TopicTracker:
        """The topic tracker of one run: the store set on the builder, else a file
        ``<checkpoint_dir>/topic-status.jsonl``, else memory (then the history lives as long as the stream).
        """
        store = self.topic_status_store
        if store is None:
            if checkpoint_dir is not None:
                store = LocalTopicStatusStore(Path(checkpoint_dir) / "topic-status.jsonl")
            else:
                store = InMemoryTopicStatusStore()
        return TopicTracker(
            self.name,
            store,
            enabled=self.options.topic_tracking_enable,
            allow_reset=self.options.topic_tracking_allow_reset,
        )

    def handles(self, event: SourceEvent) -> bool:
        """Whether ``event`` is one of this source's events (for runtimes routing events)."""
        return isinstance(event, SourceEvent)

    def run(
        self,
        handler: Callable[[list[SourceRecord]], object] | Callable[[MessageBatch], object],
        parallelism: int = 1,
        *,
        runtime: str = "threads",
        checkpoint_dir: str | None = None,
        checkpoint_interval: float | None = None,
        registry: Any = None,
        batches: bool = False,
        sink: ExactlyOnceKafkaSink | None = None,
        **runtime_options: Any,
    ) -> RunResult:
        """Push API: call ``handler(records)`` inside each of ``parallelism`` readers' workers with its
        batches (``batches=True``: ``handler(batch)`` with each :class:`MessageBatch` of the client's own
        messages, no record built, no deserializer applied); block until a bounded source is read to its
        end and handled, or until stopped (``control=RunControl()`` then ``control.stop()``, or
        ``stop_event=threading.Event()``); raise the source's failure. ``runtime``: ``"threads"``,
        ``"processes"`` (one worker process per reader) or ``"ray"`` (readers as Ray actors). Checkpoints
        cover exactly what the handlers returned from. See the guide "Scale out with processes and Ray"
        (docs/guides/scale-out.md) for the options of each runtime.

        ``sink``: an :class:`ExactlyOnceKafkaSink`; the handler then returns what to produce (None, or an
        iterable of ``(topic, value)``, ``(topic, value, key)`` or mappings with ``topic``), and each worker
        commits it with its splits' positions in its own transactions (transactional id
        ``<transactional_id>-<reader index>``), every ``checkpoint_interval`` seconds (default 1): each
        input's results exactly once for ``read_committed`` readers (docs/guides/exactly-once.md)."""
        from multicluster_source.runtime.push._push import run_source

        return run_source(
            self,
            handler,
            parallelism,
            runtime=runtime,
            checkpoint_dir=checkpoint_dir,
            checkpoint_interval=checkpoint_interval,
            registry=registry,
            batches=batches,
            sink=sink,
            sink_positions=None if sink is None else self._with_sink_positions,
            **runtime_options,
        )


class MultiClusterKafkaSourceBuilder(SourceBuilderBase):
    """Builds a :class:`MultiClusterKafkaSource`; ``build()`` validates everything and names what is wrong."""

    def build(self) -> MultiClusterKafkaSource:
        """Validate everything and make the source."""
        return MultiClusterKafkaSource(**self._source_arguments())
