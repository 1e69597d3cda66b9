"""Which streams a source reads: a fixed set of ids or a pattern over the ids the service knows."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from multicluster_source.exceptions import ConfigurationError
from multicluster_source.metadata._model import KafkaMetadataService, KafkaStream

__all__ = ["KafkaStreamSubscriber", "StreamPatternSubscriber", "StreamSetSubscriber"]

_log = logging.getLogger("multicluster_source.metadata")


@runtime_checkable
class KafkaStreamSubscriber(Protocol):
    """Chooses the streams a source reads, asked again at every metadata discovery."""

    def get_subscribed_streams(self, service: KafkaMetadataService) -> set[KafkaStream]:
        """The streams to read now, as the service describes them."""
        ...


@dataclass(frozen=True)
class StreamSetSubscriber:
    """Subscribes to streams by id; ids the service does not know are simply absent (logged at debug)."""

    stream_ids: frozenset[str]

    def __init__(self, stream_ids: Iterable[str]) -> None:
        if isinstance(stream_ids, str):
            raise TypeError("stream_ids must be a collection of ids, not a single string")
        object.__setattr__(self, "stream_ids", frozenset(stream_ids))

    def get_subscribed_streams(self, service: KafkaMetadataService) -> set[KafkaStream]:
        """The subscribed streams the service knows, via ``describe_streams``."""
        found = service.describe_streams(sorted(self.stream_ids))
        missing = self.stream_ids.difference(found)
        if missing:
            _log.debug("streams not in the metadata (yet): %s", ", ".join(sorted(missing)))
        return {stream for stream_id, stream in found.items() if stream_id in self.stream_ids}


@dataclass(frozen=True)
class StreamPatternSubscriber:
    """Subscribes to every stream whose id matches ``pattern`` with :func:`re.search`.

    An invalid regular expression raises :class:`~multicluster_source.exceptions.ConfigurationError`.
    """

    pattern: re.Pattern[str]

    def __init__(self, pattern: str | re.Pattern[str]) -> None:
        if isinstance(pattern, str):
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ConfigurationError(f"invalid stream pattern {pattern!r}: {exc}") from exc
        else:
            compiled = pattern
        object.__setattr__(self, "pattern", compiled)

    def get_subscribed_streams(self, service: KafkaMetadataService) -> set[KafkaStream]:
        """The streams of ``service.get_all_streams()`` whose id matches."""
        return {s for s in service.get_all_streams() if self.pattern.search(s.stream_id)}
