"""The builder's setters and checks: everything a source is made of, validated in one place.

:class:`SourceBuilderBase` collects the parts of a source and checks each as it is set; its
:meth:`~SourceBuilderBase._source_arguments` checks them together and returns the source's constructor
arguments. The public ``MultiClusterKafkaSourceBuilder`` (in :mod:`multicluster_source._source`) adds
``build()``, which makes the source from them: this module never needs the source class, so the source's
``builder()`` and the builder's ``build()`` import no circle.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Self, TypedDict

from multicluster_source.enumerator._offsets import OffsetsInitializer
from multicluster_source.enumerator._standby import (
    DefaultRackAwareStandbyAssignor,
    RackAwareStandbyAssignor,
    load_assignor,
)
from multicluster_source.exceptions import ConfigurationError
from multicluster_source.framework._clientprops import validate_client_properties
from multicluster_source.framework._javaprops import translate_java_properties
from multicluster_source.framework._options import SourceOptions, split_properties
from multicluster_source.framework._records import Deserializer
from multicluster_source.framework._watermarks import WatermarkStrategy
from multicluster_source.metadata._model import TOPIC_RE, KafkaMetadataService
from multicluster_source.metadata._subscriber import (
    KafkaStreamSubscriber,
    StreamPatternSubscriber,
    StreamSetSubscriber,
)
from multicluster_source.ops._topic_stores import KafkaTopicStatusStore, TopicStatusStore

__all__ = ["Deserializer", "RackIdSupplier", "SourceArguments", "SourceBuilderBase"]

_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


RackIdSupplier = Callable[[str, "str | None"], "str | None"]


class SourceArguments(TypedDict):
    """The keyword arguments of ``MultiClusterKafkaSource(...)``, as the builder validated them."""

    name: str
    metadata_service: KafkaMetadataService
    subscriber: KafkaStreamSubscriber
    group_id: str | None
    deserializer: Deserializer | None
    starting: OffsetsInitializer
    stopping: OffsetsInitializer | None
    options: SourceOptions
    client_properties: Mapping[str, str]
    client_id_prefix: str
    topic_status_store: TopicStatusStore | None
    rack_id_supplier: RackIdSupplier | None
    standby_assignor: RackAwareStandbyAssignor | None
    watermark_strategy: WatermarkStrategy


class SourceBuilderBase:
    """The setters and checks of :class:`MultiClusterKafkaSourceBuilder`, whose ``build()`` (in the source
    module) makes the source from :meth:`_source_arguments`."""

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
        self._watermark_strategy = WatermarkStrategy.no_watermarks()

    def set_watermark_strategy(self, strategy: WatermarkStrategy) -> Self:
        """Event time and watermarks (``stream.watermark``); default ``WatermarkStrategy.no_watermarks()``."""
        if not isinstance(strategy, WatermarkStrategy):
            raise ConfigurationError(
                f"set_watermark_strategy(): needs a WatermarkStrategy, got {type(strategy).__name__}"
            )
        self._watermark_strategy = strategy
        return self

    def set_rack_id_supplier(self, supplier: RackIdSupplier) -> Self:
        """``supplier(cluster_id, reader_rack) -> str | None``: the ``client.rack`` a reader's consumer of a
        cluster announces (rack names differ between clusters); default: the reader's own rack. Set only
        when non-empty, and a cluster's own ``client.rack`` property wins."""
        if not callable(supplier):
            raise ConfigurationError("set_rack_id_supplier(): needs a callable(cluster_id, reader_rack)")
        self._rack_id_supplier = supplier
        return self

    def set_standby_assignor(self, assignor: RackAwareStandbyAssignor) -> Self:
        """Places standby readers (``num.standby.replicas``); default: DefaultRackAwareStandbyAssignor."""
        if not callable(getattr(assignor, "assign_standbys", None)):
            raise ConfigurationError("set_standby_assignor(): needs an object with assign_standbys()")
        self._standby_assignor = assignor
        return self

    def set_kafka_metadata_service(self, service: KafkaMetadataService) -> Self:
        """Where stream metadata comes from."""
        self._service = service
        return self

    def _set_subscriber(self, setter: str, subscriber: KafkaStreamSubscriber) -> Self:
        if self._subscriber_setter is not None and self._subscriber_setter != setter:
            raise ConfigurationError(
                f"{setter}() conflicts with {self._subscriber_setter}(): a source has one stream subscriber"
            )
        self._subscriber = subscriber
        self._subscriber_setter = setter
        return self

    def set_stream_ids(self, stream_ids: Iterable[str]) -> Self:
        """Subscribe to these stream ids."""
        ids = [stream_ids] if isinstance(stream_ids, str) else list(stream_ids)
        if not ids or not all(isinstance(i, str) and i for i in ids):
            raise ConfigurationError(f"set_stream_ids(): needs non-empty strings, got {ids!r}")
        return self._set_subscriber("set_stream_ids", StreamSetSubscriber(ids))

    def set_stream_pattern(self, pattern: str | re.Pattern[str]) -> Self:
        """Subscribe to every stream whose id matches ``pattern`` (``re.search``)."""
        try:
            subscriber = StreamPatternSubscriber(pattern)
        except re.error as exc:
            raise ConfigurationError(f"set_stream_pattern(): invalid regular expression: {exc}") from exc
        return self._set_subscriber("set_stream_pattern", subscriber)

    def set_kafka_stream_subscriber(self, subscriber: KafkaStreamSubscriber) -> Self:
        """A custom subscriber."""
        return self._set_subscriber("set_kafka_stream_subscriber", subscriber)

    def set_group_id(self, group_id: str) -> Self:
        """Consumer group id used on every cluster; offsets are committed under it on checkpoints."""
        if not isinstance(group_id, str) or not group_id:
            raise ConfigurationError(f"set_group_id(): needs a non-empty string, got {group_id!r}")
        self._group_id = group_id
        return self

    def set_deserializer(self, deserializer: Deserializer) -> Self:
        """Any ``callable(RawRecord) -> value``; default: the value bytes."""
        if not callable(deserializer):
            raise ConfigurationError("set_deserializer(): needs a callable(RawRecord) -> value")
        self._deserializer = deserializer
        return self

    def set_starting_offsets(self, initializer: OffsetsInitializer) -> Self:
        """Where reading starts on first sight of a partition (default: earliest)."""
        if not isinstance(initializer, OffsetsInitializer):
            raise ConfigurationError("set_starting_offsets(): needs an OffsetsInitializer")
        self._starting = initializer
        return self

    def set_bounded(self, initializer: OffsetsInitializer) -> Self:
        """Batch mode: the stream finishes at these offsets; metadata and partitions are read once."""
        if not isinstance(initializer, OffsetsInitializer):
            raise ConfigurationError("set_bounded(): needs an OffsetsInitializer")
        self._stopping = initializer
        return self

    def set_properties(self, properties: Mapping[str, str]) -> Self:
        """Client properties for every cluster, and source options (a cluster's own properties win)."""
        for key, value in properties.items():
            self.set_property(key, value)
        return self

    def set_property(self, key: str, value: str) -> Self:
        """One client property or source option."""
        if not isinstance(key, str) or not key:
            raise ConfigurationError(f"set_property(): key must be a non-empty string, got {key!r}")
        if isinstance(value, bool):
            value = "true" if value else "false"
        self._properties[key] = str(value)
        return self

    def set_client_id_prefix(self, prefix: str) -> Self:
        """Prefix of every client id (``<prefix>-<cluster>-reader-<i>``)."""
        if not isinstance(prefix, str) or not prefix:
            raise ConfigurationError(f"set_client_id_prefix(): needs a non-empty string, got {prefix!r}")
        self._client_id_prefix = prefix
        return self

    def set_topic_tracking_store(self, store: TopicStatusStore) -> Self:
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
    ) -> Self:
        """Record topic tracking in a compacted ``topic`` on the cluster at ``bootstrap_servers`` (created
        with one partition if absent); ``client_properties`` (security, ...) may use placeholders."""
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
            raise ConfigurationError("set_topic_tracking_topic(): bootstrap_servers must not be empty")
        if not isinstance(topic, str) or not TOPIC_RE.match(topic) or topic in (".", ".."):
            raise ConfigurationError(f"set_topic_tracking_topic(): {topic!r} is not a valid topic name")
        props = translate_java_properties(client_properties or {}, where="set_topic_tracking_topic")
        validate_client_properties(props, where="set_topic_tracking_topic")
        store = KafkaTopicStatusStore(bootstrap_servers.strip(), topic, props)
        return self._set_topic_store("set_topic_tracking_topic", store)

    def _set_topic_store(self, setter: str, store: TopicStatusStore) -> Self:
        if self._topic_store_setter is not None and self._topic_store_setter != setter:
            raise ConfigurationError(
                f"{setter}() conflicts with {self._topic_store_setter}(): a source has one topic status store"
            )
        self._topic_store = store
        self._topic_store_setter = setter
        return self

    def set_name(self, name: str) -> Self:
        """Names the source in REST paths, logs, metrics and checkpoints ([A-Za-z0-9._-])."""
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ConfigurationError(f"set_name(): {name!r} must match [A-Za-z0-9._-]{{1,200}}")
        self._name = name
        return self

    def _source_arguments(self) -> SourceArguments:
        """Validate everything; the source's constructor arguments, or a ConfigurationError naming what is
        wrong."""
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
        client_props = translate_java_properties(client_props, where="set_properties")
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
        return SourceArguments(
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
            watermark_strategy=self._watermark_strategy,
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
