"""The exactly-once sink without brokers: its configuration checks, the positions records, the identities
check, and the transactions driven against a stand-in producer that records what it was asked."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from multicluster_source import ConfigurationError, ExactlyOnceKafkaSink, ProducerFencedError
from multicluster_source.enumerator._identity import ClusterIdentities
from multicluster_source.exceptions import CheckpointError, ClusterIdentityError, SourceFailedError
from multicluster_source.sink import _transactions
from multicluster_source.sink._positions import consumer_properties, decode_position, encode_position
from multicluster_source.sink._transactions import TransactionAborted, TransactionalSink


def sink(**props: str) -> ExactlyOnceKafkaSink:
    return ExactlyOnceKafkaSink(
        {"bootstrap.servers": "central:9092", **props}, transactional_id="billing", positions_topic="pos"
    )


# ------------------------------------------------------------------------------------------ configuration


def test_the_sink_needs_servers_and_names() -> None:
    with pytest.raises(ConfigurationError, match=r"bootstrap\.servers"):
        ExactlyOnceKafkaSink({}, transactional_id="x", positions_topic="p")
    with pytest.raises(ConfigurationError, match="transactional_id"):
        ExactlyOnceKafkaSink({"bootstrap.servers": "a:1"}, transactional_id=" ", positions_topic="p")
    with pytest.raises(ConfigurationError, match="positions_topic"):
        ExactlyOnceKafkaSink({"bootstrap.servers": "a:1"}, transactional_id="x", positions_topic="")


def test_properties_the_sink_owns_are_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"transactional\.id"):
        sink(**{"transactional.id": "other"})


def test_a_transaction_timeout_not_longer_than_the_interval_is_refused() -> None:
    sink(**{"transaction.timeout.ms": "10000"}).check_interval(5.0)
    sink().check_interval(None)
    with pytest.raises(
        ConfigurationError, match=r"transaction\.timeout\.ms=5000 .* checkpoint_interval=5\.0"
    ):
        sink(**{"transaction.timeout.ms": "5000"}).check_interval(5.0)
    with pytest.raises(ConfigurationError, match="integer"):
        sink(**{"transaction.timeout.ms": "soon"})


def test_the_repr_holds_no_property_value() -> None:
    text = repr(sink(**{"sasl.password": "hunter2"}))
    assert "hunter2" not in text and "billing" in text


def test_the_positions_consumer_gets_the_connection_not_the_producer_settings() -> None:
    conf = consumer_properties(
        {"bootstrap.servers": "a:1", "sasl.password": "s", "linger.ms": "5", "acks": "all", "retries": "3"}
    )
    assert conf == {"bootstrap.servers": "a:1", "sasl.password": "s"}


# ---------------------------------------------------------------------------------------- positions records


def test_a_position_round_trips_with_its_kafka_cluster_id() -> None:
    key, value = encode_position("eu/orders/3", 1234, "KID", "billing")
    assert key == b"eu/orders/3"
    assert json.loads(value) == {
        "v": 1,
        "offset": 1234,
        "cluster": "eu",
        "kafka_cluster_id": "KID",
        "source": "billing",
    }
    position = decode_position(key, value, "pos[0]@7")
    assert position is not None
    assert (position.split_id, position.offset, position.cluster_id, position.kafka_cluster_id) == (
        "eu/orders/3",
        1234,
        "eu",
        "KID",
    )
    assert decode_position(key, None, "pos[0]@8") is None  # a tombstone


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        (b"eu/orders/3", b"not json", "malformed"),
        (b"eu/orders/3", b'{"v": 1}', "malformed"),
        (b"eu/orders/3", b'{"v": 9, "offset": 1}', "newer"),
        (b"orders", b'{"v": 1, "offset": 1}', "not a split id"),
        (None, b'{"v": 1, "offset": 1}', "without a key"),
    ],
)
def test_a_bad_positions_record_is_an_error_naming_where_it_is(key: Any, value: bytes, match: str) -> None:
    with pytest.raises(CheckpointError, match=match) as info:
        decode_position(key, value, "positions topic pos partition 0 offset 7")
    assert "partition 0 offset 7" in str(info.value)


# ------------------------------------------------------------------------------------------------ identities


def test_identities_refuse_a_cluster_id_that_moved() -> None:
    ids = ClusterIdentities({"eu": "K1"}, what="positions in pos")
    ids.learn("eu", "K1", "eu-1:9092")
    assert ids.get("eu") == "K1"
    ids.learn("us", "K2", "us-1:9092")
    assert ids.snapshot() == {"eu": "K1", "us": "K2"}
    with pytest.raises(ClusterIdentityError, match=r"'eu' \(other:9092\) is Kafka cluster 'K3'.*'K1'"):
        ids.learn("eu", "K3", "other:9092")
    assert ids.get("ap") is None


# ---------------------------------------------------------------------------------------------- transactions


class FakeProducer:
    """Records the calls; ``fail_commit`` makes the next commit raise that error."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.fail_commit: KafkaError | None = None

    def begin_transaction(self) -> None:
        self.calls.append(("begin", None))

    def produce(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> None:
        self.calls.append(("produce", (topic, key, value)))

    def commit_transaction(self, timeout: float) -> None:
        error, self.fail_commit = self.fail_commit, None
        if error is not None:
            raise KafkaException(error)
        self.calls.append(("commit", None))

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append(("abort", None))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


def running(producer: FakeProducer, committed: dict[str, int] | None = None) -> TransactionalSink:
    session = TransactionalSink(sink(), "src")
    session._producer = producer  # what open() would have made
    session._send = producer.produce
    session.committed = dict(committed or {})
    return session


def kinds(producer: FakeProducer) -> list[str]:
    return [kind for kind, _ in producer.calls]


def test_only_positions_that_moved_are_written_and_nothing_to_do_commits_nothing() -> None:
    producer = FakeProducer()
    session = running(producer, {"eu/t/0": 10, "eu/t/1": 5})
    assert session.commit({"eu/t/0": 10, "eu/t/1": 5}, lambda c: "K") is False
    assert producer.calls == []
    session.produce("out", value=b"r")
    assert session.commit({"eu/t/0": 12, "eu/t/1": 5}, lambda c: "K") is True
    assert kinds(producer) == ["begin", "produce", "produce", "commit"]
    written = producer.calls[2][1]
    assert written[0] == "pos" and written[1] == b"eu/t/0" and json.loads(written[2])["offset"] == 12
    assert session.committed == {"eu/t/0": 12, "eu/t/1": 5}
    assert session.status()["transactions"] == {"committed": 1, "aborted": 0}


def test_an_abortable_commit_aborts_and_keeps_the_committed_positions() -> None:
    producer = FakeProducer()
    session = running(producer, {"eu/t/0": 10})
    session.produce("out", value=b"r")
    producer.fail_commit = KafkaError(KafkaError.TRANSACTION_ABORTABLE, "abortable", txn_requires_abort=True)
    with pytest.raises(TransactionAborted):
        session.commit({"eu/t/0": 20}, lambda c: None)
    assert kinds(producer)[-1] == "abort"
    assert session.committed == {"eu/t/0": 10}
    assert session.status()["transactions"] == {"committed": 0, "aborted": 1}
    session.produce("out", value=b"r")  # a new transaction after the rewind
    assert session.commit({"eu/t/0": 20}, lambda c: None) is True


def test_transactions_aborted_again_and_again_fail_the_stream() -> None:
    producer = FakeProducer()
    session = running(producer)
    for attempt in range(_transactions.MAX_ABORTS_IN_A_ROW):
        session.produce("out", value=b"r")
        producer.fail_commit = KafkaError(KafkaError._MSG_TIMED_OUT, "timed out", txn_requires_abort=True)
        expected = (
            SourceFailedError if attempt == _transactions.MAX_ABORTS_IN_A_ROW - 1 else TransactionAborted
        )
        with pytest.raises(expected):
            session.commit({"eu/t/0": attempt + 1}, lambda c: None)


def test_a_fenced_producer_raises_producer_fenced_error_at_produce_and_commit() -> None:
    producer = FakeProducer()
    session = running(producer)
    session.produce("out", value=b"r")
    producer.fail_commit = KafkaError(KafkaError._FENCED, "fenced", fatal=True)
    with pytest.raises(ProducerFencedError, match="billing"):
        session.commit({"eu/t/0": 1}, lambda c: None)
    with pytest.raises(ProducerFencedError):
        session.produce("out", value=b"r")
    assert session.status()["fenced"] is True


def test_the_step_hook_sees_each_step_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    steps: list[str] = []
    monkeypatch.setattr(_transactions, "step_hook", steps.append)
    session = running(FakeProducer())
    session.produce("out", value=b"r")
    session.commit({"eu/t/0": 1}, lambda c: None)
    assert steps == ["begun", "produced", "positions", "committing", "committed"]


def test_close_aborts_what_is_open() -> None:
    producer = FakeProducer()
    session = running(producer)
    session.produce("out", value=b"r")
    session.close()
    assert kinds(producer)[-1] == "abort"
    session.close()  # idempotent


def test_a_produce_refused_in_a_failed_transaction_dooms_it_and_the_commit_aborts() -> None:
    """After a result the sink refused, the client refuses further produces (_STATE): they are dropped, and
    the next commit aborts the transaction so the stream rewinds and produces them again."""
    producer = FakeProducer()
    session = running(producer, {"eu/t/0": 10})
    session.produce("out", value=b"a")

    def refuse(topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> None:
        raise KafkaException(KafkaError(KafkaError._STATE, "Erroneous state"))

    session._send = refuse
    producer.produce = refuse  # type: ignore[method-assign]
    session.produce("out", value=b"b")  # no exception: the transaction is doomed
    assert session.doomed is not None
    with pytest.raises(TransactionAborted):
        session.commit({"eu/t/0": 20}, lambda c: None)
    assert session.committed == {"eu/t/0": 10} and session.doomed is None
