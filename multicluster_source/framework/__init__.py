"""The framework every role builds on: values, interfaces and state formats.

Public here (``__all__``): the checkpoint storage seam, :class:`CheckpointStorage` with
:class:`DirectoryCheckpointStorage`, and :class:`ObjectStoreCheckpointStorage` over an :class:`ObjectStore`;
``column_schema``, the Arrow schema of what ``poll_columns()`` returns.
The records, batches and ``WatermarkStrategy`` defined here are imported from :mod:`multicluster_source`;
the rest is implementation.

What lives here:

- ``_split``: :class:`KafkaPartitionSplit` (``cluster/topic/partition``) and its versioned serialization.
- ``_events``: the events exchanged between the enumerator and the readers (metadata updates, finished
  splits); the metadata-update restart sequence is written down in its docstring.
- ``_interfaces``: the enumerator and reader interfaces, their contexts, and the batch a reader emits;
  which thread calls what.
- ``_records``: ``SourceRecord`` and ``RawRecord``.
- ``_options``: the option table, the validated ``SourceOptions`` and the split of user properties into
  source options and client properties.
- ``_clientprops``: the check of client properties by librdkafka (no broker contacted).
- ``_javaprops``: the Java consumer property names and their librdkafka counterparts (renamed with a
  warning, or refused with what to write instead).
- ``_clientconf``: the client configuration of one cluster (placeholders resolved at client creation).
- ``_watermarks``: ``WatermarkStrategy`` (event time and watermarks, set on the builder) and the event times
  of a batch per split (computed by fetchers, once per batch).
- ``_columns``: Arrow record batches of the client's messages (``poll_columns()``, the Spark source).
- ``_gcpause``: Python's cyclic garbage collector held off while a client answer of many short-lived
  objects is read, or a batch of records is in the caller's hands.
- ``_checkpoint`` and ``_storage``: the versioned checkpoint files and the storage seam (directory, object
  store); ``_dirlock``: the one-owner lock of a checkpoint directory.

May import: :mod:`multicluster_source.exceptions` and :mod:`multicluster_source.metadata` only.
"""

from __future__ import annotations

from multicluster_source.framework._columns import column_schema
from multicluster_source.framework._storage import (
    CheckpointStorage,
    DirectoryCheckpointStorage,
    ObjectStore,
    ObjectStoreCheckpointStorage,
)

__all__ = [
    "CheckpointStorage",
    "DirectoryCheckpointStorage",
    "ObjectStore",
    "ObjectStoreCheckpointStorage",
    "column_schema",
]
