"""The hybrid source and its builder: stages read one after the other, each split handed over exactly.

``HybridSource.builder(first).add_source(next)...build()``; each stage is a :class:`HybridStage` (an
archive, an in-memory stage, a user's own) or a :class:`MultiClusterKafkaSource` (wrapped in a
:class:`KafkaSourceStage`). Every stage but the last must be bounded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from multicluster_source._source import MultiClusterKafkaSource
from multicluster_source.exceptions import ConfigurationError
from multicluster_source.hybrid._async import AsyncHybridStream
from multicluster_source.hybrid._kafka_stage import GAP_POLICIES, KafkaSourceStage
from multicluster_source.hybrid._stage import HybridStage
from multicluster_source.hybrid._stream import HybridStream

if TYPE_CHECKING:
    from multicluster_source.runtime.push._control import RunResult

__all__ = ["HybridSource", "HybridSourceBuilder"]


class HybridSource:
    """Stages read one after the other: archives or bounded Kafka sources, then the live source.

    Build it with :meth:`builder`; run it as a source::

        hybrid = HybridSource.builder(archive).add_source(live_source).build()
        with hybrid.open(parallelism=2, checkpoint_dir="ckpt/") as stream:
            for record in stream:
                handle(record)

    When a bounded stage has finished, the next one starts each split right after the last offset the
    finished stage returned for it (exact), splits it did not see at the next stage's own starting offsets,
    or at the handed-over timestamp when the finished stage knew only times. The whole stage switches at
    once (see the guide ``docs/guides/hybrid-backfill.md``).
    """

    def __init__(self, stages: tuple[HybridStage, ...], *, name: str) -> None:
        self.stages = stages
        self.name = name
        self._switch_hook: Callable[[str], None] | None = None
        """Tests only: called with each switch step (``finished``, ``written``, ``closed``, ``opened``)."""

    @staticmethod
    def builder(first: HybridStage | MultiClusterKafkaSource) -> HybridSourceBuilder:
        """A builder whose first stage is ``first``."""
        return HybridSourceBuilder(first)

    @property
    def bounded(self) -> bool:
        """Whether the last stage is bounded (then the whole source ends)."""
        return self.stages[-1].bounded

    def _check_open(
        self, parallelism: int, checkpoint_dir: str | None, checkpoint_interval: float | None
    ) -> None:
        if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
            raise ConfigurationError(f"open(parallelism=...): must be an int >= 1, got {parallelism!r}")
        if checkpoint_interval is not None:
            if checkpoint_dir is None:
                raise ConfigurationError("open(checkpoint_interval=...) needs checkpoint_dir")
            if checkpoint_interval <= 0:
                raise ConfigurationError(
                    f"open(checkpoint_interval=...): must be > 0 seconds, got {checkpoint_interval!r}"
                )

    def open(
        self,
        parallelism: int = 1,
        *,
        checkpoint_dir: str | None = None,
        checkpoint_interval: float | None = None,
        registry: Any = None,
        admin_address: str | None = None,
        admin_token: str | None = None,
    ) -> HybridStream:
        """Start reading with ``parallelism`` readers per stage; restores from the newest hybrid checkpoint
        in ``checkpoint_dir`` (the stage it was in, and the handover into it). ``registry``: where the
        stages' and the hybrid metrics go (None: a registry of the stream's own, ``stream.metrics_registry``).
        """
        self._check_open(parallelism, checkpoint_dir, checkpoint_interval)
        return HybridStream(
            self,
            parallelism=parallelism,
            checkpoint_dir=checkpoint_dir,
            checkpoint_interval=checkpoint_interval,
            registry=registry,
            admin_address=admin_address,
            admin_token=admin_token,
        )

    def open_async(
        self,
        parallelism: int = 1,
        *,
        checkpoint_dir: str | None = None,
        checkpoint_interval: float | None = None,
        registry: Any = None,
        admin_address: str | None = None,
        admin_token: str | None = None,
    ) -> AsyncHybridStream:
        """:meth:`open` for asyncio code (same arguments): ``async with hybrid.open_async(...) as stream``.
        Opening, checkpoints, switches and closing run in the loop's executor."""
        self._check_open(parallelism, checkpoint_dir, checkpoint_interval)

        def opener() -> HybridStream:
            return self.open(
                parallelism,
                checkpoint_dir=checkpoint_dir,
                registry=registry,
                admin_address=admin_address,
                admin_token=admin_token,
            )

        return AsyncHybridStream(opener, checkpoint_interval)

    def run(
        self,
        handler: Callable[..., object],
        parallelism: int = 1,
        *,
        runtime: str = "threads",
        checkpoint_dir: str | None = None,
        checkpoint_interval: float | None = None,
        registry: Any = None,
        batches: bool = False,
        **runtime_options: Any,
    ) -> RunResult:
        """Push API: ``handler(records)`` (``batches=True``: ``handler(batch)``) for every stage. Bounded
        stages other than Kafka sources are read on the calling thread; a last stage that is a Kafka source
        runs as its own ``run()`` on ``runtime`` (``threads``, ``processes``, ``ray``) from the handover,
        keeping its checkpoints in the stage's sub-directory. Blocks until the last stage ends or the run is
        stopped (``control=RunControl()``, ``stop_event=``); returns a :class:`RunResult` for the whole run.
        """
        from multicluster_source.hybrid._run import run_hybrid

        self._check_open(parallelism, checkpoint_dir, checkpoint_interval)
        return run_hybrid(
            self,
            handler,
            parallelism,
            runtime=runtime,
            checkpoint_dir=checkpoint_dir,
            checkpoint_interval=checkpoint_interval,
            registry=registry,
            batches=batches,
            options=runtime_options,
        )


class HybridSourceBuilder:
    """Builds a :class:`HybridSource`; ``build()`` checks the chain of stages and names what is wrong."""

    def __init__(self, first: HybridStage | MultiClusterKafkaSource) -> None:
        self._stages: list[HybridStage | MultiClusterKafkaSource] = [first]
        self._name: str | None = None
        self._gap_policy: Literal["fail", "warn"] = "fail"

    def add_source(self, stage: HybridStage | MultiClusterKafkaSource) -> HybridSourceBuilder:
        """Read ``stage`` after the stages added so far."""
        self._stages.append(stage)
        return self

    def set_name(self, name: str) -> HybridSourceBuilder:
        """The hybrid source's name in logs, status and the admin server (default ``hybrid-<last stage>``)."""
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"set_name: a non-empty string, got {name!r}")
        self._name = name
        return self

    def set_gap_policy(self, policy: str) -> HybridSourceBuilder:
        """When a handed-over position is below a Kafka stage's earliest offset (the previous stage ends
        before the cluster's retention starts): ``fail`` (default; the source fails naming the split) or
        ``warn`` (log it and go on from the earliest offset)."""
        if policy not in GAP_POLICIES:
            raise ConfigurationError(f"set_gap_policy: one of {', '.join(GAP_POLICIES)}, got {policy!r}")
        self._gap_policy = policy  # type: ignore[assignment]
        return self

    def build(self) -> HybridSource:
        """Check the stages (every one but the last bounded) and make the hybrid source."""
        stages: list[HybridStage] = []
        for i, stage in enumerate(self._stages):
            if isinstance(stage, MultiClusterKafkaSource):
                stages.append(KafkaSourceStage(stage, gap_policy=self._gap_policy))
            elif isinstance(stage, HybridStage):
                stages.append(stage)
            else:
                raise ConfigurationError(
                    f"HybridSource: stage {i} is a {type(stage).__name__}, neither a MultiClusterKafkaSource "
                    "nor a HybridStage (bounded, name, open_stage)"
                )
        for i, stage in enumerate(stages[:-1]):
            if not stage.bounded:
                raise ConfigurationError(
                    f"HybridSource: stage {i} ({stage.name}) is not bounded; every stage but the last must "
                    "be (a Kafka source: set_bounded(...))"
                )
        return HybridSource(tuple(stages), name=self._name or f"hybrid-{stages[-1].name}")
