"""``${env:NAME}`` and ``${file:/path}`` placeholders in cluster property values.

Syntax (decided here, documented for users in the metadata docs):

- ``${env:NAME}`` is replaced by the environment variable ``NAME`` (``[A-Za-z_][A-Za-z0-9_]*``).
- ``${file:/abs/path}`` is replaced by the content of the file (UTF-8), with trailing newlines removed
  (secret files mounted by Kubernetes usually end with one). The path must be absolute.
- Placeholders may be embedded in a longer value (``password="${env:PW}";`` in ``sasl.jaas.config``),
  several per value. ``$${`` is a literal ``${``. A resolved value is never scanned again.
- Any other kind (``${vault:x}``), a malformed placeholder or an unterminated ``${`` is a validation error
  when the metadata is read.
- A missing environment variable or unreadable file is *not* a read-time error: metadata is often validated
  where the secrets are absent (CI, a tool) and a file may describe clusters this job never connects to. It
  is logged as a warning once per (source, key, reference) when the metadata is read, and it is a
  :class:`MetadataError` naming the source and the key when a client is created
  (:func:`resolve_properties`).

Nothing here ever logs or puts into an exception message a resolved value.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from multicluster_source.exceptions import MetadataError

__all__ = [
    "PLACEHOLDER_KINDS",
    "Placeholder",
    "find_placeholder_errors",
    "find_unresolvable_placeholders",
    "has_placeholder",
    "is_secret_key",
    "redact_properties",
    "resolve_properties",
    "resolve_value",
    "warn_unresolvable_placeholders",
]

_log = logging.getLogger("multicluster_source.metadata")

PLACEHOLDER_KINDS = ("env", "file")
REDACTED = "***"

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KIND_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")

# Tokens of a property name (split on . _ -) that mark its value as secret.
_SECRET_TOKENS = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "secret",
        "token",
        "credential",
        "credentials",
        "jaas",
        "apikey",
        "privatekey",
    }
)
_SECRET_FRAGMENTS = ("sasl.jaas.config", "ssl.key.", "user.info", "private.key", "api.key")


@dataclass(frozen=True)
class Placeholder:
    """One ``${kind:argument}`` reference as written in a property value."""

    kind: str
    argument: str
    text: str

    def __str__(self) -> str:
        return self.text


class _SyntaxProblem(ValueError):
    pass


def _scan(value: str) -> Iterator[str | Placeholder]:
    """Split ``value`` into literal text and placeholders; raises _SyntaxProblem on malformed input."""
    i = 0
    literal: list[str] = []
    n = len(value)
    while i < n:
        if value.startswith("$${", i):
            literal.append("${")
            i += 3
            continue
        if value.startswith("${", i):
            end = value.find("}", i + 2)
            if end < 0:
                raise _SyntaxProblem(f"unterminated placeholder starting at character {i + 1}")
            text = value[i : end + 1]
            body = value[i + 2 : end]
            kind, sep, argument = body.partition(":")
            if not sep or not _KIND_RE.match(kind):
                raise _SyntaxProblem(
                    f"malformed placeholder {text!r}: expected ${{kind:argument}} "
                    f"with kind one of {', '.join(PLACEHOLDER_KINDS)} (write $${{ for a literal ${{)"
                )
            if literal:
                yield "".join(literal)
                literal = []
            yield Placeholder(kind=kind, argument=argument, text=text)
            i = end + 1
            continue
        literal.append(value[i])
        i += 1
    if literal:
        yield "".join(literal)


def _check(placeholder: Placeholder) -> str | None:
    if placeholder.kind not in PLACEHOLDER_KINDS:
        return (
            f"unknown placeholder kind {placeholder.kind!r} in {placeholder.text!r}; "
            f"supported: {', '.join('${' + k + ':...}' for k in PLACEHOLDER_KINDS)}"
        )
    if placeholder.kind == "env" and not _ENV_NAME_RE.match(placeholder.argument):
        return f"invalid environment variable name in {placeholder.text!r}"
    if placeholder.kind == "file" and not os.path.isabs(placeholder.argument):
        return f"the path in {placeholder.text!r} must be absolute"
    return None


def find_placeholder_errors(value: str) -> list[str]:
    """Syntax and kind problems of the placeholders in one property value (empty when it is valid)."""
    try:
        parts = list(_scan(value))
    except _SyntaxProblem as exc:
        return [str(exc)]
    return [p for p in (_check(part) for part in parts if isinstance(part, Placeholder)) if p]


def has_placeholder(value: str) -> bool:
    """Whether ``value`` holds at least one well-formed placeholder."""
    try:
        return any(isinstance(part, Placeholder) for part in _scan(value))
    except _SyntaxProblem:
        return False


def _only_placeholders(value: str) -> bool:
    try:
        parts = list(_scan(value))
    except _SyntaxProblem:
        return False
    return bool(parts) and all(isinstance(p, Placeholder) or not p.strip() for p in parts)


def _resolve_one(placeholder: Placeholder) -> str:
    """The value of one placeholder; raises ValueError with a message that never holds the value."""
    problem = _check(placeholder)
    if problem:
        raise ValueError(problem)
    if placeholder.kind == "env":
        resolved = os.environ.get(placeholder.argument)
        if resolved is None:
            raise ValueError(f"environment variable {placeholder.argument!r} is not set ({placeholder.text})")
        return resolved
    try:
        with open(placeholder.argument, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ValueError(
            f"cannot read file {placeholder.argument!r} for {placeholder.text}: "
            f"{exc.strerror or type(exc).__name__}"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"file {placeholder.argument!r} for {placeholder.text} is not valid UTF-8") from None
    return text.rstrip("\r\n")


def resolve_value(value: str, *, source: str, key: str) -> str:
    """Resolve every placeholder of one value; raises MetadataError naming ``source`` and ``key``."""
    try:
        parts = list(_scan(value))
    except _SyntaxProblem as exc:
        raise MetadataError(str(exc), source=source, key=key) from None
    out: list[str] = []
    for part in parts:
        if isinstance(part, Placeholder):
            try:
                out.append(_resolve_one(part))
            except ValueError as exc:
                raise MetadataError(str(exc), source=source, key=key) from None
        else:
            out.append(part)
    return "".join(out)


def resolve_properties(props: Mapping[str, str], *, source: str) -> dict[str, str]:
    """Return a copy of ``props`` with every placeholder resolved.

    Call it only when a client is created, and never log the result. Raises :class:`MetadataError` naming
    ``source`` and the property key (never the resolved value) for an unknown placeholder kind, a missing
    environment variable or an unreadable file.
    """
    return {key: resolve_value(value, source=source, key=key) for key, value in props.items()}


def find_unresolvable_placeholders(props: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(key, reason)`` for each placeholder that cannot be resolved in this process now.

    Reasons name the variable or file, never a value. Syntax problems are reported too.
    """
    problems: list[tuple[str, str]] = []
    for key, value in props.items():
        try:
            parts = list(_scan(value))
        except _SyntaxProblem as exc:
            problems.append((key, str(exc)))
            continue
        for part in parts:
            if isinstance(part, Placeholder):
                try:
                    _resolve_one(part)
                except ValueError as exc:
                    problems.append((key, str(exc)))
    return problems


_warned: set[tuple[str, str, str]] = set()
_warned_lock = threading.Lock()


def warn_unresolvable_placeholders(
    props: Mapping[str, str], *, source: str, cluster_id: str | None = None
) -> None:
    """Log a warning once per (source, cluster, key, reason) for placeholders that cannot be resolved now."""
    for key, reason in find_unresolvable_placeholders(props):
        marker = (source, f"{cluster_id}/{key}", reason)
        with _warned_lock:
            if marker in _warned:
                continue
            _warned.add(marker)
        _log.warning(
            "%s: %sproperty %r: %s; a client for this cluster cannot be created until this is fixed",
            source,
            f"cluster {cluster_id!r} " if cluster_id is not None else "",
            key,
            reason,
        )


def is_secret_key(key: str) -> bool:
    """Whether a property name looks like it holds a secret (password, token, key, JAAS config, ...)."""
    lowered = key.lower()
    if any(fragment in lowered for fragment in _SECRET_FRAGMENTS):
        return True
    tokens = [t for t in re.split(r"[._\-]", lowered) if t]
    if any(t in _SECRET_TOKENS for t in tokens):
        return True
    return bool(tokens) and tokens[-1] == "key"


def redact_properties(props: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``props`` that is safe to log.

    Values of keys that look secret are replaced by ``***`` unless they consist only of placeholders
    (which are kept as written: they name where the secret comes from, not the secret). Other values are
    kept as they are; this function never resolves anything.
    """
    return {
        key: value if not is_secret_key(key) or _only_placeholders(value) else REDACTED
        for key, value in props.items()
    }
