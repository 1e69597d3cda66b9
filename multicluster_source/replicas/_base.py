"""What every translator shares: the replica look-ups, the per-split loop that never raises (a split that
cannot be translated gets mode ``start`` with ``to_offset`` :data:`START_OFFSET`: the enumerator starts it at
the source's starting offsets), the log line per translated split, and ``close``."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping, Sequence

from multicluster_source.metadata._model import ClusterMetadata
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.replicas._lookup import ClusterLookup, LookupDeferred, ReplicaLookupError
from multicluster_source.replicas._model import OriginPosition, Translation

__all__ = ["START_OFFSET", "BaseTranslator", "start_translation", "wait_for_end"]

START_OFFSET = -1
"""``to_offset`` of a ``start`` translation: no translated position, use the source's starting offsets."""

_log = logging.getLogger("multicluster_source.replicas")
_RETRY_PAUSE_S = 0.1
"""The first pause before a failed split's look-ups are asked again (doubling up to 1 s)."""
_ROUNDS = 8
"""Rounds of batched look-ups in one :meth:`BaseTranslator.translate` (a translation needs up to four, more
when the offset syncs move meanwhile); then the rest looks up one split at a time."""


class BaseTranslator:
    """What every translator shares: the replica look-ups, the per-split loop that never raises, the log
    line per translated split, and ``close``."""

    def __init__(
        self,
        replica_of: ReplicaOf,
        origin: ClusterMetadata,
        replica: ClusterMetadata,
        *,
        group_id: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        self.replica_of = replica_of
        self.origin = origin
        self.replica = replica
        self.group_id = group_id
        self.properties = dict(properties or {})
        self.replica_lookup = ClusterLookup(replica, self.properties, role="replica")
        self._closed = False

    def start(self) -> None:
        """Nothing to follow for this mode; returns at once."""

    def translate(
        self,
        handovers: Sequence[tuple[OriginPosition, str]],
        *,
        origin_reachable: bool,
        wait_s: float,
    ) -> list[Translation]:
        """One :class:`Translation` per pair, in order (``wait_s`` bounds the waiting of the whole call).

        With :meth:`batched_lookups`, every split is translated in rounds: a round runs each split's
        translation until it needs a look-up not fetched yet (:class:`LookupDeferred`), then fetches what
        all of them need together, and the next round replays those splits. After :data:`_ROUNDS` rounds,
        what is left looks up one split at a time, as a translator without batches does.

        The splits whose look-ups failed with a passing error (a time-out, a leader moving after a broker's
        restart) are translated again together, in a fresh batch (a batch keeps its errors), after a pause
        that doubles from :data:`_RETRY_PAUSE_S` up to 1 s, while ``wait_s`` lasts. The last attempt
        starts at or after the deadline, so a translator that settles for less once the wait is over (as
        ``mirrormaker2`` keeps its conservative start when the copy's search fails) settles in it. A split
        that still fails gets mode ``start`` with the error as its reason."""
        deadline = time.monotonic() + max(0.0, wait_s)
        out: list[Translation | None] = [None] * len(handovers)
        pending = list(range(len(handovers)))
        pause = _RETRY_PAUSE_S
        while True:
            final = time.monotonic() >= deadline or self._closed
            failed = self._attempt(handovers, pending, out, origin_reachable, deadline)
            pending = []
            for i, error in failed.items():
                if error.retriable and not final:
                    pending.append(i)
                else:
                    out[i] = start_translation(*handovers[i], f"could not translate: {error}")
            if not pending:
                break
            time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
            pause = min(2 * pause, 1.0)
        done = [t for t in out if t is not None]
        assert len(done) == len(handovers)  # the last round defers nothing
        for translation in done:
            _log.info(
                "cluster=%s: handover %s@%d -> %s@%d mode=%s max_repeats=%s: %s",
                self.replica.cluster_id,
                translation.from_split,
                translation.from_offset,
                translation.to_split,
                translation.to_offset,
                translation.mode,
                translation.max_repeats,
                translation.detail,
            )
        return done

    def _attempt(
        self,
        handovers: Sequence[tuple[OriginPosition, str]],
        pending: list[int],
        out: list[Translation | None],
        origin_reachable: bool,
        deadline: float,
    ) -> dict[int, ReplicaLookupError]:
        """Translate ``handovers[i]`` for each ``i`` in ``pending`` into ``out[i]``, in batched rounds (see
        :meth:`translate`); the look-up errors of those that failed (any other error is a ``start``)."""
        lookups = self.batched_lookups()
        failed: dict[int, ReplicaLookupError] = {}
        with contextlib.ExitStack() as stack:
            for lookup in lookups:
                stack.enter_context(lookup.batch())
            for round_ in range(_ROUNDS + 1):
                for lookup in lookups:
                    lookup.defer(round_ < _ROUNDS)
                deferred: list[int] = []
                for i in pending:
                    position, to_split = handovers[i]
                    try:
                        out[i] = self.translate_one(
                            position, to_split, origin_reachable=origin_reachable, deadline=deadline
                        )
                    except LookupDeferred:
                        deferred.append(i)
                    except ReplicaLookupError as exc:
                        failed[i] = exc
                    except Exception as exc:  # one split's failure must not stop the others' handover
                        out[i] = start_translation(position, to_split, f"could not translate: {exc}")
                if not deferred:
                    break
                for lookup in lookups:
                    lookup.fetch_deferred()
                pending = deferred
        return failed

    def batched_lookups(self) -> Sequence[ClusterLookup]:
        """The look-ups whose requests :meth:`translate` gathers into batches (none: one split at a time;
        a translator that polls a look-up until it changes, as ``identical`` does, must not batch it)."""
        return ()

    def translate_one(
        self, position: OriginPosition, to_split: str, *, origin_reachable: bool, deadline: float
    ) -> Translation:
        """One split's translation (may raise: :meth:`translate` turns an error into a ``start``)."""
        raise NotImplementedError

    def close(self) -> None:
        """Closes the look-up clients. Idempotent."""
        self._closed = True
        self.replica_lookup.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.origin.cluster_id}->{self.replica.cluster_id}, "
            f"offsets={self.replica_of.offsets})"
        )


def start_translation(position: OriginPosition, to_split: str, detail: str) -> Translation:
    """A ``start`` translation (the source's starting offsets) with the reason."""
    return Translation(
        position.split, to_split, position.offset, START_OFFSET, "start", max_repeats=None, detail=detail
    )


def wait_for_end(
    lookup: ClusterLookup, topic: str, partition: int, at_least: int, deadline: float
) -> tuple[int, int]:
    """The partition's ``(log start, end)``, polled until the end reaches ``at_least`` or the deadline."""
    while True:
        low, high = lookup.watermarks(topic, partition)
        if high >= at_least or time.monotonic() >= deadline:
            return low, high
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
