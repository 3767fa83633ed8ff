"""Exactly-once ingest under real SIGKILLs, with a producer appending to the log at the same time.

A producer process (`tests/lsm/_ingest_proc.py produce`) appends to several partitions (one added
half-way), with overwrites, deletes and transactions. An ingest process (`... ingest`) loads the log into
the store with small batches while memtables flush and background compactions run, and is killed with
SIGKILL at random moments — during open and recovery, and after random delays — many rounds on the same
database. After every kill, recovery must leave the store exactly at its durable frontier; at the end:

* the store equals the log applied once, in offset order, and the frontier equals the log's lengths;
* the bindings are monotone, no binding cuts a transaction, and each binding's seq holds exactly the
  records below its frontier: every key shows the value of its last record below the frontier, written
  in the batch (seq) of the binding that made that record visible — a record applied twice would show a
  later seq.
"""

from __future__ import annotations

import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time

import lsm
from lsm.sources import PartitionedLog
from tests.compaction._util import fast_tmp

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ingest_proc.py")
RECORDS = 2500
BATCH = 23


def spawn(*args: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, HERE, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def read_log(log_dir: str) -> dict[int, list]:
    log = PartitionedLog(log_dir)
    return {p: list(log.read(p, 0)) for p in log.partitions()}


def expected_state(records: dict[int, list], frontier: dict[int, int], seq_of=None) -> dict[bytes, tuple]:
    """key -> (value, seq of the binding that made its last record visible) for the records below frontier."""
    state: dict[bytes, tuple] = {}
    for p, recs in records.items():
        for r in recs:
            if r.offset >= frontier.get(p, 0):
                break
            state[r.key] = (r.value, seq_of(p, r.offset) if seq_of else None)
    return {k: v for k, v in state.items() if v[0] is not None}


def check_exact(db: lsm.DB, records: dict[int, list], name: str) -> lsm.Remap | None:
    """The store holds exactly the records below its durable frontier (after a crash and recovery)."""
    try:
        remap = db.remap(name)
    except lsm.UnknownSourceError:
        assert list(db.scan()) == []
        return None
    want = expected_state(records, remap.frontier)
    assert dict(db.scan()) == {k: v for k, (v, _) in want.items()}
    return remap


def closes_no_transaction(recs: list, cut: int) -> bool:
    open_tx = set()
    for r in recs:
        if r.offset >= cut:
            break
        if r.tx is not None:
            (open_tx.discard if r.tx_end else open_tx.add)(r.tx)
    return not open_tx


def test_sigkill_while_ingesting_a_growing_log() -> None:
    rng = random.Random(int(os.environ.get("LSM_CRASH_SEED", "0")) or None)
    base = fast_tmp("lsm-ingest-crash-")
    db_path, log_dir = os.path.join(base, "db"), os.path.join(base, "log")
    os.makedirs(log_dir)  # an empty log until the producer's first append
    producer = spawn("produce", log_dir, RECORDS, rng.randrange(1 << 30))
    kills = 0
    try:
        t0 = time.monotonic()
        while kills < 12 or producer.poll() is None:
            if time.monotonic() - t0 > 60:
                raise AssertionError("the crash rounds took over 60 s")
            proc = spawn("ingest", db_path, log_dir, "events", BATCH)
            how = rng.choice(["at once", "random", "random", "after a batch"])
            if how == "at once":  # during start-up, open and WAL recovery
                time.sleep(rng.uniform(0.0, 0.3))
            elif how == "random":
                time.sleep(rng.uniform(0.2, 0.8))
            else:  # right after a batch, when there is one to make
                ready, _, _ = select.select([proc.stdout], [], [], 3.0)
                if ready:
                    time.sleep(rng.uniform(0.0, 0.05))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            err = proc.stderr.read()
            # the only traceback allowed: the background compaction worker, whose parent just died
            for tb in err.split("Traceback (most recent call last):")[1:]:
                assert "compaction/worker.py" in tb and "BrokenPipeError" in tb, err
            proc.stdout.close()
            proc.stderr.close()
            kills += 1
            with lsm.DB.open(db_path, lsm.DbOptions(background_compaction=False, history_retention=10**12)) as db:
                check_exact(db, read_log(log_dir), "events")
        assert producer.wait(60) == 0, producer.stderr.read()

        records = read_log(log_dir)
        assert set(records) == {0, 1, 2, 3}
        log = PartitionedLog(log_dir)
        with lsm.DB.open(db_path, lsm.DbOptions(background_compaction=False, history_retention=10**12)) as db:
            db.ingest(log, name="events", batch_records=BATCH)
            remap = check_exact(db, records, "events")
            assert remap.frontier == {p: log.end(p) for p in log.partitions()}
            bindings = remap.bindings()
            # batches of one millisecond merge into one binding: fewer bindings than batches
            assert len(bindings) > 10, "too few bindings to prove much"
            for a, b in zip(bindings, bindings[1:], strict=False):
                assert a.ts <= b.ts and a.seq < b.seq
                assert all(b.frontier.get(p, 0) >= off for p, off in a.frontier.items())
            assert any(3 not in b.frontier for b in bindings) and 3 in bindings[-1].frontier
            for b in bindings:
                for p, cut in b.frontier.items():
                    assert closes_no_transaction(records[p], cut), f"binding {b} cuts a transaction of {p}"

            index = {b.seq: i for i, b in enumerate(bindings)}

            def seq_of(p: int, off: int) -> tuple[int, int]:
                """The seqs (after, upto] of the batches merged into the binding that made it visible."""
                b = remap.binding_for(p, off)
                i = index[b.seq]
                return (bindings[i - 1].seq if i else 0, b.seq)

            for b in bindings:
                want = expected_state(records, b.frontier, seq_of)
                with db.snapshot_at_seq(b.seq) as snap:
                    got = {k: v for k, v in snap.scan()}
                    assert got == {k: v for k, (v, _) in want.items()}, f"state at binding {b}"
                    for k, (_v, (after, upto)) in want.items():
                        assert after < snap.get_entry(k).seq <= upto, f"{k!r} at binding {b}: applied twice?"
            db.compact(full=True)  # the remap and the data survive a full compaction too
            assert db.remap("events").bindings() == bindings
            check_exact(db, records, "events")
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
        for f in (producer.stdout, producer.stderr):
            f.close()
        shutil.rmtree(base, ignore_errors=True)
