"""Command-line tools shipped with multicluster_source.

- ``python -m multicluster_source`` / ``multicluster-source`` (:mod:`.cli`): ``describe``, ``consume`` and
  ``check`` (``_inspect`` reads offsets, ``_consume`` writes records and the progress bar, ``_check``
  validates metadata).
- ``python -m multicluster_source.tools.publish_metadata``: publish a metadata file into the metadata topic
  read by :class:`~multicluster_source.metadata.KafkaTopicMetadataService`.
"""
