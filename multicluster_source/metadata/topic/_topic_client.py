"""What the metadata topic's service and writer share: argument checks, client settings, error texts.

Also the topic check (:func:`ensure_topic`, and :func:`check_metadata_topic` for the command-line tool): a
metadata topic must have exactly one partition and ``cleanup.policy`` exactly ``compact``; an absent one is
created that way or is a :class:`MetadataTopicMissingError`. When the broker cannot describe the topic's
configuration, only a warning is logged. The service runs the check in ``start()``, in the caller's thread.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection

# documented public names of confluent_kafka.admin that the package does not mark as re-exported
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from multicluster_source.exceptions import ConfigurationError, MetadataError
from multicluster_source.metadata._connection import ThrottledClientLog, with_connection_defaults
from multicluster_source.metadata._placeholders import redact_properties, resolve_properties
from multicluster_source.metadata._validate import topic_name_problem

__all__ = [
    "MetadataTopicMissingError",
    "check_arguments",
    "check_metadata_topic",
    "client_config",
    "describe_source",
    "ensure_topic",
    "error_text",
    "kafka_error",
]

_log = logging.getLogger("multicluster_source.metadata")

_ABSENT_CODES = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})


class MetadataTopicMissingError(MetadataError):
    """The metadata topic does not exist and may not be created."""


def describe_source(topic: str, bootstrap_servers: str) -> str:
    return f"metadata topic {topic!r} at {bootstrap_servers}"


def error_text(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        err: KafkaError = exc.args[0]
        return f"{err.str()} ({err.name()})"
    return str(exc) or type(exc).__name__


def kafka_error(exc: KafkaException) -> KafkaError | None:
    first = exc.args[0] if exc.args else None
    return first if isinstance(first, KafkaError) else None


def check_arguments(bootstrap_servers: str, topic: str) -> None:
    if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
        raise ConfigurationError("bootstrap_servers must be a non-empty host:port list")
    problem = topic_name_problem(topic) if isinstance(topic, str) else "the topic must be a string"
    if problem:
        raise ConfigurationError(f"metadata topic: {problem}")


def client_config(
    bootstrap_servers: str, client_properties: Mapping[str, str] | None, *, source: str
) -> dict[str, Any]:
    """Resolved client configuration (contains secrets: never log it), with the source's connection defaults
    and a throttled ``logger``."""
    props = dict(client_properties or {})
    if props:
        _log.debug("%s: client properties %s", source, redact_properties(props))
    conf: dict[str, Any] = dict(resolve_properties(props, source=f"{source} client properties"))
    conf["bootstrap.servers"] = bootstrap_servers
    # how a cluster that is down is retried, and librdkafka's lines in Python logging, one per distinct line
    # and interval (see metadata._connection)
    conf = with_connection_defaults(conf)
    conf.setdefault("logger", ThrottledClientLog(logging.getLogger("multicluster_source.client.metadata")))
    return conf


def check_metadata_topic(
    bootstrap_servers: str,
    topic: str,
    *,
    client_properties: Mapping[str, str] | None = None,
    create: bool = False,
    replication_factor: int = 1,
    timeout: float = 30.0,
) -> bool:
    """Check (and with ``create`` create) the metadata topic; returns whether it exists afterwards.

    Without ``create`` an absent topic returns False. Raises :class:`MetadataError` for a topic with other
    than one partition or a ``cleanup.policy`` other than ``compact``, and when the cluster cannot be asked.
    """
    check_arguments(bootstrap_servers, topic)
    source = describe_source(topic, bootstrap_servers)
    conf = client_config(bootstrap_servers, client_properties, source=source)
    try:
        ensure_topic(
            AdminClient(conf),
            topic,
            create=create,
            replication_factor=replication_factor,
            timeout=timeout,
            source=source,
        )
    except MetadataTopicMissingError:
        return False
    return True


def ensure_topic(
    admin: AdminClient, topic: str, *, create: bool, replication_factor: int, timeout: float, source: str
) -> None:
    description = _describe_topic(admin, topic, timeout=timeout, source=source)
    if description is None:
        if not create:
            raise MetadataTopicMissingError(
                "the topic does not exist (create it with 1 partition and cleanup.policy=compact, "
                "or allow the service to create it)",
                source=source,
            )
        if _create_topic(admin, topic, replication_factor=replication_factor, timeout=timeout, source=source):
            return
        description = _describe_topic(admin, topic, timeout=timeout, source=source)
        if description is None:
            raise MetadataError("the topic was reported to exist but cannot be described", source=source)
    partitions = len(description.partitions)
    if partitions != 1:
        raise MetadataError(
            f"the topic has {partitions} partitions; a metadata topic must have exactly 1 "
            "(its single log orders the writes)",
            source=source,
        )
    policy = _cleanup_policy(admin, topic, timeout=timeout, source=source)
    if policy is not None and policy.replace(" ", "") != "compact":
        raise MetadataError(
            f"the topic has cleanup.policy={policy!r}; a metadata topic must have cleanup.policy=compact "
            "exactly (retention would delete metadata that is still in effect)",
            source=source,
        )


def _describe_topic(admin: AdminClient, topic: str, *, timeout: float, source: str) -> Any:
    futures = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)
    try:
        return futures[topic].result(timeout + 5.0)
    except KafkaException as exc:
        err = kafka_error(exc)
        if err is not None and err.code() in _ABSENT_CODES:
            return None
        raise MetadataError(f"cannot describe the topic: {error_text(exc)}", source=source) from exc
    except TimeoutError as exc:
        raise MetadataError(f"cannot describe the topic within {timeout}s", source=source) from exc


def _create_topic(
    admin: AdminClient, topic: str, *, replication_factor: int, timeout: float, source: str
) -> bool:
    """Create the topic; True when created here, False when somebody else created it meanwhile."""
    new = NewTopic(
        topic,
        num_partitions=1,
        replication_factor=replication_factor,
        config={"cleanup.policy": "compact"},
    )
    future = admin.create_topics([new], operation_timeout=timeout, request_timeout=timeout)[topic]
    try:
        future.result(timeout + 5.0)
    except KafkaException as exc:
        err = kafka_error(exc)
        if err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise MetadataError(f"cannot create the topic: {error_text(exc)}", source=source) from exc
    except TimeoutError as exc:
        raise MetadataError(f"cannot create the topic within {timeout}s", source=source) from exc
    _log.info(
        "%s: created the topic (1 partition, replication factor %d, cleanup.policy=compact)",
        source,
        replication_factor,
    )
    return True


def _cleanup_policy(admin: AdminClient, topic: str, *, timeout: float, source: str) -> str | None:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        futures = admin.describe_configs([resource], request_timeout=timeout)
        entries = next(iter(futures.values())).result(timeout + 5.0)
        entry = entries.get("cleanup.policy")
        value = None if entry is None else entry.value
    except (KafkaException, TimeoutError, StopIteration, ValueError) as exc:
        _log.warning(
            "%s: cannot describe the topic's configuration (%s); cleanup.policy is not checked",
            source,
            error_text(exc),
        )
        return None
    if value is None:
        _log.warning("%s: the broker does not report cleanup.policy; it is not checked", source)
        return None
    return str(value)
