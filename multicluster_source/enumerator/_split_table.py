"""The enumerator's table of active splits, indexed by cluster.

A metadata change touches a few clusters of many; with the index, finding the splits of those clusters
(those that leave, those an added cluster already knows, the gauges to update) costs what they hold, not
what the whole source holds (100,000 splits take about 30 ms to walk in Python, per walk).

Threads: the coordinator thread owns the table (the enumerator, its reader hand-out and its replica
handovers change and read it there). ``capture_state`` copies its values there too.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView

from multicluster_source.framework._split import KafkaPartitionSplit


class SplitTable(Mapping[str, KafkaPartitionSplit]):
    """Split id -> split, with the ids of each cluster's splits at hand. Change it only with :meth:`put`
    and :meth:`pop` (a split replaced by one of another cluster moves between the cluster sets)."""

    def __init__(self, splits: Iterable[KafkaPartitionSplit] = ()) -> None:
        self._splits: dict[str, KafkaPartitionSplit] = {}
        self._by_cluster: dict[str, dict[str, None]] = {}  # insertion-ordered sets
        self.version = 0
        """Moves with every change (before the changed table can be seen by another thread)."""
        for split in splits:
            self.put(split)

    def put(self, split: KafkaPartitionSplit) -> None:
        """Add ``split``, or replace the split of the same id (a new starting offset)."""
        sid = split.split_id
        self.version += 1
        old = self._splits.get(sid)
        if old is not None and old.cluster_id != split.cluster_id:
            self._unindex(sid, old.cluster_id)
        self._splits[sid] = split
        self._by_cluster.setdefault(split.cluster_id, {})[sid] = None

    def pop(self, split_id: str) -> KafkaPartitionSplit:
        """Remove and return the split ``split_id`` (``KeyError`` when there is none)."""
        split = self._splits.pop(split_id)
        self.version += 1
        self._unindex(split_id, split.cluster_id)
        return split

    def _unindex(self, split_id: str, cluster_id: str) -> None:
        ids = self._by_cluster.get(cluster_id)
        if ids is not None:
            ids.pop(split_id, None)
            if not ids:
                del self._by_cluster[cluster_id]

    def ids_of(self, cluster_id: str) -> KeysView[str]:
        """The ids of ``cluster_id``'s splits (a live view: copy it before changing the table)."""
        return self._by_cluster.get(cluster_id, {}).keys()

    def of_clusters(self, cluster_ids: Iterable[str]) -> list[KafkaPartitionSplit]:
        """The splits of these clusters."""
        splits = self._splits
        return [splits[sid] for cid in cluster_ids for sid in self._by_cluster.get(cid, ())]

    def cluster_ids(self) -> KeysView[str]:
        """The clusters that have at least one split here."""
        return self._by_cluster.keys()

    def __getitem__(self, split_id: str) -> KafkaPartitionSplit:
        return self._splits[split_id]

    def __contains__(self, split_id: object) -> bool:
        return split_id in self._splits

    def __iter__(self) -> Iterator[str]:
        return iter(self._splits)

    def __len__(self) -> int:
        return len(self._splits)

    def keys(self) -> KeysView[str]:
        """Every split id (the underlying dict's view: as fast as a dict's)."""
        return self._splits.keys()

    def values(self) -> ValuesView[KafkaPartitionSplit]:
        """Every split."""
        return self._splits.values()

    def items(self) -> ItemsView[str, KafkaPartitionSplit]:
        """Every (split id, split)."""
        return self._splits.items()
