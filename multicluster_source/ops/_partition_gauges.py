"""The per-partition offset gauges of a registry, kept as plain dicts and exported when the registry is read.

``current_offset``, ``records_lag`` and ``committed_offset`` have one sample per partition: 108,000 samples
at 36,000 splits. As prometheus-client gauge children they cost three objects each (the child, its value
and its lock), 324,000 objects the garbage collector walks in every full pass (0.4-0.6 s each at 36,000
splits, measured), and creating one costs about 15 us under the shared lock. Here a value is one entry of a
dict keyed ``(topic, partition)`` per cluster, set in C by ``dict.update`` (the callers hand over dicts whose
keys they already hold), and the samples are built only when the registry is scraped.

Sharing a registry between sources works as for the other gauges: a value is the one written last, and a
label set leaves the exposition when no source on the registry uses it any longer (each source's share is
counted in :attr:`PartitionGauges.owners`).

Threads: every method is called under the lock given to the constructor (``SharedMetrics.lock``), except
:meth:`collect` and :meth:`describe`, which the registry calls from the scraping thread and which take it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["PartitionGauges", "PartitionKey"]

PartitionKey = tuple[str, int]
"""``(topic, partition)``: a partition within one cluster."""

_LABELS = ("cluster", "topic", "partition")


class PartitionGauges(Collector):
    """The values of the per-partition gauges ``names`` of one registry: name -> cluster -> (topic,
    partition) -> value, with how many sources use each (see the module notes on threads)."""

    def __init__(self, docs: Mapping[str, str], lock: threading.Lock) -> None:
        """``docs``: help text per metric name; ``lock``: held by every caller but the registry."""
        self._docs = dict(docs)
        self._lock = lock
        self.values: dict[str, dict[str, dict[PartitionKey, float]]] = {name: {} for name in docs}
        self.owners: dict[str, dict[str, dict[PartitionKey, int]]] = {name: {} for name in docs}

    def set_many(
        self, name: str, cluster: str, values: Mapping[PartitionKey, float], mine: set[PartitionKey]
    ) -> None:
        """Set ``values`` of ``cluster``'s partitions; ``mine`` is the calling source's share of this name and
        cluster: partitions new to it are added to it and counted as used once more. Caller holds the lock."""
        store = self.values[name].get(cluster)
        if store is None:
            store = self.values[name][cluster] = {}
        store.update(values)
        if not mine.issuperset(values):
            new = values.keys() - mine
            mine |= new
            owners = self.owners[name].setdefault(cluster, {})
            for key in new:
                owners[key] = owners.get(key, 0) + 1

    def release(self, name: str, cluster: str, keys: Iterable[PartitionKey]) -> None:
        """A source no longer uses ``keys`` of ``cluster``: a partition no source uses leaves the exposition.
        Caller holds the lock."""
        owners = self.owners[name].get(cluster)
        if owners is None:
            return
        store = self.values[name].get(cluster, {})
        for key in keys:
            left = owners.get(key, 0) - 1
            if left > 0:
                owners[key] = left
            else:
                owners.pop(key, None)
                store.pop(key, None)
        if not owners:
            del self.owners[name][cluster]
            self.values[name].pop(cluster, None)

    # ---------------------------------------------------------------------------- the registry's side

    def describe(self) -> list[GaugeMetricFamily]:
        """The families without samples (the registry checks names with it when registering)."""
        return [GaugeMetricFamily(name, doc, labels=_LABELS) for name, doc in self._docs.items()]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """One gauge family per name with a sample per partition (a copy taken under the lock)."""
        with self._lock:
            copies = {
                name: [(cluster, dict(store)) for cluster, store in clusters.items()]
                for name, clusters in self.values.items()
            }
        for name, clusters in copies.items():
            family = GaugeMetricFamily(name, self._docs[name], labels=_LABELS)
            for cluster, store in clusters:
                for (topic, partition), value in store.items():
                    family.add_metric((cluster, topic, str(partition)), value)
            yield family
