"""Archived records at a low cost per record: one tuple per record, built by C-level calls only.

A live record is a view of the client's ``confluent_kafka.Message`` (framework/_records.py). An archived
record has no message: :class:`ArchivedRecord` is a :class:`SourceRecord` whose tuple holds the eight fields
itself (a ninth slot keeps the layout of ``(cluster_id, message, value)``: slot 1 is None), so building one
is a single ``tuple.__new__`` in a ``map``. It compares, hashes, prints and pickles as the
``SourceRecord`` of its eight fields (unpickled, it is a plain ``SourceRecord``).

A Parquet value is a row of columns: :class:`ArchivedRow` is a read-only mapping over one row of an Arrow
record batch, a ``(columns, index)`` tuple; a column is turned into Python objects once per batch, the
first time any row of the batch asks for it. ``dict(row)`` gives a plain dict, ``row == {...}`` compares
as one, and a pickled row is a dict. A row is made with its record (one small tuple, by a C-level ``map``):
a property making it when ``value`` is read costs a Python call per record, more than the tuple.

What remains per record is two small tuples (record and row) and the ints of its offset and timestamp;
measured here, that and the garbage collector's work on them are most of the stage's cost per record, as
making records is on the live path (benchmarks/bench_hybrid.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import islice, repeat
from typing import TYPE_CHECKING, Any

from multicluster_source.framework._records import Headers, SourceRecord

_new = tuple.__new__
_get = tuple.__getitem__


def _slot(index: int, doc: str) -> Any:
    try:
        from _collections import _tuplegetter  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # another Python implementation
        return property(lambda self: _get(self, index), doc=doc)
    return _tuplegetter(index, doc)


class ArchivedRecord(SourceRecord):
    """A :class:`SourceRecord` read from an archive: ``(cluster_id, None, value, topic, partition, offset,
    timestamp, key, headers)`` underneath."""

    __slots__ = ()

    if not TYPE_CHECKING:
        topic = _slot(3, "The topic.")
        partition = _slot(4, "The partition.")
        offset = _slot(5, "The record's offset in its partition.")
        timestamp = _slot(6, "Milliseconds since the epoch, or None when the archive holds none.")
        key = _slot(7, "The key bytes, or None.")
        headers = _slot(8, "The headers as ``[(name, value), ...]``, or None.")

    @property
    def split_id(self) -> str:
        """``"<cluster_id>/<topic>/<partition>"``."""
        return f"{_get(self, 0)}/{_get(self, 3)}/{_get(self, 4)}"

    def _fields(self) -> tuple[Any, ...]:
        return (
            _get(self, 0),
            _get(self, 3),
            _get(self, 4),
            _get(self, 5),
            _get(self, 6),
            _get(self, 7),
            _get(self, 2),
            _get(self, 8),
        )

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (SourceRecord, self._fields())


def _column(values: Sequence[Any] | None, lo: int, hi: int) -> Any:
    return repeat(None) if values is None else islice(values, lo, hi)


def archived_records(
    cluster_id: str,
    topic: str,
    partition: int,
    offsets: Sequence[int],
    timestamps: Sequence[int | None] | None,
    keys: Sequence[bytes | None] | None,
    values: Sequence[Any] | None,
    headers: Sequence[Headers] | None,
    lo: int,
    hi: int,
    rows: RowColumns | None = None,
    base: int = 0,
) -> list[SourceRecord]:
    """Records ``lo`` to ``hi`` of one chunk of one partition, by C-level calls only: the value of record
    ``i`` is ``values[i]``, or (``values`` None) an :class:`ArchivedRow` over row ``base + i`` of ``rows``
    (made here, for the records asked for only: a property making it when read costs more per record)."""
    row_values: Any = (
        islice(values, lo, hi)
        if values is not None
        else map(_new, repeat(ArchivedRow), zip(repeat(rows), range(base + lo, base + hi)))
    )
    return list(
        map(
            _new,
            repeat(ArchivedRecord),
            zip(
                repeat(cluster_id),
                repeat(None),
                row_values,
                repeat(topic),
                repeat(partition),
                islice(offsets, lo, hi),
                _column(timestamps, lo, hi),
                _column(keys, lo, hi),
                _column(headers, lo, hi),
            ),
        )
    )


class RowColumns:
    """The columns of one Arrow record batch, each turned into a Python list on first use."""

    __slots__ = ("_lists", "batch", "count", "index", "names")

    def __init__(self, batch: Any) -> None:
        """Columns of ``batch`` (a ``pyarrow.RecordBatch``)."""
        self.batch = batch
        self.count: int = batch.num_rows
        self.names: tuple[str, ...] = tuple(batch.schema.names)
        self.index: dict[str, int] = {n: i for i, n in enumerate(self.names)}
        self._lists: list[list[Any] | None] = [None] * len(self.names)

    def column(self, position: int) -> list[Any]:
        """The Python values of column ``position``."""
        values = self._lists[position]
        if values is None:
            values = self.batch.column(position).to_pylist()
            self._lists[position] = values
        return values


class ArchivedRow(tuple):  # type: ignore[type-arg]
    """One row of a Parquet archive as a read-only mapping: column name -> value."""

    __slots__ = ()

    def __getitem__(self, name: Any) -> Any:
        columns: RowColumns = _get(self, 0)
        position = columns.index.get(name)
        if position is None:
            raise KeyError(name)
        return columns.column(position)[_get(self, 1)]

    def get(self, name: str, default: Any = None) -> Any:
        """The value of column ``name``, or ``default``."""
        columns: RowColumns = _get(self, 0)
        position = columns.index.get(name)
        return default if position is None else columns.column(position)[_get(self, 1)]

    def keys(self) -> tuple[str, ...]:
        """The column names."""
        names: tuple[str, ...] = _get(self, 0).names
        return names

    def values(self) -> list[Any]:
        """The values, in column order."""
        columns: RowColumns = _get(self, 0)
        i = _get(self, 1)
        return [columns.column(p)[i] for p in range(len(columns.names))]

    def items(self) -> list[tuple[str, Any]]:
        """``(name, value)`` pairs, in column order."""
        return list(zip(self.keys(), self.values(), strict=True))

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, name: object) -> bool:
        return name in _get(self, 0).index

    def as_dict(self) -> dict[str, Any]:
        """A plain dict of the row."""
        return dict(self.items())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ArchivedRow | Mapping):
            return self.as_dict() == dict(other.items())
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        raise TypeError("unhashable type: 'ArchivedRow'")

    def __repr__(self) -> str:
        return f"ArchivedRow({self.as_dict()!r})"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (dict, (self.as_dict(),))


Mapping.register(ArchivedRow)


def rows_of(columns: RowColumns) -> list[ArchivedRow]:
    """One :class:`ArchivedRow` per row of ``columns`` (for a deserializer, which takes every value)."""
    return list(map(_new, repeat(ArchivedRow), zip(repeat(columns), range(columns.count))))
