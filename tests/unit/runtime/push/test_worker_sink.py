"""What a push handler may return to an exactly-once sink, and the positions topic's worker-count record."""

from __future__ import annotations

import pytest

from multicluster_source import ConfigurationError
from multicluster_source.exceptions import CheckpointError
from multicluster_source.runtime.push._worker_sink import results_of
from multicluster_source.sink._positions import WORKERS_KEY, decode_position, decode_workers, encode_workers


def test_results_come_as_tuples_or_mappings() -> None:
    returned = [
        ("out", b"v1"),
        ("out", b"v2", b"k2"),
        {"topic": "other", "value": b"v3", "partition": 1, "headers": [("h", b"x")]},
    ]
    assert list(results_of(returned)) == [
        ("out", b"v1", None, None, None),
        ("out", b"v2", b"k2", None, None),
        ("other", b"v3", None, 1, [("h", b"x")]),
    ]
    assert list(results_of(None)) == []
    assert list(results_of(x for x in [("t", None)])) == [("t", None, None, None, None)]


@pytest.mark.parametrize(
    ("returned", "named"),
    [
        (b"value", "returned a bytes"),
        ({"topic": "t"}, "returned a dict"),
        (42, "returned a int"),
        ([("t",)], "a tuple of 1 among its results"),
        ([(1, b"v")], "a tuple of 2 among its results"),
        ([{"value": b"v"}], "a dict among its results"),
    ],
)
def test_anything_else_is_refused_naming_its_shape(returned: object, named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        list(results_of(returned))


def test_the_worker_count_record_reads_back_and_is_never_a_split() -> None:
    key, value = encode_workers(4)
    assert key == WORKERS_KEY and b"/" not in key
    assert decode_workers(value, "here") == 4
    with pytest.raises(CheckpointError, match="here: malformed worker-count record"):
        decode_workers(b"{}", "here")
    with pytest.raises(CheckpointError, match="there: malformed positions record for key"):
        decode_position(key, value, "there")  # read_positions sets it apart before decoding positions
