"""Source options: the option table and the validated, frozen :class:`SourceOptions`.

A user hands the builder one flat ``str -> str`` mapping, as in Flink. :func:`split_properties` separates the
source's own options (:data:`SOURCE_OPTION_KEYS`, each defined by one entry of the option table with the
values it takes, parsed into a frozen :class:`SourceOptions`) from client properties, which go to every
consumer unchanged and are checked by librdkafka itself through
:func:`multicluster_source.framework._clientprops.validate_client_properties`, without contacting a broker.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Final, Literal, cast

from multicluster_source.exceptions import ConfigurationError

__all__ = [
    "MAX_COUNT",
    "MAX_MS",
    "SOURCE_OPTION_KEYS",
    "DeserializationErrorPolicy",
    "EnumeratorMode",
    "SourceOptions",
    "key_hint",
    "split_properties",
]

EnumeratorMode = Literal["per_cluster", "global"]
DeserializationErrorPolicy = Literal["fail", "skip"]

#: Upper bound of every millisecond option (about 31.7 years), within ``threading.TIMEOUT_MAX``.
MAX_MS: Final = 1_000_000_000_000
#: Upper bound of the count options (Java's ``Integer.MAX_VALUE``).
MAX_COUNT: Final = 2_147_483_647
#: ``Consumer.consume(num_messages=...)`` refuses more than this.
_MAX_BATCH_RECORDS: Final = 1_000_000

_INT_RE = re.compile(r"-?[0-9]+")


@dataclass(frozen=True)
class _IntRule:
    """An integer range, optionally with ``-1`` as a special value."""

    minimum: int
    maximum: int
    minus_one: str | None = None  # what -1 means, when it is allowed

    def allowed(self) -> str:
        span = f"an integer from {self.minimum} to {self.maximum}"
        return f"-1 ({self.minus_one}) or {span}" if self.minus_one else span

    def accepts(self, value: int) -> bool:
        return (self.minus_one is not None and value == -1) or self.minimum <= value <= self.maximum


@dataclass(frozen=True)
class _Option:
    """One source option: its key, the :class:`SourceOptions` field and what values it takes."""

    key: str
    field: str
    kind: Literal["int", "bool", "optional_bool", "choice", "spec"]
    rule: _IntRule | None = None
    choices: tuple[str, ...] = ()

    def allowed(self) -> str:
        if self.rule is not None:
            return self.rule.allowed()
        if self.kind == "choice":
            return " or ".join(repr(c) for c in self.choices)
        if self.kind == "spec":
            return "'' (none) or 'module:Class'"
        return "'true' or 'false' (case-insensitive)"

    def error(self, value: object) -> ConfigurationError:
        return ConfigurationError(
            f"source option {self.key!r} has invalid value {value!r}: allowed values are {self.allowed()}"
        )

    def parse(self, text: str) -> object:
        """Turn the string form into the field's value; raise naming key, value and allowed values."""
        if not isinstance(text, str):
            raise self.error(text)
        stripped = text.strip()
        if self.kind == "int":
            if not _INT_RE.fullmatch(stripped):
                raise self.error(text)
            return int(stripped)
        if self.kind == "spec":
            if not _SPEC_RE.fullmatch(stripped):
                raise self.error(text)
            return stripped
        if self.kind in ("bool", "optional_bool"):
            lowered = stripped.lower()
            if lowered not in ("true", "false"):
                raise self.error(text)
            return lowered == "true"
        lowered = stripped.lower()
        if lowered not in self.choices:
            raise self.error(text)
        return lowered

    def check(self, value: object) -> None:
        """Raise unless ``value`` is a valid field value (used for direct construction too)."""
        if self.kind == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
            if not ok or self.rule is None or not self.rule.accepts(cast(int, value)):
                raise self.error(value)
        elif self.kind == "bool":
            if not isinstance(value, bool):
                raise self.error(value)
        elif self.kind == "optional_bool":
            if value is not None and not isinstance(value, bool):
                raise self.error(value)
        elif self.kind == "spec":
            if not isinstance(value, str) or not _SPEC_RE.fullmatch(value):
                raise self.error(value)
        elif value not in self.choices:
            raise self.error(value)

    def format(self, value: object) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)


_SPEC_RE: Final = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*)?")

_OPTIONS: Final[tuple[_Option, ...]] = (
    _Option(
        "stream-metadata-discovery-interval-ms",
        "stream_metadata_discovery_interval_ms",
        "int",
        _IntRule(1, MAX_MS, "discover once"),
    ),
    _Option(
        "stream-metadata-discovery-failure-threshold",
        "stream_metadata_discovery_failure_threshold",
        "int",
        _IntRule(1, MAX_COUNT, "never fail"),
    ),
    _Option(
        "stream-metadata-removed-retention-ms",
        "stream_metadata_removed_retention_ms",
        "int",
        _IntRule(0, MAX_MS),
    ),
    _Option(
        "partition.discovery.interval.ms",
        "partition_discovery_interval_ms",
        "int",
        _IntRule(1, MAX_MS, "disabled"),
    ),
    _Option("commit.offsets.on.checkpoint", "commit_offsets_on_checkpoint", "optional_bool"),
    _Option("checkpoint.commit.wait.ms", "checkpoint_commit_wait_ms", "int", _IntRule(0, MAX_MS)),
    _Option("stream-enumerator-mode", "enumerator_mode", "choice", choices=("per_cluster", "global")),
    _Option("num.standby.replicas", "num_standby_replicas", "int", _IntRule(0, MAX_COUNT)),
    _Option(
        "deserialization-error-policy", "deserialization_error_policy", "choice", choices=("fail", "skip")
    ),
    _Option("topic.tracking.enable", "topic_tracking_enable", "bool"),
    _Option("topic.tracking.allow.reset", "topic_tracking_allow_reset", "bool"),
    _Option("reader.buffer.max.batches", "reader_buffer_max_batches", "int", _IntRule(1, MAX_COUNT)),
    _Option("reader.batch.max.records", "reader_batch_max_records", "int", _IntRule(1, _MAX_BATCH_RECORDS)),
    _Option(
        "reader.stall.timeout.ms", "reader_stall_timeout_ms", "int", _IntRule(1, MAX_MS, "never checked")
    ),
    _Option("metadata.change.debounce.ms", "metadata_change_debounce_ms", "int", _IntRule(0, MAX_MS)),
    _Option("standby.assignor", "standby_assignor", "spec"),
    _Option("reader.heartbeat.timeout.ms", "reader_heartbeat_timeout_ms", "int", _IntRule(100, MAX_MS)),
    _Option("replica.sync.wait.ms", "replica_sync_wait_ms", "int", _IntRule(0, MAX_MS)),
    _Option(
        "replica.failover.unreachable.ms",
        "replica_failover_unreachable_ms",
        "int",
        _IntRule(1, MAX_MS, "never automatic"),
    ),
)
_BY_KEY: Final = {o.key: o for o in _OPTIONS}
_BY_FIELD: Final = {o.field: o for o in _OPTIONS}

#: Every key the source consumes itself; any other key is a client property.
SOURCE_OPTION_KEYS: Final[frozenset[str]] = frozenset(_BY_KEY)


@dataclass(frozen=True)
class SourceOptions:
    """The source's own options, validated; every field is checked on construction too.

    Field names follow the option keys (``stream-metadata-discovery-interval-ms`` ->
    ``stream_metadata_discovery_interval_ms``), except ``stream-enumerator-mode`` -> ``enumerator_mode``.
    Durations are integer milliseconds; ``-1`` means "once" (discovery interval), "never fail" (failure
    threshold) or "disabled" (partition discovery). ``commit_offsets_on_checkpoint=None`` means "true when a
    group id is set" (see :meth:`commits_offsets`).
    """

    stream_metadata_discovery_interval_ms: int = 30_000
    stream_metadata_discovery_failure_threshold: int = -1
    stream_metadata_removed_retention_ms: int = 86_400_000
    partition_discovery_interval_ms: int = 30_000
    commit_offsets_on_checkpoint: bool | None = None
    checkpoint_commit_wait_ms: int = 5_000
    enumerator_mode: EnumeratorMode = "per_cluster"
    num_standby_replicas: int = 0
    deserialization_error_policy: DeserializationErrorPolicy = "fail"
    topic_tracking_enable: bool = True
    topic_tracking_allow_reset: bool = True
    reader_buffer_max_batches: int = 16
    reader_batch_max_records: int = 1000
    reader_stall_timeout_ms: int = 60_000
    metadata_change_debounce_ms: int = 20
    standby_assignor: str = ""
    reader_heartbeat_timeout_ms: int = 10_000
    replica_sync_wait_ms: int = 5_000
    replica_failover_unreachable_ms: int = -1

    def __post_init__(self) -> None:
        for f in fields(self):
            _BY_FIELD[f.name].check(getattr(self, f.name))

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> SourceOptions:
        """Parse source options from their string form; keys not given keep their defaults.

        ``props`` must hold source options only (use :func:`split_properties` first): any other key raises
        :class:`ConfigurationError`, as does a value outside the allowed values; the message names the key,
        the value given and what is allowed.
        """
        values: dict[str, Any] = {}
        for key, text in props.items():
            option = _BY_KEY.get(key)
            if option is None:
                raise ConfigurationError(f"unknown source option {key!r}{key_hint(key)}")
            value = option.parse(text)
            try:
                option.check(value)
            except ConfigurationError:
                raise option.error(text) from None  # name the value as it was given
            values[option.field] = value
        return cls(**values)

    def as_dict(self) -> dict[str, str]:
        """The options in their string form, keyed by option key; ``from_properties`` reads it back.

        ``commit.offsets.on.checkpoint`` is left out while it is ``None`` (the group-id dependent default).
        """
        out: dict[str, str] = {}
        for option in _OPTIONS:
            value = getattr(self, option.field)
            if value is not None:
                out[option.key] = option.format(value)
        return out

    def commits_offsets(self, group_id: str | None) -> bool:
        """Whether checkpointed offsets are committed back to the clusters, given the source's group id."""
        if self.commit_offsets_on_checkpoint is None:
            return bool(group_id)
        return self.commit_offsets_on_checkpoint


def split_properties(props: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Split one flat mapping into ``(source options, client properties)``; the input is not mutated."""
    source: dict[str, str] = {}
    client: dict[str, str] = {}
    for key, value in props.items():
        (source if key in SOURCE_OPTION_KEYS else client)[key] = value
    return source, client


#: Hints for keys that are not client properties but look like something the source offers.
_KEY_HINTS: Final = {
    "client.id.prefix": "set it with set_client_id_prefix(), not as a property",
}


def key_hint(key: str) -> str:
    """The end of a message about an unknown ``key``: what it may have been meant as (a source option, a
    builder setter) in parentheses, or "" when nothing resembles it."""
    if key in _KEY_HINTS:
        return f" ({_KEY_HINTS[key]})"
    close = difflib.get_close_matches(key, sorted(SOURCE_OPTION_KEYS), n=1, cutoff=0.75)
    return f" (did you mean source option {close[0]!r}?)" if close else ""
