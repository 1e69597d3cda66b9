"""The exactly-once sink as the user configures it: :class:`ExactlyOnceKafkaSink` (a value, checked once).

Opening a source with it (``source.open(sink=...)``) starts a
:class:`~multicluster_source.sink._transactions.TransactionalSink`, which does the work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from multicluster_source.exceptions import ConfigurationError
from multicluster_source.metadata._placeholders import resolve_properties

__all__ = ["DEFAULT_TRANSACTION_TIMEOUT_MS", "ExactlyOnceKafkaSink"]

DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
"""librdkafka's ``transaction.timeout.ms`` when the properties do not set it."""

_OWNED = ("transactional.id", "enable.idempotence")
"""Producer properties the sink sets itself (``transactional_id`` names the first)."""


@dataclass(frozen=True)
class ExactlyOnceKafkaSink:
    """Where a job's results go, exactly once: a Kafka cluster, written in transactions that carry the
    stream's positions with them (API.md section 11).

    ``properties`` are confluent-kafka producer properties (``bootstrap.servers`` at least; ``${env:...}``
    and ``${file:...}`` placeholders are resolved when the stream opens). ``transactional_id`` is stable
    for the job: a second job with the same id fences the first. ``positions_topic`` is the compacted topic
    on the sink cluster that holds the positions (made when missing; one topic per job).
    """

    properties: Mapping[str, str] = field(repr=False)  # may hold secrets
    transactional_id: str = field(kw_only=True)
    positions_topic: str = field(kw_only=True)
    positions_partitions: int = field(default=1, kw_only=True)
    """Partitions of the positions topic when the sink makes it."""
    positions_replication_factor: int = field(default=-1, kw_only=True)
    """Replication factor of the positions topic when the sink makes it (-1: the broker's default)."""

    def __post_init__(self) -> None:
        props = {str(k): str(v) for k, v in dict(self.properties).items()}
        transactional_id = self.transactional_id
        if not props.get("bootstrap.servers"):
            raise ConfigurationError("ExactlyOnceKafkaSink: properties need bootstrap.servers")
        for key in _OWNED:
            if key in props:
                raise ConfigurationError(
                    f"ExactlyOnceKafkaSink: do not set {key!r} in properties: the sink sets it "
                    f"(transactional_id={transactional_id!r})"
                )
        if not isinstance(transactional_id, str) or not transactional_id.strip():
            raise ConfigurationError("ExactlyOnceKafkaSink: transactional_id must be a non-empty string")
        if not isinstance(self.positions_topic, str) or not self.positions_topic.strip():
            raise ConfigurationError("ExactlyOnceKafkaSink: positions_topic must be a non-empty string")
        if self.positions_partitions < 1:
            raise ConfigurationError(
                f"ExactlyOnceKafkaSink: positions_partitions must be >= 1, got {self.positions_partitions}"
            )
        object.__setattr__(self, "properties", props)
        self.transaction_timeout_ms()  # a bad value fails here, not when the stream opens

    def resolved_properties(self) -> dict[str, str]:
        """The producer properties with placeholders resolved (secrets inside: never log them)."""
        return resolve_properties(self.properties, source="ExactlyOnceKafkaSink properties")

    def transaction_timeout_ms(self) -> int:
        """``transaction.timeout.ms`` as set (or librdkafka's default)."""
        raw = self.properties.get("transaction.timeout.ms", str(DEFAULT_TRANSACTION_TIMEOUT_MS))
        try:
            return int(raw)
        except ValueError as exc:
            raise ConfigurationError(
                f"ExactlyOnceKafkaSink: transaction.timeout.ms must be an integer, got {raw!r}"
            ) from exc

    def check_interval(self, checkpoint_interval: float | None) -> None:
        """Raise :class:`ConfigurationError` when a transaction may stay open longer than the broker lets it:
        ``transaction.timeout.ms`` must exceed the checkpoint interval."""
        if checkpoint_interval is None:
            return
        timeout_ms = self.transaction_timeout_ms()
        if timeout_ms <= checkpoint_interval * 1000:
            raise ConfigurationError(
                f"ExactlyOnceKafkaSink {self.transactional_id!r}: transaction.timeout.ms={timeout_ms} is not "
                f"longer than checkpoint_interval={checkpoint_interval} s: the sink cluster would abort a "
                f"transaction before the stream commits it. Raise transaction.timeout.ms (at most the "
                f"brokers' transaction.max.timeout.ms) or shorten the interval"
            )
