"""``check``: validate a metadata file or a ConfigMap (manifest or mounted directory) and list every problem.

Problems are printed one a line as ``FILE:LINE: key KEY: reason`` (the line and key where known), then the
client properties of every cluster are checked as the source would check them (librdkafka, no broker).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TextIO

import yaml

from multicluster_source.exceptions import ConfigurationError, MetadataError
from multicluster_source.framework._clientprops import validate_client_properties
from multicluster_source.metadata import ConfigMapMetadataService, FileMetadataService, KafkaStream

__all__ = ["check_path"]

_DEFAULT_KEY = "stream-metadata.yaml"


def _is_configmap(path: Path) -> bool:
    if path.is_dir():
        return True
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
        documents = list(yaml.safe_load_all(text))
    except (OSError, yaml.YAMLError, RecursionError):
        return False
    return any(isinstance(d, dict) and d.get("kind") == "ConfigMap" for d in documents)


def _format(problem: MetadataError) -> str:
    where = str(problem.source) if problem.source is not None else "?"
    if problem.line is not None:
        where += f":{problem.line}"
    key = f" key {problem.key}:" if problem.key else ""
    return f"{where}:{key} {problem.reason}"


def _line_of(lines: list[str], cluster_id: str, key: str) -> int | None:
    """The 1-based line of property ``key`` in the entry of ``cluster_id`` (the first such line after a line
    naming the cluster), or None when it cannot be told (JSON on one line, a key in quotes, ...)."""
    start = next((i for i, line in enumerate(lines) if cluster_id in line), None)
    if start is None:
        return None
    for i in range(start, len(lines)):
        stripped = lines[i].strip().lstrip("{,").strip()
        if stripped.startswith((f"{key}:", f'"{key}":', f"'{key}':")):
            return i + 1
    return None


def _property_problems(path: Path, streams: set[KafkaStream], key: str) -> list[str]:
    """Every client property librdkafka refuses, one line each, with the line of the key where found."""
    text_path = path / key if path.is_dir() else path
    try:
        lines = text_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    out: list[str] = []
    seen: set[str] = set()
    for stream in sorted(streams, key=lambda s: s.stream_id):
        for cid, cluster in sorted(stream.clusters.items()):
            if cid in seen:
                continue
            seen.add(cid)
            where = f"cluster {cid!r} properties"
            refused: dict[str, ConfigurationError] = {}
            for key, value in sorted(cluster.properties.items()):
                try:
                    validate_client_properties({key: value}, where=where)
                except ConfigurationError as exc:
                    refused[key] = exc
            # Some properties are refused alone only for want of their companions: security.protocol=SASL_SSL
            # alone means librdkafka's default mechanism, GSSAPI, which not every build has. Such a property
            # is a problem only when it is still refused beside the properties accepted alone.
            accepted = {k: v for k, v in cluster.properties.items() if k not in refused}
            for key, alone in refused.items():
                try:
                    validate_client_properties({**accepted, key: cluster.properties[key]}, where=where)
                    continue
                except ConfigurationError:
                    pass
                line = _line_of(lines, cid, key)
                out.append(f"{path}:{line}: {alone}" if line is not None else f"{path}: {alone}")
    return out


def check_path(path: str, key: str | None, out: TextIO) -> int:
    """Validate ``path``; print every problem (or a summary when valid) to ``out``. Returns 0 when valid,
    1 when problems were found."""
    target = Path(path)
    if not os.path.exists(target):
        print(f"{path}: no such file or directory", file=out)
        return 1
    configmap = key is not None or _is_configmap(target)
    service = (
        ConfigMapMetadataService(target, key or _DEFAULT_KEY, watch=False)
        if configmap
        else FileMetadataService(target, watch=False)
    )
    try:
        streams = service.get_all_streams()
    except MetadataError as exc:
        for problem in exc.problems:
            print(_format(problem), file=out)
        print(f"{len(exc.problems)} problem(s) in {path}", file=out)
        return 1
    finally:
        service.close()
    problems = _property_problems(target, streams, key or _DEFAULT_KEY)
    for line in problems:
        print(line, file=out)
    if problems:
        print(f"{len(problems)} problem(s) in {path}", file=out)
        return 1
    clusters = {cid for s in streams for cid in s.clusters}
    topics = {(cid, t) for s in streams for cid, c in s.clusters.items() for t in c.topics}
    print(
        f"{path}: valid: {len(streams)} stream(s), {len(clusters)} cluster(s), {len(topics)} topic(s)",
        file=out,
    )
    for line in _replica_lines(streams):
        print(line, file=out)
    return 0


def _replica_lines(streams: set[KafkaStream]) -> list[str]:
    """One line per replica topic: what it copies and how positions are carried over (``replicaOf``)."""
    out: list[str] = []
    for stream in sorted(streams, key=lambda s: s.stream_id):
        for cid, cluster in sorted(stream.clusters.items()):
            r = cluster.replica_of
            if r is None:
                continue
            copies = sorted((t, o) for t in cluster.topics if (o := r.origin_topic(t)) is not None)
            how = f"offsets {r.offsets}"
            if r.offsets == "mirrormaker2":
                place = "origin" if r.syncs_location == "source" else "replica"
                how += f", offset syncs in {r.offset_syncs_topic(cid)} on the {place}"
            if r.failover:
                how += ", failover: the origin is not read"
            for topic, origin in copies or [("(none)", "-")]:
                out.append(f"stream {stream.stream_id}: {cid}/{topic} copies {r.cluster}/{origin} ({how})")
    return out
