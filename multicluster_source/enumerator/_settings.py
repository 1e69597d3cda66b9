"""The multi-cluster enumerator's configuration, :class:`EnumeratorSettings` (the source builds it from its
options); every part of the enumerator reads it."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from multicluster_source.enumerator._committer import ConsumerFactory, default_consumer_factory
from multicluster_source.enumerator._kafka import AdminFactory, default_admin_factory
from multicluster_source.enumerator._offsets import OffsetsInitializer
from multicluster_source.enumerator._standby import RackAwareStandbyAssignor
from multicluster_source.metadata._model import KafkaMetadataService
from multicluster_source.metadata._subscriber import KafkaStreamSubscriber
from multicluster_source.replicas._model import Translator

TranslatorFactory = Callable[..., Translator]
"""``factory(replica_of, origin, replica, *, group_id, properties) -> Translator`` (a ``ReplicaOf`` and two
``ClusterMetadata``); ``origin.bootstrap_servers`` is empty when the origin's connection is unknown (a restart
after it left the metadata)."""


@dataclass(frozen=True)
class EnumeratorSettings:
    """The multi-cluster enumerator's configuration (built by the source from its options)."""

    source_name: str
    service: KafkaMetadataService
    subscriber: KafkaStreamSubscriber
    group_id: str | None
    starting: OffsetsInitializer
    stopping: OffsetsInitializer | None
    client_properties: Mapping[str, str]
    client_id_prefix: str
    metadata_interval_s: float | None
    """None: read metadata once (bounded, or ``stream-metadata-discovery-interval-ms=-1``)."""
    failure_threshold: int
    """Consecutive metadata failures before the source fails; -1 never."""
    removed_retention_ms: int
    partition_discovery_interval_s: float | None
    commit_offsets: bool
    mode: Literal["per_cluster", "global"]
    metrics: Any
    num_standby: int = 0
    standby_assignor: RackAwareStandbyAssignor | None = None
    debounce_s: float = 0.02
    """Delay between a change notification and the metadata read it triggers: notifications within it give
    one read. File and ConfigMap watchers settle a burst of events themselves (see
    :mod:`multicluster_source.metadata._watch`), so this only joins changes made in quick succession."""
    admin_factory: AdminFactory = default_admin_factory
    commit_consumer_factory: ConsumerFactory = default_consumer_factory
    """Makes the consumer each cluster's offset committer commits with (:mod:`._committer`)."""
    commit_wait_s: float = 5.0
    """``checkpoint.commit.wait.ms``: how long a checkpoint waits for the commits of clusters that answer."""
    clock: Callable[[], float] = time.time
    replica_sync_wait_s: float = 5.0
    """``replica.sync.wait.ms``: how long a translation may wait for MirrorMaker 2 to catch up."""
    replica_failover_unreachable_ms: int = -1
    """``replica.failover.unreachable.ms``: an origin unreachable this long fails over; -1 never."""
    identities: Any = None
    """A :class:`~._identity.ClusterIdentities` the per-cluster enumerators tell each cluster's Kafka
    ``cluster.id`` (an exactly-once sink opened the source); None: not asked."""
    translator_factory: TranslatorFactory | None = None
    """Makes the translator of a ``replicaOf`` declaration; None: MirrorMaker 2's
    (:func:`multicluster_source.replicas._translate.make_translator`, imported when first needed)."""

    @property
    def bounded(self) -> bool:
        """Whether the source stops at stopping offsets."""
        return self.stopping is not None
