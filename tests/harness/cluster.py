"""The interface every test cluster offers (:class:`Cluster`): identity, lifecycle, and client helpers in
the style of confluent-kafka's test fixtures (clients, topics, producing, groups); :func:`unique_name`;
and the registry that stops, at exit, brokers a session left running."""

from __future__ import annotations

import abc
import atexit
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, Self

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

# documented public names of confluent_kafka.admin that the package does not mark as re-exported
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic  # type: ignore[attr-defined]

_live_lock = threading.Lock()
_live: set[Cluster] = set()


def track(cluster: Cluster) -> None:
    """Remember a cluster whose brokers this process starts, until ``untrack``: see ``_stop_leftovers``."""
    with _live_lock:
        _live.add(cluster)


def untrack(cluster: Cluster) -> None:
    """Forget a cluster whose brokers are stopped."""
    with _live_lock:
        _live.discard(cluster)


@atexit.register
def _stop_leftovers() -> None:
    """Last resort (an interrupted session): no broker outlives the Python process that started it."""
    with _live_lock:
        leftovers = list(_live)
    for cluster in leftovers:
        cluster.stop(graceful=False)


class Cluster(abc.ABC):
    """A Kafka cluster the tests talk to, with helpers in the style of confluent-kafka's test fixtures.

    Topic and group names made by the helpers are unique, so tests sharing a cluster stay isolated.
    Clients from ``consumer()`` and ``producer()`` belong to the caller, who closes them; the admin client
    and the producer behind ``produce()`` are shared and released by ``stop()``.
    """

    kind: ClassVar[str]

    def __init__(self, cluster_id: str) -> None:
        self._cluster_id = cluster_id
        self._clients_lock = threading.Lock()
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None
        #: When true, ``stop()`` keeps the broker logs on disk (set for clusters that saw a failed test).
        self.keep_logs = False

    # -- identity and lifecycle ------------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        """The short name of this cluster in the tests (e.g. "east"), not Kafka's cluster UUID."""
        return self._cluster_id

    @property
    @abc.abstractmethod
    def bootstrap_servers(self) -> str:
        """Comma-separated ``host:port`` list for ``bootstrap.servers``."""

    @property
    @abc.abstractmethod
    def node_racks(self) -> dict[int, str | None]:
        """Broker node id -> ``broker.rack`` (None when the broker has no rack)."""

    @abc.abstractmethod
    def stop(self, *, graceful: bool = True) -> None:
        """Close the shared clients and stop every broker this object started (idempotent)."""

    @abc.abstractmethod
    def stop_node(self, node_id: int, *, graceful: bool = True) -> None:
        """Stop one broker (SIGTERM, or SIGKILL when ``graceful`` is false); its data stays."""

    @abc.abstractmethod
    def start_node(self, node_id: int) -> None:
        """Start a stopped broker again on its ports and data, and wait until it is back in metadata."""

    @abc.abstractmethod
    def log_tail(self, lines: int = 40) -> str:
        """The last lines of each broker's log, headed by node, for failure reports."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._cluster_id!r})"

    def _close_clients(self) -> None:
        with self._clients_lock:
            producer, self._producer, self._admin = self._producer, None, None
        if producer is not None:
            producer.flush(5.0)
            producer.close()

    # -- clients ---------------------------------------------------------------------------------------

    def client_config(self, **overrides: Any) -> dict[str, Any]:
        """``bootstrap.servers`` of this cluster plus ``overrides`` (dotted keys: ``**{"group.id": "g"}``)."""
        return {"bootstrap.servers": self.bootstrap_servers, **overrides}

    def admin(self) -> AdminClient:
        """The cluster's shared AdminClient."""
        with self._clients_lock:
            if self._admin is None:
                self._admin = AdminClient(self.client_config())
            return self._admin

    def producer(self, **conf: Any) -> Producer:
        """A new Producer for this cluster; the caller flushes and closes it."""
        return Producer(self.client_config(**conf))

    def consumer(self, **conf: Any) -> Consumer:
        """A new Consumer (unique ``group.id``, ``auto.offset.reset=earliest`` unless given); the caller
        closes it."""
        defaults = {"group.id": unique_name("group"), "auto.offset.reset": "earliest"}
        return Consumer(self.client_config(**{**defaults, **conf}))

    def _shared_producer(self) -> Producer:
        with self._clients_lock:
            if self._producer is None:
                self._producer = Producer(self.client_config(**{"message.timeout.ms": 30000}))
            return self._producer

    # -- topics ----------------------------------------------------------------------------------------

    def create_topic(
        self,
        prefix: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
        *,
        timeout: float = 30.0,
    ) -> str:
        """Create a topic named ``<prefix>-<unique part>`` and wait until every partition has a leader
        and a full ISR in the served metadata; return its name."""
        name = unique_name(prefix)
        new = NewTopic(
            name, num_partitions=partitions, replication_factor=replication_factor, config=dict(config or {})
        )
        self.admin().create_topics([new], operation_timeout=timeout)[name].result(timeout)
        self._await_metadata(name, timeout, lambda md: _topic_ready(md, name, partitions, replication_factor))
        return name

    def delete_topic(self, name: str, *, timeout: float = 30.0) -> None:
        """Delete a topic and wait until the metadata no longer lists it."""
        self.admin().delete_topics([name], operation_timeout=timeout)[name].result(timeout)
        self._await_metadata(
            name, timeout, lambda md: name not in md.topics or md.topics[name].error is not None
        )

    def _await_metadata(self, topic: str, timeout: float, ready: Callable[[ClusterMetadata], bool]) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                # all topics: asking for one by name makes some brokers (tansu) create it
                if ready(self.admin().list_topics(timeout=5.0)):
                    return
            except KafkaException:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic!r} on {self!r}: metadata did not settle in {timeout}s")
            time.sleep(0.1)

    # -- producing -------------------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        values: Iterable[bytes | str],
        *,
        partition: int | None = None,
        key: bytes | str | None = None,
        headers: Mapping[str, bytes | str] | Sequence[tuple[str, bytes | str]] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """Produce ``values`` in order (to ``partition`` if given, else by key or the default partitioner),
        flush, and raise ``KafkaException`` on the first delivery error."""
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err)

        producer = self._shared_producer()
        extra: dict[str, Any] = {}
        if partition is not None:
            extra["partition"] = partition
        if headers is not None:
            extra["headers"] = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
        for value in values:
            while True:
                try:
                    producer.produce(topic, value=value, key=key, on_delivery=delivered, **extra)
                    break
                except BufferError:  # local queue full: serve deliveries, then retry
                    producer.poll(0.1)
            producer.poll(0)
        remaining = producer.flush(timeout)
        if errors:
            raise KafkaException(errors[0])
        if remaining:
            raise TimeoutError(f"{remaining} records to {topic!r} not delivered within {timeout}s")

    def produce_n(self, topic: str, n: int, *, partitions: int, prefix: str = "r") -> list[tuple[int, bytes]]:
        """Produce values ``f"{prefix}-{i}"`` for i in range(n), round-robin over ``partitions`` partitions;
        return ``(partition, value)`` in production order."""
        sent = [(i % partitions, f"{prefix}-{i}".encode()) for i in range(n)]
        for p in range(partitions):
            values = [value for part, value in sent if part == p]
            if values:
                self.produce(topic, values, partition=p)
        return sent

    # -- groups ----------------------------------------------------------------------------------------

    def committed_offsets(self, group: str, topic: str, partitions: int | Iterable[int]) -> dict[int, int]:
        """Offsets committed by ``group`` on ``topic`` (partitions: a count or the ids), read with the admin
        client; partitions without a committed offset are left out."""
        ids = range(partitions) if isinstance(partitions, int) else list(partitions)
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in ids])
        result = self.admin().list_consumer_group_offsets([request])[group].result(30.0)
        return {
            tp.partition: tp.offset for tp in result.topic_partitions if tp.error is None and tp.offset >= 0
        }

    def describe_nodes(self) -> dict[int, str | None]:
        """Broker node id -> rack as the cluster describes itself (AdminClient.describe_cluster)."""
        description = self.admin().describe_cluster(request_timeout=10.0).result(15.0)
        return {node.id: node.rack for node in description.nodes}


def unique_name(prefix: str) -> str:
    """``<prefix>-<10 hex digits>``: a topic or group name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _topic_ready(md: ClusterMetadata, name: str, partitions: int, replication_factor: int) -> bool:
    topic = md.topics.get(name)
    if topic is None or topic.error is not None or len(topic.partitions) != partitions:
        return False
    return all(
        p.error is None and p.leader >= 0 and len(p.isrs) >= min(replication_factor, len(p.replicas))
        for p in topic.partitions.values()
    )
