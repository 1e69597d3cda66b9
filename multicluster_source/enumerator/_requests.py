"""How many partitions one admin request of the enumerator names: at most :data:`REQUEST_PARTITIONS`.

One confluent-kafka admin request over many partitions costs the calling process far more than its
partitions' share: measured with confluent-kafka 2.16 against Apache Kafka 4.1.1 (this process's CPU for one
request, the broker's was a fraction of it):

=================================  ==========  ==========  ===========
request                            1,000       4,000       12,000
=================================  ==========  ==========  ===========
``alter_consumer_group_offsets``   ~0 s        0.06 s      0.40 s
``list_offsets``                   0.02 s      0.17 s      1.14 s
``list_consumer_group_offsets``    ~0 s        0.06 s      0.43 s
=================================  ==========  ==========  ===========

Twelve commits of 1,000 offsets sent at once took 0.11 s (0.05 s of the process's CPU), one of 12,000 took
0.49 s (0.40 s); the Python side of the client is linear, so the rest is the C library's. At 36,000 splits a
checkpoint that commits every split's offset spent most of its second there, holding a core the readers
needed. So the enumerator cuts every admin request over more partitions into groups of
:data:`REQUEST_PARTITIONS` and sends the groups at once (one client, its own connection to each broker).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

REQUEST_PARTITIONS = 1000
"""Partitions named by one admin request at most (offset commits, offset look-ups, committed offsets)."""

T = TypeVar("T")


def groups(items: Sequence[T], size: int = REQUEST_PARTITIONS) -> list[Sequence[T]]:
    """``items`` in consecutive groups of at most ``size`` (none when ``items`` is empty)."""
    size = max(1, size)
    return [items[i : i + size] for i in range(0, len(items), size)]
