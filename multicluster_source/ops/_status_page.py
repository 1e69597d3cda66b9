"""The HTML status page of the admin server (``GET /``), rendered from the status answers of the sources.

:func:`render_status_page` fills the template ``_static/status.html`` (a ``string.Template``: the page's
style and its 2 s refresh) with one section per source: health, facts, clusters, streams, readers, lag per
partition, the last reconciliation and topic tracking. Every value is HTML-escaped here; masking secrets is
the server's job (:mod:`multicluster_source.ops._admin`).

Threads: called by the admin server on its request threads ``mcs-admin-<source>-request``; it only reads
its arguments and the template.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Mapping
from importlib import resources
from string import Template
from typing import Any

__all__ = ["render_status_page"]


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _table(table_id: str, head: Iterable[str], rows: list[str], empty: str) -> str:
    if not rows:
        return f'<p class="empty" id="{table_id}">{_e(empty)}</p>'
    cells = "".join(f"<th>{_e(h)}</th>" for h in head)
    return f'<table id="{table_id}"><thead><tr>{cells}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _num(value: Any, *, lag: bool = False) -> str:
    css = "num lagging" if lag and isinstance(value, int) and value > 0 else "num"
    return f'<td class="{css}">{_e("-" if value is None else value)}</td>'


def _render_source(status: Mapping[str, Any]) -> str:
    name = str(status.get("source", "?"))
    health = status.get("health") or {}
    ready = health.get("status") == "ready"
    metadata = status.get("metadata") or {}
    tracking = status.get("tracking") or {}
    tracked: Mapping[str, list[str]] = tracking.get("topics") or {}
    lag = status.get("lag") or []
    lag_by_cluster: dict[str, int] = {}
    for row in lag:
        if isinstance(row.get("lag"), int):
            lag_by_cluster[row["cluster"]] = lag_by_cluster.get(row["cluster"], 0) + row["lag"]
    out = [
        f'<section class="source" data-source="{_e(name)}">',
        f'<h2>Source <code>{_e(name)}</code><span class="badge {"ready" if ready else "not_ready"}" '
        f'id="health">{"ready" if ready else "not ready"}</span></h2>',
    ]
    reasons = health.get("reasons") or []
    if reasons:
        out.append('<div class="reasons">' + "<br>".join(_e(r) for r in reasons) + "</div>")
    event_time: Mapping[str, Any] = status.get("event_time") or {}
    facts = {
        "state": status.get("state"),
        "readers": status.get("parallelism"),
        "metadata version": metadata.get("version"),
        "metadata failures in a row": metadata.get("failures_in_a_row"),
        "metadata failures total": metadata.get("failures_total"),
        "retained splits": metadata.get("retained_splits"),
        "last checkpoint": (status.get("checkpoint") or {}).get("last_id"),
        "watermark (ms)": event_time.get("watermark"),
        "paused by watermark alignment": ", ".join(event_time.get("paused") or []) or None,
    }
    out.append(
        '<div class="kv">'
        + "".join(
            f"<div><span>{_e(k)}:</span> <b>{_e('-' if v is None else v)}</b></div>" for k, v in facts.items()
        )
        + "</div>"
    )

    hybrid: Mapping[str, Any] = status.get("hybrid") or {}
    if hybrid:
        out.append(_render_hybrid(hybrid))
    clusters: Mapping[str, Any] = status.get("clusters") or {}
    rows = []
    for cid, c in clusters.items():
        read = ", ".join(tracked.get(cid, []))
        servers = c.get("bootstrap_servers")
        topics = ", ".join(c.get("topics", []))
        error = f'<br><small class="error">{_e(c["error"])}</small>' if c.get("error") else ""
        rows.append(
            f'<tr data-cluster="{_e(cid)}"><td><b>{_e(cid)}</b>{error}</td>'
            f"<td><code>{_e(servers)}</code></td>"
            f"<td>{_e(topics)}</td><td>{_e(read)}</td>"
            f"{_num(c.get('assigned_splits'))}{_num(lag_by_cluster.get(cid), lag=True)}</tr>"
        )
    for cid in sorted(set(tracked) - set(clusters)):
        rows.append(
            f'<tr data-cluster="{_e(cid)}" class="gone"><td><b>{_e(cid)}</b> <i>(not in metadata)</i></td>'
            f"<td></td><td></td><td>{_e(', '.join(tracked[cid]))}</td>{_num(None)}{_num(None)}</tr>"
        )
    out.append("<h3>Clusters</h3>")
    out.append(
        _table(
            "clusters",
            ["cluster", "bootstrap servers", "topics (metadata)", "topics read (tracking)", "splits", "lag"],
            rows,
            "no clusters",
        )
    )

    streams: Mapping[str, Mapping[str, list[str]]] = status.get("streams") or {}
    rows = [
        f'<tr data-stream="{_e(sid)}"><td><b>{_e(sid)}</b></td><td>'
        + "<br>".join(f"{_e(cid)}: {_e(', '.join(topics))}" for cid, topics in parts.items())
        + "</td></tr>"
        for sid, parts in streams.items()
    ]
    out.append("<h3>Streams</h3>")
    out.append(_table("streams", ["stream", "clusters: topics"], rows, "no stream subscribed"))

    readers: Mapping[str, Any] = status.get("readers") or {}
    rows = []
    for idx, r in readers.items():
        splits = r.get("splits", [])
        alive = "running" if r.get("alive") else "stopped"
        rows.append(
            f'<tr data-reader="{_e(idx)}"><td>{_e(idx)}</td><td>{_e(alive)}</td>{_num(len(splits))}'
            f'<td class="splits"><code>{_e(", ".join(splits))}</code></td></tr>'
        )
    out.append("<h3>Readers</h3>")
    out.append(_table("readers", ["reader", "thread", "splits", "split ids"], rows, "no readers"))

    rows = [
        f'<tr data-cluster="{_e(r["cluster"])}" data-topic="{_e(r["topic"])}" '
        f'data-partition="{_e(r["partition"])}"><td>{_e(r["cluster"])}</td><td>{_e(r["topic"])}</td>'
        f"{_num(r['partition'])}{_num(r.get('current_offset'))}{_num(r.get('lag'), lag=True)}"
        f"{_num(r.get('committed_offset'))}</tr>"
        for r in lag
    ]
    out.append("<h3>Lag per partition</h3>")
    out.append(
        _table(
            "lag",
            ["cluster", "topic", "partition", "next offset", "lag", "committed"],
            rows,
            "no partition reported yet",
        )
    )

    out.append(_render_handovers(status))

    rec = status.get("last_reconciliation")
    out.append("<h3>Last reconciliation</h3>")
    if rec:
        at = rec.get("at_ms")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at / 1000)) if isinstance(at, int) else at
        parts = [
            ("version", rec.get("version")),
            ("at", when),
            ("added", ", ".join(rec.get("added", [])) or "-"),
            ("removed", ", ".join(rec.get("removed", [])) or "-"),
            ("reconnected", ", ".join(rec.get("reconnected", [])) or "-"),
            ("topics changed", ", ".join(rec.get("topics_changed", [])) or "-"),
            ("splits retired", rec.get("splits_retired")),
        ]
        out.append(
            '<div class="kv" id="reconciliation">'
            + "".join(f"<div><span>{_e(k)}:</span> <b>{_e(v)}</b></div>" for k, v in parts)
            + "</div>"
        )
    else:
        out.append('<p class="empty" id="reconciliation">none yet</p>')

    out.append("<h3>Topic tracking</h3>")
    if tracking.get("enabled"):
        reset = "allowed" if tracking.get("allow_reset") else "disabled"
        out.append(
            f'<div class="kv" id="tracking"><div><span>store:</span> <b>{_e(tracking.get("store"))}</b></div>'
            f"<div><span>reset:</span> <b>{_e(reset)}</b></div>"
            f"<div><span>(cluster, topic) pairs read:</span> <b>"
            f"{sum(len(t) for t in tracked.values())}</b></div></div>"
        )
    else:
        out.append('<p class="empty" id="tracking">disabled (topic.tracking.enable=false)</p>')
    out.append("</section>")
    return "\n".join(out)


def _render_handovers(status: Mapping[str, Any]) -> str:
    """Replica handovers: per split, where the replica started and how that was chosen; what waits."""
    rows = [
        f'<tr data-split="{_e(h.get("to"))}"><td><code>{_e(h.get("from"))}</code></td>'
        f"{_num(h.get('from_offset'))}<td><code>{_e(h.get('to'))}</code></td>{_num(h.get('to_offset'))}"
        f"<td>{_e(h.get('mode'))}</td>{_num(h.get('max_repeats'))}<td>{_e(h.get('detail'))}</td></tr>"
        for h in status.get("handovers") or []
    ]
    head = ("from", "position", "to", "starts at", "mode", "may repeat", "why")
    out = ["<h3>Replica handovers</h3>", _table("handovers", head, rows, "no split handed over")]
    replicas: Mapping[str, Any] = status.get("replicas") or {}
    held: Mapping[str, list[str]] = replicas.get("held_topics") or {}
    waiting = [("translating", ", ".join(replicas.get("pending") or []) or "-")]
    waiting += [(f"{cid}: not read (origin read)", ", ".join(topics)) for cid, topics in sorted(held.items())]
    out.append(
        '<div class="kv" id="replicas">'
        + "".join(f"<div><span>{_e(k)}:</span> <b>{_e(v)}</b></div>" for k, v in waiting)
        + "</div>"
    )
    return "\n".join(out)


def _render_hybrid(hybrid: Mapping[str, Any]) -> str:
    """The hybrid source's part: the stage, what the handover chose, and per split archived or live."""
    handover: Mapping[str, Any] = hybrid.get("handover") or {}
    modes = ", ".join(f"{k}: {v}" for k, v in (handover.get("modes") or {}).items()) or None
    stage = f"{int(hybrid.get('stage', 0)) + 1} of {hybrid.get('stages')} ({hybrid.get('stage_name')})"
    facts = {"stage": stage, "handover": modes, "handover timestamp (ms)": handover.get("timestamp_ms")}
    out = [
        "<h3>Hybrid stages</h3>",
        '<div class="kv" id="hybrid">'
        + "".join(
            f"<div><span>{_e(k)}:</span> <b>{_e('-' if v is None else v)}</b></div>" for k, v in facts.items()
        )
        + "</div>",
    ]
    splits: Mapping[str, Mapping[str, Any]] = hybrid.get("splits") or {}
    rows = [
        f'<tr data-split="{_e(sid)}"><td><code>{_e(sid)}</code></td><td>{_e(info.get("phase"))}</td>'
        f"<td>{_e(info.get('start', '-'))}</td></tr>"
        for sid, info in splits.items()
    ]
    out.append(_table("hybrid-splits", ("split", "archived or live", "started by"), rows, "no split yet"))
    return "\n".join(out)


def render_status_page(statuses: list[dict[str, Any]]) -> str:
    """The HTML status page for ``statuses`` (each as :meth:`SourceStream.status` returns it)."""
    template = Template(
        resources.files("multicluster_source.ops").joinpath("_static/status.html").read_text(encoding="utf-8")
    )
    names = ", ".join(str(s.get("source", "?")) for s in statuses)
    return template.substitute(
        title=_e(f"{names} - multicluster_source"),
        generated=_e(time.strftime("%Y-%m-%d %H:%M:%S")),
        body="\n".join(_render_source(s) for s in statuses),
    )
