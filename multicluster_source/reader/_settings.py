"""What every fetcher and reader of a source shares: settings values and the consumer factory."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from multicluster_source.reader._resets import consumer_config

ConsumerFactory = Callable[[dict[str, Any]], Any]


def default_consumer_factory(conf: dict[str, Any]) -> Any:
    """A confluent-kafka Consumer for ``conf`` (with :func:`consumer_config` applied)."""
    from confluent_kafka import Consumer

    return Consumer(consumer_config(conf))


@dataclass(frozen=True)
class FetchSettings:
    """How a fetcher reads and hands on records."""

    source_name: str
    reader_index: int
    batch_max_records: int
    metrics: Any
    consumer_factory: ConsumerFactory = default_consumer_factory
    poll_timeout_s: float = 0.1
    lag_interval_s: float = 1.0
    stall_timeout_s: float | None = 60.0
    """``reader.stall.timeout.ms``: a split whose position stands still this long while its broker has records
    beyond it is stalled (:mod:`multicluster_source.reader._stalls`); None: never checked."""
    on_topic_read: Callable[[str, str, int], None] | None = None
    """Called with (cluster, topic, reader index) for each topic of a batch handed on (topic tracking)."""
    watermark_bound_ms: int = 0
    aligned: bool = False
    """Watermark alignment: each split fetches one batch, then waits for the coordinator's first word."""
    """The strategy's out-of-orderness bound (a split's watermark is its largest event time minus it)."""
    event_times: str | None = None
    """Each batch's Kafka timestamps per split (a watermark strategy without timestamp assigner): ``"all"``
    (every message's) or ``"ends"`` (monotonous: each split's first and last message); None: not computed."""


@dataclass(frozen=True)
class ReaderSettings:
    """What every reader of a source shares (and this reader's rack)."""

    group_id: str
    client_properties: Mapping[str, str]
    client_id_prefix: str
    bounded: bool
    fetch: FetchSettings
    rack: str | None = None
    rack_id_supplier: Callable[[str, str | None], str | None] | None = None
