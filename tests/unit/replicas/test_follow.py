"""The offset-sync follower's record handling without a broker: good syncs go into the store, a record that
does not decode is skipped and counted (never fatal), the end seen at the start makes it ready; and a
follower that was never started closes at once."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError

from multicluster_source.metadata import ClusterMetadata
from multicluster_source.replicas._codec import OffsetSync, encode_offset_sync
from multicluster_source.replicas._follow import SyncFollower
from multicluster_source.replicas._store import SyncStore


class _Msg:
    def __init__(self, offset: int, key: bytes | None = None, value: bytes | None = None, error: Any = None):
        self._offset, self._key, self._value, self._error = offset, key, value, error

    def error(self) -> Any:
        return self._error

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value


def _follower() -> SyncFollower:
    east = ClusterMetadata("east", "127.0.0.1:1", frozenset({"orders"}))
    return SyncFollower(east, "mm2-offset-syncs.west.internal", SyncStore(), replica_id="west")


def test_syncs_are_stored_bad_records_skipped_and_counted_and_the_end_makes_it_ready() -> None:
    follower = _follower()
    assert follower.thread_name == "mcs-replica-west-syncs"
    follower._handle(_Msg(0, *encode_offset_sync(OffsetSync("orders", 0, 5, 9))), end=3)
    follower._handle(_Msg(1, b"\x00\x09short", b"\x00" * 16), end=3)
    assert not follower.ready()
    follower._handle(_Msg(2, *encode_offset_sync(OffsetSync("orders", 0, 8, 12))), end=3)
    assert follower.ready()
    assert (follower.records, follower.bad_records) == (3, 1)
    assert [s.upstream for s in follower.store.syncs("orders", 0)] == [5, 8]


def test_the_end_of_the_partition_makes_it_ready_and_errors_are_kept() -> None:
    follower = _follower()
    follower._handle(_Msg(0, error=KafkaError(KafkaError._TRANSPORT, "broker down")), end=10)
    assert not follower.ready() and follower.last_error == "broker down"
    follower._handle(_Msg(0, error=KafkaError(KafkaError._PARTITION_EOF)), end=10)
    assert follower.ready()


def test_a_follower_never_started_closes_at_once() -> None:
    follower = _follower()
    follower.close()
    follower.close()
