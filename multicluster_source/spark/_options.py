"""The Spark source's options, read from the strings Spark hands over (no pyspark here: unit-testable).

Names follow Spark's own Kafka source where one exists. Spark passes options case-insensitively (keys may
arrive lower-cased), so every lookup here ignores case. Client properties (``kafka.`` prefix) stay as
written: a ``${env:...}`` or ``${file:...}`` placeholder is resolved only where a client is made.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from multicluster_source.exceptions import ConfigurationError
from multicluster_source.framework._clientprops import validate_client_properties
from multicluster_source.framework._split import parse_split_id
from multicluster_source.metadata._configmap import DEFAULT_KEY

__all__ = [
    "FORMAT",
    "OPTION_NAMES",
    "SparkOptions",
    "StartingOffsets",
    "for_batch",
    "for_streaming",
    "parse_options",
]

FORMAT = "multicluster-kafka"
"""The format name :func:`multicluster_source.spark.register` registers."""

EARLIEST = -2
LATEST = -1

OPTION_NAMES = (
    "metadataFile",
    "metadataConfigMap",
    "metadataConfigMapKey",
    "metadataTopic",
    "metadataTopicBootstrapServers",
    "streamIds",
    "startingOffsets",
    "endingOffsets",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "commitGroupId",
    "includeHeaders",
    "failOnDataLoss",
    "groupIdPrefix",
    "kafkaConsumer.pollTimeoutMs",
    "replicaSyncWait",
)
"""The options this source reads, besides the ``kafka.``-prefixed client properties (and the
``metadataTopic.kafka.``-prefixed ones of the metadata topic's cluster)."""

METADATA_TOPIC_PREFIX = "metadataTopic.kafka."
"""Client properties of the cluster that holds the metadata topic (security and the like)."""

_REFUSED_CLIENT_KEYS = {
    "bootstrap.servers": "the bootstrap servers of every cluster come from the metadata file",
    "group.id": "the source's consumers use no group (set groupIdPrefix; commitGroupId commits offsets)",
    "enable.auto.commit": "the source never commits offsets: Spark's checkpoint holds them",
}
_BOOLEANS = {"true": True, "false": False}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True)
class StartingOffsets:
    """Where a new query starts: ``earliest``, ``latest``, or per split (``-2`` earliest, ``-1`` latest);
    splits left out of the map start at the earliest offset (as in Spark's Kafka source). Also where a batch
    read ends (``endingOffsets``: ``latest`` or per split, ``-1`` latest; splits left out end at latest)."""

    kind: Literal["earliest", "latest", "explicit"]
    explicit: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SparkOptions:
    """The parsed options of one query's source. Holds only what the user wrote: never a resolved secret."""

    metadata_file: str
    """The metadata file, the mounted ConfigMap directory with ``metadata_key``, or the metadata topic with
    ``metadata_servers``."""
    metadata_key: str | None
    """``metadataConfigMapKey`` when the metadata is a mounted ConfigMap (``metadataConfigMap``)."""
    stream_ids: tuple[str, ...]
    starting: StartingOffsets
    ending: StartingOffsets | None
    """``endingOffsets`` (batch reads only), ``None`` when not given."""
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int | None
    commit_group_id: str | None
    client_properties: Mapping[str, str]
    include_headers: bool
    fail_on_data_loss: bool
    group_id_prefix: str
    poll_timeout_ms: int
    replica_sync_wait_ms: int = 5000
    """``replicaSyncWait``: how long a replica handover may wait for MirrorMaker 2 to catch up."""
    metadata_servers: str | None = None
    """``metadataTopicBootstrapServers`` when the metadata is a compacted topic (``metadataTopic``)."""
    metadata_properties: Mapping[str, str] = field(default_factory=dict)
    """The ``metadataTopic.kafka.*`` client properties (placeholders kept as written)."""

    @property
    def metadata_option(self) -> str:
        """The option that names the metadata, with its value (for messages)."""
        if self.metadata_servers is not None:
            return f"option metadataTopic {self.metadata_file!r} (at {self.metadata_servers})"
        if self.metadata_key is None:
            return f"option metadataFile {self.metadata_file!r}"
        return f"option metadataConfigMap {self.metadata_file!r} (key {self.metadata_key!r})"


def _get(options: Mapping[str, str], name: str) -> str | None:
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return str(value)
    return None


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        return _BOOLEANS[raw.strip().lower()]
    except KeyError:
        raise ConfigurationError(f"option {name}: expected true or false, got {raw!r}") from None


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigurationError(f"option {name}: expected a positive integer, got {raw!r}") from None
    if value <= 0:
        raise ConfigurationError(f"option {name}: expected a positive integer, got {raw!r}")
    return value


def _duration_ms(options: Mapping[str, str], name: str, default: str) -> int:
    raw = _get(options, name)
    match = _DURATION.match(raw if raw is not None else default)
    if match is None:
        raise ConfigurationError(f"option {name}: expected a duration such as 30s, 15m or 500ms, got {raw!r}")
    return int(match.group(1)) * _UNIT_MS[(match.group(2) or "ms").lower()]


def parse_starting_offsets(raw: str | None) -> StartingOffsets:
    """``startingOffsets``: ``latest`` (also when absent), ``earliest``, or a JSON object of split id
    (``cluster/topic/partition``) to offset, ``-2`` meaning earliest and ``-1`` latest."""
    if raw is None or raw.strip().lower() == "latest":
        return StartingOffsets("latest")
    text = raw.strip()
    if text.lower() == "earliest":
        return StartingOffsets("earliest")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"option startingOffsets: expected latest, earliest or a JSON object, got {raw!r} ({exc.msg})"
        ) from None
    if not isinstance(data, dict):
        raise ConfigurationError("option startingOffsets: the JSON must be an object of split id to offset")
    explicit: dict[str, int] = {}
    for key, value in data.items():
        try:
            parse_split_id(key)
        except ValueError:
            raise ConfigurationError(
                f"option startingOffsets: key {key!r} is not a split id 'cluster/topic/partition'"
            ) from None
        if isinstance(value, bool) or not isinstance(value, int) or value < EARLIEST:
            raise ConfigurationError(
                f"option startingOffsets: the offset of {key!r} must be an offset >= 0, -2 (earliest) or "
                f"-1 (latest), got {value!r}"
            )
        explicit[key] = value
    return StartingOffsets("explicit", dict(sorted(explicit.items())))


def parse_ending_offsets(raw: str | None) -> StartingOffsets | None:
    """``endingOffsets`` (batch reads): ``latest`` or a JSON object of split id to offset, ``-1`` meaning
    latest (``earliest`` and ``-2`` are refused, as in Spark's Kafka source); ``None`` when absent."""
    if raw is None:
        return None
    try:
        ending = parse_starting_offsets(raw)
    except ConfigurationError as exc:
        raise ConfigurationError(str(exc).replace("startingOffsets", "endingOffsets")) from None
    if ending.kind == "earliest" or EARLIEST in ending.explicit.values():
        raise ConfigurationError(
            f"option endingOffsets: earliest (-2) cannot end a batch read, got {raw!r} (latest, -1, offsets)"
        )
    return ending


def client_properties(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.``-prefixed options without the prefix (placeholders kept as written)."""
    out: dict[str, str] = {}
    for key, value in options.items():
        if not key.lower().startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        reason = _REFUSED_CLIENT_KEYS.get(name.lower())
        if reason is not None:
            raise ConfigurationError(f"option kafka.{name} is not supported: {reason}")
        out[name] = str(value)
    # librdkafka checks every key (and every value without a placeholder), no broker asked
    validate_client_properties(out, where="the kafka.* options")
    return dict(sorted(out.items()))


def metadata_topic_properties(options: Mapping[str, str]) -> dict[str, str]:
    """The ``metadataTopic.kafka.``-prefixed options without the prefix (placeholders kept as written)."""
    out: dict[str, str] = {}
    for key, value in options.items():
        if key.lower().startswith(METADATA_TOPIC_PREFIX.lower()):
            name = key[len(METADATA_TOPIC_PREFIX) :]
            if name.lower() in ("bootstrap.servers", "group.id"):
                raise ConfigurationError(
                    f"option {METADATA_TOPIC_PREFIX}{name} is not supported: the metadata topic's cluster is "
                    "metadataTopicBootstrapServers, and its reader uses no group"
                )
            out[name] = str(value)
    validate_client_properties(out, where=f"the {METADATA_TOPIC_PREFIX}* options")
    return dict(sorted(out.items()))


def parse_options(options: Mapping[str, str]) -> SparkOptions:
    """Check and parse the options; a bad one raises :class:`ConfigurationError` naming it."""
    metadata_file = (_get(options, "metadataFile") or "").strip()
    configmap = (_get(options, "metadataConfigMap") or "").strip()
    topic = (_get(options, "metadataTopic") or "").strip()
    servers = (_get(options, "metadataTopicBootstrapServers") or "").strip()
    given = [
        name
        for name, value in (
            ("metadataFile", metadata_file),
            ("metadataConfigMap", configmap),
            ("metadataTopic", topic),
        )
        if value
    ]
    if len(given) > 1:
        raise ConfigurationError(f"options {' and '.join(given)}: set one of them, not several")
    if not given:
        raise ConfigurationError(
            "option metadataFile is required: the path of a metadata file (or metadataConfigMap: a mounted "
            "ConfigMap directory; or metadataTopic: a compacted metadata topic)"
        )
    if topic and not servers:
        raise ConfigurationError(
            f"option metadataTopicBootstrapServers is required with metadataTopic {topic!r}: the bootstrap "
            "servers of the cluster that holds it"
        )
    if servers and not topic:
        raise ConfigurationError("option metadataTopicBootstrapServers is set without metadataTopic")
    key = (_get(options, "metadataConfigMapKey") or DEFAULT_KEY).strip() if configmap else None
    stream_ids = tuple(
        sorted({s.strip() for s in (_get(options, "streamIds") or "").split(",") if s.strip()})
    )
    if not stream_ids:
        raise ConfigurationError("option streamIds is required: comma-separated stream ids")
    poll_timeout = _positive_int(options, "kafkaConsumer.pollTimeoutMs")
    return SparkOptions(
        metadata_file=metadata_file or configmap or topic,
        metadata_key=key,
        metadata_servers=servers or None,
        metadata_properties=metadata_topic_properties(options),
        stream_ids=stream_ids,
        starting=parse_starting_offsets(_get(options, "startingOffsets")),
        ending=parse_ending_offsets(_get(options, "endingOffsets")),
        max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger"),
        min_offsets_per_trigger=_positive_int(options, "minOffsetsPerTrigger"),
        max_trigger_delay_ms=_duration_ms(options, "maxTriggerDelay", "15m"),
        min_partitions=_positive_int(options, "minPartitions"),
        commit_group_id=(_get(options, "commitGroupId") or "").strip() or None,
        client_properties=client_properties(options),
        include_headers=_bool(options, "includeHeaders", False),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        group_id_prefix=(_get(options, "groupIdPrefix") or "spark-multicluster-kafka").strip(),
        poll_timeout_ms=poll_timeout if poll_timeout is not None else 120_000,
        replica_sync_wait_ms=_duration_ms(options, "replicaSyncWait", "5s"),
    )


def for_batch(parsed: SparkOptions, options: Mapping[str, str]) -> SparkOptions:
    """The options of a batch read (``spark.read``), as Spark's Kafka source has them: ``startingOffsets``
    defaults to ``earliest`` and may not be ``latest`` (nor ``-1``), ``endingOffsets`` defaults to
    ``latest``."""
    if _get(options, "startingOffsets") is None:
        parsed = replace(parsed, starting=StartingOffsets("earliest"))
    starting = parsed.starting
    if starting.kind == "latest" or LATEST in starting.explicit.values():
        raise ConfigurationError(
            "option startingOffsets: a batch read cannot start at latest (-1): earliest, or offsets"
        )
    return parsed if parsed.ending is not None else replace(parsed, ending=StartingOffsets("latest"))


def for_streaming(parsed: SparkOptions) -> SparkOptions:
    """The options of a streaming query: ``endingOffsets`` is refused (a batch read's option)."""
    if parsed.ending is not None:
        raise ConfigurationError("option endingOffsets is for batch reads (spark.read), not for streaming")
    return parsed
