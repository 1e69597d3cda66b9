"""Per-batch work of a fetch thread that looks at messages: what a batch counts per topic, the cut at a
bounded split's end, and whether a batch is of one split. Each runs only where it must (a fetcher of several
topics; a split whose position crossed its stopping offset; a watermark strategy), so the usual batch is
handled without a loop over its messages in Python."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def counts_per_topic(topics: Sequence[str], messages: list[Any]) -> dict[str, tuple[int, int]]:
    """Records and value bytes per topic of ``messages``; ``topics`` are the fetcher's assigned topics (one
    topic: no loop over the messages in Python)."""
    if len(topics) == 1:
        return {topics[0]: (len(messages), sum(map(len, messages)))}
    per_topic: dict[str, list[int]] = {}
    for m in messages:
        c = per_topic.get(m.topic())
        if c is None:
            c = per_topic[m.topic()] = [0, 0]
        c[0] += 1
        c[1] += len(m)
    return {t: (c[0], c[1]) for t, c in per_topic.items()}


def without_from(messages: list[Any], key: tuple[str, int], stop: int) -> list[Any]:
    """``messages`` without those of partition ``key`` at or past ``stop`` (a bounded split's end)."""
    topic, partition = key
    return [m for m in messages if m.offset() < stop or m.partition() != partition or m.topic() != topic]


def only_split(moved: Sequence[Any], messages: Sequence[Any]) -> list[str]:
    """``[split id]`` when the batch's messages are all of one split, else ``[]`` (event times then look the
    splits up message by message). ``moved``: the progress of the splits whose position moved with this
    batch; every split with a message in it is among them, so when only one moved (the usual batch: the client
    hands over one partition's fetch at a time) every message is of it; its ends are checked all the same."""
    if len(moved) != 1 or not messages:
        return []
    split = moved[0].split
    for m in (messages[0], messages[-1]):
        if m.partition() != split.partition or m.topic() != split.topic:
            return []
    return [split.split_id]
