"""The positions topic of an exactly-once sink: its records, making it, and reading it back.

Each record is keyed by a split id (``cluster/topic/partition``, UTF-8) and holds, as JSON::

    {"v": 1, "offset": 1234, "cluster": "eu", "kafka_cluster_id": "MkU3OEVBNTcwNTJENDM2", "source": "billing"}

``offset`` is the next offset to read (what a checkpoint holds); ``kafka_cluster_id`` the ``cluster.id`` of
the Kafka cluster the split was read from when the position was written (None when it was not known yet:
a split assigned, never read, on a cluster that did not answer). One more key, :data:`WORKERS_KEY`, holds
how many worker slots a push run (``run(..., sink=...)``) last had, each with its own transactional id, so
that the next run fences every one of them, however many it has itself. The topic is compacted: the newest
record of a key is its position. Positions of removed splits are never deleted (no tombstones), so a topic
removed and added back resumes where it was. Records of a format version this code does not know are an error
naming topic, partition and offset, never skipped.

Reading runs on the thread that opens the stream, once, after the sink's ``init_transactions`` aborted what
a previous instance left open: a ``read_committed`` consumer reads every partition up to its end (the last
stable offset), so exactly the positions of committed transactions are read.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from multicluster_source.exceptions import CheckpointError, ConfigurationError

__all__ = [
    "POSITIONS_FORMAT_VERSION",
    "WORKERS_KEY",
    "StoredPosition",
    "consumer_properties",
    "decode_position",
    "decode_workers",
    "encode_position",
    "encode_workers",
    "ensure_positions_topic",
    "make_positions_topic",
    "read_positions",
]

_log = logging.getLogger("multicluster_source.sink")

POSITIONS_FORMAT_VERSION = 1
WORKERS_KEY = b"#workers"
"""The key of the record that holds a push run's number of worker slots (it has no ``/``, which every split
id has twice, so it is never a split's)."""
READ_TIMEOUT_S = 120.0
"""How long reading the positions topic back may take before opening fails (a sink cluster that is down)."""

_PRODUCER_ONLY_PREFIXES = (
    "transaction",
    "linger.",
    "batch.",
    "queue.buffering.",
    "message.",
    "compression.",
    "retry.",
    "delivery.",
    "partitioner",
    "sticky.",
    "max.in.flight",
    "produce.",
    "dr_",
)
_PRODUCER_ONLY_KEYS = frozenset(
    {
        "acks",
        "request.required.acks",
        "enable.idempotence",
        "retries",
        "message.send.max.retries",
        "enable.gapless.guarantee",
        "queuing.strategy",
        "request.timeout.ms",
        "compression.codec",
        "on_delivery",
    }
)


@dataclass(frozen=True)
class StoredPosition:
    """One split's position as the positions topic holds it."""

    split_id: str
    offset: int
    cluster_id: str
    kafka_cluster_id: str | None


def encode_position(
    split_id: str, offset: int, kafka_cluster_id: str | None, source: str
) -> tuple[bytes, bytes]:
    """The key and value of a positions record."""
    cluster = split_id.split("/", 1)[0]
    value = {
        "v": POSITIONS_FORMAT_VERSION,
        "offset": offset,
        "cluster": cluster,
        "kafka_cluster_id": kafka_cluster_id,
        "source": source,
    }
    return split_id.encode(), json.dumps(value, separators=(",", ":")).encode()


def encode_workers(workers: int) -> tuple[bytes, bytes]:
    """The key and value of the record naming how many worker slots a push run has."""
    return WORKERS_KEY, json.dumps({"v": POSITIONS_FORMAT_VERSION, "workers": workers}).encode()


def decode_workers(value: bytes, where: str) -> int:
    """The number of worker slots :data:`WORKERS_KEY`'s record names."""
    try:
        return int(json.loads(value)["workers"])
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{where}: malformed worker-count record: {exc}") from exc


def decode_position(key: bytes | None, value: bytes | None, where: str) -> StoredPosition | None:
    """A positions record (``where`` names topic, partition and offset in errors); None for a tombstone."""
    if value is None:
        return None
    if not key:
        raise CheckpointError(f"{where}: a positions record without a key (a split id)")
    try:
        split_id = key.decode()
        data = json.loads(value)
        version = int(data["v"])
        if version > POSITIONS_FORMAT_VERSION:
            raise CheckpointError(
                f"{where}: positions format v{version} is newer than this version reads "
                f"(v{POSITIONS_FORMAT_VERSION}): upgrade multicluster-kafka-source"
            )
        offset = int(data["offset"])
        kafka_id = data.get("kafka_cluster_id")
        cluster = str(data.get("cluster") or split_id.split("/", 1)[0])
    except CheckpointError:
        raise
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{where}: malformed positions record for key {key!r}: {exc}") from exc
    if split_id.count("/") < 2:
        raise CheckpointError(f"{where}: key {split_id!r} is not a split id (cluster/topic/partition)")
    return StoredPosition(split_id, offset, cluster, str(kafka_id) if kafka_id else None)


def consumer_properties(producer: Mapping[str, str]) -> dict[str, str]:
    """The connection part of the sink's producer properties, for the consumer and admin client of the
    positions topic (producer-only properties dropped, so librdkafka does not warn about them)."""
    return {
        k: v
        for k, v in producer.items()
        if k not in _PRODUCER_ONLY_KEYS and not k.startswith(_PRODUCER_ONLY_PREFIXES)
    }


def ensure_positions_topic(
    admin: Any, topic: str, partitions: int, replication_factor: int, timeout_s: float = 30.0
) -> bool:
    """Make the compacted positions topic when it is missing; True when it was made. A topic that exists
    but is not compacted is used as it is, with a warning (it keeps every position ever written)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ConfigResource, NewTopic  # type: ignore[attr-defined]

    listed = admin.list_topics(topic=topic, timeout=timeout_s)
    meta = listed.topics.get(topic)
    if meta is not None and meta.error is None:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        try:
            configs = admin.describe_configs([resource])[resource].result(timeout=timeout_s)
            policy = configs.get("cleanup.policy")
            if policy is not None and "compact" not in str(policy.value):
                _log.warning(
                    "positions topic %s has cleanup.policy=%s, not compact: it keeps every position written",
                    topic,
                    policy.value,
                )
        except KafkaException as exc:
            _log.warning("positions topic %s: its configuration could not be read: %s", topic, exc)
        return False
    new = NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=replication_factor,
        config={"cleanup.policy": "compact"},
    )
    try:
        admin.create_topics([new], operation_timeout=timeout_s)[topic].result(timeout=timeout_s)
    except KafkaException as exc:
        if exc.args and getattr(exc.args[0], "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise ConfigurationError(f"positions topic {topic}: could not be created: {exc}") from exc
    _log.info("positions topic %s made (compacted, %d partitions)", topic, partitions)
    return True


def make_positions_topic(connection: Mapping[str, str], sink: Any) -> bool:
    """:func:`ensure_positions_topic` for ``sink`` (an ``ExactlyOnceKafkaSink``), with an admin client of its
    own, closed before it returns."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(dict[str, str | int | float | bool](connection))
    try:
        return ensure_positions_topic(
            admin, sink.positions_topic, sink.positions_partitions, sink.positions_replication_factor
        )
    finally:
        del admin


def read_positions(
    conf: Mapping[str, str],
    topic: str,
    *,
    timeout_s: float = READ_TIMEOUT_S,
    workers: list[int] | None = None,
) -> dict[str, StoredPosition]:
    """Every split's newest position in ``topic``, read ``read_committed`` up to the end of each partition
    (``workers``, when given, gets the newest worker count of a push run appended). Raises
    :class:`CheckpointError` when the topic cannot be read within ``timeout_s`` or holds a record that is not
    a position."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            **conf,
            "group.id": f"mcs-positions-{topic}",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "isolation.level": "read_committed",
            "enable.partition.eof": "true",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        deadline = time.monotonic() + timeout_s
        meta = consumer.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise CheckpointError(f"positions topic {topic}: not readable: {getattr(meta, 'error', None)}")
        pending = set(meta.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(pending)])
        out: dict[str, StoredPosition] = {}
        while pending:
            if time.monotonic() > deadline:
                raise CheckpointError(
                    f"positions topic {topic}: partitions {sorted(pending)} not read to their end within "
                    f"{timeout_s:.0f} s (is the sink cluster up?)"
                )
            for msg in consumer.consume(10_000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        continue
                    if err.fatal() or not err.retriable():
                        raise CheckpointError(f"positions topic {topic}: reading failed: {err}")
                    continue
                where = f"positions topic {topic} partition {msg.partition()} offset {msg.offset()}"
                if msg.key() == WORKERS_KEY:
                    value = msg.value()
                    if workers is not None and value is not None:
                        workers.append(decode_workers(value, where))
                    continue
                position = decode_position(msg.key(), msg.value(), where)
                if position is not None:
                    out[position.split_id] = position
        return out
    finally:
        consumer.close()
