"""Operations: what an operator sees of a running source (implementation; nothing public here).

What lives here:

- ``_metrics``: the Prometheus metrics of a source (names, labels, removal of a cluster's label sets).
- ``_admin`` and ``_status_page``: the admin HTTP server (``/health``, ``/status``, ``/metrics``, topic
  tracking endpoints) and the HTML status page it serves.
- ``_topic_stores`` and ``_tracking``: topic tracking (KIP-558): which topics each reader read, kept in a
  local file or a compacted Kafka topic.
- ``_clientlog``: librdkafka logs and client errors to Python logging, with the cluster id.

May import: :mod:`multicluster_source.framework`, :mod:`multicluster_source.metadata`,
:mod:`multicluster_source.exceptions`.
"""
