"""Operations: what an operator sees of a running source.

Public here (``__all__``): topic tracking's stores (:class:`TopicStatusStore`, :class:`LocalTopicStatusStore`,
:class:`KafkaTopicStatusStore`) and :class:`TopicTrackingDisabledError`; the rest is implementation.

What lives here:

- ``_metric_families`` and ``_metrics``: the Prometheus metrics of a source: the metric families (names,
  labels, help) shared by the sources on a registry, and what one source records and removes (a cluster's,
  topic's or partition's label sets); ``_partition_gauges``: the per-partition offset gauges, kept as plain
  dicts and exported when the registry is read; ``_metrics_relay``: the reader metrics of push workers in
  other processes or actors, recorded there and applied to the driver's.
- ``_admin``, ``_admin_target`` and ``_status_page``: the admin HTTP server (``/health``, ``/status``,
  ``/metrics``, topic tracking endpoints; address and token checks), its source side (the ``AdminTarget``
  protocol; lag rows and the streams subscribed last, for status answers) and the HTML status page.
- ``_topic_stores`` and ``_tracking``: topic tracking (KIP-558): the stores (in memory, a local file, a
  compacted Kafka topic) and the tracker recording which topics each reader read.
- ``_clientlog``: librdkafka logs and client errors to Python logging, with the cluster id.

May import: :mod:`multicluster_source.framework`, :mod:`multicluster_source.metadata`,
:mod:`multicluster_source.exceptions`.
"""

from __future__ import annotations

from multicluster_source.ops._topic_stores import (
    KafkaTopicStatusStore,
    LocalTopicStatusStore,
    TopicStatusStore,
)
from multicluster_source.ops._tracking import TopicTrackingDisabledError

__all__ = ["KafkaTopicStatusStore", "LocalTopicStatusStore", "TopicStatusStore", "TopicTrackingDisabledError"]
