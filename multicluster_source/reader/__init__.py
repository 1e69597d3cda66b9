"""The reader role: fetch records of assigned splits from each cluster (implementation; nothing public here).

What lives here:

- ``_multicluster``: :class:`MultiClusterReader`, one per reader, which filters its splits on every metadata
  update and restarts only the per-cluster fetchers whose cluster changed.
- ``_fetcher``: :class:`ClusterFetcher`, one confluent-kafka consumer and its fetch thread per cluster;
  ``_pauses``: the splits watermark alignment holds, applied to a fetcher's consumer; ``_batches``: the
  per-batch work that looks at messages (counts per topic, the cut at a bounded end); ``_resets``: positions
  out of range moved per ``auto.offset.reset``; ``_settings``: fetch and reader settings; ``_lag``: a
  fetcher's lag reports (what moved since the last one, plus a bounded slice of the rest); ``_stalls``: the
  stall watchdog (a position that stands still while the broker has records beyond it); ``_warm``:
  consumers opened ahead of their splits, connected and with their cluster's topic metadata.
- ``_records``: records made of a batch's messages (with the deserializer), on the thread that asks for them.

May import: :mod:`multicluster_source.framework`, :mod:`multicluster_source.ops`,
:mod:`multicluster_source.metadata`, :mod:`multicluster_source.exceptions`; never the enumerator or the
runtimes.
"""
