"""The stage protocol of a hybrid source: what :class:`HybridSource` asks of each stage.

A stage is opened once per run of the hybrid source (:meth:`HybridStage.open_stage`) and gives a
:class:`StageReader`, which the hybrid stream polls from the caller's thread. Every method of a reader is
called from that one thread (the caller's thread of the hybrid stream); a reader may run threads of its own
(named ``mcs-<what>``) and must stop and join them in :meth:`StageReader.close`.

Handover between stages is per split: when a bounded stage has finished, :meth:`StageReader.positions`
says, for every split it returned records of, the offset right after the last record returned; the next
stage starts those splits there (exact), and splits the previous stage never saw at its own starting offsets.
A stage whose records carry no offsets hands over a time instead (``timestamp_ms``).

Optional: a reader may offer ``iterate() -> Iterator[SourceRecord]``, its own blocking iterator that ends
when the stage has finished or was closed, and after which a :meth:`StageReader.snapshot` covers exactly the
records it handed out; the hybrid stream's ``for`` loop then uses it instead of a ``poll`` per record.
Optional too: ``capture() -> (snapshot, durable)``, a :meth:`StageReader.snapshot` whose stage writes its own
part on a thread of its own (the Kafka stage: its source's checkpoint); ``durable()`` waits for that.
Optional too: ``snapshot_later() -> Callable[[], dict]``, what :meth:`StageReader.snapshot` would return now,
built only when called (and each time anew): the ``for`` loop keeps one from before each batch it polls, and
needs it only when a checkpoint falls inside the batch. Without it the loop takes a snapshot and a deep copy
of it before every batch, which costs what the stage's splits hold (84 ms a batch at 20,000 archive splits).

State: :meth:`StageReader.snapshot` returns a JSON-ready dict, carrying a ``"v"`` version, that covers
exactly the records returned so far; :meth:`HybridStage.open_stage` with ``restored=`` that dict goes on
right after them (at-least-once: nothing is skipped).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry

from multicluster_source.framework._records import MessageBatch, SourceRecord

HandoverMode = Literal["exact", "estimated", "timestamp", "start"]
"""How a split's start in the next stage was chosen: ``exact`` (the offset of the last record returned was
read from the record), ``estimated`` (from file names and positions in files: low where the log had gaps,
so records may repeat, never be skipped), ``timestamp`` (the stage knew only times), ``start`` (the previous
stage did not see the split: the next stage's starting offsets)."""


@dataclass(frozen=True)
class StageHandover:
    """What a finished stage hands to the next one.

    ``positions``: split id (``cluster/topic/partition``) -> the next offset to read (right after the last
    record the stage returned for that split). ``modes``: split id -> :data:`HandoverMode` of that position.
    ``timestamp_ms``: for stages that know only time, the largest timestamp returned (the next stage starts
    at the first record at or after it); None otherwise.
    """

    positions: Mapping[str, int] = field(default_factory=dict)
    modes: Mapping[str, HandoverMode] = field(default_factory=dict)
    timestamp_ms: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "positions", MappingProxyType(dict(self.positions)))
        object.__setattr__(self, "modes", MappingProxyType(dict(self.modes)))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, versioned."""
        return {
            "v": 1,
            "positions": dict(sorted(self.positions.items())),
            "modes": dict(sorted(self.modes.items())),
            "timestamp_ms": self.timestamp_ms,
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> StageHandover:
        """Read any known version (1)."""
        if data.get("v") != 1:
            raise ValueError(f"unknown stage handover version {data.get('v')!r} (this library reads 1)")
        ts = data.get("timestamp_ms")
        return StageHandover(
            positions={str(k): int(v) for k, v in data.get("positions", {}).items()},
            modes={str(k): v for k, v in data.get("modes", {}).items()},
            timestamp_ms=None if ts is None else int(ts),
        )


@runtime_checkable
class StageReader(Protocol):
    """An opened stage. Every method is called from the hybrid stream's caller thread."""

    def poll(self, timeout: float, max_records: int) -> list[SourceRecord]:
        """Records ready now (waits up to ``timeout`` seconds for some); ``[]`` when none or finished."""
        ...

    def poll_batches(self, timeout: float, max_records: int) -> list[MessageBatch]:
        """The same records as :class:`MessageBatch` objects (one cluster each)."""
        ...

    @property
    def finished(self) -> bool:
        """True once a bounded stage returned every record it will return."""
        ...

    @property
    def watermark(self) -> int | None:
        """The stage's watermark (ms), or None."""
        ...

    def positions(self) -> dict[str, int]:
        """Split id -> the offset right after the last record returned so far."""
        ...

    def handover(self) -> StageHandover:
        """What the next stage starts from; called once :attr:`finished` is true."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready, versioned state covering exactly the records returned so far."""
        ...

    def commit(self, snapshot_id: int) -> None:
        """A checkpoint holding the :meth:`snapshot` of that id is durable (a Kafka stage's source commits its
        own offsets). A periodic checkpoint is written in the background: the stream calls this on its
        thread (an asyncio stream's: the loop's) at a ``poll`` once it is durable, maybe after more polls."""
        ...

    def status(self) -> dict[str, Any]:
        """A JSON-ready view: per split, where it is and whether it is archived or live."""
        ...

    def close(self) -> None:
        """Stop and join every thread, close every client and file. Idempotent."""
        ...


@runtime_checkable
class HybridStage(Protocol):
    """One stage of a hybrid source: an archive, a bounded Kafka source, or the live source (last)."""

    @property
    def bounded(self) -> bool:
        """Every stage but the last must be bounded."""
        ...

    @property
    def name(self) -> str:
        """Short name for logs, status and metrics (``archive``, ``iceberg``, the source's name)."""
        ...

    def open_stage(
        self,
        *,
        parallelism: int,
        start: StageHandover | None,
        restored: Mapping[str, Any] | None,
        registry: CollectorRegistry | None,
        work_dir: str | None,
    ) -> StageReader:
        """Open the stage. ``start``: where the previous stage left each split (None for the first stage);
        ``restored``: a :meth:`StageReader.snapshot` to go on from (then ``start`` is given too, unchanged);
        ``work_dir``: a directory this stage may keep files in across restarts (None without checkpoints)."""
        ...


class StageChain(Protocol):
    """What a hybrid stream reads: :class:`HybridSource` (named here without importing it)."""

    stages: tuple[HybridStage, ...]
    name: str
    _switch_hook: Callable[[str], None] | None
