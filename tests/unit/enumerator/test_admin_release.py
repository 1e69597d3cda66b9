"""A discovery round stopped by close lets go of the cluster's admin client at once (issue 33's leak check).

confluent-kafka's AdminClient has no close(): the last reference destroys it, its threads and its broker
connections. The error that ends a round stopped by close travels to the coordinator (and may wait there),
and its traceback's frames held the client: it stayed alive, with its threads and sockets, until the next
full cyclic garbage collection (seen in the chaos soak after a leader was cut off from the job). No broker.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from multicluster_source import ClusterMetadata, OffsetsInitializer
from multicluster_source.enumerator._kafka import ClusterEnumeratorConfig, KafkaClusterEnumerator


class SilentAdmin:
    """A cluster that does not answer: every describe_topics future stays pending."""

    def __init__(self) -> None:
        self.polls = 0

    def describe_topics(self, topics: Any, request_timeout: float) -> dict[str, Future[Any]]:
        return {name: Future() for name in topics.topic_names}

    def poll(self, timeout: float) -> int:
        self.polls += 1
        return 0


@pytest.fixture
def no_cyclic_collector() -> Iterator[None]:
    """Only reference counting frees objects in the test (what a quiet process after close relies on)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def test_a_round_stopped_by_close_keeps_no_reference_to_the_admin_client(no_cyclic_collector: None) -> None:
    config = ClusterEnumeratorConfig(
        cluster=ClusterMetadata("east", "east:9092", frozenset({"orders", "payments"})),
        client_properties={},
        group_id=None,
        starting=OffsetsInitializer.earliest(),
        stopping=None,
        discovery_interval_s=None,
    )
    enumerator = KafkaClusterEnumerator(config, context=None, admin_factory=lambda conf: SilentAdmin())  # type: ignore[arg-type]
    admin = enumerator.admin()
    enumerator._closing.set()  # close() while the round waits for the cluster
    with pytest.raises(Exception) as caught:
        enumerator._discover()
    error = caught.value  # kept, as the I/O thread's future keeps it for the coordinator
    assert admin.polls == 1, "the round serves the client's callbacks on its way out"
    enumerator._admin = None  # what close() does
    released = weakref.ref(admin)
    del admin
    assert released() is None, "the stopped round's error still holds the admin client"
    assert error.__traceback__ is not None, "the error keeps its traceback (where it came from) for the log"
