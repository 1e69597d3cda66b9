"""What a runtime needs of a source (:class:`SourceFactory`), and the checks made before readers start.

The runtimes never import the source or its builder: :class:`~multicluster_source.MultiClusterKafkaSource`
is one :class:`SourceFactory`, and tests may bring their own.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from multicluster_source.exceptions import ConfigurationError
from multicluster_source.framework._interfaces import (
    ReaderContext,
    SourceReader,
    SplitEnumeratorContext,
)
from multicluster_source.framework._options import SourceOptions
from multicluster_source.framework._records import Deserializer
from multicluster_source.metadata._model import KafkaMetadataService
from multicluster_source.metadata._subscriber import KafkaStreamSubscriber
from multicluster_source.runtime.core._messages import Handler

if TYPE_CHECKING:
    from multicluster_source.enumerator._multicluster import MultiClusterEnumerator
    from multicluster_source.ops._tracking import TopicTracker

_log = logging.getLogger("multicluster_source.push")
S = TypeVar("S", bound="SourceFactory")


class SourceFactory(Protocol):
    """What the runtimes use of a source: its name and options, and the factories of its parts.

    ``metadata_service`` and ``subscriber`` are None in a copy made for worker processes
    (:func:`reader_only_source`), which only builds readers.
    """

    name: str
    options: SourceOptions
    deserializer: Deserializer | None
    """Applied on the record path (``poll``, iteration, the default push handler), never to batches."""

    @property
    def client_properties(self) -> Mapping[str, str]:
        """Client properties set on the builder (as configured: placeholders unresolved)."""
        ...

    @property
    def bounded(self) -> bool:
        """Whether the source stops at stopping offsets."""
        ...

    @property
    def metadata_service(self) -> KafkaMetadataService | None:
        """The metadata service (closed by the runtime at the end of a run)."""
        ...

    @property
    def subscriber(self) -> KafkaStreamSubscriber | None:
        """Chooses the streams read."""
        ...

    def create_enumerator(
        self,
        context: SplitEnumeratorContext,
        restored: dict[str, Any] | None,
        positions: dict[str, int] | None,
        metrics: Any,
        subscriber: KafkaStreamSubscriber | None = None,
    ) -> MultiClusterEnumerator:
        """The enumerator, restored from a checkpoint's state when given."""
        ...

    def create_reader(
        self,
        context: ReaderContext,
        metrics: Any,
        on_topic_read: Callable[[str, str, int], None] | None = None,
    ) -> SourceReader:
        """A reader for the runtime slot ``context``."""
        ...

    def create_topic_tracker(self, checkpoint_dir: str | os.PathLike[str] | None) -> TopicTracker:
        """The topic tracker of one run."""
        ...


def validate_reader_racks(
    racks: Mapping[int, str] | Sequence[str | None] | None, parallelism: int
) -> dict[int, str | None]:
    """Validate the ``reader_racks`` option of ``open``/``run``: reader index -> rack."""
    if racks is None:
        return {}
    items = dict(enumerate(racks)) if isinstance(racks, Sequence) and not isinstance(racks, str) else racks
    if not isinstance(items, Mapping):
        raise ConfigurationError("open(reader_racks=...): a mapping reader index -> rack, or a list of racks")
    out: dict[int, str | None] = {}
    for reader, rack in items.items():
        if not isinstance(reader, int) or not 0 <= reader < parallelism:
            raise ConfigurationError(
                f"open(reader_racks=...): reader index {reader!r} is not in 0..{parallelism - 1}"
            )
        if rack is not None and (not isinstance(rack, str) or not rack):
            raise ConfigurationError(
                f"open(reader_racks=...): rack of reader {reader} must be a non-empty string"
            )
        out[reader] = rack
    return out


def reader_only_source(source: S) -> S:
    """A copy of ``source`` with only what readers need, for workers in other processes: no metadata
    service (watch threads, clients), subscriber, topic status store, standby assignor or cluster identities
    (an exactly-once sink's, which the driver's enumerators learn)."""
    import copy

    clone = copy.copy(source)
    clone.__dict__.update(
        metadata_service=None, subscriber=None, topic_status_store=None, standby_assignor=None
    )
    if "identities" in clone.__dict__:
        clone.__dict__["identities"] = None
    return clone


def check_picklable(runtime: str, source: SourceFactory, handler: Handler) -> None:
    """Raise :class:`ConfigurationError` naming what cannot be sent to a worker process."""
    try:
        pickle.dumps(handler)
    except Exception as exc:
        raise ConfigurationError(
            f"run(runtime={runtime!r}): the handler cannot be sent to a worker process ({exc}); use a "
            f"module-level function or an instance of a module-level class"
        ) from exc
    for name, value in vars(source).items():
        try:
            pickle.dumps(value)
        except Exception as exc:
            hint = (
                " (set_deserializer: use a module-level function, not a lambda)"
                if name == "deserializer"
                else ""
            )
            raise ConfigurationError(
                f"run(runtime={runtime!r}): the source's {name} cannot be sent to a worker process "
                f"({exc}){hint}"
            ) from exc
