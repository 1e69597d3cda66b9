"""Apache Kafka clusters that check who connects: :class:`SecuredKafkaCluster`.

Each node keeps the harness's PLAINTEXT listener (inter-broker traffic and the harness's own helpers:
topics, producing, SCRAM users) and adds a ``SECURE`` listener for the clients under test:

* ``mode="sasl_ssl"``: SASL_SSL with SCRAM-SHA-512; users are created through the admin API
  (:meth:`add_scram_user`), passwords are checked by the broker;
* ``mode="mtls"``: SSL with ``ssl.client.auth=required``; a client needs a certificate issued by a CA
  the listener trusts (:meth:`write_client_certificate`); :meth:`trust_only` swaps that CA at runtime.

A CA and the brokers' certificates are made for each cluster at start (:mod:`harness.tls`), in a
temporary directory removed by ``stop()``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from harness.kafka import KafkaCluster, _Node
from harness.processes import HOST, free_port
from harness.tls import TestCA

MODES = ("sasl_ssl", "mtls")
SECURE = "SECURE"


class SecuredKafkaCluster(KafkaCluster):
    """A one-node KRaft cluster with a SASL_SSL (SCRAM-SHA-512) or a mutual-TLS listener besides PLAINTEXT."""

    def __init__(self, cluster_id: str, *, mode: str = "sasl_ssl", **kwargs: Any) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        super().__init__(cluster_id, **kwargs)
        self.mode = mode
        self.tls_dir = Path(tempfile.mkdtemp(prefix=f"mcs-tls-{cluster_id}-"))
        self.ca = TestCA(self.tls_dir / "ca", f"mcs-{cluster_id}-ca")
        self._keystore = self.ca.broker_keystore(f"broker-{cluster_id}")
        self._secure_ports: dict[int, int] = {}

    @property
    def secure_bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>`` of every node's secured listener."""
        if not self._secure_ports:
            raise RuntimeError(f"{self!r} is not started")
        return ",".join(f"{HOST}:{port}" for _, port in sorted(self._secure_ports.items()))

    @property
    def ca_path(self) -> Path:
        """The PEM file of the CA that signed the brokers' certificates (``ssl.ca.location``)."""
        return self.ca.ca_path

    def _properties(self, node: _Node, voters: str) -> dict[str, str]:
        props = super()._properties(node, voters)
        port = self._secure_ports[node.node_id] = free_port()
        props["listeners"] += f",{SECURE}://{HOST}:{port}"
        props["advertised.listeners"] += f",{SECURE}://{HOST}:{port}"
        protocol = "SASL_SSL" if self.mode == "sasl_ssl" else "SSL"
        props["listener.security.protocol.map"] += f",{SECURE}:{protocol}"
        prefix = f"listener.name.{SECURE.lower()}."
        props[prefix + "ssl.keystore.type"] = "PEM"
        props[prefix + "ssl.keystore.location"] = str(self._keystore)
        props[prefix + "ssl.truststore.type"] = "PEM"
        props[prefix + "ssl.truststore.location"] = str(self.ca_path)
        if self.mode == "sasl_ssl":
            props[prefix + "sasl.enabled.mechanisms"] = "SCRAM-SHA-512"
            props[prefix + "scram-sha-512.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
        else:
            props[prefix + "ssl.client.auth"] = "required"
        return props

    # -- SASL ------------------------------------------------------------------------------------------

    def add_scram_user(self, user: str, password: str, timeout: float = 60.0) -> None:
        """Create or change a SCRAM-SHA-512 user (admin API over PLAINTEXT); returns once it can log in."""
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        futures = self.admin().alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, info, password.encode())]
        )
        for future in futures.values():
            future.result(timeout=30)
        probe = AdminClient(
            {**self.sasl_properties(user, password), "bootstrap.servers": self.secure_bootstrap_servers}
        )
        deadline = time.monotonic() + timeout
        while True:  # the credential reaches the broker through the metadata log: wait until it logs in
            try:
                probe.list_topics(timeout=5)
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise

    def sasl_properties(self, user: str, password: str) -> dict[str, str]:
        """Client properties for the SASL_SSL listener (``bootstrap.servers`` not included)."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
            "ssl.ca.location": str(self.ca_path),
        }

    # -- mutual TLS ------------------------------------------------------------------------------------

    def write_client_certificate(
        self, common_name: str, cert_path: Path, key_path: Path, ca: TestCA | None = None
    ) -> None:
        """Issue a client certificate from ``ca`` (default: the cluster's CA) into the given files."""
        (ca or self.ca).write_client(common_name, cert_path, key_path)

    def trust_only(self, ca: TestCA) -> None:
        """Make the secured listener accept client certificates of ``ca`` only, from now on (a dynamic
        broker configuration: connections already open stay open, new ones are checked against it)."""
        entry = ConfigEntry(
            f"listener.name.{SECURE.lower()}.ssl.truststore.location",
            str(ca.ca_path),
            incremental_operation=AlterConfigOpType.SET,
        )
        self._alter_broker_configs([entry])

    def _alter_broker_configs(self, entries: list[ConfigEntry]) -> None:
        for node_id in self._secure_ports:
            resource = ConfigResource(ConfigResource.Type.BROKER, str(node_id), incremental_configs=entries)
            for future in self.admin().incremental_alter_configs([resource]).values():
                future.result(timeout=30)

    def mtls_properties(self, cert_path: Path, key_path: Path) -> dict[str, str]:
        """Client properties for the mutual-TLS listener (``bootstrap.servers`` not included)."""
        return {
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.ca_path),
            "ssl.certificate.location": str(cert_path),
            "ssl.key.location": str(key_path),
        }

    def stop(self, *, graceful: bool = True) -> None:
        """Stop the brokers, then remove the certificates."""
        super().stop(graceful=graceful)
        shutil.rmtree(self.tls_dir, ignore_errors=True)
