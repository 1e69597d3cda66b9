"""Whatever the input, the parser either returns streams or raises MetadataError: no crash, no hang."""

import json

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multicluster_source.exceptions import MetadataError
from multicluster_source.metadata import dump_streams, parse_streams

FRAGMENTS = [
    "- ",
    "  ",
    "    ",
    "\n",
    ": ",
    "streamId",
    "clusterMetadataList",
    "clusterId",
    "bootstrapServers",
    "topics",
    "properties",
    "[",
    "]",
    "{",
    "}",
    ",",
    "&a ",
    "*a",
    "<<",
    "!!str ",
    "!!binary ",
    "!tag ",
    "'",
    '"',
    "|",
    ">",
    "#",
    "---",
    "...",
    "~",
    "null",
    "true",
    "1.5",
    "0x1F",
    "2001-12-14",
    "${env:X}",
    "${vault:y}",
    "${",
    "$${",
    "\t",
    "%YAML 1.1\n",
    "?",
    "\\",
    "\ufeff",
    "\x00",
    "é",
    "..",
    ".",
]

yamlish = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=5), max_size=40).map("".join)

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "streamId",
                    "clusterMetadataList",
                    "clusterId",
                    "bootstrapServers",
                    "topics",
                    "properties",
                    "x",
                ]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=25,
)


def check(text: str) -> None:
    try:
        result = parse_streams(text, source="fuzz")
    except MetadataError:
        return
    assert isinstance(result, set)
    # Whatever parsed must survive a round trip.
    assert parse_streams(dump_streams(result), source="roundtrip") == result


@settings(max_examples=400, deadline=2000, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(yamlish)
def test_random_yamlish_text(text):
    check(text)


@settings(max_examples=300, deadline=2000, database=None)
@given(values)
def test_random_structures_as_yaml_and_json(value):
    check(yaml.safe_dump(value))
    check(json.dumps(value))
    check(yaml.safe_dump([{"streamId": "s", "clusterMetadataList": [value]}]))


def test_deep_nesting_does_not_crash():
    check("[" * 5000)
    check("- " * 3000 + "x")
    check("{a: " * 2000)


def test_alias_bomb_is_bounded():
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev = chr(ord("a") + i - 1)
        cur = chr(ord("a") + i)
        lines.append(
            f"{cur}: &{cur} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]"
        )
    check("\n".join(lines))
    bomb = "- streamId: s\n  clusterMetadataList:\n" + "".join(
        f"    - {{clusterId: c{i}, bootstrapServers: b, topics: &t{i} [t]}}\n" for i in range(3)
    )
    check(bomb)
