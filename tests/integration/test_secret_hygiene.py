"""Secret hygiene: a unique secret planted in every place a secret can be given, and everything the source
emits scanned for it.

Planted (each its own string, each a real SCRAM password of the SASL_SSL cluster where it is a password):
a literal ``sasl.password`` in cluster properties; a resolved ``${env:...}`` value; a resolved
``${file:...}`` value; a source-wide ``set_property`` value (through ``${env:...}``); the metadata topic's
client properties; the topic tracking store's client properties; the admin token.

Scanned: every log record at DEBUG (ours and librdkafka's, rendered with arguments and tracebacks), the texts
of the exceptions a user meets (an unresolvable placeholder, a wrong password's status error, a held
checkpoint directory), every file in the checkpoint directory, every record of the topic-status topic, the
Prometheus text of the stream's registry, every admin endpoint with and without the token (bodies and
headers, the status page HTML among them), ``status()``, ``health()``, ``repr()`` of every public object
the test made, and the pickled payloads the processes/Ray runtimes send to workers (a reader-only copy of
the source and a metadata update). Placeholders travel unresolved: only a literal in the metadata itself
reaches the workers, since they must connect with it.
"""

from __future__ import annotations

import logging
import pickle
import traceback
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from harness.cluster import unique_name
from harness.scenario import builder, drain, stream, wait_for
from harness.secured import SecuredKafkaCluster
from multicluster_source import (
    CheckpointError,
    ClusterMetadata,
    KafkaTopicMetadataService,
    MetadataError,
    MultiClusterKafkaSource,
    StaticMetadataService,
)
from multicluster_source.framework import DirectoryCheckpointStorage
from multicluster_source.framework._clientconf import merge_stream_clusters
from multicluster_source.framework._events import MetadataUpdateEvent
from multicluster_source.metadata import KafkaTopicMetadataWriter
from multicluster_source.runtime.core._factory import reader_only_source
from multicluster_source.runtime.core._messages import EventToReader

pytestmark = pytest.mark.integration

PLACES = ("literal", "env", "file", "source", "meta", "tracking", "token")


def _http(url: str, method: str = "GET", token: str | None = None) -> str:
    request = urllib.request.Request(url, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return f"{answer.status} {dict(answer.headers)} {answer.read().decode('utf-8', 'replace')}"
    except urllib.error.HTTPError as exc:
        with exc:
            return f"{exc.code} {dict(exc.headers)} {exc.read().decode('utf-8', 'replace')}"


def _exception_text(exc: BaseException) -> str:
    return f"{exc}\n{exc!r}\n" + "".join(traceback.format_exception(exc))


def test_a_planted_secret_appears_nowhere_the_source_emits(
    secured_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sec: SecuredKafkaCluster = secured_cluster("sasl_ssl")
    secrets = {place: f"planted-{place}-{uuid.uuid4().hex}" for place in PLACES}
    users = {place: unique_name(f"u-{place}") for place in PLACES if place != "token"}
    for place, user in users.items():
        sec.add_scram_user(user, secrets[place])
    monkeypatch.setenv("MCS_HYGIENE_ENV", secrets["env"])
    monkeypatch.setenv("MCS_HYGIENE_SOURCE", secrets["source"])
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(secrets["file"])

    def props(place: str, password: str) -> dict[str, str]:
        return sec.sasl_properties(users[place], password)

    topics = {place: sec.create_topic(f"h-{place}") for place in ("literal", "env", "file")}
    for place, topic in topics.items():
        sec.produce_n(topic, 5, partitions=1, prefix=place)
    clusters = [
        ClusterMetadata(
            "lit",
            sec.secure_bootstrap_servers,
            frozenset({topics["literal"]}),
            props("literal", secrets["literal"]),
        ),
        ClusterMetadata(
            "env",
            sec.secure_bootstrap_servers,
            frozenset({topics["env"]}),
            props("env", "${env:MCS_HYGIENE_ENV}"),
        ),
        ClusterMetadata(
            "file",
            sec.secure_bootstrap_servers,
            frozenset({topics["file"]}),
            props("file", f"${{file:{secret_file}}}"),
        ),
    ]
    streams = [stream("orders", *clusters)]
    meta_topic, status_topic = unique_name("h-meta"), unique_name("h-status")
    meta_props = props("meta", secrets["meta"])
    tracking_props = props("tracking", secrets["tracking"])
    service = KafkaTopicMetadataService(
        sec.secure_bootstrap_servers, meta_topic, client_properties=meta_props
    )
    writer = KafkaTopicMetadataWriter(sec.secure_bootstrap_servers, meta_topic, client_properties=meta_props)
    ckpt = tmp_path / "ckpt"
    emitted: dict[str, str] = {}
    registry = CollectorRegistry()
    caplog.set_level(logging.DEBUG)
    with writer:
        writer.publish(streams, current=service.snapshot())
        source = (
            builder(service, stream_ids=["orders"])
            .set_name("hygiene")
            .set_property("sasl.password", "${env:MCS_HYGIENE_SOURCE}")  # source-wide; clusters override
            .set_topic_tracking_topic(sec.secure_bootstrap_servers, status_topic, tracking_props)
            .build()
        )
        stream_ = source.open(
            checkpoint_dir=str(ckpt),
            admin_address="127.0.0.1:0",
            admin_token=secrets["token"],
            registry=registry,
        )
        with stream_ as s:
            got = drain(s, 15)
            assert len(got) == 15, "reading works with every planted credential"
            s.checkpoint()
            assert wait_for(lambda: len(s.tracked_topics()) == 3, 30)
            # a wrong password (the literal one with a suffix) on one more cluster: its error is shown
            bad = ClusterMetadata(
                "bad",
                sec.secure_bootstrap_servers,
                frozenset({topics["literal"]}),
                props("literal", secrets["literal"] + "-wrong"),
            )
            writer.publish([stream("orders", *clusters, bad)], current=service.snapshot())
            assert wait_for(lambda: bool((s.status()["clusters"].get("bad") or {}).get("error")), 60)
            s.checkpoint()
            url = s.admin_url
            assert url is not None
            for path in (
                "/",
                "/index.html",
                "/metrics",
                "/health",
                "/status",
                "/sources",
                "/sources/hygiene/topics",
                "/sources/other/topics",
                "/no-such-page",
            ):
                for token in (secrets["token"], None, "wrong-token-1234"):
                    emitted[f"GET {path} token={token is not None}"] = _http(url + path, token=token)
            emitted["PUT reset"] = _http(url + "/sources/hygiene/topics/reset", "PUT", secrets["token"])
            emitted["status()"] = repr(s.status())
            emitted["health()"] = repr(s.health())
            emitted["metrics"] = generate_latest(registry).decode()
            emitted["repr(stream)"] = repr(s)
            try:
                source.open(checkpoint_dir=str(ckpt))
            except CheckpointError as exc:
                emitted["CheckpointError"] = _exception_text(exc)
            # what the processes and Ray runtimes pickle for their workers
            payloads = pickle.dumps(reader_only_source(source)) + pickle.dumps(
                EventToReader(MetadataUpdateEvent(merge_stream_clusters(list(clusters)), version=1))
            )
    # an unresolvable placeholder beside a literal secret: the error names the key, never a value
    broken = ClusterMetadata(
        "broken",
        sec.secure_bootstrap_servers,
        frozenset({topics["env"]}),
        {**props("literal", secrets["literal"]), "ssl.key.password": "${env:MCS_NOT_SET}"},
    )
    with pytest.raises(MetadataError) as info:
        MultiClusterKafkaSource.builder().set_kafka_metadata_service(
            StaticMetadataService([stream("x", broken)])
        ).set_stream_ids(["x"]).build().open()
    emitted["MetadataError"] = _exception_text(info.value)
    for entry in sorted(ckpt.iterdir()):
        emitted[f"file {entry.name}"] = entry.read_text(errors="replace")
    assert any(name.startswith("file chk-") for name in emitted)
    consumer = sec.consumer()
    try:
        consumer.subscribe([status_topic])
        records = []
        for _ in range(40):
            records += [m for m in consumer.consume(100, timeout=0.5) if m.error() is None]
            if len(records) >= 3 and not consumer.consume(100, timeout=0.5):
                break
    finally:
        consumer.close()
    assert records, "the topic-status topic has records to scan"
    emitted["topic-status records"] = "\n".join(f"{m.key()!r} {m.value()!r}" for m in records)
    for obj in (
        source,
        service,
        writer,
        DirectoryCheckpointStorage(tmp_path / "other"),
        *clusters,
        *streams,
        bad,
    ):
        emitted[f"repr {type(obj).__name__}"] = repr(obj)
    emitted["logs"] = "\n".join(
        logging.Formatter("%(name)s %(levelname)s %(message)s").format(r) for r in caplog.records
    )
    assert len(caplog.records) > 50, "DEBUG logs were captured"

    leaks = [
        f"{place} secret in {where}"
        for where, text in emitted.items()
        for place, secret in secrets.items()
        if secret in text
    ]
    assert leaks == []
    # Placeholders travel unresolved; a literal in the metadata must reach the workers to connect.
    travelling = [place for place, secret in secrets.items() if secret.encode() in payloads]
    assert travelling == ["literal"]
    assert b"${env:MCS_HYGIENE_ENV}" in payloads and b"${env:MCS_HYGIENE_SOURCE}" in payloads
