"""The hand-off between fetch threads and the caller: bounded, and fair to the fetch threads waiting for room.

With a plain queue a fetch thread that comes back with its next batch just as the caller frees a slot could
take it before a thread that had waited longer (the status-page test once saw one cluster's fetcher report
nothing for 30 s while the caller was slow). This test does not reproduce that race with the old queue; it
checks what the hand-off promises now: threads waiting for room put in the order they came."""

from __future__ import annotations

import threading
import time
from collections import Counter

from multicluster_source.framework._interfaces import RecordBatch
from multicluster_source.runtime.core._handoff import Handoff


def test_waiting_fetch_threads_take_turns_while_the_caller_is_slow() -> None:
    handoff = Handoff(1)
    stop = threading.Event()

    def fetch(cluster: str, work_s: float) -> None:
        while not stop.is_set():
            if not handoff.put(RecordBatch(cluster, [], {}), stop.is_set):
                return
            until = time.perf_counter() + work_s  # Python work on the next batch, holding the GIL
            while time.perf_counter() < until:
                pass

    work = {"east": 0.001, "west": 0.0, "north": 0.001}  # west always waits; the others come back busy
    threads = [threading.Thread(target=fetch, args=(c, s)) for c, s in work.items()]
    for t in threads:
        t.start()
    taken: list[str] = []
    try:
        while len(taken) < 60:
            batch = handoff.get(1.0)
            assert batch is not None
            taken.append(batch.cluster_id)
            time.sleep(0.003)  # the slower side
    finally:
        stop.set()
        handoff.closed.set()
        for t in threads:
            t.join(5)
    counts = Counter(taken[3:])  # after the first round, every thread waits in line
    assert set(counts) == {"east", "west", "north"}
    assert min(counts.values()) >= 18, counts


def test_put_refuses_once_closed_or_stopping_and_get_times_out() -> None:
    handoff = Handoff(1)
    assert handoff.put(RecordBatch("east", [], {}), lambda: False)
    assert handoff.full() and len(handoff) == 1
    started = time.monotonic()
    assert not handoff.put(RecordBatch("east", [], {}), lambda: time.monotonic() - started > 0.1)
    assert handoff.get(0) is not None and handoff.empty()
    assert handoff.get(0.05) is None
    handoff.closed.set()
    assert not handoff.put(RecordBatch("east", [], {}), lambda: False)
