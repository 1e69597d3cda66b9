"""atheris target: the bytes of a metadata file (UTF-8 decoding, YAML/JSON, Flink's format, placeholders).

    PYTHONPATH=.:tests python -m fuzz.fuzz_metadata_file -runs=20000 /tmp/corpus tests/fuzz/seeds/metadata

Any exception other than ``MetadataError`` (or a failed round trip) is a finding.
"""

from __future__ import annotations

from fuzz._atheris import atheris, fuzz

with atheris.instrument_imports(include=["multicluster_source", "yaml"]):
    from fuzz.inputs import check_metadata_bytes, quiet_logs


def test_one_input(data: bytes) -> None:
    """One input."""
    check_metadata_bytes(data)


if __name__ == "__main__":
    quiet_logs()
    fuzz(test_one_input)
