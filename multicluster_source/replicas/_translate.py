"""The translators: :func:`make_translator` picks one by ``replicaOf.offsets``.

* ``identical`` (a byte-for-byte link: Cluster Linking and the like): the replica split starts at the
  origin position, clamped to the replica's log (below its log start: the log start, the records between
  are gone; above its end after waiting up to ``wait_s`` for the copy to catch up: its end, and the records
  between may repeat, counted in ``max_repeats``).
* ``timestamp`` (a copy that keeps timestamps): the first replica offset whose timestamp is at or after the
  last returned record's (``offsets_for_times``; none yet: the replica's end). It re-reads the records of
  that millisecond at least: ``max_repeats`` is None (unknown). No record returned: ``start``.
* ``mirrormaker2``: offset syncs, record matching and checkpoints (:mod:`._mm2`).
"""

from __future__ import annotations

from collections.abc import Mapping

from multicluster_source.framework._split import parse_split_id
from multicluster_source.metadata._model import ClusterMetadata
from multicluster_source.metadata._replica import ReplicaOf
from multicluster_source.replicas._base import BaseTranslator, start_translation, wait_for_end
from multicluster_source.replicas._mm2 import MirrorMaker2Translator
from multicluster_source.replicas._model import OriginPosition, Translation, Translator

__all__ = ["IdenticalTranslator", "TimestampTranslator", "make_translator"]


def make_translator(
    replica_of: ReplicaOf,
    origin: ClusterMetadata,
    replica: ClusterMetadata,
    *,
    group_id: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> Translator:
    """The translator for ``replica``'s declaration ``replica_of`` (whose origin cluster is ``origin``).

    ``properties`` are the source-wide client properties (``set_properties``), overridden by each cluster's
    own, as for every client of the source; ``group_id`` the source's group (MM2 checkpoints are looked up
    for it). Nothing connects before ``start()`` or the first ``translate``.
    """
    if replica_of.cluster != origin.cluster_id:
        raise ValueError(
            f"cluster {replica.cluster_id}: replicaOf names {replica_of.cluster!r}, not {origin.cluster_id!r}"
        )
    if replica_of.offsets == "identical":
        return IdenticalTranslator(replica_of, origin, replica, group_id=group_id, properties=properties)
    if replica_of.offsets == "timestamp":
        return TimestampTranslator(replica_of, origin, replica, group_id=group_id, properties=properties)
    return MirrorMaker2Translator(replica_of, origin, replica, group_id=group_id, properties=properties)


class IdenticalTranslator(BaseTranslator):
    """``identical``: the same offset, clamped to the replica's log (see the module text)."""

    def translate_one(
        self, position: OriginPosition, to_split: str, *, origin_reachable: bool, deadline: float
    ) -> Translation:
        _cid, topic, partition = parse_split_id(to_split)
        low, high = wait_for_end(self.replica_lookup, topic, partition, position.offset, deadline)
        at = position.offset
        if at < low:
            detail = (
                f"same offset; the replica's log starts at {low}: offsets {at}..{low - 1} are gone from it"
            )
            return Translation(position.split, to_split, at, low, "identical", 0, detail)
        if at > high:
            detail = (
                f"same offset, but the replica ends at {high}: started there, {at - high} records "
                "copied later may repeat"
            )
            return Translation(position.split, to_split, at, high, "identical", at - high, detail)
        return Translation(position.split, to_split, at, at, "identical", 0, "same offset")


class TimestampTranslator(BaseTranslator):
    """``timestamp``: the first replica offset at or after the last returned record's timestamp."""

    def translate_one(
        self, position: OriginPosition, to_split: str, *, origin_reachable: bool, deadline: float
    ) -> Translation:
        if position.last_timestamp_ms is None:
            return start_translation(
                position,
                to_split,
                "no record was returned from the origin split: no time to start at",
            )
        _cid, topic, partition = parse_split_id(to_split)
        ts = position.last_timestamp_ms
        found = self.replica_lookup.offset_for_time(topic, partition, ts)
        if found is None:
            _low, high = self.replica_lookup.watermarks(topic, partition)
            detail = f"no replica record at or after {ts} ms yet: started at the replica's end"
            return Translation(position.split, to_split, position.offset, high, "timestamp", None, detail)
        detail = f"first replica record at or after {ts} ms (the last returned record's time)"
        return Translation(position.split, to_split, position.offset, found, "timestamp", None, detail)
