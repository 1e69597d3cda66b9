"""A job reading the ``orders`` stream from every cluster the stream-metadata ConfigMap lists.

Run in the pod of deployment.yaml; the metadata directory is the ConfigMap volume mount.
"""

from __future__ import annotations

import logging
import os

from multicluster_source import ConfigMapMetadataService, MultiClusterKafkaSource, OffsetsInitializer


def main() -> None:
    """Build the source and print every record until the process is stopped."""
    logging.basicConfig(level=logging.INFO)
    metadata_dir = os.environ.get("STREAM_METADATA_DIR", "/etc/stream-metadata")
    source = (
        MultiClusterKafkaSource.builder()
        .set_kafka_metadata_service(ConfigMapMetadataService(metadata_dir, key="stream-metadata.yaml"))
        .set_stream_ids(["orders"])
        .set_group_id("billing")
        .set_deserializer(lambda raw: raw.value.decode("utf-8") if raw.value is not None else None)
        .set_starting_offsets(OffsetsInitializer.committed(reset="earliest"))
        .set_property("stream-metadata-discovery-interval-ms", "30000")
        .set_client_id_prefix("billing")
        .set_name("billing-orders")
        .build()
    )
    with source.open(
        parallelism=2, checkpoint_dir="/var/lib/billing/ckpt", checkpoint_interval=10.0
    ) as stream:
        for record in stream:
            print(f"{record.cluster_id}/{record.topic}/{record.partition}@{record.offset}: {record.value}")


if __name__ == "__main__":
    main()
