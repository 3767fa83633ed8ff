"""Exactly-once ingest under real SIGKILLs, with a producer appending to the log at the same time.

A producer process (`tests/lsm/_ingest_proc.py produce`) appends to several partitions (one added
half-way), with overwrites, deletes and transactions. An ingest process (`... ingest`) loads the log into
the store with small batches while memtables flush and background compactions run, and is killed with
SIGKILL at random moments — during open and recovery, and after random delays — many rounds on the same
database. After every kill, recovery must leave the store exactly at its durable frontier; at the end:

* the store equals the log applied once, in offset order, and the frontier equals the log's lengths;
* the bindings are monotone, and each binding's seq holds exactly the records below its frontier,
  a transaction's only once it is complete (`expected_states`): every key shows the value of its last
  record applied, written in the batch (seq) of the binding that made that record visible — a record
  applied twice would show a later seq.

`test_sigkill_with_transactions_across_partitions` does the same with a producer whose transactions span
partitions (end markers with counts per partition), some left open for a while: never half a
transaction, exactly once, over at least 12 kills.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import lsm
import lsm.ingest_tx
from lsm.sources import PartitionedLog
from tests.compaction._util import fast_tmp
from tests.lsm._ingest_proc import next_ms

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


def expected_states(records: dict[int, list], bindings: list) -> list[dict[bytes, tuple]]:
    """For each binding: key -> (value, seq of the binding that applied it), by the ingest rules: each
    binding applies its records outside transactions in offset order, then the transactions that are
    complete at it (the end marker and every record of the transaction below its frontier; ids are
    unique in these logs) in end-marker order (the binding that read the marker, then partition and
    offset), each in (partition, offset) order."""
    by_tx: dict = {}
    for recs in records.values():
        for r in recs:
            if r.tx is not None:
                by_tx.setdefault(r.tx, []).append(r)
    state: dict[bytes, tuple] = {}
    out = []
    prev: dict[int, int] = {}
    waiting: list = []  # end markers read, of transactions not applied yet, in end-marker order
    for b in bindings:
        new = []
        for p, recs in sorted(records.items()):
            for r in recs[prev.get(p, 0) : b.frontier.get(p, 0)]:
                if r.tx is None:
                    state[r.key] = (r.value, b.seq)
                elif r.tx_end:
                    new.append(r)
        waiting += sorted(new, key=lambda m: (m.partition, m.offset))
        for m in list(waiting):
            recs = by_tx[m.tx]
            if all(r.offset < b.frontier.get(r.partition, 0) for r in recs):
                waiting.remove(m)
                for r in sorted(recs, key=lambda r: (r.partition, r.offset)):
                    state[r.key] = (r.value, b.seq)
        prev = b.frontier
        out.append({k: v for k, v in state.items() if v[0] is not None})
    return out


def check_exact(db: lsm.DB, records: dict[int, list], name: str) -> lsm.Remap | None:
    """The store holds exactly what its durable bindings say (after a crash and recovery)."""
    try:
        remap = db.remap(name)
    except lsm.UnknownSourceError:
        assert list(db.scan()) == []
        return None
    want = expected_states(records, remap.bindings())[-1]
    assert dict(db.scan()) == {k: v for k, (v, _) in want.items()}
    return remap


def kill_rounds(rng: random.Random, db_path: str, log_dir: str, producer: subprocess.Popen) -> int:
    """Start an ingest process and SIGKILL it, again and again (at least 12 times, and until the producer
    is done); after each kill the store must hold exactly what its durable bindings say. Returns the
    number of kills."""
    kills = 0
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
    return kills


def check_bindings(db: lsm.DB, records: dict[int, list], bindings: list) -> None:
    """Each binding's seq holds exactly the records its rules say, each written once (by its seq)."""
    for b, want in zip(bindings, expected_states(records, bindings), strict=True):
        with db.snapshot_at_seq(b.seq) as snap:
            got = {k: v for k, v in snap.scan()}
            assert got == {k: v for k, (v, _) in want.items()}, f"state at binding {b}"
            for k, (_v, seq) in want.items():
                assert snap.get_entry(k).seq == seq, f"{k!r} at binding {b}: applied twice?"


@contextlib.contextmanager
def producing(mode: str, count: int, db_path: str) -> Iterator[tuple[random.Random, str, str, subprocess.Popen]]:
    """(rng, `db_path`, log dir, the producer process running `mode`) with the log in a fresh temporary
    directory, removed (and the producer killed if still running) at the end."""
    rng = random.Random(int(os.environ.get("LSM_CRASH_SEED", "0")) or None)
    base = fast_tmp("lsm-ingest-crash-")
    log_dir = os.path.join(base, "log")
    os.makedirs(log_dir)  # an empty log until the producer's first append
    producer = spawn(mode, log_dir, count, rng.randrange(1 << 30))
    try:
        yield rng, db_path, log_dir, producer
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
        for f in (producer.stdout, producer.stderr):
            f.close()
        shutil.rmtree(base, ignore_errors=True)


def test_sigkill_while_ingesting_a_growing_log(shared_root) -> None:
    with producing("produce", RECORDS, shared_root) as (rng, db_path, log_dir, producer):
        kill_rounds(rng, db_path, log_dir, producer)
        records = read_log(log_dir)
        assert set(records) == {0, 1, 2, 3}
        log = PartitionedLog(log_dir)
        with lsm.DB.open(db_path, lsm.DbOptions(background_compaction=False, history_retention=10**12)) as db:
            db.ingest(log, name="events", batch_records=BATCH, progress=next_ms)
            remap = check_exact(db, records, "events")
            assert remap.frontier == {p: log.end(p) for p in log.partitions()}
            bindings = remap.bindings()
            assert len(bindings) > 10, "too few bindings to prove much"
            for a, b in zip(bindings, bindings[1:], strict=False):
                assert a.ts <= b.ts and a.seq < b.seq
                assert all(b.frontier.get(p, 0) >= off for p, off in a.frontier.items())
            assert any(3 not in b.frontier for b in bindings) and 3 in bindings[-1].frontier
            check_bindings(db, records, bindings)
            db.compact(full=True)  # the remap and the data survive a full compaction too
            assert db.remap("events").bindings() == bindings
            check_exact(db, records, "events")


def test_sigkill_with_transactions_across_partitions(shared_root) -> None:
    with producing("produce_tx", RECORDS // 2, shared_root) as (rng, db_path, log_dir, producer):
        assert kill_rounds(rng, db_path, log_dir, producer) >= 12
        records = read_log(log_dir)
        txs: dict = {}
        parts: dict = {}
        for recs in records.values():
            for r in recs:
                if r.tx is not None:
                    txs.setdefault(r.tx, set()).add(r.key)
                    parts.setdefault(r.tx, set()).add(r.partition)
        assert sum(len(recs) for recs in records.values()) >= RECORDS // 2 and len(txs) > 20
        assert sum(len(ps) > 1 for ps in parts.values()) > 10  # transactions across partitions
        log = PartitionedLog(log_dir)
        with lsm.DB.open(db_path, lsm.DbOptions(background_compaction=False, history_retention=10**12)) as db:
            db.ingest(log, name="events", batch_records=BATCH, progress=next_ms)
            remap = check_exact(db, records, "events")
            assert remap.frontier == {p: log.end(p) for p in log.partitions()}
            assert remap.pending == lsm.Pending(0, 0)  # every transaction was closed
            bindings = remap.bindings()
            check_bindings(db, records, bindings)  # exactly once
            spans = 0
            for b in bindings:  # never half a transaction, and some waited across bindings
                with db.snapshot_at_seq(b.seq) as snap:
                    for keys in txs.values():
                        seen = [snap.get(k) is not None for k in keys]
                        assert all(seen) or not any(seen), f"half a transaction at binding {b}"
                if lsm.ingest_tx.load_pending(db, "events", b.seq).records:
                    spans += 1
            assert spans > 0, "no binding left a transaction waiting in TEMP: nothing was tested"
            assert dict(db.scan()) == {r.key: r.value for recs in records.values() for r in recs}
