"""The README's example, run as written against a real broker (its copy in docs/getting-started.md too).

The README's placeholders are mapped onto the harness: ``kafka-east:9092`` is the test cluster's address and
``orders`` a unique topic of this test; the output is compared after mapping back. The docs pages' other
blocks run in ``test_docs_examples.py``; the markers that tie blocks to tests are checked by
``tests/unit/test_docs.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from docblocks import ROOT, blocks, marked_block, run_python
from harness.cluster import Cluster

pytestmark = pytest.mark.integration


def test_the_readme_example_reads_the_stream_it_describes(kafka_cluster: Cluster, tmp_path: Path) -> None:
    topic = kafka_cluster.create_topic("orders", partitions=1)
    kafka_cluster.produce(topic, [b"order-0", b"order-1", b"order-2"], partition=0)
    readme = blocks(ROOT / "README.md")
    (streams,) = [b for b in readme if b.lang == "yaml"]
    to_test = {"kafka-east:9092": kafka_cluster.bootstrap_servers, "[orders]": f"[{topic}]"}
    yaml_text = streams.code
    for doc_value, test_value in to_test.items():
        assert doc_value in yaml_text
        yaml_text = yaml_text.replace(doc_value, test_value)
    (tmp_path / "streams.yaml").write_text(yaml_text)

    example = marked_block("readme-example")  # the same block in docs/getting-started.md
    assert example.path == ROOT / "README.md"
    done = run_python(example.code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.replace(topic, "orders").splitlines() == [
        "east orders 0 order-0",
        "east orders 1 order-1",
        "east orders 2 order-2",
    ]
    assert (tmp_path / "ckpt").is_dir()
