"""Records out of the messages a fetcher handed on: the record path of ``poll``, iteration and the push
handler.

Runs on the thread that takes records (the caller's thread for a stream, the handler thread of a push
worker), not on fetch threads: fetch threads hand on the client's messages untouched, so the per-record work
happens only where records are asked for, and ``poll_batches`` does none of it.

Without a deserializer a record is a view of ``(cluster_id, message)``, made by one C-level call per message.
With one, the deserializer gets a :class:`RawRecord` view and its result becomes the record's value; when it
raises, policy ``fail`` raises :class:`DeserializationError` naming cluster, topic, partition and offset, and
``skip`` counts the record in ``multicluster_source_deserialization_errors_total`` and leaves it out (its
position still counts as delivered, as the record was read).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal

from multicluster_source.exceptions import DeserializationError
from multicluster_source.framework._records import (
    Deserializer,
    SourceRecord,
    deserialized_record,
    iterator_at,
    raw_record,
    record_iterator,
    records_of,
)


class RecordMaker:
    """Turns the messages of one batch into records: ``maker(cluster_id, messages) -> list[SourceRecord]``."""

    __slots__ = ("_deserializer", "_metrics", "_policy")

    def __init__(
        self, deserializer: Deserializer | None, policy: Literal["fail", "skip"] = "fail", metrics: Any = None
    ) -> None:
        """``metrics`` (a ``SourceMetrics``) counts records skipped under policy ``skip``."""
        self._deserializer = deserializer
        self._policy = policy
        self._metrics = metrics

    @property
    def views(self) -> bool:
        """Whether records are made by C-level calls alone (no deserializer: making one cannot raise)."""
        return self._deserializer is None

    def iterate(
        self, cluster_id: str, messages: Sequence[Any], start: int
    ) -> tuple[Iterator[SourceRecord], Any]:
        """Records of ``messages[start:]`` made one at a time as they are taken (iteration of a stream), and
        the iterator over ``messages`` they are taken from (see
        :func:`~multicluster_source.framework._records.record_iterator`). A message whose deserializer raises
        under policy ``fail`` is not counted as taken."""
        if self._deserializer is None:
            return record_iterator(cluster_id, messages, start)
        taken = iterator_at(messages, start)
        return self._deserialized(cluster_id, messages, taken), taken

    def _deserialized(self, cluster_id: str, messages: Sequence[Any], taken: Any) -> Iterator[SourceRecord]:
        deserializer = self._deserializer
        assert deserializer is not None
        for m in taken:
            try:
                value = deserializer(raw_record(cluster_id, m))
            except Exception as exc:
                if self._policy == "fail":
                    taken.__setstate__(len(messages) - taken.__length_hint__() - 1)  # m was not delivered
                    raise DeserializationError(cluster_id, m.topic(), m.partition(), m.offset()) from exc
                if self._metrics is not None:
                    self._metrics.deserialization_error(cluster_id, m.topic())
                continue
            yield deserialized_record(cluster_id, m, value)

    def __call__(self, cluster_id: str, messages: Sequence[Any]) -> list[SourceRecord]:
        """The records of ``messages`` (all of one cluster), in order."""
        deserializer = self._deserializer
        if deserializer is None:
            return records_of(cluster_id, messages)
        out: list[SourceRecord] = []
        append = out.append
        for m in messages:
            try:
                value = deserializer(raw_record(cluster_id, m))
            except Exception as exc:
                if self._policy == "fail":
                    raise DeserializationError(cluster_id, m.topic(), m.partition(), m.offset()) from exc
                if self._metrics is not None:
                    self._metrics.deserialization_error(cluster_id, m.topic())
                continue
            append(deserialized_record(cluster_id, m, value))
        return out
