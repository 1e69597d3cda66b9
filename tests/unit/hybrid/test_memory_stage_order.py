"""The in-memory archive stage hands records out round robin over its splits, however many splits it has.

Its ``poll`` once filtered every split after every record (a poll of 1,000 records over 20,000 splits took
5.6 s); the order below is the definition it keeps: each poll starts from the splits with records left, in
order, picks ``live[turn % len(live)]`` for each record, and a split leaves ``live`` once its last record is
out.
"""

from __future__ import annotations

import random

from multicluster_source.hybrid import InMemoryArchiveStage


def _reference(records: dict[str, list[bytes]], sizes: list[int]) -> list[list[tuple[str, int]]]:
    order, nxt, turn, polls = sorted(records), dict.fromkeys(records, 0), 0, []
    for size in sizes:
        out: list[tuple[str, int]] = []
        live = [s for s in order if nxt[s] < len(records[s])]
        while live and len(out) < size:
            split = live[turn % len(live)]
            turn += 1
            out.append((split, nxt[split]))
            nxt[split] += 1
            live = [s for s in live if nxt[s] < len(records[s])]
        polls.append(out)
    return polls


def test_records_come_round_robin_over_the_splits_that_have_records_left() -> None:
    rng = random.Random(11)
    for _ in range(300):
        records = {
            f"c/t{i}/{p}": [b"v"] * rng.randrange(0, 6) for i in range(rng.randrange(1, 4)) for p in range(4)
        }
        sizes = [rng.randrange(1, 8) for _ in range(20)]
        reader = InMemoryArchiveStage(records).open_stage(
            parallelism=1, start=None, restored=None, registry=None, work_dir=None
        )
        got = [[(r.split_id, r.offset) for r in reader.poll(0.0, size)] for size in sizes]
        assert got == _reference(records, sizes)


def test_a_stage_of_20000_splits_is_read_to_the_end() -> None:
    records = {f"c/t{i // 100}/{i % 100}": [b"v"] * 3 for i in range(20_000)}
    reader = InMemoryArchiveStage(records).open_stage(
        parallelism=1, start=None, restored=None, registry=None, work_dir=None
    )
    seen: list[tuple[str, int]] = []
    while batch := reader.poll(0.0, 1000):
        seen += [(r.split_id, r.offset) for r in batch]
    assert sorted(seen) == sorted((s, o) for s in records for o in range(3))
    assert reader.finished
