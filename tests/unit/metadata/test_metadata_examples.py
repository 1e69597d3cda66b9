"""Every file in configmap-examples/ is read with the real code, so the examples never go stale."""

import re
from pathlib import Path
from typing import Any

import yaml

from multicluster_source.metadata import ClusterMetadata, ConfigMapMetadataService, parse_streams
from multicluster_source.testing import make_configmap_volume

EXAMPLES = Path(__file__).resolve().parents[3] / "configmap-examples"


def load_all(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def test_every_example_is_covered():
    assert {p.name for p in EXAMPLES.iterdir()} == {
        "configmap.yaml",
        "deployment.yaml",
        "job.py",
        "README.md",
    }


def check_streams(streams):
    by_id = {s.stream_id: s for s in streams}
    assert set(by_id) == {"orders", "payments"}
    assert set(by_id["orders"].clusters) == {"east", "west"}
    assert by_id["orders"].clusters["east"].properties["sasl.password"] == "${env:EAST_KAFKA_PASSWORD}"
    assert by_id["orders"].clusters["west"] == ClusterMetadata(
        "west", "kafka-west-0.kafka-west:9092", frozenset({"orders"})
    )
    assert by_id["payments"].clusters["west"].topics == {"payments"}


def test_configmap_manifest_through_the_service():
    with ConfigMapMetadataService(EXAMPLES / "configmap.yaml", watch=False, poll_interval=0) as service:
        check_streams(service.get_all_streams())


def test_configmap_manifest_as_a_mounted_volume(tmp_path):
    (manifest,) = load_all("configmap.yaml")
    assert manifest["kind"] == "ConfigMap"
    make_configmap_volume(tmp_path / "cm", manifest["data"])
    with ConfigMapMetadataService(tmp_path / "cm", watch=False, poll_interval=0) as service:
        check_streams(service.get_all_streams())
    check_streams(parse_streams(manifest["data"]["stream-metadata.yaml"], source="configmap.yaml"))


def test_deployment_mounts_the_configmap_as_a_volume_without_subpath():
    (configmap,) = load_all("configmap.yaml")
    (deployment,) = load_all("deployment.yaml")
    assert deployment["kind"] == "Deployment"
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = [m for c in pod["containers"] for m in c.get("volumeMounts", [])]
    metadata_mounts = [m for m in mounts if m["mountPath"] == "/etc/stream-metadata"]
    assert len(metadata_mounts) == 1
    mount = metadata_mounts[0]
    assert "subPath" not in mount and "subPathExpr" not in mount
    assert volumes[mount["name"]]["configMap"]["name"] == configmap["metadata"]["name"]
    assert "subPath" in (EXAMPLES / "deployment.yaml").read_text()  # the comment explaining why not


def test_job_script_compiles_and_uses_the_public_api():
    source = (EXAMPLES / "job.py").read_text()
    compile(source, str(EXAMPLES / "job.py"), "exec")
    assert (
        "from multicluster_source import "
        "ConfigMapMetadataService, MultiClusterKafkaSource, OffsetsInitializer" in source
    )
    assert "/etc/stream-metadata" in source


def test_readme_code_blocks_compile():
    text = (EXAMPLES / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        compile(block, "README.md", "exec")
