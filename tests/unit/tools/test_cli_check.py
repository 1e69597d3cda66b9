"""``python -m multicluster_source check``: every problem of a metadata file or ConfigMap, with file and line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from multicluster_source import FileMetadataService, MetadataError

ROOT = Path(__file__).resolve().parents[3]

BAD = textwrap.dedent(
    """\
    - streamId: orders
      clusterMetadataList:
        - clusterId: east
          bootstrapServers: kafka-east:9092
          topics: []
        - clusterId: "bad id"
          bootstrapServers: kafka-x:9092
          topics: [orders]
    - streamId: payments
      clusterMetadataList:
        - clusterId: west
          topics: [payments]
    - streamId: refunds
      clusterMetadataList:
        - clusterId: south
          bootstrapServers: kafka-south:9092
          topics: [refunds]
    """
)


def check(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "multicluster_source", "check", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_every_problem_of_a_file_is_listed_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "streams.yaml"
    path.write_text(BAD)
    done = check(str(path))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{path}:5: key [0].clusterMetadataList[0].topics: topics must not be empty")
    assert lines[1].startswith(f"{path}:6: ") and "'bad id' is invalid" in lines[1]
    assert lines[2].startswith(f"{path}:11: ") and "bootstrapServers" in lines[2]
    assert lines[3] == f"3 problem(s) in {path}"


def test_the_service_still_raises_the_first_problem_and_carries_the_others(tmp_path: Path) -> None:
    path = tmp_path / "streams.yaml"
    path.write_text(BAD)
    with pytest.raises(MetadataError) as err:
        FileMetadataService(path, watch=False).get_all_streams()
    assert err.value.line == 5 and [p.line for p in err.value.problems] == [5, 6, 11]


def test_a_configmap_manifest_reports_manifest_lines(tmp_path: Path) -> None:
    path = tmp_path / "configmap.yaml"
    body = textwrap.indent(BAD, "    ")
    path.write_text(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: streams\ndata:\n  stream-metadata.yaml: |\n{body}"
    )
    done = check(str(path))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert [line.split(":")[1] for line in lines[:3]] == [
        "11",
        "12",
        "17",
    ]  # 6 manifest lines before the block
    assert 'key data["stream-metadata.yaml"][0].clusterMetadataList[0].topics' in lines[0]


def test_a_valid_file_is_summed_up_and_java_properties_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "streams.yaml"
    path.write_text(
        "- streamId: orders\n  clusterMetadataList:\n    - clusterId: east\n      bootstrapServers: k:9092\n"
        "      topics: [orders, retry]\n"
    )
    done = check(str(path))
    assert done.returncode == 0, done.stdout
    assert done.stdout.strip() == f"{path}: valid: 1 stream(s), 1 cluster(s), 2 topic(s)"
    path.write_text(
        path.read_text() + "      properties:\n        sasl.jaas.config: x\n        fetch.min.bytes: lots\n"
    )
    done = check(str(path))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{path}:8: cluster 'east' properties: invalid value 'lots'")
    assert lines[1].startswith(f"{path}:7: cluster 'east' properties: client property 'sasl.jaas.config'")
    assert "'sasl.username'" in lines[1]
    assert lines[2] == f"2 problem(s) in {path}"


def test_properties_refused_alone_but_valid_with_their_companions_are_no_problem(tmp_path: Path) -> None:
    # security.protocol=SASL_SSL alone means the GSSAPI mechanism, which librdkafka builds without libsasl2
    # refuse; with sasl.mechanism beside it the cluster is fine (the secured-clusters guide's example).
    path = tmp_path / "streams.yaml"
    path.write_text(
        "- streamId: payments\n  clusterMetadataList:\n    - clusterId: east\n      bootstrapServers: k:9093\n"
        "      topics: [payments]\n      properties:\n        security.protocol: SASL_SSL\n"
        "        sasl.mechanism: SCRAM-SHA-512\n        sasl.username: payments-reader\n"
        "        sasl.password: ${env:EAST_KAFKA_PASSWORD}\n"
    )
    done = check(str(path))
    assert done.returncode == 0, done.stdout
    path.write_text(path.read_text() + "        sasl.mechanism.extra: 1\n")
    done = check(str(path))
    assert done.returncode == 1
    assert "unknown client property 'sasl.mechanism.extra'" in done.stdout
