"""The split/enumerator framework (FLIP-27 in Python): the protocols a source is made of.

Threads, in the local runtime:

* the **coordinator thread** runs the :class:`SplitEnumerator`; every enumerator method and every handler
  passed to :meth:`SplitEnumeratorContext.call_async` runs there, one at a time (a mailbox), so an
  enumerator needs no locks. Blocking I/O goes through ``call_async``: the callable runs on an I/O thread,
  its result comes back to the handler on the coordinator thread.
* each **reader thread** runs one :class:`SourceReader`; its methods are called only from that thread.
  A reader may start fetch threads of its own; they hand records on with :meth:`ReaderContext.emit`.
* the **caller's thread** polls the :class:`~multicluster_source.SourceStream` and takes checkpoints.

The seam between them is message passing of plain frozen values (splits, events), so a runtime may place
readers in other processes or on other machines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from multicluster_source.framework._events import SourceEvent
from multicluster_source.framework._split import KafkaPartitionSplit

T = TypeVar("T")


class Cancellable(Protocol):
    """Handle of scheduled work."""

    def cancel(self) -> None:
        """Stop the work; a run already under way completes but its handler is not called."""
        ...


@dataclass(frozen=True)
class RecordBatch:
    """What a fetcher hands on: the client's messages of one cluster, and the position each split reaches
    once all of them are delivered.

    ``messages`` are ``confluent_kafka.Message`` objects as the client returned them, without error events
    and without messages at or past a split's stopping offset; records are made of them only where records
    are asked for (:mod:`~multicluster_source.framework._records`).
    """

    cluster_id: str
    messages: Sequence[Any]
    positions: Mapping[str, int] = field(default_factory=dict)
    """split id -> next offset to read after the last message of that split in this batch."""
    event_times: Mapping[str, tuple[int, int]] | None = None
    """split id -> (smallest, largest) Kafka timestamp of this batch's messages of that split, computed by
    the fetcher when the source has a watermark strategy without timestamp assigner; else None."""
    reset: bool = False
    """The positions of an offset reset (no messages): they may move a split back, unlike delivered ones."""
    count_bytes: Callable[[int], None] | None = None
    """Set when the fetcher left counting these messages' value bytes (``bytes_consumed_total``) to whoever
    takes them: called with the bytes of each part taken (a column taker reads them off its Arrow value
    column, the others sum the messages' lengths). None: the fetcher counted them."""


class SplitEnumeratorContext(Protocol):
    """What an enumerator may ask of its runtime. Called on the coordinator thread only."""

    @property
    def parallelism(self) -> int:
        """How many readers there are (indices ``0..parallelism-1``)."""
        ...

    @property
    def reader_racks(self) -> Mapping[int, str | None]:
        """Reader index -> rack (availability zone), empty when racks are not used."""
        ...

    def assign_splits(self, assignment: Mapping[int, Sequence[KafkaPartitionSplit]]) -> None:
        """Hand splits to readers (reader index -> splits)."""
        ...

    def send_event_to_reader(self, reader: int, event: SourceEvent) -> None:
        """Send an event to one reader."""
        ...

    def signal_no_more_splits(self, reader: int) -> None:
        """Tell a reader that it will get no further splits (bounded sources)."""
        ...

    def call_async(
        self,
        call: Callable[[], T],
        handler: Callable[[T | None, BaseException | None], None],
        *,
        initial_delay: float = 0.0,
        period: float | None = None,
    ) -> Cancellable:
        """Run ``call`` on an I/O thread after ``initial_delay`` seconds (then every ``period`` seconds after
        the previous run ended), and ``handler(result, error)`` on the coordinator thread."""
        ...

    def run_in_coordinator(self, fn: Callable[[], None], *, delay: float = 0.0) -> Cancellable:
        """Run ``fn`` on the coordinator thread (from any thread)."""
        ...

    def delivered_positions(self, split_ids: Sequence[str]) -> dict[str, int]:
        """The next offset after the last record the caller received, for the named splits that have one."""
        ...

    def forget_positions(self, split_ids: Sequence[str]) -> None:
        """Drop delivered positions of splits that are gone for good (retention over, or created anew)."""
        ...

    def fail(self, error: BaseException) -> None:
        """Fail the whole source with ``error``."""
        ...


class SplitEnumerator(Protocol):
    """Discovers splits and assigns them to readers. Runs on the coordinator thread only."""

    def start(self) -> None:
        """Begin work; exceptions raised here fail ``open()``."""
        ...

    def add_reader(self, reader: int) -> None:
        """A reader has started and asked for work."""
        ...

    def handle_reader_event(self, reader: int, event: SourceEvent) -> None:
        """An event sent by a reader."""
        ...

    def reader_failed(self, reader: int) -> None:
        """A reader died or stopped heart-beating: move its splits to other readers."""
        ...

    def is_finished(self) -> bool:
        """Bounded: every split reached its stopping offset (readers have emitted all their records)."""
        ...

    def snapshot_state(self, checkpoint_id: int) -> dict[str, Any]:
        """The enumerator's state, JSON-ready and versioned."""
        ...

    def notify_checkpoint_complete(
        self, checkpoint_id: int, positions: Mapping[str, int]
    ) -> Callable[[float], None]:
        """A checkpoint is durable; start committing ``positions``. Returns a waiter ``wait(timeout)``
        that the caller may block on (off the coordinator thread) until the commits are done."""
        ...

    def close(self) -> None:
        """Stop scheduled work and close clients."""
        ...


InlineStep = Callable[[Callable[[RecordBatch], bool]], bool]
"""One fetch step a fetcher offers to the thread that takes batches (see ``ReaderContext.offer_inline``)."""


class ReaderContext(Protocol):
    """What a reader may ask of its runtime. ``emit`` and ``fail`` may be called from any thread."""

    @property
    def index(self) -> int:
        """This reader's index."""
        ...

    def send_event_to_enumerator(self, event: SourceEvent) -> None:
        """Send an event to the enumerator."""
        ...

    def emit(self, batch: RecordBatch, should_stop: Callable[[], bool]) -> bool:
        """Hand a batch to the caller, waiting while the buffer is full (back-pressure). Returns False when
        ``should_stop()`` turned true or the source is closing before the batch could be handed on."""
        ...

    def offer_inline(
        self, step: InlineStep, release: Callable[[], None], hold: Callable[[], None] | None = None
    ) -> Callable[[], None]:
        """Let the thread that takes batches run ``step(emit_now)`` itself whenever it finds none handed on:
        one fetch step on that thread, without a thread hand-over. ``emit_now(batch)`` hands a batch on
        without waiting for room (False once this reader is fenced). ``step`` returns True when it ran and
        found nothing ready; ``release()`` is called then if no other step found anything either (the taker
        is about to wait): the fetch thread is to wait for records again. ``hold()`` is called when the
        taker comes and finds batches waiting: it will step once it has taken them, so the fetch thread need
        not fetch ahead. Returns what withdraws the offer."""
        ...

    def fail(self, error: BaseException) -> None:
        """Fail the whole source with ``error``."""
        ...

    def reader_failed(self, error: BaseException) -> None:
        """This reader cannot go on (its client failed): the runtime fails it over to other readers."""
        ...

    @property
    def rack(self) -> str | None:
        """This reader's rack, when racks are used."""
        ...


class SourceReader(Protocol):
    """Reads the splits assigned to one reader. Its methods run on that reader's thread only."""

    def start(self) -> None:
        """Begin; typically asks the enumerator for metadata."""
        ...

    def add_splits(self, splits: Sequence[KafkaPartitionSplit]) -> None:
        """New splits to read."""
        ...

    def handle_source_event(self, event: SourceEvent) -> None:
        """An event from the enumerator."""
        ...

    def notify_no_more_splits(self) -> None:
        """No further splits will come (bounded)."""
        ...

    def is_finished(self) -> bool:
        """True when no more splits will come and every split reached its end."""
        ...

    def poll_events(self) -> None:
        """Called regularly on the reader thread: act on what fetch threads reported."""
        ...

    def close(self) -> None:
        """Stop fetching and close every client."""
        ...


class Source(Protocol):
    """A factory of enumerators and readers."""

    def create_enumerator(
        self, context: SplitEnumeratorContext, restored: dict[str, Any] | None
    ) -> SplitEnumerator:
        """A new enumerator, restored from a checkpointed state when given."""
        ...

    def create_reader(self, context: ReaderContext) -> SourceReader:
        """A new reader."""
        ...
