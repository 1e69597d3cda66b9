"""``consume``: read a stream to stdout, bounded (to the end offsets at start) or following.

Records are taken on the zero-copy batch path (``poll_batches``) and written as JSON lines (``cluster``,
``topic``, ``partition``, ``offset``, ``timestamp``, ``key``, ``value``, ``headers``; bytes that are not UTF-8
are given as ``key_base64`` / ``value_base64``) or as raw values, one per line. A bounded read shows a
progress bar with rate and ETA on stderr (``tqdm``, else ``rich``, else a line every few seconds).
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Callable
from typing import Any, BinaryIO, TextIO

from multicluster_source.framework._records import MessageBatch
from multicluster_source.runtime.pull._stream import SourceStream

__all__ = ["Progress", "consume_to", "message_line"]

_string: Any = json.encoder.encode_basestring  # the C version when available


def _field(name: str, data: bytes | None) -> str:
    """``,"name":"text"``, or ``,"name_base64":"..."`` for bytes that are not UTF-8, or ``,"name":null``."""
    if data is None:
        return f',"{name}":null'
    try:
        return f',"{name}":{_string(data.decode("utf-8"))}'
    except UnicodeDecodeError:
        return f',"{name}_base64":"{base64.b64encode(data).decode("ascii")}"'


def message_line(cluster_json: str, message: Any) -> bytes:
    """One JSON line for a client message; ``cluster_json`` is the cluster id as a JSON string (made once
    per batch). Written by hand with the json module's C string encoder: about 3x faster than ``dumps``."""
    line = (
        f'{{"cluster":{cluster_json},"topic":{_string(message.topic())},"partition":{message.partition()},'
        f'"offset":{message.offset()},"timestamp":{message.timestamp()[1]}'
        f"{_field('key', message.key())}{_field('value', message.value())}"
    )
    headers = message.headers()
    if headers:
        line += (
            ',"headers":['
            + ",".join(f'{{"name":{_string(n)}{_field("value", v)}}}' for n, v in headers)
            + "]"
        )
    return (line + "}\n").encode("utf-8")


class Progress:
    """Records written against an expected total, on stderr: tqdm, else rich, else a plain line every 2 s."""

    def __init__(self, total: int, err: TextIO) -> None:
        self._total = total
        self._done = 0
        self._close: Callable[[], None] = lambda: None
        self._update: Callable[[int], None]
        try:
            from tqdm import tqdm

            bar = tqdm(
                total=total, unit="rec", unit_scale=True, file=err, dynamic_ncols=True, mininterval=0.5
            )
            self._update, self._close = bar.update, bar.close
            return
        except ImportError:
            pass
        try:
            from rich.console import Console
            from rich.progress import Progress as RichProgress

            rich = RichProgress(*RichProgress.get_default_columns(), console=Console(file=err))
            task = rich.add_task("records", total=total)
            rich.start()
            self._update = lambda n: rich.advance(task, n)
            self._close = rich.stop
            return
        except ImportError:
            pass
        started, last = time.monotonic(), [0.0]

        def plain(n: int) -> None:
            now = time.monotonic()
            if now - last[0] < 2.0 and self._done < total:
                return
            last[0] = now
            rate = self._done / max(now - started, 1e-9)
            eta = (total - self._done) / rate if rate > 0 else float("inf")
            err.write(f"{self._done}/{total} records, {rate:,.0f} rec/s, ETA {eta:,.0f} s\n")

        self._update = plain

    def update(self, n: int) -> None:
        """``n`` more records written."""
        self._done += n
        self._update(n)

    def close(self) -> None:
        """End the bar."""
        self._close()


def consume_to(
    stream: SourceStream,
    out: BinaryIO,
    *,
    raw: bool,
    max_records: int | None,
    progress: Progress | None,
) -> int:
    """Write records of ``stream`` to ``out`` until it finished (bounded), ``max_records`` were written, or
    a KeyboardInterrupt; returns the number written."""
    written = 0
    try:
        while not stream.finished and (max_records is None or written < max_records):
            room = 10_000 if max_records is None else min(10_000, max_records - written)
            batches: list[MessageBatch] = stream.poll_batches(timeout=0.5, max_records=room)
            for batch in batches:
                if raw:
                    out.write(b"".join((m.value() or b"") + b"\n" for m in batch.messages))
                else:
                    cluster = _string(batch.cluster_id)
                    out.write(b"".join(message_line(cluster, m) for m in batch.messages))
                written += len(batch)
                if progress is not None:
                    progress.update(len(batch))
            if batches:
                out.flush()
    except KeyboardInterrupt:
        pass
    finally:
        if progress is not None:
            progress.close()
    return written


def stdout_binary() -> BinaryIO:
    """The process's stdout as bytes."""
    return sys.stdout.buffer
