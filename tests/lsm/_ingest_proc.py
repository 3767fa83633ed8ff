"""Processes for the ingest crash test: a producer appending to a partitioned log, and an ingester.

Not a test module; tests run it as ``python _ingest_proc.py MODE ...``.

``produce DIR COUNT SEED``
    A `LogWriter` appending COUNT records as a deterministic (SEED) random walk: partitions 0..2 from the
    start, partition 3 from record COUNT // 2 on. Keys are ``p<partition>-<n>`` with n < 40 (so records
    overwrite each other), about 1 in 10 is a delete, and about a third of the records belong to
    transactions of 2-6 contiguous records of one partition (tx id ``<partition>-<i>``, the last one
    tx_end). Each record's value is ``<partition>:<offset>``. Every transaction is closed by the end.
    A short sleep every few records keeps it running alongside the ingester. Prints ``done``.

``produce_tx DIR COUNT SEED``
    Like ``produce``, over partitions 0..3 from the start, with transactions that span partitions: up
    to three open at once, each of 1-3 records in each of 1-3 partitions, written interleaved with other
    records and one another, closed by an end marker (the transaction's last record) counting its
    records per partition. Keys are unique (``r<n>``), ids ``x<i>``; every transaction is closed by the
    end. Prints ``done``.

``ingest DB DIR NAME BATCH``
    Opens DB (small memtable and L0 threshold, so flushes and background compactions run while it
    ingests; a long history retention) and calls `DB.ingest` on the log in a loop, forever, printing
    ``B <records>`` after each call that applied something. Tests SIGKILL it.
"""

from __future__ import annotations

import os
import random
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import lsm  # noqa: E402
from lsm.sources import LogWriter, PartitionedLog  # noqa: E402

YEAR = 365 * 86_400_000


def ingest_options() -> lsm.DbOptions:
    return lsm.DbOptions(memtable_bytes=8192, l0_compaction_threshold=2, history_retention=YEAR)


def produce(directory: str, count: int, seed: int) -> None:
    rng = random.Random(seed)
    with LogWriter(directory) as w:
        open_tx: dict[int, list] = {}  # partition -> [tx id, records left]
        tx_ids = 0
        for i in range(count):
            parts = 3 if i < count // 2 else 4
            p = rng.randrange(parts)
            tx = None
            tx_end = False
            if p in open_tx:
                tx = open_tx[p][0]
                open_tx[p][1] -= 1
                if open_tx[p][1] == 0:
                    tx_end = True
                    del open_tx[p]
            elif rng.random() < 0.08:
                tx_ids += 1
                tx = f"{p}-{tx_ids}"
                open_tx[p] = [tx, rng.randint(1, 5)]
            off = w.end(p)
            value = None if rng.random() < 0.1 else f"{p}:{off}".encode()
            w.append(p, b"p%d-%d" % (p, rng.randrange(40)), value, tx=tx, tx_end=tx_end)
            if i % 8 == 0:
                time.sleep(0.002)
        for p, (tx, _left) in sorted(open_tx.items()):  # close what is still open
            w.append(p, b"p%d-end" % p, b"end", tx=tx, tx_end=True)
    print("done", flush=True)


def produce_tx(directory: str, count: int, seed: int) -> None:
    rng = random.Random(seed)
    with LogWriter(directory) as w:
        open_tx: list[list] = []  # [tx id, planned partitions (the last one carries the marker), counts]
        tx_ids = 0

        def step(tx: list, n: int) -> None:
            name, plan, counts = tx
            p = plan.pop(0)
            w.append(p, b"r%06d" % n, b"%d:%d" % (p, w.end(p)), tx=name, tx_end=counts if not plan else False)
            if not plan:
                open_tx.remove(tx)

        for i in range(count):
            roll = rng.random()
            if open_tx and roll < 0.3:
                step(rng.choice(open_tx), i)
            elif len(open_tx) < 3 and roll < 0.4:
                tx_ids += 1
                counts = {p: rng.randint(1, 3) for p in rng.sample(range(4), rng.randint(1, 3))}
                plan = [p for p, n in counts.items() for _ in range(n)]
                rng.shuffle(plan)
                open_tx.append([f"x{tx_ids}", plan, counts])
                step(open_tx[-1], i)
            else:
                p = rng.randrange(4)
                w.append(p, b"r%06d" % i, b"%d:%d" % (p, w.end(p)))
            if i % 8 == 0:
                time.sleep(0.002)
        n = count
        while open_tx:  # close what is still open
            step(open_tx[0], n)
            n += 1
    print("done", flush=True)


def next_ms(_stats: object = None) -> None:
    """Wait until the host clock reaches a new millisecond: given to `DB.ingest` as its progress callback,
    so every batch commits in a millisecond of its own. Batches of one millisecond merge into one binding
    (lsm.remap); the crash test's model checks which seq applied each record, so it wants one binding
    per batch."""
    start = time.time_ns() // 1_000_000
    while time.time_ns() // 1_000_000 == start:
        time.sleep(0.0002)


def ingest(path: str, directory: str, name: str, batch: int) -> None:
    with lsm.DB.open(path, ingest_options()) as db:
        log = PartitionedLog(directory)
        while True:
            stats = db.ingest(log, name=name, batch_records=batch, progress=next_ms)
            if stats.records:
                print(f"B {stats.records}", flush=True)
            else:
                time.sleep(0.005)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "produce":
        produce(args[0], int(args[1]), int(args[2]))
    elif mode == "produce_tx":
        produce_tx(args[0], int(args[1]), int(args[2]))
    elif mode == "ingest":
        ingest(args[0], args[1], args[2], int(args[3]))
    else:
        raise SystemExit(f"unknown mode {mode}")
