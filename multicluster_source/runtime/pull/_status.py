"""The health and status documents of a :class:`~._stream.SourceStream` (for the admin server and callers).

Built on the caller's (or an admin request's) thread from what the stream knows; the enumerator's own view is
asked for on the coordinator thread by the stream before it calls in here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from multicluster_source.framework._clientprops import _SECRET_WORDS
from multicluster_source.metadata._model import KafkaStream
from multicluster_source.ops._admin_target import lag_rows
from multicluster_source.ops._tracking import TopicTracker
from multicluster_source.runtime.core._local import ReaderRunner


def stream_health(
    closed: bool,
    error: BaseException | None,
    enumerator: dict[str, Any] | None,
    readers: Sequence[ReaderRunner],
) -> dict[str, Any]:
    """``{"status": "ready"}`` when metadata is loaded and every reader thread runs, else
    ``{"status": "not_ready", "reasons": [...]}``; ``enumerator``: its status, None when it did not
    answer."""
    reasons: list[str] = []
    if closed:
        reasons.append("the stream is closed")
    if error is not None:
        reasons.append(f"the source failed: {type(error).__name__}: {error}")
    if not closed:
        if enumerator is None:
            reasons.append("the enumerator did not answer within 5 s")
        elif int(enumerator.get("metadata_version", 0)) < 1:
            reasons.append("stream metadata is not loaded yet")
        if enumerator is not None and enumerator.get("missing_streams"):
            missing = ", ".join(enumerator["missing_streams"])
            reasons.append(f"subscribed stream ids not in the metadata: {missing}")
        reasons += [f"reader {r.index} is not running" for r in readers if not r.alive]
    if reasons:
        return {"status": "not_ready", "reasons": reasons}
    return {"status": "ready", "reasons": []}


def enumerator_status(coordinator: Any, enumerator: Any, timeout: float = 5.0) -> dict[str, Any] | None:
    """The enumerator's own status view, asked on the coordinator thread; None without one or on failure."""
    status = getattr(enumerator, "status", None)
    if not callable(status):
        return None
    try:
        result = coordinator.call_sync(status, timeout=timeout)
    except Exception:
        return None
    return dict(result) if isinstance(result, dict) else None


def fail_silent_readers(readers: Sequence[ReaderRunner], heartbeat_s: float) -> None:
    """Fail every running reader whose thread has not looped for ``heartbeat_s`` (coordinator thread)."""
    for runner in readers:
        if runner.failed is None and runner.reader is not None and not runner.finished.is_set():
            silent = runner.silent_s()
            if silent > heartbeat_s:
                runner.reader_failed(TimeoutError(f"no heartbeat for {silent:.1f} s"))


def reader_assignments(readers: Sequence[ReaderRunner]) -> dict[int, list[str]]:
    """Reader index -> split ids it reads now (none for a failed reader)."""
    out: dict[int, list[str]] = {}
    for runner in readers:
        split_ids = getattr(runner.reader, "split_ids", None)
        alive = runner.failed is None
        out[runner.index] = list(split_ids()) if callable(split_ids) and alive else []
    return out


def secret_values(client_properties: Mapping[str, str], streams: Iterable[KafkaStream]) -> set[str]:
    """Values of secret-looking properties, as configured, in ``client_properties`` and the streams."""
    props: list[tuple[str, str]] = list(client_properties.items())
    for s in streams:
        for cluster in s.clusters.values():
            props.extend(cluster.properties.items())
    return {v for k, v in props if v and any(w in k.lower() for w in _SECRET_WORDS)}


def stream_status(
    *,
    name: str,
    state: str,
    health: dict[str, Any],
    parallelism: int,
    enumerator: dict[str, Any],
    assignments: dict[int, list[str]],
    readers: Sequence[ReaderRunner],
    streams: Iterable[KafkaStream],
    topics: TopicTracker,
    registry: CollectorRegistry,
    checkpoint: dict[str, Any],
) -> dict[str, Any]:
    """The document of ``SourceStream.status()`` from what the stream knows now."""
    enum = enumerator
    clusters_md: dict[str, Any] = enum.get("clusters", {})
    per_cluster: dict[str, int] = {}
    for split_ids in assignments.values():
        for sid in split_ids:
            cid = sid.rsplit("/", 2)[0]
            per_cluster[cid] = per_cluster.get(cid, 0) + 1
    clusters = {
        cid: {
            "bootstrap_servers": md.get("bootstrap_servers"),
            "topics": list(md.get("topics", [])),
            "assigned_splits": per_cluster.get(cid, 0),
            "error": md.get("error"),
        }
        for cid, md in clusters_md.items()
    }
    stream_topics = {
        s.stream_id: {cid: sorted(c.topics) for cid, c in sorted(s.clusters.items())} for s in streams
    }
    tracking: dict[str, Any] = {
        "enabled": topics.enabled,
        "allow_reset": topics.allow_reset,
        "store": topics.store.describe() if topics.enabled else None,
        "topics": topics.active() if topics.enabled else {},
    }
    failures_total = registry.get_sample_value("multicluster_source_metadata_failures_total")
    return {
        "source": name,
        "state": state,
        "health": health,
        "parallelism": parallelism,
        "streams": stream_topics,
        "clusters": clusters,
        "readers": {str(r.index): _reader_status(r, assignments) for r in readers},
        "placement": enum.get("placement", {}),
        "failovers": enum.get("failovers", []),
        "handovers": list(enum.get("handovers", [])),
        "replicas": {
            "pending": list(enum.get("handovers_pending", [])),
            "held_topics": dict(enum.get("replica_topics_held", {})),
        },
        "lag": lag_rows(registry, {cid: c["topics"] for cid, c in clusters.items()}),
        "last_reconciliation": enum.get("last_reconciliation"),
        "metadata": {
            "version": enum.get("metadata_version"),
            "failures_in_a_row": enum.get("metadata_failures_in_a_row"),
            "failures_total": None if failures_total is None else int(failures_total),
            "retained_splits": len(enum.get("retained", [])),
            "missing_streams": list(enum.get("missing_streams", [])),
        },
        "tracking": tracking,
        "checkpoint": checkpoint,
        "enumerator": enum,
    }


def _reader_status(runner: ReaderRunner, assignments: dict[int, list[str]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "alive": runner.alive,
        "rack": runner.rack,
        "splits": assignments.get(runner.index, []),
    }
    if runner.failed is not None:
        out["failed"] = f"{type(runner.failed).__name__}: {runner.failed}"
    detail = getattr(runner.reader, "status", None)
    if callable(detail) and runner.failed is None:
        info = detail()
        out["standby"] = info.get("standby", [])
        out["fetching_from"] = info.get("fetching_from", {})
        out["stalls"] = info.get("stalls", {})
    return out
