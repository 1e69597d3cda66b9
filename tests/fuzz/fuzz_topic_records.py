"""atheris target: records of the metadata topic (``key\\x00value`` separated by ``\\x1e``) through the key
parser, the value codec and the ``MetadataLog`` state machine.

    PYTHONPATH=.:tests python -m fuzz.fuzz_topic_records -runs=20000 /tmp/corpus tests/fuzz/seeds/records

Anything but ``RecordFormatError`` from ``decode_value``, any exception from ``parse_key`` or
``MetadataLog.apply``, or a skipped record that changes what is in effect, is a finding.
"""

from __future__ import annotations

from fuzz._atheris import atheris, fuzz

with atheris.instrument_imports(include=["multicluster_source"]):
    from fuzz.inputs import check_topic_records, quiet_logs, split_records


def test_one_input(data: bytes) -> None:
    """One input."""
    check_topic_records(split_records(data))


if __name__ == "__main__":
    quiet_logs()
    fuzz(test_one_input)
