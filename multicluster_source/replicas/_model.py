"""What a replica handover decided for one split (``status()["handovers"]`` entries), the
translator protocol, and :func:`start_translator` (one made and started, for the enumerator and Spark)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from multicluster_source.metadata._model import ClusterMetadata
    from multicluster_source.metadata._replica import ReplicaOf

TranslationMode = Literal["exact", "conservative", "identical", "timestamp", "start"]
"""How a replica split's start was chosen: ``exact`` (a sync, or the copy of the last record returned, pins
it), ``conservative`` (MM2's rule: may repeat up to ``max_repeats`` records, never skips), ``identical`` (same
offset), ``timestamp`` (first offset at or after the last returned record's time), ``start`` (no origin
position: the source's starting offsets)."""


@dataclass(frozen=True)
class Translation:
    """Where a replica split starts, and how that was chosen.

    ``from_offset`` is the origin split's position (the next offset the caller had not received);
    ``to_offset`` the replica split's start. ``max_repeats`` bounds the records that may be delivered again
    (0 for ``exact`` and ``identical``; None where unknown, as for ``timestamp``). ``detail`` says why, for
    logs and ``status()`` (never a secret).
    """

    from_split: str
    to_split: str
    from_offset: int
    to_offset: int
    mode: TranslationMode
    max_repeats: int | None = 0
    detail: str = ""

    def to_status(self) -> dict[str, Any]:
        """The ``status()["handovers"]`` entry (API.md section 9)."""
        return {
            "from": self.from_split,
            "to": self.to_split,
            "from_offset": self.from_offset,
            "to_offset": self.to_offset,
            "mode": self.mode,
            "max_repeats": self.max_repeats,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class OriginPosition:
    """What the source knows of an origin split when it hands the split over to a replica.

    ``offset`` is the next offset the caller has not received (the position); ``last_timestamp_ms`` the
    timestamp of the last record returned from the split, when one was (the ``timestamp`` mode starts there,
    and the ``mirrormaker2`` mode may use it to recognise that record's copy).
    """

    split: str
    offset: int
    last_timestamp_ms: int | None = None


class Translator(Protocol):
    """Translates origin positions to replica starts for one replica declaration (one origin cluster and one
    replica cluster). Made by the enumerator when a ``replicaOf`` is declared, so that a MirrorMaker 2
    translator can follow the offset syncs from that moment; closed when the declaration goes away.

    Threads: ``start`` and ``close`` are called by the enumerator's thread; ``translate`` too, and may block
    up to ``wait_s`` (waiting for MM2 to catch up) plus the clients' timeouts. A translator's own background
    threads are named ``mcs-replica-<replica cluster id>...`` and joined by ``close``.
    """

    def start(self) -> None:
        """Begins following what the translation needs (offset syncs); returns at once."""

    def translate(
        self,
        handovers: Sequence[tuple[OriginPosition, str]],
        *,
        origin_reachable: bool,
        wait_s: float,
    ) -> list[Translation]:
        """One :class:`Translation` per ``(origin position, replica split)`` pair, in order.

        ``origin_reachable`` is False on a failover: the translator must not need the origin cluster then
        (syncs already read, or read from the replica side). Never raises for a single split: a split that
        cannot be translated gets ``mode="start"`` (or the conservative answer) with the reason in ``detail``.
        """
        ...

    def close(self) -> None:
        """Stops and joins the background threads and closes every client. Idempotent."""


def start_translator(
    factory: Callable[..., Translator],
    replica_of: ReplicaOf,
    origin: ClusterMetadata,
    replica: ClusterMetadata,
    *,
    group_id: str | None,
    properties: Mapping[str, str],
    otherwise: str,
    log: logging.Logger,
) -> Translator | None:
    """The translator for ``replica``'s declaration, made by ``factory`` and started, with a log line;
    None (logged on ``log`` as an error: the splits start ``otherwise``) when it cannot be made or started."""
    try:
        translator = factory(replica_of, origin, replica, group_id=group_id, properties=dict(properties))
        translator.start()
    except Exception as exc:
        log.error(
            "cluster=%s: no translator for replicaOf %s (%s): its splits will start %s",
            replica.cluster_id,
            replica_of.cluster,
            exc,
            otherwise,
        )
        return None
    log.info(
        "cluster=%s: replica of %s (offsets %s): translator started",
        replica.cluster_id,
        replica_of.cluster,
        replica_of.offsets,
    )
    return translator
