"""MirrorMaker 2's record formats: offset syncs and checkpoints (Kafka protocol types, big-endian).

* offset sync (``mm2-offset-syncs.<cluster>.internal``): key ``topic:STRING, partition:INT32``; value
  ``upstreamOffset:INT64, offset:INT64``.
* checkpoint (``<source>.checkpoints.internal``): key ``group:STRING, topic:STRING, partition:INT32``; value
  ``version:INT16`` (0), then ``upstreamOffset:INT64, offset:INT64, metadata:STRING``.

``STRING`` is an INT16 length and that many bytes of UTF-8. Decoding checks lengths and rejects trailing
bytes; a bad record raises :class:`MM2RecordError` naming where the record came from.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "CHECKPOINT_VERSION",
    "Checkpoint",
    "MM2RecordError",
    "OffsetSync",
    "decode_checkpoint",
    "decode_offset_sync",
    "encode_checkpoint",
    "encode_offset_sync",
]

CHECKPOINT_VERSION = 0
"""The checkpoint value version MirrorMaker 2 writes (and the only one this module reads)."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64X2 = struct.Struct(">qq")


class MM2RecordError(ValueError):
    """A record of an MM2 internal topic that cannot be decoded; the message names the record."""


@dataclass(frozen=True)
class OffsetSync:
    """One offset sync: upstream ``topic``/``partition`` record ``upstream`` was copied to ``downstream``."""

    topic: str
    partition: int
    upstream: int
    downstream: int


@dataclass(frozen=True)
class Checkpoint:
    """One MM2 checkpoint: ``group``'s committed offset ``upstream`` on the source, translated to
    ``downstream`` on the target, for the downstream ``topic``/``partition`` (the renamed topic)."""

    group: str
    topic: str
    partition: int
    upstream: int
    downstream: int
    metadata: str = ""


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def _take(self, n: int, field: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(
                f"{self.what}: {field} needs {n} bytes at byte {self.pos}, {len(self.data)} in all"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def string(self, field: str) -> str:
        (length,) = _I16.unpack(self._take(2, field))
        if length < 0:
            raise ValueError(f"{self.what}: {field} has a negative length ({length}); MM2 writes no null")
        try:
            return self._take(length, field).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{self.what}: {field} is not UTF-8 ({exc.reason})") from None

    def int16(self, field: str) -> int:
        value: int = _I16.unpack(self._take(2, field))[0]
        return value

    def int32(self, field: str) -> int:
        value: int = _I32.unpack(self._take(4, field))[0]
        return value

    def two_int64(self, field: str) -> tuple[int, int]:
        a, b = _I64X2.unpack(self._take(16, field))
        return a, b

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ValueError(f"{self.what}: {len(self.data) - self.pos} bytes after the last field")


def _where(source: str, partition: int | None, offset: int | None) -> str:
    return f"{source} partition {partition} offset {offset}"


def decode_offset_sync(
    key: bytes | None,
    value: bytes | None,
    *,
    source: str = "offset syncs",
    partition: int | None = None,
    offset: int | None = None,
) -> OffsetSync:
    """Decode one offset-sync record (``source``, ``partition`` and ``offset`` name it in errors)."""
    where = _where(source, partition, offset)
    if key is None or value is None:
        raise MM2RecordError(f"{where}: an offset sync needs a key and a value (got a null)")
    try:
        k = _Reader(bytes(key), "key")
        topic, part = k.string("topic"), k.int32("partition")
        k.end()
        v = _Reader(bytes(value), "value")
        upstream, downstream = v.two_int64("upstreamOffset and offset")
        v.end()
    except (ValueError, struct.error) as exc:
        raise MM2RecordError(f"{where}: not an MM2 offset sync: {exc}") from None
    if part < 0 or upstream < 0 or downstream < 0:
        raise MM2RecordError(
            f"{where}: not an MM2 offset sync: negative numbers ({part}, {upstream}, {downstream})"
        )
    return OffsetSync(topic, part, upstream, downstream)


def encode_offset_sync(sync: OffsetSync) -> tuple[bytes, bytes]:
    """``(key, value)`` of ``sync`` as MirrorMaker 2 writes them."""
    return _string(sync.topic) + _I32.pack(sync.partition), _I64X2.pack(sync.upstream, sync.downstream)


def decode_checkpoint(
    key: bytes | None,
    value: bytes | None,
    *,
    source: str = "checkpoints",
    partition: int | None = None,
    offset: int | None = None,
) -> Checkpoint:
    """Decode one MM2 checkpoint record (``source``, ``partition`` and ``offset`` name it in errors)."""
    where = _where(source, partition, offset)
    if key is None or value is None:
        raise MM2RecordError(f"{where}: a checkpoint needs a key and a value (got a null)")
    try:
        k = _Reader(bytes(key), "key")
        group, topic, part = k.string("group"), k.string("topic"), k.int32("partition")
        k.end()
        v = _Reader(bytes(value), "value")
        version = v.int16("version")
        if version != CHECKPOINT_VERSION:
            raise ValueError(f"version {version} (this reader knows {CHECKPOINT_VERSION})")
        upstream, downstream = v.two_int64("upstreamOffset and offset")
        metadata = v.string("metadata")
        v.end()
    except (ValueError, struct.error) as exc:
        raise MM2RecordError(f"{where}: not an MM2 checkpoint: {exc}") from None
    if part < 0 or upstream < 0 or downstream < 0:
        raise MM2RecordError(
            f"{where}: not an MM2 checkpoint: negative numbers ({part}, {upstream}, {downstream})"
        )
    return Checkpoint(group, topic, part, upstream, downstream, metadata)


def encode_checkpoint(checkpoint: Checkpoint) -> tuple[bytes, bytes]:
    """``(key, value)`` of ``checkpoint`` as MirrorMaker 2 writes them."""
    key = _string(checkpoint.group) + _string(checkpoint.topic) + _I32.pack(checkpoint.partition)
    value = (
        _I16.pack(CHECKPOINT_VERSION)
        + _I64X2.pack(checkpoint.upstream, checkpoint.downstream)
        + _string(checkpoint.metadata)
    )
    return key, value


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"a Kafka STRING holds at most 32767 bytes, not {len(data)}")
    return _I16.pack(len(data)) + data
