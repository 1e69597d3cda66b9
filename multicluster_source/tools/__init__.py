"""Command-line tools shipped with multicluster_source.

- ``python -m multicluster_source`` / ``multicluster-source`` (:mod:`.cli`): ``describe``, ``consume`` and
  ``check`` (``_inspect`` reads offsets, ``_consume`` writes records and the progress bar, ``_check``
  validates metadata, ``_replica_describe`` shows for ``describe --group`` what a replica handover of the
  group's positions would start at).
- ``_embedded``: an embedded single-node Kafka-compatible broker (tansu) for the demo and quick local runs.
- ``python -m multicluster_source.tools.publish_metadata``: publish a metadata file into the metadata topic
  read by :class:`~multicluster_source.metadata.KafkaTopicMetadataService`.
"""
