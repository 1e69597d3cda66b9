"""The source (a thin factory) and its builder (the one way in, validating in one place)."""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from multicluster_source.enumerator._multicluster import EnumeratorSettings, MultiClusterEnumerator
from multicluster_source.enumerator._offsets import OffsetsInitializer
from multicluster_source.enumerator._standby import (
    DefaultRackAwareStandbyAssignor,
    RackAwareStandbyAssignor,
    load_assignor,
)
from multicluster_source.enumerator._state import EnumeratorState
from multicluster_source.exceptions import ConfigurationError
from multicluster_source.framework._events import SourceEvent
from multicluster_source.framework._interfaces import ReaderContext, SplitEnumeratorContext
from multicluster_source.framework._options import SourceOptions, split_properties, validate_client_properties
from multicluster_source.framework._records import MessageBatch, RawRecord, SourceRecord
from multicluster_source.metadata._model import TOPIC_RE, KafkaMetadataService
from multicluster_source.metadata._subscriber import (
    KafkaStreamSubscriber,
    StreamPatternSubscriber,
    StreamSetSubscriber,
)
from multicluster_source.ops._tracking import (
    InMemoryTopicStatusStore,
    KafkaTopicStatusStore,
    LocalTopicStatusStore,
    TopicStatusStore,
    TopicTracker,
)
from multicluster_source.reader._fetcher import FetchSettings
from multicluster_source.reader._multicluster import MultiClusterReader, ReaderSettings
from multicluster_source.runtime._factory import validate_reader_racks
from multicluster_source.runtime._stream import SourceStream

if TYPE_CHECKING:
    from multicluster_source.runtime._control import RunResult

_log = logging.getLogger("multicluster_source")
_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")

__all__ = ["MultiClusterKafkaSource", "MultiClusterKafkaSourceBuilder"]

Deserializer = Callable[[RawRecord], Any]


RackIdSupplier = Callable[[str, "str | None"], "str | None"]


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
    ) -> None:
        self.name = name
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
    ) -> SourceStream:
        """Start reading with ``parallelism`` readers; restores from the newest checkpoint in
        ``checkpoint_dir``. Raises :class:`MetadataError` when no good metadata can be read at start.

        ``admin_address`` (``"127.0.0.1:0"`` picks a free port) starts the admin HTTP server
        (``SourceStream.admin_url``); an address that is not loopback needs ``admin_token``, a bearer token
        every request but ``/health`` must carry."""
        if not isinstance(parallelism, int) or parallelism < 1:
            raise ConfigurationError(f"open(parallelism=...): must be an int >= 1, got {parallelism!r}")
        if checkpoint_interval is not None:
            if checkpoint_dir is None:
                raise ConfigurationError("open(checkpoint_interval=...) needs checkpoint_dir")
            if checkpoint_interval <= 0:
                raise ConfigurationError(
                    f"open(checkpoint_interval=...): must be > 0 seconds, got {checkpoint_interval!r}"
                )
        racks = validate_reader_racks(reader_racks, parallelism)
        if self.options.num_standby_replicas > 0 and len(set(racks.values())) < 2:
            _log.warning(
                "source=%s: num.standby.replicas=%d but readers are not spread over two racks or more; "
                "standbys share their active's rack",
                self.name,
                self.options.num_standby_replicas,
            )
        return SourceStream(
            self,
            parallelism=parallelism,
            checkpoint_dir=checkpoint_dir,
            checkpoint_interval=checkpoint_interval,
            registry=registry,
            admin_address=admin_address,
            admin_token=admin_token,
            reader_racks=racks,
        )

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
            mode=opts.enumerator_mode,
            metrics=metrics,
            debounce_s=opts.metadata_change_debounce_ms / 1000.0,
            num_standby=opts.num_standby_replicas,
            standby_assignor=self.standby_assignor,
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
            on_topic_read=on_topic_read,
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
        **runtime_options: Any,
    ) -> RunResult:
        """Push API: call ``handler(records)`` inside each of ``parallelism`` readers' workers with its
        batches (``batches=True``: ``handler(batch)`` with each :class:`MessageBatch` of the client's own
        messages, no record built, no deserializer applied); block until a bounded source is read to its
        end and handled, or until stopped (``control=RunControl()`` then ``control.stop()``, or
        ``stop_event=threading.Event()``); raise the source's failure. ``runtime``: ``"threads"``,
        ``"processes"`` (one worker process per reader) or ``"ray"`` (readers as Ray actors). Checkpoints
        cover exactly what the handlers returned from. See the README section "Scaling out: runtimes"
        for the options of each runtime."""
        from multicluster_source.runtime._push import run_source

        return run_source(
            self,
            handler,
            parallelism,
            runtime=runtime,
            checkpoint_dir=checkpoint_dir,
            checkpoint_interval=checkpoint_interval,
            registry=registry,
            batches=batches,
            **runtime_options,
        )


class MultiClusterKafkaSourceBuilder:
    """Builds a :class:`MultiClusterKafkaSource`; ``build()`` validates everything and names what is wrong."""

    def __init__(self) -> None:
        self._service: KafkaMetadataService | None = None
        self._subscriber: KafkaStreamSubscriber | None = None
        self._subscriber_setter: str | None = None
        self._group_id: str | None = None
        self._deserializer: Deserializer | None = None
        self._starting = OffsetsInitializer.earliest()
        self._stopping: OffsetsInitializer | None = None
        self._properties: dict[str, str] = {}
        self._client_id_prefix: str | None = None
        self._name: str | None = None
        self._topic_store: TopicStatusStore | None = None
        self._rack_id_supplier: RackIdSupplier | None = None
        self._standby_assignor: RackAwareStandbyAssignor | None = None
        self._topic_store_setter: str | None = None

    def set_rack_id_supplier(self, supplier: RackIdSupplier) -> MultiClusterKafkaSourceBuilder:
        """``supplier(cluster_id, reader_rack) -> str | None``: the ``client.rack`` a reader's consumer of a
        cluster announces (rack names differ between clusters); default: the reader's own rack. Set only
        when non-empty, and a cluster's own ``client.rack`` property wins."""
        if not callable(supplier):
            raise ConfigurationError("set_rack_id_supplier(): needs a callable(cluster_id, reader_rack)")
        self._rack_id_supplier = supplier
        return self

    def set_standby_assignor(self, assignor: RackAwareStandbyAssignor) -> MultiClusterKafkaSourceBuilder:
        """Places standby readers (``num.standby.replicas``); default: DefaultRackAwareStandbyAssignor."""
        if not callable(getattr(assignor, "assign_standbys", None)):
            raise ConfigurationError("set_standby_assignor(): needs an object with assign_standbys()")
        self._standby_assignor = assignor
        return self

    def set_kafka_metadata_service(self, service: KafkaMetadataService) -> MultiClusterKafkaSourceBuilder:
        """Where stream metadata comes from."""
        self._service = service
        return self

    def _set_subscriber(
        self, setter: str, subscriber: KafkaStreamSubscriber
    ) -> MultiClusterKafkaSourceBuilder:
        if self._subscriber_setter is not None and self._subscriber_setter != setter:
            raise ConfigurationError(
                f"{setter}() conflicts with {self._subscriber_setter}(): a source has one stream subscriber"
            )
        self._subscriber = subscriber
        self._subscriber_setter = setter
        return self

    def set_stream_ids(self, stream_ids: Iterable[str]) -> MultiClusterKafkaSourceBuilder:
        """Subscribe to these stream ids."""
        ids = [stream_ids] if isinstance(stream_ids, str) else list(stream_ids)
        if not ids or not all(isinstance(i, str) and i for i in ids):
            raise ConfigurationError(f"set_stream_ids(): needs non-empty strings, got {ids!r}")
        return self._set_subscriber("set_stream_ids", StreamSetSubscriber(ids))

    def set_stream_pattern(self, pattern: str | re.Pattern[str]) -> MultiClusterKafkaSourceBuilder:
        """Subscribe to every stream whose id matches ``pattern`` (``re.search``)."""
        try:
            subscriber = StreamPatternSubscriber(pattern)
        except re.error as exc:
            raise ConfigurationError(f"set_stream_pattern(): invalid regular expression: {exc}") from exc
        return self._set_subscriber("set_stream_pattern", subscriber)

    def set_kafka_stream_subscriber(
        self, subscriber: KafkaStreamSubscriber
    ) -> MultiClusterKafkaSourceBuilder:
        """A custom subscriber."""
        return self._set_subscriber("set_kafka_stream_subscriber", subscriber)

    def set_group_id(self, group_id: str) -> MultiClusterKafkaSourceBuilder:
        """Consumer group id used on every cluster; offsets are committed under it on checkpoints."""
        if not isinstance(group_id, str) or not group_id:
            raise ConfigurationError(f"set_group_id(): needs a non-empty string, got {group_id!r}")
        self._group_id = group_id
        return self

    def set_deserializer(self, deserializer: Deserializer) -> MultiClusterKafkaSourceBuilder:
        """Any ``callable(RawRecord) -> value``; default: the value bytes."""
        if not callable(deserializer):
            raise ConfigurationError("set_deserializer(): needs a callable(RawRecord) -> value")
        self._deserializer = deserializer
        return self

    def set_starting_offsets(self, initializer: OffsetsInitializer) -> MultiClusterKafkaSourceBuilder:
        """Where reading starts on first sight of a partition (default: earliest)."""
        if not isinstance(initializer, OffsetsInitializer):
            raise ConfigurationError("set_starting_offsets(): needs an OffsetsInitializer")
        self._starting = initializer
        return self

    def set_bounded(self, initializer: OffsetsInitializer) -> MultiClusterKafkaSourceBuilder:
        """Batch mode: the stream finishes at these offsets; metadata and partitions are read once."""
        if not isinstance(initializer, OffsetsInitializer):
            raise ConfigurationError("set_bounded(): needs an OffsetsInitializer")
        self._stopping = initializer
        return self

    def set_properties(self, properties: Mapping[str, str]) -> MultiClusterKafkaSourceBuilder:
        """Client properties for every cluster, and source options (a cluster's own properties win)."""
        for key, value in properties.items():
            self.set_property(key, value)
        return self

    def set_property(self, key: str, value: str) -> MultiClusterKafkaSourceBuilder:
        """One client property or source option."""
        if not isinstance(key, str) or not key:
            raise ConfigurationError(f"set_property(): key must be a non-empty string, got {key!r}")
        if isinstance(value, bool):
            value = "true" if value else "false"
        self._properties[key] = str(value)
        return self

    def set_client_id_prefix(self, prefix: str) -> MultiClusterKafkaSourceBuilder:
        """Prefix of every client id (``<prefix>-<cluster>-reader-<i>``)."""
        if not isinstance(prefix, str) or not prefix:
            raise ConfigurationError(f"set_client_id_prefix(): needs a non-empty string, got {prefix!r}")
        self._client_id_prefix = prefix
        return self

    def set_topic_tracking_store(self, store: TopicStatusStore) -> MultiClusterKafkaSourceBuilder:
        """Where topic tracking records which (cluster, topic) pairs the source read (KIP-558).

        Default: a file ``topic-status.jsonl`` in ``checkpoint_dir``, or memory without one. Any object with
        ``describe``, ``load``, ``append`` and ``close`` (the ``TopicStatusStore`` protocol) works.
        """
        if not isinstance(store, TopicStatusStore):
            raise ConfigurationError(
                "set_topic_tracking_store(): needs a TopicStatusStore (describe, load, append, close)"
            )
        return self._set_topic_store("set_topic_tracking_store", store)

    def set_topic_tracking_topic(
        self, bootstrap_servers: str, topic: str, client_properties: Mapping[str, str] | None = None
    ) -> MultiClusterKafkaSourceBuilder:
        """Record topic tracking in a compacted ``topic`` on the cluster at ``bootstrap_servers`` (created
        with one partition if absent); ``client_properties`` (security, ...) may use placeholders."""
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
            raise ConfigurationError("set_topic_tracking_topic(): bootstrap_servers must not be empty")
        if not isinstance(topic, str) or not TOPIC_RE.match(topic) or topic in (".", ".."):
            raise ConfigurationError(f"set_topic_tracking_topic(): {topic!r} is not a valid topic name")
        props = dict(client_properties or {})
        validate_client_properties(props, where="set_topic_tracking_topic")
        store = KafkaTopicStatusStore(bootstrap_servers.strip(), topic, props)
        return self._set_topic_store("set_topic_tracking_topic", store)

    def _set_topic_store(self, setter: str, store: TopicStatusStore) -> MultiClusterKafkaSourceBuilder:
        if self._topic_store_setter is not None and self._topic_store_setter != setter:
            raise ConfigurationError(
                f"{setter}() conflicts with {self._topic_store_setter}(): a source has one topic status store"
            )
        self._topic_store = store
        self._topic_store_setter = setter
        return self

    def set_name(self, name: str) -> MultiClusterKafkaSourceBuilder:
        """Names the source in REST paths, logs, metrics and checkpoints ([A-Za-z0-9._-])."""
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ConfigurationError(f"set_name(): {name!r} must match [A-Za-z0-9._-]{{1,200}}")
        self._name = name
        return self

    def build(self) -> MultiClusterKafkaSource:
        """Validate everything and make the source."""
        if self._service is None:
            raise ConfigurationError("set_kafka_metadata_service() is required")
        if self._subscriber is None:
            raise ConfigurationError(
                "a stream subscriber is required: set_stream_ids(), set_stream_pattern() or "
                "set_kafka_stream_subscriber()"
            )
        source_props, client_props = split_properties(self._properties)
        options = SourceOptions.from_properties(source_props)
        if "group.id" in client_props:
            raise ConfigurationError("property 'group.id': use set_group_id() instead")
        validate_client_properties(client_props, where="set_properties")
        if self._stopping is not None and self._stopping.kind == "committed" and self._group_id is None:
            raise ConfigurationError("set_bounded(OffsetsInitializer.committed()) needs set_group_id()")
        if self._starting.kind == "committed" and self._group_id is None:
            raise ConfigurationError(
                "set_starting_offsets(OffsetsInitializer.committed()) needs set_group_id()"
            )
        name = self._name or self._group_id or f"source-{uuid.uuid4().hex[:8]}"
        if not _NAME_RE.match(name):
            name = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:200]
        return MultiClusterKafkaSource(
            name=name,
            metadata_service=self._service,
            subscriber=self._subscriber,
            group_id=self._group_id,
            deserializer=self._deserializer,
            starting=self._starting,
            stopping=self._stopping,
            options=options,
            client_properties=client_props,
            client_id_prefix=self._client_id_prefix or name,
            topic_status_store=self._topic_store,
            rack_id_supplier=self._rack_id_supplier,
            standby_assignor=self._standby(options),
        )

    def _standby(self, options: SourceOptions) -> RackAwareStandbyAssignor | None:
        if self._standby_assignor is not None:
            if options.standby_assignor:
                raise ConfigurationError(
                    "set_standby_assignor() conflicts with the property 'standby.assignor': set one"
                )
            return self._standby_assignor
        if options.standby_assignor:
            return load_assignor(options.standby_assignor)
        if options.num_standby_replicas > 0:
            return DefaultRackAwareStandbyAssignor(options.num_standby_replicas)
        return None
