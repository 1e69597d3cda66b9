"""The enumerator role: which splits exist and which reader reads each (implementation; nothing public here).

What lives here:

- ``_multicluster``: :class:`MultiClusterEnumerator`, which polls and listens to the metadata service,
  reconciles per-cluster enumerators and assigns splits; it runs on the coordinator thread only. Its parts:
  ``_settings`` (its configuration), ``_follow`` (when metadata is read again, failure counting),
  ``_clusters`` (what changed between metadata versions; the running per-cluster enumerators),
  ``_readers`` (handing splits to readers: registration, standbys, failover), ``_split_table`` (the table
  of active splits, by cluster), ``_published`` (its state as of its last change, for checkpoints taken off
  its thread), ``_view`` (its status, for the admin server and tests) and ``_commit`` (offset commits of
  completed checkpoints: the checkpoint's wait), with ``_committer`` (one consumer and thread per cluster
  that commits them).
- ``_copies`` and ``_handover``: replica clusters (``replicaOf``): which topics are copies and the metadata
  read, and each origin split's position carried to the replica split that takes over;
  ``_replica_state``: the versioned ``replicas`` section of the checkpointed state.
- ``_kafka`` and ``_proxy``: the per-cluster enumerator (partition discovery) behind a stoppable
  context proxy; ``_describe``: describing a cluster's topics for discovery, a few hundred partitions per
  request (``_requests``: how many partitions one admin request names).
- ``_offsets``: ``OffsetsInitializer`` (starting and stopping offsets), resolved with the admin client.
- ``_assignment`` and ``_standby``: placement of splits on readers (balanced, rack-aware) and standby readers
  (KIP-708).
- ``_state``: the enumerator's versioned checkpoint state.
- ``_identity``: which Kafka cluster (``cluster.id``) each cluster id of the metadata is, learned by the
  per-cluster enumerators and checked against what an exactly-once sink's positions were written for.

May import: :mod:`multicluster_source.framework`, :mod:`multicluster_source.ops`,
:mod:`multicluster_source.metadata`, :mod:`multicluster_source.exceptions`; never the reader or the runtimes.
"""
