"""The running hybrid source: :class:`HybridStream`, with the surface of a :class:`SourceStream`.

One stage reader is open at a time. ``poll`` reads the current stage; when a bounded stage has finished,
the same call switches to the next stage (the stage switches as a whole, with exact per-split positions)
and goes on reading there within its timeout. The switch, in order (a ``kill -9`` between any two steps
restores correctly, see :mod:`._state`):

1. ``finished``: the stage returned its last record; its handover H is taken;
2. ``written``: the hybrid state "stage i+1, handed H, no snapshot yet" is written durably;
3. ``closed``: stage i's reader is closed;
4. ``opened``: stage i+1 is opened with ``start=H``.

Threads: every method is called from the caller's thread (as for a :class:`SourceStream`), but the
``write`` of :meth:`HybridStream.capture_checkpoint` runs on another (``mcs-hybrid-checkpoint-<source>``,
see :mod:`._periodic`, or the asyncio stream's executor); the admin server calls ``status()``, ``health()``
and the registry from its request threads (they only read).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from multicluster_source.exceptions import ConfigurationError, StreamClosedError
from multicluster_source.framework._dirlock import DirectoryLock
from multicluster_source.framework._records import MessageBatch, SourceRecord
from multicluster_source.hybrid._columns import arrow_batches, columnar, kept_columns, take_columns
from multicluster_source.hybrid._held import Held, as_batches, iterate
from multicluster_source.hybrid._metrics import HybridMetrics
from multicluster_source.hybrid._periodic import BackgroundCheckpoint, Captured, stage_busy
from multicluster_source.hybrid._stage import StageChain, StageHandover, StageReader
from multicluster_source.hybrid._state import HybridState, HybridStateStore, checked_restore, write_state
from multicluster_source.hybrid._status import hybrid_status, log_switch, stage_secrets, switch_summary
from multicluster_source.ops._admin import AdminServer, check_admin_address
from multicluster_source.runtime.pull._stream import SourceStream, handoff_of

__all__ = ["HybridStream"]

_T = TypeVar("_T")


class HybridStream:
    """A running hybrid source: iterate it or ``poll()`` it, take checkpoints, close it.

    Made by :meth:`HybridSource.open`. Records of every stage are :class:`SourceRecord` objects; one
    ``checkpoint()`` covers whatever stage is being read and the handover into it; the watermark never
    goes back, also across a switch.
    """

    def __init__(
        self,
        hybrid: StageChain,
        *,
        parallelism: int,
        checkpoint_dir: str | None,
        checkpoint_interval: float | None,
        registry: CollectorRegistry | None,
        admin_address: str | None = None,
        admin_token: str | None = None,
        defer_kafka_last: bool = False,
    ) -> None:
        if admin_address is not None:
            check_admin_address(admin_address, admin_token)
        self._hybrid = hybrid
        self._name = hybrid.name
        self._stages = hybrid.stages
        self._parallelism = parallelism
        self._interval = checkpoint_interval
        self._defer_kafka_last = defer_kafka_last
        self._registry = registry if registry is not None else CollectorRegistry()
        self._metrics = HybridMetrics(self._registry)
        self._closed = False
        self._background = BackgroundCheckpoint(self._name)
        self._reader: StageReader | None = None
        self._failure: BaseException | None = None  # why the next stage did not open (raised again)
        self._admin: AdminServer | None = None
        self._last_checkpoint = time.monotonic()
        self._last_record_at: float | None = None
        self._switched_at: float | None = None
        self.restored_from: str | None = None
        self._lock: DirectoryLock | None = None
        self._store: HybridStateStore | None = None
        names = tuple(stage.name for stage in self._stages)
        self._state = HybridState(stages=names)
        if checkpoint_dir is not None:
            self._lock = DirectoryLock(checkpoint_dir, self._name)
            self._lock.acquire()
        try:
            if checkpoint_dir is not None:
                self._store = HybridStateStore(checkpoint_dir)
                found = self._store.latest()
                if found is not None:
                    self._state = checked_restore(found[0], str(found[1]), names, self._name)
                    self.restored_from = str(found[1])
            self._watermark = self._state.watermark
            self._held = Held(self._state.skip)
            state = self._state
            self._reader = self._open_stage(state.stage, state.handover, state.snapshot)
            if admin_address is not None:
                self._admin = AdminServer(
                    admin_address, {self._name: self}, token=admin_token, source_name=self._name
                ).start()
        except BaseException:
            self.close()
            raise

    def _open_stage(
        self, index: int, start: StageHandover | None, restored: dict[str, Any] | None
    ) -> StageReader | None:
        self._metrics.stage(index)
        if self._defer_kafka_last and index == len(self._stages) - 1:
            return None  # run(): the last (Kafka) stage runs as its source's own run()
        return self._stages[index].open_stage(
            parallelism=self._parallelism,
            start=start,
            restored=restored,
            registry=self._registry,
            work_dir=None if self._store is None else self._store.stage_dir(index),
        )

    # ------------------------------------------------------------------------------------------ reading

    def _current(self, what: str) -> StageReader:
        if self._closed:
            raise StreamClosedError(f"source {self._name}: {what} on a closed stream")
        if self._reader is None:
            raise self._failure or StreamClosedError(f"source {self._name}: {what}: no stage is open here")
        return self._reader

    @property
    def stage(self) -> int:
        """The index of the stage being read (0 first)."""
        return self._state.stage

    def switch_due(self) -> bool:
        """Whether the current stage has finished and a next stage waits (``poll`` then switches)."""
        reader = self._reader
        return reader is not None and self._state.stage + 1 < len(self._stages) and reader.finished

    def checkpoint_if_due(self) -> None:
        """Take the periodic checkpoint when ``checkpoint_interval`` has passed since the last one (captured
        here, written in the background: :mod:`._periodic`); tell the stage of the last one once written."""
        self._background.settle()
        if self._interval is not None and time.monotonic() - self._last_checkpoint >= self._interval:
            self._periodic_checkpoint()

    def _take(
        self,
        take: Callable[[StageReader, float], list[_T]],
        what: str,
        timeout: float,
        kept: Callable[[list[_T]], list[_T]],
        go_on: Callable[[StageReader], bool] | None = None,
    ) -> list[_T]:
        reader = self._current(what)
        self.checkpoint_if_due()
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            out = kept(take(reader, max(0.0, deadline - time.monotonic())))
            if out:
                self._delivered()
                return out
            if self.switch_due():
                self.switch()
                if self._reader is None or (go_on is not None and not go_on(self._reader)):
                    return out  # no next stage here, or one this call cannot read (columns from Kafka)
                reader = self._reader
                continue
            if reader.finished or time.monotonic() >= deadline:
                return out

    def _delivered(self) -> None:
        now = time.monotonic()
        if self._switched_at is not None:
            self._metrics.switch_seconds(now - self._switched_at)
            switches = self._state.switches
            if switches and switches[-1].get("latency_ms") is None:
                last = {**switches[-1], "latency_ms": round((now - self._switched_at) * 1000.0, 3)}
                self._state = self._state.with_changes(switches=(*switches[:-1], last))
            self._switched_at = None
        self._last_record_at = now

    def poll(self, timeout: float = 1.0, max_records: int = 10_000) -> list[SourceRecord]:
        """Records that are ready (at most ``max_records``), ``[]`` after ``timeout`` seconds; switches to
        the next stage when the current one has finished. Raises :class:`StreamClosedError` once closed."""
        if self._held.buffer:  # taken by a for loop left early
            self._current("poll()")
            return self._held.take(max_records)
        return self._take(lambda r, left: r.poll(left, max_records), "poll()", timeout, self._held.filter)

    def poll_batches(self, timeout: float = 1.0, max_records: int = 10_000) -> list[MessageBatch]:
        """Batches of ``confluent_kafka.Message`` objects (one cluster each), as ``poll`` does records."""
        if self._held.buffer:
            self._current("poll_batches()")
            return as_batches(self._held.take(max_records))
        take = self._held.filter_batches
        return self._take(lambda r, left: r.poll_batches(left, max_records), "poll_batches()", timeout, take)

    @property
    def columnar(self) -> bool:
        """Whether the stage being read hands out :class:`ArchivedColumns` parts with :meth:`poll_columns`
        (the archive and Iceberg stages do; a Kafka stage hands out Arrow record batches)."""
        return columnar(self._reader) and not self._held.buffer

    def poll_columns(
        self, timeout: float = 1.0, max_records: int = 100_000, *, headers: bool = False
    ) -> list[Any]:
        """The stage's records as columns (see :mod:`._columns`), as ``poll`` returns records: an archive
        stage's :class:`ArchivedColumns` parts, or a Kafka stage's Arrow record batches (``headers``:
        :meth:`SourceStream.poll_columns`). ``[]`` at a switch to a stage of the other kind (:attr:`columnar`
        says which); ``TypeError`` on a stage without columns."""
        if self._held.buffer:
            raise TypeError("poll_columns(): a for loop left records behind; take them with poll() first")
        what, kept = "poll_columns()", functools.partial(kept_columns, skip=self._held.skip)
        same = columnar if columnar(self._current(what)) else arrow_batches  # what this call goes on into
        take = functools.partial(take_columns, max_records=max_records, headers=headers)
        return self._take(lambda r, left: take(r, left), what, timeout, kept, same)

    def __iter__(self) -> Iterator[SourceRecord]:
        """Every record, blocking; ends when the last stage is bounded and finished, or after ``close()``.
        A checkpoint in the loop covers exactly the records it got; a ``poll`` after leaving the loop
        returns the records it took from the stage and did not hand out yet."""
        self._current("iterating")
        return iterate(self)

    @property
    def finished(self) -> bool:
        """The last stage is bounded and has finished, with every record returned."""
        reader = self._reader
        return (
            reader is not None
            and self._state.stage == len(self._stages) - 1
            and self._stages[-1].bounded
            and reader.finished
        )

    @property
    def watermark(self) -> int | None:
        """The watermark in ms of the records returned so far: the stage's own, never going back (also
        across a switch, when the next stage has none yet); None until a stage has one."""
        reader = self._reader  # while the for loop holds records, the stage's watermark is ahead of them
        current = None if reader is None or self._closed or self._held.buffer else reader.watermark
        if current is not None and (self._watermark is None or current > self._watermark):
            self._watermark = current
        return self._watermark

    # -------------------------------------------------------------------------------------- the switch

    def switch(self) -> None:
        """Switch to the next stage (``poll`` does it when the current stage has finished)."""
        reader = self._current("switch()")
        index = self._state.stage
        if not self.switch_due():
            raise ConfigurationError(f"source {self._name}: stage {index} has not finished; cannot switch")
        self._background.settle(wait=True)  # the checkpoint under way first: the state files stay in order
        started = time.monotonic()
        hook = self._hybrid._switch_hook or (lambda step: None)
        handover = reader.handover()
        hook("finished")
        summary = switch_summary(index, handover)
        self._held.reset()
        state = self._state.with_changes(
            stage=index + 1,
            handover=handover,
            snapshot=None,
            skip={},
            watermark=self.watermark,
            switches=(*self._state.switches, summary),
        )
        if self._store is not None:
            self._store.write(state)  # durable before the next stage reads anything
        hook("written")
        self._reader = None
        reader.close()
        self._state = state
        hook("closed")
        try:
            self._reader = self._open_stage(index + 1, handover, None)
        except BaseException as exc:
            self._failure = exc  # the state says stage i+1: a restart opens it again from the handover
            raise
        hook("opened")
        self._metrics.handed_over(handover.modes)
        self._switched_at = self._last_record_at or started
        summary = {**summary, "open_ms": round((time.monotonic() - started) * 1000.0, 3)}
        self._state = state.with_changes(switches=(*state.switches[:-1], summary))
        log_switch(self._name, [st.name for st in self._stages], index, handover, summary)

    # -------------------------------------------------------------------------------------- checkpoints

    def checkpoint(self) -> int:
        """A checkpoint covering every record already returned and the handover into the current stage;
        returns its id once it is durable (after the periodic checkpoint being written, if one is)."""
        self._background.settle(wait=True)
        checkpoint_id, write, commit = self.capture_checkpoint()
        write()
        commit()
        return checkpoint_id

    def _periodic_checkpoint(self) -> bool:
        """Capture a periodic checkpoint, written in the background (:mod:`._periodic`); False (deferred)
        while the last one is written or a Kafka stage's source is busy. Raises, once, what it raised."""
        if not self._background.idle() or stage_busy(self._reader):
            return False
        self._last_checkpoint = time.monotonic()
        self._background.raise_failure()
        self._background.start(self.capture_checkpoint())
        return True

    def capture_checkpoint(self) -> Captured:
        """:meth:`checkpoint` in parts: (id, write, commit). Captured now, exact; ``write()`` makes it durable
        (a Kafka stage's source checkpoint, then the hybrid state) on any thread while the stream goes on, one
        at a time, in order, not during a switch or close; then ``commit()`` on this stream's thread."""
        reader = self._current("checkpoint()")
        snapshot, skip, durable = self._held.view(reader)
        checkpoint_id = self._state.checkpoint_id + 1
        self._state = state = self._state.with_changes(
            snapshot=snapshot, skip=skip, checkpoint_id=checkpoint_id, watermark=self.watermark
        )
        self._last_checkpoint = time.monotonic()
        write = functools.partial(write_state, durable, self._store, state)
        return checkpoint_id, write, functools.partial(reader.commit, checkpoint_id)

    # ------------------------------------------------------------------------------------------- status

    @property
    def name(self) -> str:
        """The hybrid source's name."""
        return self._name

    @property
    def admin_url(self) -> str | None:
        """Base URL of the admin HTTP server, when ``open(admin_address=...)``."""
        return self._admin.url if self._admin is not None else None

    @property
    def metrics_registry(self) -> CollectorRegistry:
        """The registry of the hybrid metrics and of every stage's."""
        return self._registry

    def assignments(self) -> dict[int, list[str]]:
        """Reader index -> split ids it reads now (a Kafka stage's; ``{}`` for other stages)."""
        stream = getattr(self._reader, "stream", None)
        return stream.assignments() if stream is not None and not self._closed else {}

    def tracked_topics(self) -> dict[str, list[str]]:
        """The current Kafka stage's tracked topics (``{}`` for other stages)."""
        stream = getattr(self._reader, "stream", None)
        return stream.tracked_topics() if stream is not None else {}

    def reset_tracked_topics(self) -> int:
        """Reset the current Kafka stage's tracked topics (0 for other stages)."""
        stream = getattr(self._reader, "stream", None)
        return stream.reset_tracked_topics() if stream is not None else 0

    def health(self) -> dict[str, Any]:
        """The current stage's health (``ready`` while a stage other than Kafka is open)."""
        if self._closed:
            return {"status": "not_ready", "reasons": ["closed"]}
        stream = getattr(self._reader, "stream", None)
        return stream.health() if stream is not None else {"status": "ready"}

    def secret_values(self) -> set[str]:
        """Secret-looking property values of the Kafka stages (the admin server masks them)."""
        stream = getattr(self._reader, "stream", None)
        return stage_secrets(self._stages) | (stream.secret_values() if stream is not None else set())

    def status(self) -> dict[str, Any]:
        """A JSON-ready view: the current stage's own status (a Kafka stage's is a source's status), and
        ``"hybrid"``: ``{"stage": i, "stages": n, ...}`` with the handover, per split archived or live."""
        reader = None if self._closed else self._reader
        return hybrid_status(
            name=self._name,
            state=self._state,
            stages=self._stages,
            reader=reader,
            closed=self._closed,
            finished=self.finished,
            health=self.health(),
            parallelism=self._parallelism,
            assignments=self.assignments(),
            restored_from=self.restored_from,
            watermark=self._watermark,
        )

    # ------------------------------------------------------------------------------------------- closing

    def close(self) -> None:
        """Close the admin server and the current stage (its threads and clients). Idempotent."""
        if self._closed:
            return
        self._closed = True
        reader, self._reader = self._reader, None
        try:
            self._background.settle(wait=True)  # the checkpoint under way is written and its stage told first
            if self._admin is not None:
                self._admin.close()
            if reader is not None:
                reader.close()
        finally:
            if self._lock is not None:
                self._lock.release()

    def __enter__(self) -> HybridStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


# ------------------------------------------------------------------ for the asyncio stream and run_hybrid
# What the asyncio hybrid stream (:mod:`._async`) and ``run()`` (:mod:`._run`) drive of a HybridStream: named
# here, in the module that defines it, rather than read from its private fields elsewhere.


def ready_records(stream: HybridStream, max_records: int) -> list[SourceRecord]:
    """Records ready now, without waiting and without switching (a step of :meth:`AsyncHybridStream.poll`)."""
    reader = stream._current("poll()")
    out = stream._held.take(max_records) or stream._held.filter(reader.poll(0.0, max_records))
    if out:
        stream._delivered()
    return out


def ready_batches(stream: HybridStream, max_records: int) -> list[MessageBatch]:
    """Batches ready now, without waiting and without switching (a step of ``poll_batches``)."""
    reader = stream._current("poll_batches()")
    held = stream._held.take(max_records)
    out = as_batches(held) if held else stream._held.filter_batches(reader.poll_batches(0.0, max_records))
    if out:
        stream._delivered()
    return out


def ready_columns(stream: HybridStream, max_records: int, headers: bool) -> list[Any]:
    """Columns ready now (parts or Arrow batches), without waiting or switching (``poll_columns``)."""
    reader = stream._current("poll_columns()")
    if stream._held.buffer:
        raise TypeError("poll_columns(): a for loop left records behind; take them with poll() first")
    out = kept_columns(take_columns(reader, 0.0, max_records, headers), stream._held.skip)
    if out:
        stream._delivered()
    return out


def fetch_in_threads(stream: HybridStream) -> None:
    """A Kafka stage's fetch threads fetch themselves: no client call on the loop's thread (as
    :class:`AsyncSourceStream` sets its stream)."""
    inner = getattr(stream._reader, "stream", None)
    if isinstance(inner, SourceStream):
        handoff_of(inner).inline = False


def stage_reader(stream: HybridStream) -> StageReader | None:
    """The stage being read (None once closed)."""
    return stream._reader


def periodic_checkpoint(stream: HybridStream) -> bool:
    """Capture a periodic checkpoint (written in the background); whether one was captured."""
    return stream._periodic_checkpoint()


def live_start(stream: HybridStream) -> tuple[StageHandover | None, HybridStateStore | None]:
    """What the live stage of ``run()`` starts from: the last handover, and the stream's state store."""
    return stream._state.handover, stream._store
