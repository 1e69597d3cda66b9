"""Java consumer property names (Flink, Kafka Connect, the Java client) and their librdkafka counterparts.

People moving a Flink job bring the Java client's names. :data:`JAVA_CONSUMER_PROPERTIES` says, for the
common ones that librdkafka does not understand as written, what to use instead:

- a **rename** (same meaning, another name) is accepted: :func:`translate_java_properties` replaces it by the
  librdkafka name and logs a warning saying so;
- every other entry is refused by the client-property check with :func:`java_hint` in the message: "did you
  mean <librdkafka name>?", or how the same thing is done here (``sasl.jaas.config`` gets the librdkafka
  keys that replace a JAAS line);
- ``max.poll.records`` is accepted by librdkafka but does not size what this source hands out: a warning
  points to the source's own knobs.

Java names that librdkafka knows under the same name (``fetch.min.bytes``, ``max.partition.fetch.bytes``,
``client.rack``, ``isolation.level``, ...) are not listed: they pass through unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from multicluster_source.exceptions import ConfigurationError

__all__ = ["JAVA_CONSUMER_PROPERTIES", "JavaProperty", "java_hint", "translate_java_properties"]

_log = logging.getLogger("multicluster_source")


@dataclass(frozen=True)
class JavaProperty:
    """A Java consumer property name and what librdkafka uses instead.

    ``librdkafka`` is the librdkafka property of the same purpose (None: there is none); ``rename`` is true
    when it means exactly the same and the value carries over; ``note`` explains the rest.
    """

    java: str
    librdkafka: str | None
    rename: bool = False
    note: str = ""


_JAAS_NOTE: Final = (
    "librdkafka takes no JAAS line; set its keys instead: PLAIN or SCRAM: 'sasl.mechanism' (PLAIN, "
    "SCRAM-SHA-256, SCRAM-SHA-512), 'sasl.username', 'sasl.password'; OAUTHBEARER with OIDC: "
    "'sasl.mechanism'='OAUTHBEARER', 'sasl.oauthbearer.method'='oidc', 'sasl.oauthbearer.client.id', "
    "'sasl.oauthbearer.client.secret', 'sasl.oauthbearer.token.endpoint.url' (and 'sasl.oauthbearer.scope'); "
    "GSSAPI (Kerberos): 'sasl.kerberos.service.name', 'sasl.kerberos.principal', 'sasl.kerberos.keytab'; "
    "with 'security.protocol' SASL_SSL or SASL_PLAINTEXT; secrets may be '${env:NAME}' or '${file:PATH}'"
)

_TABLE: Final = (
    JavaProperty("fetch.max.wait.ms", "fetch.wait.max.ms", rename=True),
    JavaProperty("receive.buffer.bytes", "socket.receive.buffer.bytes", rename=True, note="-1 becomes 0"),
    JavaProperty("send.buffer.bytes", "socket.send.buffer.bytes", rename=True, note="-1 becomes 0"),
    JavaProperty("ssl.truststore.certificates", "ssl.ca.pem", rename=True),
    JavaProperty("ssl.keystore.certificate.chain", "ssl.certificate.pem", rename=True),
    JavaProperty("ssl.keystore.key", "ssl.key.pem", rename=True),
    JavaProperty("sasl.jaas.config", None, note=_JAAS_NOTE),
    JavaProperty(
        "ssl.truststore.location",
        "ssl.ca.location",
        note="a PEM file of CA certificates; export a JKS truststore with "
        "'keytool -exportcert -rfc -keystore truststore.jks -alias <alias>'",
    ),
    JavaProperty(
        "ssl.truststore.password", None, note="a PEM CA file ('ssl.ca.location') needs no password; remove it"
    ),
    JavaProperty(
        "ssl.truststore.type",
        None,
        note="librdkafka reads CA certificates as PEM ('ssl.ca.location'); remove it",
    ),
    JavaProperty(
        "ssl.keystore.type",
        None,
        note="'ssl.keystore.location' is a PKCS#12 file; PEM goes to 'ssl.certificate.location' and "
        "'ssl.key.location'; JKS is not read",
    ),
    JavaProperty(
        "ssl.enabled.protocols", None, note="librdkafka has no such setting; OpenSSL's defaults apply"
    ),
    JavaProperty("ssl.protocol", None, note="librdkafka has no such setting; OpenSSL's defaults apply"),
    JavaProperty("ssl.keymanager.algorithm", None, note="a Java security setting; remove it"),
    JavaProperty("ssl.trustmanager.algorithm", None, note="a Java security setting; remove it"),
    JavaProperty("security.providers", None, note="a Java security setting; remove it"),
    JavaProperty(
        "sasl.login.callback.handler.class",
        "sasl.oauthbearer.method",
        note="for OIDC tokens set 'sasl.oauthbearer.method'='oidc' and the 'sasl.oauthbearer.*' keys",
    ),
    JavaProperty(
        "sasl.client.callback.handler.class", None, note="librdkafka loads no classes; see 'sasl.jaas.config'"
    ),
    JavaProperty(
        "sasl.login.refresh.window.factor",
        None,
        note="librdkafka refreshes OIDC tokens on its own; remove it",
    ),
    JavaProperty("key.deserializer", None, note="use builder.set_deserializer(callable) on the source"),
    JavaProperty("value.deserializer", None, note="use builder.set_deserializer(callable) on the source"),
    JavaProperty(
        "interceptor.classes", None, note="librdkafka loads no classes; wrap the deserializer instead"
    ),
    JavaProperty(
        "default.api.timeout.ms", None, note="the source sets its own timeouts per call; 'socket.timeout.ms'"
    ),
    JavaProperty(
        "exclude.internal.topics", None, note="the source reads only the topics its metadata names; remove it"
    ),
    JavaProperty(
        "metric.reporters", None, note="the source exports Prometheus metrics (open(registry=...)); remove it"
    ),
    JavaProperty("auto.include.jmx.reporter", None, note="there is no JMX; remove it"),
    JavaProperty(
        "max.poll.records",
        None,
        note="this source sizes its batches with the source option 'reader.batch.max.records' and what poll "
        "returns with poll(max_records=...)",
    ),
)

JAVA_CONSUMER_PROPERTIES: Final[Mapping[str, JavaProperty]] = {p.java: p for p in _TABLE}
"""Java consumer property name -> what librdkafka uses instead (see the module docstring)."""

#: Accepted by librdkafka as written, but without the effect a Java user expects: a warning, not an error.
_WARN_ONLY: Final = frozenset({"max.poll.records"})
#: Java's "system default" is -1 for these, librdkafka's is 0.
_MINUS_ONE_IS_ZERO: Final = frozenset({"receive.buffer.bytes", "send.buffer.bytes"})
_warned: set[tuple[str, str]] = set()


def java_hint(key: str) -> str | None:
    """What to write instead of the Java property ``key`` (a sentence), or None when it is not one."""
    entry = JAVA_CONSUMER_PROPERTIES.get(key)
    if entry is None:
        return None
    if entry.librdkafka is not None and entry.note:
        return f"a Java client property; did you mean {entry.librdkafka!r}? ({entry.note})"
    if entry.librdkafka is not None:
        return f"a Java client property; did you mean {entry.librdkafka!r}?"
    return f"a Java client property: {entry.note}"


def _warn_once(where: str, key: str, message: str) -> None:
    if (where, key) in _warned:
        return
    _warned.add((where, key))
    _log.warning("%s: %s", where, message)


def translate_java_properties(props: Mapping[str, str], *, where: str) -> dict[str, str]:
    """A copy of ``props`` with the one-to-one Java names replaced by their librdkafka names (a warning per
    name, once per ``where``). Raises :class:`ConfigurationError` when both names of one setting are given
    with different values. Other Java names are left for the client-property check to refuse with a hint.
    """
    out = dict(props)
    for key in list(out):
        entry = JAVA_CONSUMER_PROPERTIES.get(key)
        if entry is None:
            continue
        if key in _WARN_ONLY:
            _warn_once(where, key, f"client property {key!r} is a Java client property: {entry.note}")
            continue
        if not entry.rename or entry.librdkafka is None:
            continue
        value = out.pop(key)
        if key in _MINUS_ONE_IS_ZERO and isinstance(value, str) and value.strip() == "-1":
            value = "0"
        target = entry.librdkafka
        if target in out and out[target] != value:
            raise ConfigurationError(
                f"{where}: client properties {key!r} (Java) and {target!r} (librdkafka) name the same "
                "setting with different values; keep one"
            )
        out[target] = value
        _warn_once(where, key, f"Java client property {key!r} is read as librdkafka's {target!r}")
    return out
