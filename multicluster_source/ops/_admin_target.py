"""The source side of the admin server: what it asks a running source, and what a source answers with.

- :class:`AdminTarget`: the protocol the admin server (:mod:`multicluster_source.ops._admin`) asks a source
  through; :class:`~multicluster_source.runtime.pull._stream.SourceStream` implements it.
- :func:`lag_rows` and :class:`RecordingSubscriber`: what ``SourceStream.status()`` builds its answer with
  (the offset gauges per partition, read back from the metrics registry; the streams subscribed last).

Threads: the admin server calls :class:`AdminTarget` methods on its request threads
``mcs-admin-<source>-request``, so ``status()`` and with it :func:`lag_rows` run there.
:meth:`RecordingSubscriber.get_subscribed_streams` runs on the enumerator's thread; ``last`` is replaced
whole, so a request thread reads either the old or the new tuple.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final, Protocol

from prometheus_client import CollectorRegistry

from multicluster_source.metadata._model import KafkaMetadataService, KafkaStream
from multicluster_source.metadata._subscriber import KafkaStreamSubscriber
from multicluster_source.ops._metric_families import COMMITTED, CURRENT, LAG

__all__ = ["AdminTarget", "RecordingSubscriber", "lag_rows"]

#: Offset gauge -> the field of a lag row it fills.
_LAG_FAMILIES: Final = {CURRENT: "current_offset", LAG: "lag", COMMITTED: "committed_offset"}


class AdminTarget(Protocol):
    """What the admin server asks a running source (implemented by :class:`SourceStream`)."""

    @property
    def name(self) -> str:
        """The source's name (the ``{name}`` of ``/sources/{name}/...``)."""
        ...

    @property
    def metrics_registry(self) -> CollectorRegistry:
        """The registry ``/metrics`` exposes."""
        ...

    def tracked_topics(self) -> dict[str, list[str]]:
        """Cluster -> topics read; raises ``TopicTrackingDisabledError`` when tracking is disabled."""
        ...

    def reset_tracked_topics(self) -> int:
        """Tombstone the active topics; raises ``TopicTrackingDisabledError`` when not allowed."""
        ...

    def health(self) -> dict[str, Any]:
        """``{"status": "ready" | "not_ready", "reasons": [...]}``."""
        ...

    def status(self) -> dict[str, Any]:
        """The JSON-ready status (see :meth:`SourceStream.status`)."""
        ...

    def secret_values(self) -> Collection[str]:
        """Values that must never appear in an answer (secret-looking properties, as configured)."""
        ...


def lag_rows(registry: CollectorRegistry, clusters: Mapping[str, Iterable[str]]) -> list[dict[str, Any]]:
    """Offset gauges per partition from ``registry``, for (cluster, topic) pairs in ``clusters`` only
    (a registry may be shared by several sources). Sorted by cluster, topic, partition."""
    wanted = {(c, t) for c, topics in clusters.items() for t in topics}
    rows: dict[tuple[str, str, int], dict[str, Any]] = {}
    for family in registry.collect():
        field = _LAG_FAMILIES.get(family.name)
        if field is None:
            continue
        for sample in family.samples:
            labels = sample.labels
            cluster, topic, partition = labels.get("cluster"), labels.get("topic"), labels.get("partition")
            if cluster is None or topic is None or partition is None or (cluster, topic) not in wanted:
                continue
            key = (cluster, topic, int(partition))
            row = rows.setdefault(
                key,
                {
                    "cluster": cluster,
                    "topic": topic,
                    "partition": int(partition),
                    "current_offset": None,
                    "lag": None,
                    "committed_offset": None,
                },
            )
            row[field] = int(sample.value)
    return [rows[k] for k in sorted(rows)]


class RecordingSubscriber:
    """Wraps a subscriber and keeps the streams it returned last, for status answers.

    The enumerator flattens streams into clusters; this keeps the stream -> cluster view without reading the
    metadata service again (it is called on the enumerator's thread only, as the service requires).
    """

    def __init__(self, inner: KafkaStreamSubscriber) -> None:
        self.inner = inner
        self.last: tuple[KafkaStream, ...] = ()

    @property
    def stream_ids(self) -> frozenset[str] | None:
        """The inner subscriber's fixed ids (a :class:`StreamSetSubscriber`), else None."""
        ids = getattr(self.inner, "stream_ids", None)
        return ids if isinstance(ids, frozenset) else None

    def get_subscribed_streams(self, service: KafkaMetadataService) -> set[KafkaStream]:
        """Delegate, remembering the answer."""
        streams = self.inner.get_subscribed_streams(service)
        self.last = tuple(sorted(streams, key=lambda s: s.stream_id))
        return streams
