"""Metadata kept in a compacted Kafka topic: how is it written, read and checked?

- ``_kafka_topic``: :class:`KafkaTopicMetadataService`, the reading service (``start()`` checks the topic
  and starts the reader thread; the caller's threads read what it published).
- ``_topic_reader``: what the reader thread ``metadata-topic[<topic>]`` runs, and the state it publishes.
- ``_topic_records``: the record format (keys, values, commits, tombstones) and its encoding.
- ``_topic_log``: :class:`MetadataLog`, the reader's state, applying records in log order (free of Kafka).
- ``_topic_plan``: the writer's diff, which records make the topic hold exactly the wanted streams.
- ``_topic_writer``: :class:`KafkaTopicMetadataWriter`, the single transactional writer.
- ``_topic_client``: what the service and the writer share: argument checks, client settings, error texts,
  and the topic check (one partition, ``cleanup.policy=compact``).

May import: the metadata model, validation, placeholders and connection defaults of
:mod:`multicluster_source.metadata`, and :mod:`multicluster_source.exceptions`; nothing else of the
package (the metadata layer is below every other).
"""
