"""The error of a failed replica look-up, and which of the client's errors may pass when asked again."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

__all__ = ["HARD_ERRORS", "ReplicaLookupError", "passing", "passing_error", "text_of"]


class ReplicaLookupError(Exception):
    """A look-up on a cluster failed (unreachable, timed out, topic gone); the message says which.

    ``retriable``: the client's error was a passing one (a time-out, a leader moving after a broker's
    restart), so the same look-up may succeed when asked again; False for a missing topic or partition, a
    refused authorisation, a fatal client error, or an answer that did not come from the client."""

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


HARD_ERRORS = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.OFFSET_OUT_OF_RANGE,
        KafkaError._AUTO_OFFSET_RESET,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    }
)
"""The client's errors that asking again does not cure: the topic or partition is missing, the position is
out of range, or the look-up is not allowed."""


def passing(exc: KafkaException) -> bool:
    """Whether the client's exception holds an error that may pass when asked again."""
    first = exc.args[0] if exc.args else None
    return isinstance(first, KafkaError) and passing_error(first)


def passing_error(error: KafkaError) -> bool:
    """Not fatal and not one of :data:`HARD_ERRORS` (the topic, partition or permission is missing)."""
    return not error.fatal() and error.code() not in HARD_ERRORS


def text_of(exc: KafkaException) -> str:
    """The client's words for ``exc`` (its error's text, without the exception's wrapping)."""
    first = exc.args[0] if exc.args else None
    return first.str() if isinstance(first, KafkaError) else str(exc)
