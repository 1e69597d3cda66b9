"""Archive stages: how are Kafka records that were stored outside Kafka (Kafka Connect's storage sinks,
Iceberg's Kafka Connect sink) read back as a bounded hybrid stage, with exact positions to hand over?

- ``_archive``: :class:`KafkaArchiveSource`, the stage over the storage sinks' files (S3, GCS, Azure, HDFS,
  local), with its settings, splits and snapshots.
- ``_archive_layout``: where the files are (the sinks' file layout, on any filesystem) and
  :class:`ArchiveError`.
- ``_archive_formats``: reading one file in chunks (JSON lines, Avro, Parquet), with its keys and headers.
- ``_archive_rows``: archived records at a low cost per record (one tuple each, built by C-level calls).
- ``_archive_pieces``: what the reader threads hand to the caller thread (:class:`ArchivedColumns`,
  pieces) and where a split is.
- ``_archive_reader``: the reader side shared by both stages: reader threads fill a queue with pieces, the
  hybrid stream's caller thread takes records and keeps each split's position.
- ``_iceberg``: :class:`KafkaIcebergSource`, the stage over Iceberg tables written with Kafka metadata
  columns (through pyiceberg), on the same reader side.

May import: the stage protocol (:mod:`multicluster_source.hybrid._stage`) and what the hybrid source may
import; never the hybrid stream, its runs or its other stages.
"""
