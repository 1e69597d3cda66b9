"""atheris target: a ConfigMap manifest file read by ``ConfigMapMetadataService`` (documents, kinds, data keys,
the embedded metadata and its line mapping).

    PYTHONPATH=.:tests python -m fuzz.fuzz_configmap -runs=20000 /tmp/corpus tests/fuzz/seeds/configmap

Any exception other than ``MetadataError`` is a finding.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from fuzz._atheris import atheris, fuzz

with atheris.instrument_imports(include=["multicluster_source", "yaml"]):
    from fuzz.inputs import check_configmap_file, quiet_logs

_DIR = Path(tempfile.mkdtemp(prefix="mcs-fuzz-configmap-"))
_PATH = _DIR / "configmap.yaml"
atexit.register(shutil.rmtree, _DIR, True)


def test_one_input(data: bytes) -> None:
    """One input."""
    check_configmap_file(_PATH, data)


if __name__ == "__main__":
    quiet_logs()
    fuzz(test_one_input)
