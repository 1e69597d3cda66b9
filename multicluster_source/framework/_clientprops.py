"""Client properties: librdkafka checks them, without contacting a broker, before anything runs.

:func:`validate_client_properties` creates a short-lived probe consumer with the properties and turns
librdkafka's complaint into a :class:`ConfigurationError` that names the property (secret values masked);
the source's own rules (no auto-commit, no empty ``group.id``, no callback keys) come first.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Final

from confluent_kafka import Consumer, KafkaException

from multicluster_source.exceptions import ConfigurationError
from multicluster_source.framework._javaprops import (
    JAVA_CONSUMER_PROPERTIES,
    java_hint,
    translate_java_properties,
)
from multicluster_source.framework._options import key_hint

__all__ = ["validate_client_properties"]

# The name these warnings have always been logged under (they moved here from ``_options``).
_log = logging.getLogger("multicluster_source.framework._options")

#: Keys confluent-kafka reads as Python callables; a string property cannot provide them.
_CALLBACK_KEYS: Final = frozenset(
    {"error_cb", "throttle_cb", "stats_cb", "logger", "oauth_cb", "on_commit", "on_delivery"}
)
#: librdkafka parses a bool as true for these spellings (case-insensitive).
_LIBRDKAFKA_TRUE: Final = frozenset({"true", "t", "1"})
_SECRET_WORDS: Final = ("password", "secret", "jaas", "token", "credential", "key.pem", "private")
#: librdkafka's messages for a single bad key or value; group 1 is always the property name.
_NAMED_ERROR_RES: Final = (
    re.compile(r'No such configuration property: "([^"]+)"'),
    re.compile(r'Invalid value (?:"[^"]*" )?for configuration property "([^"]+)"'),
    re.compile(r'Configuration property "([^"]+)" value .* is outside allowed range'),
    re.compile(r'Expected bool value for "([^"]+)"'),
    re.compile(r"^(\S+) requires a callable"),
)


def _shown(key: str, value: str) -> str:
    """A value as it may appear in a message: secrets never do."""
    if any(word in key.lower() for word in _SECRET_WORDS):
        return "'***'"
    return repr(value)


class _LibrdkafkaLog(logging.Handler):
    """Collects librdkafka's log lines during a probe so none reaches stderr."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _swallow(_error: object) -> None:
    """``error_cb`` of probe consumers: they never connect, and nothing they report matters."""


def _probe(props: Mapping[str, str]) -> tuple[str | None, list[str]]:
    """Create and close a consumer with ``props``; return (librdkafka's error or None, log lines).

    No ``bootstrap.servers`` is given, so librdkafka opens no connection and logs no connection errors.
    """
    # A standalone logger (not registered with logging's manager), so concurrent probes never mix lines.
    probe_logger = logging.Logger(f"{_log.name}.probe")
    handler = _LibrdkafkaLog()
    conf: dict[str, object] = {"group.id": "multicluster-source-config-probe", **props}
    conf["logger"] = probe_logger
    conf["error_cb"] = _swallow
    probe_logger.addHandler(handler)
    try:
        consumer = Consumer(conf)
        consumer.close()
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        text = error.str() if hasattr(error, "str") else str(error)
        return str(text).strip(), handler.lines
    except (TypeError, ValueError) as exc:
        return str(exc).strip(), handler.lines
    return None, handler.lines


def _conf_error_property(message: str) -> str | None:
    """The property a librdkafka per-property error names (unknown key, bad value), else None."""
    for pattern in _NAMED_ERROR_RES:
        match = pattern.search(message)
        if match:
            return match.group(1)
    return None


def _reject(where: str, key: str, value: str | None, message: str) -> ConfigurationError:
    hint = java_hint(key)
    if hint is not None:
        return ConfigurationError(f"{where}: client property {key!r} is {hint}")
    if message.startswith("No such configuration property"):
        return ConfigurationError(
            f"{where}: unknown client property {key!r}{key_hint(key)} (librdkafka: {message})"
        )
    shown = "" if value is None else f" {_shown(key, value)}"
    if _conf_error_property(message) is None:
        # librdkafka refused to create the client with this property (checked alone), not its syntax.
        return ConfigurationError(
            f"{where}: client property {key!r} with value{shown} is refused (librdkafka: {message})"
        )
    return ConfigurationError(
        f"{where}: invalid value{shown} for client property {key!r} (librdkafka: {message})"
    )


def validate_client_properties(props: Mapping[str, str], *, where: str) -> None:
    """Ask librdkafka whether every entry of ``props`` is a valid consumer property; no broker is contacted.

    A short-lived consumer without ``bootstrap.servers`` is created and closed at once, with its log and
    errors captured (so nothing is printed). Raises :class:`ConfigurationError` whose message starts with
    ``where`` (e.g. ``"set_properties"``, ``"cluster east properties"``) and names the property:

    * an unknown key (with a hint when it resembles a source option or a builder setter);
    * a value librdkafka refuses (secret values are masked in the message);
    * ``enable.auto.commit`` set to true: the source reads with ``assign()`` and commits the offsets of
      completed checkpoints itself (``commit.offsets.on.checkpoint``); auto-commit would commit offsets of
      records not yet covered by a checkpoint and break at-least-once delivery on restore;
    * an empty ``group.id`` (it would abort the process inside confluent-kafka; use ``set_group_id``);
    * confluent-kafka's callback keys (``error_cb``, ``stats_cb``, ...), which cannot be strings.

    A value holding a placeholder (``${env:NAME}``, ``${file:PATH}``) is not resolved here: only its key is
    checked. ``bootstrap.servers`` is accepted and not probed (the cluster's metadata provides it).
    Producer-only properties are accepted (librdkafka ignores them) and logged as a warning.

    Java client names (``fetch.max.wait.ms``, ``sasl.jaas.config``, ...; see ``_javaprops``): the ones that
    map one-to-one are checked under their librdkafka name (callers use :func:`translate_java_properties`
    to pass the client that name), the others are refused with what to write instead.
    """
    literal: dict[str, str] = {}
    placeholders: dict[str, str] = {}
    props = translate_java_properties(props, where=where)
    for key, value in props.items():
        entry = JAVA_CONSUMER_PROPERTIES.get(key)
        if entry is not None and key != "max.poll.records":
            raise _reject(where, key, None, "")
        if not isinstance(key, str) or not isinstance(value, str):
            raise ConfigurationError(
                f"{where}: client property {key!r} must map a string to a string, got {type(value).__name__}"
            )
        if key in _CALLBACK_KEYS:
            raise ConfigurationError(
                f"{where}: client property {key!r} is a confluent-kafka callback and cannot be given as a "
                "string property; the source installs its own callbacks"
            )
        if key == "bootstrap.servers":
            continue
        if "${" in value:
            placeholders[key] = value
        else:
            literal[key] = value

    if "enable.auto.commit" in literal and literal["enable.auto.commit"].strip().lower() in _LIBRDKAFKA_TRUE:
        raise ConfigurationError(
            f"{where}: client property 'enable.auto.commit' must not be true: the source assigns partitions "
            "itself and commits the offsets of completed checkpoints (see 'commit.offsets.on.checkpoint'); "
            "remove it or set it to 'false'"
        )
    if "group.id" in literal and not literal["group.id"].strip():
        raise ConfigurationError(
            f"{where}: client property 'group.id' must not be empty; use set_group_id() to name the group"
        )

    for key, value in placeholders.items():
        # The value is not literal: only an unknown key is an error, whatever librdkafka says of the value.
        message, _ = _probe({key: value})
        if message is not None and message.startswith("No such configuration property"):
            raise _reject(where, key, None, message)

    message, log_lines = _probe(literal)
    if message is not None:
        _raise_for(where, literal, message, lenient=bool(placeholders))
    for line in log_lines:
        if "CONFWARN" in line:
            _log.warning("%s: %s", where, line.rsplit("]: ", 1)[-1])


def _raise_for(where: str, literal: Mapping[str, str], message: str, *, lenient: bool) -> None:
    """Turn a failed probe of ``literal`` into a ConfigurationError naming the culprit property."""
    key = _conf_error_property(message)
    if key is not None and key in literal:
        raise _reject(where, key, literal[key], message)
    if lenient:
        # Every property was accepted one by one; only creating the client failed, and unresolved
        # placeholder values (left out of the probe) may be what it missed, e.g. a keystore password.
        return
    # The message names no property (e.g. "Failed to create consumer: ..."): find the one that fails alone.
    for candidate, value in literal.items():
        single, _ = _probe({candidate: value})
        if single is not None:
            raise _reject(where, candidate, value, single)
    keys = ", ".join(sorted(literal))
    raise ConfigurationError(f"{where}: client properties rejected together ({keys}) (librdkafka: {message})")
