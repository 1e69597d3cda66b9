"""A bounded atheris (libFuzzer) run of each fuzz target in ``tests/fuzz`` (issue 8, part 2).

Skipped when atheris is not installed (``pip install atheris``). ``MCS_FUZZ_RUNS`` sets the runs per target
(default 20000: about 3 s to 30 s each on 2 cores); a finding fails the test with libFuzzer's report and
leaves the input as ``crash-*`` in the test's temporary directory.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed"),
]

TESTS = Path(__file__).resolve().parent.parent
SEEDS = TESTS / "fuzz" / "seeds"
TARGETS = {
    "fuzz_metadata_file": "metadata",
    "fuzz_configmap": "configmap",
    "fuzz_topic_records": "records",
}


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_fuzz_target_finds_nothing(target: str, tmp_path: Path) -> None:
    runs = int(os.environ.get("MCS_FUZZ_RUNS", "20000"))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    command = [
        sys.executable,
        "-m",
        f"fuzz.{target}",
        f"-runs={runs}",
        "-max_total_time=240",
        "-timeout=10",  # one input taking longer than 10 s is a hang
        "-rss_limit_mb=1024",
        f"-artifact_prefix={tmp_path}/",
        str(corpus),
        str(SEEDS / TARGETS[target]),
    ]
    result = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    report = result.stderr[-6000:]
    assert result.returncode == 0, f"{target} found a problem:\n{report}"
    assert "Done" in result.stderr, report
