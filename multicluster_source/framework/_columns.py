"""Arrow record batches made of the client's messages: what ``poll_columns()`` hands out, and what the Spark
source's executors hand to Spark.

A batch has the columns ``cluster, topic, partition, offset, timestamp, key, value`` (and ``headers`` when
asked for): see :func:`column_schema`. Every column is made by C-level calls over the batch's messages (one
``list(map(...))`` per field, then ``pyarrow.array``), so no Python object is made per record that outlives
the call, and the garbage collector has nothing to walk afterwards: the buffers are Arrow's. A batch of one
split (the usual batch: the client hands over one partition's fetch at a time) gets its ``topic`` and
``partition`` columns by repeating one value, and, when its offsets have no gap, its ``offset`` column as a
running sum made in Arrow: a partition's offsets rise, so the first and last message tell (a gap comes of
compaction or transaction markers), and no message's offset is read in between.

pyarrow is an optional dependency (the ``arrow`` extra): :func:`require_pyarrow` raises an ``ImportError``
naming it.

The value bytes of what a column taker takes are read off its Arrow value column (:func:`value_bytes`, a
constant-time look at the offsets) instead of summing each message's length as the fetcher does for the
other paths (about 24 ns a message, 8 % of the column path): a fetch made inline on a thread inside
:func:`mark_columns` leaves them to the taker (``RecordBatch.count_bytes``). Threads: any; the mark is per
thread.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Sequence
from functools import cache
from operator import itemgetter
from typing import Any

from confluent_kafka import Message

__all__ = [
    "ARROW_EXTRA",
    "COLUMNS",
    "COLUMN_FETCH_FACTOR",
    "ColumnBuilder",
    "column_builder",
    "column_schema",
    "mark_columns",
    "message_columns",
    "require_pyarrow",
    "taking_columns",
    "value_bytes",
]

ARROW_EXTRA = "multicluster-kafka-source[arrow]"
"""What to install for the columnar reads."""

COLUMNS = ("cluster", "topic", "partition", "offset", "timestamp", "key", "value")
"""The columns of every batch, in order (``headers`` follows when asked for)."""

# the client's own methods, called by map() at C level (typed Any: the stubs' optional results do not matter
# for messages that are not error events)
_topic: Any = Message.topic
_partition: Any = Message.partition
_offset: Any = Message.offset
_timestamp: Any = Message.timestamp
_key: Any = Message.key
_value: Any = Message.value
_headers: Any = Message.headers
_kind = itemgetter(0)
_ms = itemgetter(1)


def require_pyarrow(what: str = "poll_columns()") -> Any:
    """The ``pyarrow`` module; an ``ImportError`` naming the extra to install when it is missing."""
    try:
        import pyarrow
    except ImportError as exc:
        raise ImportError(
            f"{what} needs pyarrow, which is not installed: pip install '{ARROW_EXTRA}' (or pyarrow>=15)"
        ) from exc
    return pyarrow


def column_schema(headers: bool = False) -> Any:
    """The ``pyarrow.Schema`` of the batches: ``cluster`` string, ``topic`` string, ``partition`` int32,
    ``offset`` int64, ``timestamp`` timestamp[ms, UTC] (null when the record has none), ``key`` binary,
    ``value`` binary (the value bytes: no deserializer is applied); with ``headers``, also ``headers``
    list<struct<key: string, value: binary>> (null for a record without headers)."""
    pa = require_pyarrow("column_schema()")
    fields = [
        pa.field("cluster", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
    ]
    if headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(pa.field("element", header))))
    return pa.schema(fields)


class ColumnBuilder:
    """Makes Arrow record batches of messages; made once per stream (the schema and types are looked up
    once, not per batch)."""

    __slots__ = (
        "_binary",
        "_compute",
        "_header_type",
        "_int32",
        "_int64",
        "_one",
        "_pa",
        "_schema",
        "_stamp",
        "_string",
    )

    def __init__(self, headers: bool = False) -> None:
        """``headers``: add the ``headers`` column."""
        pa = self._pa = require_pyarrow()
        self._schema = column_schema(headers)
        self._header_type = self._schema.field("headers").type if headers else None
        self._string, self._int32, self._int64 = pa.string(), pa.int32(), pa.int64()
        self._binary, self._stamp = pa.binary(), pa.timestamp("ms", tz="UTC")
        self._one = pa.scalar(1, self._int64)
        from pyarrow import compute  # after require_pyarrow(): its error names the extra

        self._compute = compute

    def _ints(self, kind: Any, n: int, values: array[int]) -> Any:
        return _ints_of(self._pa, kind, n, values)

    @property
    def schema(self) -> Any:
        """The batches' ``pyarrow.Schema`` (:func:`column_schema`)."""
        return self._schema

    def __call__(self, cluster_id: str, messages: Sequence[Any], split: tuple[str, int] | None = None) -> Any:
        """A ``pyarrow.RecordBatch`` of ``messages`` (all of ``cluster_id``; none an error event), in order.
        ``split``: ``(topic, partition)`` when every message is of that one partition, in the order the
        client returns them (offsets rising)."""
        return self._build(cluster_id, messages, split, False)[0]

    def with_kinds(
        self, cluster_id: str, messages: Sequence[Any], split: tuple[str, int] | None = None
    ) -> tuple[Any, list[int]]:
        """The batch of :meth:`__call__` and each message's timestamp type, read in the same pass (0 none,
        1 CreateTime, 2 LogAppendTime: the client's ``TIMESTAMP_*``), for a reader that hands them on too."""
        batch, kinds = self._build(cluster_id, messages, split, True)
        assert kinds is not None
        return batch, kinds

    def _build(
        self, cluster_id: str, messages: Sequence[Any], split: tuple[str, int] | None, with_kinds: bool
    ) -> tuple[Any, list[int] | None]:
        pa, n = self._pa, len(messages)
        offsets = None
        if split is not None:
            topics = pa.repeat(pa.scalar(split[0], self._string), n)
            partitions = pa.repeat(pa.scalar(split[1], self._int32), n)
            if n:
                first = messages[0].offset()
                if messages[-1].offset() - first == n - 1:  # rising offsets without a gap: first..first+n-1
                    offsets = self._compute.cumulative_sum(pa.repeat(self._one, n), start=first - 1)
        else:
            topics = pa.array(list(map(_topic, messages)), self._string)
            partitions = pa.array(list(map(_partition, messages)), self._int32)
        if offsets is None:
            offsets = self._ints(self._int64, n, array("q", list(map(_offset, messages))))
        stamps = list(map(_timestamp, messages))
        kinds = list(map(_kind, stamps)) if with_kinds else None
        ms = list(map(_ms, stamps))
        if n and min(ms) < 0 and 0 in (kinds or map(_kind, stamps)):  # TIMESTAMP_NOT_AVAILABLE (-1): null
            times = pa.array([t if kind else None for kind, t in stamps], self._int64).view(self._stamp)
        else:  # min() of the list: of the array it made an int per message again (5 % of the making)
            times = self._ints(self._stamp, n, array("q", ms))
        keys = list(map(_key, messages))
        columns = [
            pa.repeat(pa.scalar(cluster_id, self._string), n),
            topics,
            partitions,
            offsets,
            times,
            pa.nulls(n, self._binary) if keys.count(None) == n else pa.array(keys, self._binary),
            pa.array(list(map(_value, messages)), self._binary),
        ]
        if self._header_type is not None:
            columns.append(pa.array(list(map(_headers, messages)), self._header_type))
        return pa.RecordBatch.from_arrays(columns, schema=self._schema), kinds


def _ints_of(pa: Any, kind: Any, n: int, values: array[int]) -> Any:
    """An Arrow array of ``kind`` (64-bit) over ``values`` without a null: the buffer as it is (a C-level
    copy of the ints, several times faster than converting a list of Python ints)."""
    return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(values)])


def message_columns(
    cluster_id: str, messages: Sequence[Any], *, headers: bool = False, split: tuple[str, int] | None = None
) -> Any:
    """A ``pyarrow.RecordBatch`` of ``messages`` (see :class:`ColumnBuilder`; one call, one builder)."""
    return ColumnBuilder(headers)(cluster_id, messages, split)


@cache
def column_builder(headers: bool = False) -> ColumnBuilder:
    """The one :class:`ColumnBuilder` of the process with or without ``headers`` (it holds no state but
    the schema); an ``ImportError`` naming the extra when pyarrow is missing."""
    return ColumnBuilder(headers)


COLUMN_FETCH_FACTOR = 2
"""A column taker's inline fetch takes this many times ``reader.batch.max.records`` messages at once: they
die with the Arrow build (the record path keeps its batches smaller for the garbage collector, which walks
records the caller still holds), and the build and the fetcher's bookkeeping cost the same per batch."""

_here = threading.local()


def mark_columns(on: bool) -> bool:
    """Mark this thread as a column taker's (``on``) or not; returns the mark it had, to put back. Marked,
    what it fetches inline leaves its value bytes to be counted off the Arrow batches (see the module doc)."""
    before = bool(getattr(_here, "columns", False))
    _here.columns = on
    return before


def taking_columns() -> bool:
    """Whether this thread is marked a column taker's (:func:`mark_columns`)."""
    return bool(getattr(_here, "columns", False))


def value_bytes(batch: Any) -> int:
    """The bytes of the ``value`` column of a batch made by :class:`ColumnBuilder` (what the messages'
    lengths sum to), from its offsets alone."""
    values = batch.column(6)
    n = len(values)
    if not n:
        return 0
    offsets = memoryview(values.buffers()[1]).cast("i")  # binary: int32 offsets, one more than values
    first = values.offset
    return int(offsets[first + n] - offsets[first])
