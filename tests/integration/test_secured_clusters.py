"""Reading clusters that check who connects: Apache Kafka with a SASL_SSL (SCRAM-SHA-512) listener and one
with mutual TLS (``harness.secured``), next to the plain shared cluster.

Credentials come through the metadata's ``${env:...}`` and ``${file:...}`` placeholders as a user would give
them; a wrong password fails only its cluster; a metadata fix reconnects it; a rotated client certificate is
read again at reconnect; the Kafka-topic metadata service and the topic tracking store run on SASL_SSL.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from harness.cluster import Cluster, unique_name
from harness.scenario import builder, cluster_md, drain, stream, values, wait_for
from harness.secured import SecuredKafkaCluster
from harness.tls import TestCA
from multicluster_source import ClusterMetadata, FileMetadataService, KafkaTopicMetadataService
from multicluster_source.metadata import KafkaTopicMetadataWriter
from multicluster_source.testing import write_metadata_file

pytestmark = pytest.mark.integration


def _user(cluster: SecuredKafkaCluster) -> tuple[str, str]:
    user, password = unique_name("user"), f"pw-{uuid.uuid4().hex}"
    cluster.add_scram_user(user, password)
    return user, password


def _secure_md(
    cluster: SecuredKafkaCluster, cluster_id: str, topic: str, **properties: str
) -> ClusterMetadata:
    return ClusterMetadata(cluster_id, cluster.secure_bootstrap_servers, frozenset({topic}), properties)


def _connects(cluster: SecuredKafkaCluster, cert: Path, key: Path) -> bool:
    """Whether a new client with this certificate gets a metadata answer from the mutual-TLS listener."""
    from confluent_kafka.admin import AdminClient

    props = {"bootstrap.servers": cluster.secure_bootstrap_servers, **cluster.mtls_properties(cert, key)}
    admin = AdminClient({**props, "log_level": "0"})
    try:
        admin.list_topics(timeout=3)
        return True
    except Exception:
        return False


def _sasl(cluster: SecuredKafkaCluster, user: str, password: str) -> dict[str, str]:
    return cluster.sasl_properties(user, password)


def test_reads_with_credentials_from_env_and_file_placeholders(
    secured_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sec: SecuredKafkaCluster = secured_cluster("sasl_ssl")
    (user_a, pw_a), (user_b, pw_b) = _user(sec), _user(sec)
    t_a, t_b = sec.create_topic("env", partitions=2), sec.create_topic("file", partitions=1)
    sec.produce_n(t_a, 50, partitions=2, prefix="a")
    sec.produce_n(t_b, 50, partitions=1, prefix="b")
    monkeypatch.setenv("MCS_TEST_SASL_PASSWORD", pw_a)
    secret_file = tmp_path / "password"
    secret_file.write_text(pw_b + "\n")
    # two logical clusters on the one secured cluster, each with its own user and way of giving the password
    by_env = _secure_md(sec, "sec-env", t_a, **_sasl(sec, user_a, "${env:MCS_TEST_SASL_PASSWORD}"))
    by_file = _secure_md(sec, "sec-file", t_b, **_sasl(sec, user_b, f"${{file:{secret_file}}}"))
    with builder([stream("orders", by_env, by_file)]).build().open() as s:
        got = drain(s, 100)
    assert sorted(values(got)) == sorted(
        [f"a-{i}".encode() for i in range(50)] + [f"b-{i}".encode() for i in range(50)]
    )
    assert {r.cluster_id for r in got} == {"sec-env", "sec-file"}


def test_a_wrong_password_fails_only_its_cluster_and_a_metadata_fix_reconnects_it(
    secured_cluster, kafka_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    sec: SecuredKafkaCluster = secured_cluster("sasl_ssl")
    user, password = _user(sec)
    t_sec, t_plain = sec.create_topic("auth"), kafka_cluster.create_topic("plain")
    sec.produce_n(t_sec, 20, partitions=1, prefix="s")
    kafka_cluster.produce_n(t_plain, 20, partitions=1, prefix="p")
    monkeypatch.setenv("MCS_TEST_GOOD", password)
    monkeypatch.setenv("MCS_TEST_BAD", password + "-typo")
    path = tmp_path / "streams.yaml"

    def write(env_name: str) -> None:
        secured = _secure_md(sec, "sec", t_sec, **_sasl(sec, user, f"${{env:{env_name}}}"))
        write_metadata_file(path, [stream("orders", cluster_md(kafka_cluster, t_plain), secured)])

    write("MCS_TEST_BAD")
    caplog.set_level(logging.WARNING, logger="multicluster_source")
    with builder(FileMetadataService(path), stream_ids=["orders"]).build().open() as s:
        got = drain(s, 20)
        assert {r.cluster_id for r in got} == {kafka_cluster.cluster_id}, "the plain cluster flows"

        def auth_error() -> str | None:
            error = s.status()["clusters"]["sec"]["error"]
            return error if error and "_AUTHENTICATION" in error else None

        assert wait_for(lambda: auth_error() is not None, 60), s.status()["clusters"]
        assert "SASL authentication" in (auth_error() or "")
        lines = [r.getMessage() for r in caplog.records if "cluster=sec:" in r.getMessage()]
        assert any("_AUTHENTICATION" in line for line in lines), lines
        assert password not in str(s.status()) and password not in caplog.text
        kafka_cluster.produce_n(t_plain, 10, partitions=1, prefix="p2")
        more = drain(s, 10)
        assert sorted(values(more)) == sorted(f"p2-{i}".encode() for i in range(10)), "still flowing"
        write("MCS_TEST_GOOD")  # the fix: a properties change reconnects the cluster, no restart
        fixed = drain(s, 20)
        assert sorted(values(fixed)) == sorted(f"s-{i}".encode() for i in range(20))
        assert wait_for(lambda: s.status()["clusters"]["sec"]["error"] is None, 30)


def test_a_rotated_client_certificate_is_picked_up_when_the_cluster_reconnects(
    secured_cluster, tmp_path: Path
) -> None:
    tls: SecuredKafkaCluster = secured_cluster("mtls")
    topic = tls.create_topic("mtls")
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    tls.write_client_certificate("reader", cert, key)
    md_path = tmp_path / "streams.yaml"

    def write(**extra: str) -> None:
        props = {**tls.mtls_properties(cert, key), **extra}
        write_metadata_file(md_path, [stream("orders", _secure_md(tls, "tls", topic, **props))])

    write()
    new_ca = TestCA(tmp_path / "new-ca", "mcs-rotated-ca")
    tls.produce_n(topic, 10, partitions=1, prefix="v1")
    try:
        with builder(FileMetadataService(md_path), stream_ids=["orders"]).build().open() as s:
            assert sorted(values(drain(s, 10))) == sorted(f"v1-{i}".encode() for i in range(10))
            tls.trust_only(new_ca)  # the broker now accepts certificates of the new CA only
            # the listener reloads its trust store asynchronously: change the metadata once it took effect
            assert wait_for(lambda: not _connects(tls, cert, key), 30)
            write(**{"socket.keepalive.enable": "true"})  # a reconnect with the old files fails
            assert wait_for(lambda: bool(s.status()["clusters"]["tls"]["error"]), 60), s.status()["clusters"]
            new_ca.write_client("reader", cert, key)  # rotation: new files at the same paths
            tls.produce_n(topic, 10, partitions=1, prefix="v2")
            write(**{"socket.keepalive.enable": "false"})  # the next reconnect reads them
            got = drain(s, 10, until=lambda rs: {f"v2-{i}".encode() for i in range(10)} <= set(values(rs)))
            assert {f"v2-{i}".encode() for i in range(10)} <= set(values(got))
    finally:
        tls.trust_only(tls.ca)


def test_kafka_topic_metadata_and_topic_tracking_on_a_secured_cluster(
    secured_cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    sec: SecuredKafkaCluster = secured_cluster("sasl_ssl")
    user, password = _user(sec)
    monkeypatch.setenv("MCS_TEST_OPS_PASSWORD", password)
    ops = _sasl(sec, user, "${env:MCS_TEST_OPS_PASSWORD}")
    meta_topic, status_topic = unique_name("meta"), unique_name("status")
    data = sec.create_topic("data", partitions=1)
    sec.produce_n(data, 15, partitions=1, prefix="d")
    service = KafkaTopicMetadataService(sec.secure_bootstrap_servers, meta_topic, client_properties=ops)
    md = stream("orders", _secure_md(sec, "sec", data, **ops))
    with KafkaTopicMetadataWriter(
        sec.secure_bootstrap_servers, meta_topic, client_properties=_sasl(sec, user, password)
    ) as writer:
        writer.publish({md}, current=service.snapshot())
    source = (
        builder(service, stream_ids=["orders"])
        .set_name("secured")
        .set_topic_tracking_topic(sec.secure_bootstrap_servers, status_topic, ops)
        .build()
    )
    with source.open() as s:
        got = drain(s, 15)
        assert sorted(values(got)) == sorted(f"d-{i}".encode() for i in range(15))
        assert wait_for(lambda: s.tracked_topics() == {"sec": [data]}, 30)
    # what the store wrote is on the secured cluster's topic, readable by a new source with the same store
    again = (
        builder(KafkaTopicMetadataService(sec.secure_bootstrap_servers, meta_topic, client_properties=ops))
        .set_stream_ids(["orders"])
        .set_name("secured")
        .set_topic_tracking_topic(sec.secure_bootstrap_servers, status_topic, ops)
        .build()
    )
    with again.open() as s:
        assert s.tracked_topics() == {"sec": [data]}
