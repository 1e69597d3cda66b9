"""Replica handovers on Spark's driver (API.md section 9 in a Spark query): which topics a micro-batch reads
when some clusters copy others (``replicaOf``), and where a replica split starts when its origin leaves.

The rules are the library's own (``enumerator._copies``, ``replicas``); this module applies them to
micro-batch planning, where positions are the query's offsets rather than a running reader's:

- **What is read**: :func:`~multicluster_source.enumerator._copies.effective_metadata` of the declared
  metadata (``failover: true`` fails an origin). A replica topic is left out while its origin topic is read,
  so it enters exactly when the origin topic leaves the metadata or its origin fails.
- **Where it starts**: a replica split entering the read set takes the translation of its origin split's
  position in the query's offsets (the end of the last micro-batch planned, which is the next offset the
  query has not read). One translator per ``replicaOf`` declaration (``mirrormaker2``, ``identical``,
  ``timestamp``), made when the declaration first appears so that MirrorMaker 2's offset syncs are followed
  from then on, and closed when it goes away. A split with no origin position, or whose translation fails,
  starts at its earliest offset, as every split that appears under a running query does.
- **Which splits**: a replica split that has no position in the query's offsets while its origin split has
  one. The start is written into the micro-batch's end offsets, so Spark's offset log holds it: a replayed
  micro-batch never translates again, and a handover decided while the query was down is the same one. A
  replica split that already has a position (read before: the copy was read, then its origin again, and
  now the origin leaves once more) goes on from its own position: Spark reads each split from where the
  last micro-batch ended, so such a split repeats what the origin delivered meanwhile, and loses nothing.

Driver thread only (Spark plans micro-batches from one thread); :meth:`SparkHandovers.translate` may block
up to ``replicaSyncWait`` plus the clients' timeouts while MirrorMaker 2 catches up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

from multicluster_source.enumerator._copies import (
    copied_origin_topics,
    effective_metadata,
    failed_origins,
)
from multicluster_source.enumerator._handover import default_translator_factory
from multicluster_source.framework._split import make_split_id, parse_split_id
from multicluster_source.metadata._model import ClusterMetadata
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.replicas._model import OriginPosition, Translation, Translator, start_translator

__all__ = ["SparkHandovers", "origin_split_of"]

_log = logging.getLogger("multicluster_source.spark")
_MAX_DONE = 10_000  # translations kept (the oldest go first)


def origin_split_of(split_id: str, declared: Mapping[str, ClusterMetadata]) -> str | None:
    """The origin split that the replica split ``split_id`` copies (same partition), or None."""
    cid, topic, partition = parse_split_id(split_id)
    cluster = declared.get(cid)
    if cluster is None or cluster.replica_of is None:
        return None
    origin_topic = copied_origin_topics(cluster).get(topic)
    if origin_topic is None:
        return None
    return make_split_id(cluster.replica_of.cluster, origin_topic, partition)


class SparkHandovers:
    """The replica handovers of one query on Spark's driver (see the module text).

    ``properties`` are the query's client properties (``kafka.*``, placeholders unresolved: the translators
    resolve them where they make their clients); ``group_id`` the group whose MirrorMaker 2 checkpoints may
    pin a start (``commitGroupId``). :meth:`close` closes every translator.
    """

    def __init__(
        self,
        properties: Mapping[str, str],
        *,
        group_id: str | None = None,
        wait_s: float = 5.0,
        factory: Callable[..., Translator] | None = None,
    ) -> None:
        self._properties = dict(properties)
        self._group_id = group_id
        self._wait_s = wait_s
        self._factory = factory
        self._translators: dict[str, tuple[ReplicaOf, ClusterMetadata, Translator | None]] = {}
        self.done: list[Translation] = []
        """The latest translations of this run (at most :data:`_MAX_DONE`), oldest first."""

    def effective(self, declared: Mapping[str, ClusterMetadata]) -> dict[str, ClusterMetadata]:
        """What to read of ``declared``; makes the translators of new declarations, closes those gone."""
        for cid in sorted(set(self._translators) - set(declared)):
            self._close(cid)
        for cid, cluster in sorted(declared.items()):
            r = cluster.replica_of
            held = self._translators.get(cid)
            origin = declared.get(r.cluster) if r is not None else None
            if held is not None and (
                r is None
                or replace(held[0], failover=False) != replace(r, failover=False)
                or (origin is not None and not held[1].same_connection(origin))
            ):
                self._close(cid)
                held = None
            if r is not None and held is None and origin is not None:
                self._translators[cid] = (r, origin, self._make(r, origin, cluster))
        return effective_metadata(declared, failed_origins(declared))

    def _make(
        self, replica_of: ReplicaOf, origin: ClusterMetadata, replica: ClusterMetadata
    ) -> Translator | None:
        return start_translator(
            self._factory or default_translator_factory,
            replica_of,
            origin,
            replica,
            group_id=self._group_id,
            properties=self._properties,
            otherwise="at their earliest offsets",
            log=_log,
        )

    def _close(self, cid: str) -> None:
        _r, _origin, translator = self._translators.pop(cid)
        if translator is not None:
            translator.close()

    def translate(
        self,
        declared: Mapping[str, ClusterMetadata],
        discovered: Mapping[str, list[str]],
        positions: Mapping[str, int],
        down: set[str],
    ) -> dict[str, int]:
        """Starts of the replica splits that take over now. ``discovered`` is cluster id -> the split ids
        found in the effective metadata at this planning, ``positions`` the query's offsets, ``down`` the
        clusters that did not answer. A replica split with no position whose origin split has one is
        handed over; returns split id -> start offset (a split left out starts as any new split does)."""
        starts: dict[str, int] = {}
        for cid, splits in sorted(discovered.items()):
            asks: list[tuple[OriginPosition, str]] = []
            for split in splits:
                origin = origin_split_of(split, declared)
                if origin is not None and origin in positions and split not in positions:
                    asks.append((OriginPosition(origin, positions[origin]), split))
            if asks:
                starts.update(self._translated(cid, asks, declared, down))
        return starts

    def _translated(
        self,
        cid: str,
        asks: list[tuple[OriginPosition, str]],
        declared: Mapping[str, ClusterMetadata],
        down: set[str],
    ) -> dict[str, int]:
        held = self._translators.get(cid)
        translator = held[2] if held is not None else None
        if held is None or translator is None:
            _log.error(
                "cluster=%s: no translator: %d replica split(s) start at their earliest offsets",
                cid,
                len(asks),
            )
            return {}
        origin_id = held[0].cluster
        reachable = origin_id not in down and origin_id not in failed_origins(declared)
        try:
            done = translator.translate(asks, origin_reachable=reachable, wait_s=self._wait_s)
        except Exception as exc:  # a translator answers per split; this is its failure as a whole
            _log.error(
                "cluster=%s: translation failed (%s): the replica splits start at their earliest", cid, exc
            )
            return {}
        starts: dict[str, int] = {}
        self.done.extend(done)
        del self.done[:-_MAX_DONE]
        for translation in done:
            if translation.mode == "start":
                continue
            starts[translation.to_split] = translation.to_offset
            _log.info(
                "cluster=%s: %s starts at offset %d: handed over from %s offset %d, mode %s%s",
                cid,
                translation.to_split,
                translation.to_offset,
                translation.from_split,
                translation.from_offset,
                translation.mode,
                f", at most {translation.max_repeats} record(s) may repeat"
                if translation.max_repeats
                else "",
            )
        return starts

    def close(self) -> None:
        """Close every translator (idempotent)."""
        for cid in sorted(self._translators):
            self._close(cid)
