"""The driver's side of the Spark source: the metadata file, partition discovery and offsets (no pyspark).

Spark calls the stream reader on its driver to plan each micro-batch; this module does the work with the
library's own parts: the metadata file service, ``merge_stream_clusters``, ``describe_partitions`` and
``resolve_offsets`` over one admin client per cluster. The metadata file is read again for every
micro-batch, so a change applies to the next one planned, in the same query. Admin clients are made with
the cluster's client configuration (placeholders resolved here, in this process, and kept nowhere else).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from multicluster_source.enumerator._describe import describe_partitions
from multicluster_source.enumerator._offsets import OffsetsInitializer, resolve_offsets
from multicluster_source.exceptions import ConfigurationError, MetadataError, MultiClusterSourceError
from multicluster_source.framework._clientconf import (
    admin_properties,
    cluster_client_config,
    merge_stream_clusters,
)
from multicluster_source.framework._split import make_split_id, parse_split_id
from multicluster_source.metadata._configmap import ConfigMapMetadataService
from multicluster_source.metadata._file import FileMetadataService
from multicluster_source.metadata._model import ClusterMetadata, KafkaMetadataService
from multicluster_source.ops._clientlog import client_logging
from multicluster_source.spark._commits import GroupCommits
from multicluster_source.spark._handovers import SparkHandovers
from multicluster_source.spark._metrics import count_data_loss
from multicluster_source.spark._offsets import (
    Range,
    backlog,
    encode_offset,
    plan_ranges,
    split_ranges,
    spread_limit,
)
from multicluster_source.spark._options import EARLIEST, LATEST, SparkOptions

__all__ = ["DataLossError", "Planner"]

_log = logging.getLogger("multicluster_source.spark")

TopicPartitions = list[tuple[str, int]]


class DataLossError(MultiClusterSourceError):
    """Records a micro-batch should read are gone (retention, a topic made again, a cluster left the
    metadata); raised with ``failOnDataLoss=true`` (the default), the message names the split."""


def _admin(conf: Mapping[str, Any]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(dict(conf))


def _metadata_service(options: SparkOptions) -> KafkaMetadataService:
    """The metadata service the options name: a file or a mounted ConfigMap read again at every planning
    (no watcher thread), or a compacted topic followed by its reader thread (never created here)."""
    if options.metadata_servers is not None:
        from multicluster_source.metadata.topic._kafka_topic import KafkaTopicMetadataService

        return KafkaTopicMetadataService(
            options.metadata_servers,
            options.metadata_file,
            client_properties=options.metadata_properties,
            create_topic=False,
        )
    if options.metadata_key is None:
        return FileMetadataService(options.metadata_file, poll_interval=0, watch=False)
    return ConfigMapMetadataService(options.metadata_file, options.metadata_key, poll_interval=0, watch=False)


class Planner:
    """Offsets and ranges of the micro-batches of one query (one instance on Spark's driver).

    Not thread-safe; Spark calls a stream reader from one thread. :meth:`close` lets go of the clients.
    """

    def __init__(self, options: SparkOptions) -> None:
        self._options = options
        self._service = _metadata_service(options)
        self._clusters: dict[str, ClusterMetadata] = {}
        """The clusters read now: the declared metadata less the copies of origins read (``replicaOf``)."""
        self._declared: dict[str, ClusterMetadata] = {}
        self._handovers = SparkHandovers(
            options.client_properties,
            group_id=options.commit_group_id,
            wait_s=options.replica_sync_wait_ms / 1000.0,
        )
        self._seen: dict[str, ClusterMetadata] = {}
        """Every cluster the metadata described during this run, as last described (ranges planned
        before a cluster left the metadata are still read)."""
        self._admins: dict[str, tuple[ClusterMetadata, Any, bool]] = {}
        self._loaded = False
        self._target: dict[str, int] | None = None
        self._warned: set[str] = set()
        self._last_batch = time.monotonic()
        self._down: set[str] = set()
        """Clusters whose last discovery or offsets request failed (logged once until they answer)."""
        self._commits: GroupCommits | None = None
        if options.commit_group_id:
            self._commits = GroupCommits(
                options.commit_group_id, options.client_properties, options.group_id_prefix
            )

    # ------------------------------------------------------------------------------------ metadata

    def refresh(self) -> dict[str, ClusterMetadata]:
        """Read the metadata file (or ConfigMap) again; the clusters of the subscribed streams now. Metadata
        that cannot be read or is invalid fails the first read (naming the option and file); later, the last
        good metadata stays."""
        options = self._options
        try:
            found = self._service.describe_streams(options.stream_ids)
            declared = merge_stream_clusters([c for s in found.values() for c in s.clusters.values()])
        except (MetadataError, ValueError) as exc:
            if not self._loaded:
                raise ConfigurationError(f"{options.metadata_option}: {exc}") from exc
            self._warn_once(
                f"metadata:{exc}", "%s: %s; keeping the last good metadata", options.metadata_option, exc
            )
            return self._clusters
        missing = sorted(set(options.stream_ids) - set(found))
        if missing and not self._loaded:
            raise ConfigurationError(
                f"option streamIds: stream(s) {', '.join(missing)} not in the metadata of "
                f"{options.metadata_option}"
            )
        clusters = self._handovers.effective(declared)
        added = sorted(set(clusters) - set(self._clusters))
        removed = sorted(set(self._clusters) - set(clusters))
        if self._loaded and (added or removed):
            _log.info("metadata changed: clusters added %s, removed %s", added or "-", removed or "-")
        self._loaded = True
        self._clusters = clusters
        self._declared = declared
        self._seen.update(declared)
        return clusters

    def cluster(self, cluster_id: str) -> ClusterMetadata | None:
        """The cluster as the metadata describes it now, else as it was last described in this run."""
        return self._clusters.get(cluster_id) or self._seen.get(cluster_id)

    # ------------------------------------------------------------------------------------ clients

    def _admin_of(self, cluster: ClusterMetadata) -> tuple[Any, bool]:
        held = self._admins.get(cluster.cluster_id)
        if held is not None and held[0].same_connection(cluster):
            return held[1], held[2]
        conf = cluster_client_config(
            cluster,
            self._options.client_properties,
            client_id=f"{self._options.group_id_prefix}-{cluster.cluster_id}-driver",
        )
        read_committed = str(conf.get("isolation.level", "read_committed")).lower() != "read_uncommitted"
        full: dict[str, Any] = admin_properties(conf)
        full.update(client_logging(cluster.cluster_id, "spark driver"))
        admin = _admin(full)
        self._admins[cluster.cluster_id] = (cluster, admin, read_committed)
        return admin, read_committed

    def _timeout(self) -> float:
        raw = self._options.client_properties.get("socket.timeout.ms", "30000")
        return min(30.0, max(1.0, float(raw) / 1000.0))

    def partitions_of(self, cluster: ClusterMetadata) -> TopicPartitions:
        """The partitions of the cluster's topics (missing topics are left out, logged once)."""
        admin, _ = self._admin_of(cluster)
        found, missing, _leaders = describe_partitions(admin, cluster.topics, {}, self._timeout(), None)
        for topic in missing:
            self._warn_once(
                f"missing:{cluster.cluster_id}/{topic}",
                "cluster=%s: topic %r does not exist (yet)",
                cluster.cluster_id,
                topic,
            )
        return found

    def offsets(self, cluster: ClusterMetadata, kind: str, partitions: TopicPartitions) -> dict[str, int]:
        """The ``earliest`` or ``latest`` offsets of ``partitions`` by split id."""
        if not partitions:
            return {}
        admin, read_committed = self._admin_of(cluster)
        initializer = OffsetsInitializer.earliest() if kind == "earliest" else OffsetsInitializer.latest()
        found = resolve_offsets(
            initializer,
            admin=admin,
            cluster_id=cluster.cluster_id,
            group_id=None,
            partitions=partitions,
            timeout=self._timeout(),
            read_committed=read_committed,
        )
        return {make_split_id(cluster.cluster_id, t, p): max(0, o) for (t, p), o in found.items()}

    # ------------------------------------------------------------------------------------ offsets

    def initial(self) -> dict[str, int]:
        """Where a new query starts (``startingOffsets``); a cluster that does not answer fails it."""
        starting = self._options.starting
        positions: dict[str, int] = {}
        for cid, cluster in sorted(self.refresh().items()):
            try:
                parts = self.partitions_of(cluster)
                if starting.kind != "explicit":
                    positions.update(self.offsets(cluster, starting.kind, parts))
                    continue
                ids = {make_split_id(cid, t, p): (t, p) for t, p in parts}
                latest = [tp for key, tp in ids.items() if starting.explicit.get(key) == LATEST]
                earliest = [tp for key, tp in ids.items() if starting.explicit.get(key, EARLIEST) == EARLIEST]
                positions.update(self.offsets(cluster, "latest", latest))
                positions.update(self.offsets(cluster, "earliest", earliest))
                positions.update({k: v for k, v in starting.explicit.items() if k in ids and v >= 0})
            except MultiClusterSourceError:
                raise
            except Exception as exc:
                raise MultiClusterSourceError(
                    f"cluster {cid}: cannot resolve startingOffsets: {type(exc).__name__}: {exc}"
                ) from exc
        if starting.kind == "explicit":
            unknown = sorted(set(starting.explicit) - set(positions))
            if unknown:
                _log.warning(
                    "startingOffsets: no such split in the subscribed streams: %s", ", ".join(unknown)
                )
        _log.info(
            "starting at %d splits of %d clusters (%s)", len(positions), len(self._clusters), starting.kind
        )
        return encode_offset(positions)

    def bounded(self) -> list[tuple[Range, ClusterMetadata]]:
        """The ranges of a batch read (``spark.read``): from ``startingOffsets`` to ``endingOffsets``
        (``latest`` when not given) of every split of the metadata now; a cluster that does not answer
        fails the read. A split whose end is not after its start reads nothing."""
        start = self.initial()
        ending = self._options.ending
        explicit = ending.explicit if ending is not None else {}
        end: dict[str, int] = {}
        for cid, cluster in sorted(self._clusters.items()):
            try:
                ids = {make_split_id(cid, t, p): (t, p) for t, p in self.partitions_of(cluster)}
                latest = [tp for key, tp in ids.items() if explicit.get(key, LATEST) == LATEST]
                end.update(self.offsets(cluster, "latest", latest))
                end.update({k: v for k, v in explicit.items() if k in ids and v >= 0})
            except MultiClusterSourceError:
                raise
            except Exception as exc:
                raise MultiClusterSourceError(
                    f"cluster {cid}: cannot resolve endingOffsets: {type(exc).__name__}: {exc}"
                ) from exc
        unknown = sorted(set(explicit) - set(end))
        if unknown:
            _log.warning("endingOffsets: no such split in the subscribed streams: %s", ", ".join(unknown))
        return self.plan(start, end)

    def prepare_available_now(self, start: Mapping[str, int]) -> None:
        """Fix the end of a ``Trigger.AvailableNow`` run: every split's latest offset now."""
        target: dict[str, int] = {}
        for _cid, cluster in sorted(self.refresh().items()):
            target.update(self.offsets(cluster, "latest", self.partitions_of(cluster)))
        self._target = target
        _log.info("availableNow: reading up to the latest offsets of %d splits", len(target))

    def latest(self, start: Mapping[str, int], limit: int | None) -> dict[str, int]:
        """The end of the next micro-batch from ``start``: the metadata read again, new splits entered at
        their earliest offset, replica splits taking over from an origin split at its translated position
        (both read from the next micro-batch on), the others moved towards their latest offsets, at most
        ``limit`` records in all."""
        positions = dict(start)
        found: dict[str, TopicPartitions] = {}
        for cid, cluster in sorted(self.refresh().items()):
            try:
                parts = self.partitions_of(cluster)
            except Exception as exc:
                self._went_down(cid, exc)
                continue
            if self._target is not None:
                parts = [tp for tp in parts if make_split_id(cid, *tp) in self._target]
            found[cid] = parts
        handed = self._handovers.translate(
            self._declared,
            {cid: [make_split_id(cid, *tp) for tp in parts] for cid, parts in found.items()},
            positions,
            self._down,
        )
        latest: dict[str, int] = {}
        for cid, parts in found.items():
            cluster = self._clusters[cid]
            ids = {make_split_id(cid, t, p): (t, p) for t, p in parts}
            try:
                new = [tp for key, tp in ids.items() if key not in positions and key not in handed]
                known = [tp for key, tp in ids.items() if key in positions]
                entered = self.offsets(cluster, "earliest", new)
                if entered:
                    _log.info("cluster=%s: %d new splits start at their earliest offsets", cid, len(entered))
                positions.update(entered)
                positions.update({key: at for key, at in handed.items() if key in ids})
                latest.update(self._checked(cluster, positions, self.offsets(cluster, "latest", known)))
            except MultiClusterSourceError:
                raise
            except Exception as exc:
                self._went_down(cid, exc)
                continue
            if cid in self._down:
                self._down.discard(cid)
                _log.info("cluster=%s: answers again", cid)
        if self._target is not None:
            latest = {k: min(v, self._target[k]) for k, v in latest.items()}
        elif self._waits(backlog(positions, latest)):
            return encode_offset(positions)
        positions.update(spread_limit(positions, latest, limit))
        if positions != start:
            self._last_batch = time.monotonic()
        return encode_offset(positions)

    def _went_down(self, cid: str, exc: BaseException) -> None:
        if isinstance(exc, MultiClusterSourceError):
            raise exc
        if cid not in self._down:
            _log.warning("cluster=%s: not read until it answers: %s: %s", cid, type(exc).__name__, exc)
        self._down.add(cid)

    def _waits(self, records: int) -> bool:
        """``minOffsetsPerTrigger``: fewer records than that wait, up to ``maxTriggerDelay`` since the last
        micro-batch (not in an ``AvailableNow`` run, which reads what there is)."""
        least = self._options.min_offsets_per_trigger
        if least is None or records >= least or records == 0:
            return False
        waited_ms = (time.monotonic() - self._last_batch) * 1000.0
        return waited_ms < self._options.max_trigger_delay_ms

    def _checked(
        self, cluster: ClusterMetadata, positions: dict[str, int], latest: dict[str, int]
    ) -> dict[str, int]:
        """``latest`` where no split's latest offset is below the query's position (a topic deleted and
        made again): with ``failOnDataLoss`` that fails the query, else the split starts over at earliest."""
        behind = sorted(k for k, v in latest.items() if v < positions[k])
        for key in behind:
            message = (
                f"split {key}: the cluster's latest offset {latest[key]} is below the query's position "
                f"{positions[key]} (the topic was deleted and made again?)"
            )
            if self._options.fail_on_data_loss:
                raise DataLossError(message + "; set failOnDataLoss=false to read it again from its start")
            _log.warning("%s; reading it from its earliest offset (failOnDataLoss=false)", message)
            _c, topic, partition = parse_split_id(key)
            positions.update(self.offsets(cluster, "earliest", [(topic, partition)]))
            del latest[key]
        return latest

    def plan(self, start: Mapping[str, int], end: Mapping[str, int]) -> list[tuple[Range, ClusterMetadata]]:
        """The ranges of a micro-batch with the cluster each is read from. A range of a cluster no longer
        in the metadata (a replay after a restart) fails with ``failOnDataLoss``, else is skipped."""
        if not self._loaded:
            self.refresh()
        readable: list[Range] = []
        for piece in plan_ranges(start, end):
            cid = parse_split_id(piece.split_id)[0]
            if self.cluster(cid) is not None:
                readable.append(piece)
                continue
            message = (
                f"split {piece.split_id}: offsets {piece.start}..{piece.end - 1} were planned but cluster "
                f"{cid} is not in the metadata file any more"
            )
            if self._options.fail_on_data_loss:
                raise DataLossError(message + "; set failOnDataLoss=false to skip them")
            _log.warning("%s: skipped (failOnDataLoss=false)", message)
            count_data_loss(cid, parse_split_id(piece.split_id)[1], piece.size)
        out: list[tuple[Range, ClusterMetadata]] = []
        for piece in split_ranges(readable, self._options.min_partitions):
            cluster = self.cluster(parse_split_id(piece.split_id)[0])
            assert cluster is not None
            out.append((piece, cluster))
        return out

    def commit(self, end: Mapping[str, int]) -> None:
        """A micro-batch ending at ``end`` is committed: owe its offsets to ``commitGroupId`` if set."""
        if self._commits is not None:
            self._commits.commit(self._clusters, end)

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            _log.warning(message, *args)

    def close(self) -> None:
        """Let go of the admin clients, the committers and the metadata service."""
        self._admins.clear()
        self._handovers.close()
        if self._commits is not None:
            self._commits.close()
        self._service.close()
