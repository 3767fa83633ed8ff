"""Crash safety under real SIGKILLs.

A writer process (`tests/lsm/_lsm_proc.py writer`) commits WriteBatches with ``sync=True`` into a small
memtable, so memtables freeze and flush to L0 while it writes, and prints the id of every batch it got
an acknowledgement for. It is killed with SIGKILL at random moments — right after start (during open and
recovery), after random delays, and right after it reported a flush under way — several rounds on the
same directory, each round recovering what the last one left. After every kill:

* every acknowledged batch is there, whole (all its keys, with its value);
* no batch is partial: each batch's keys are all present with the same value, or none is;
* ``last`` (rewritten by every batch) names the newest batch present, and batches are a prefix 1..n:
  a commit is never lost while a later one survives.

On a directory and on S3 (the children reach the server through the AWS variables the `s3_server`
fixture put in the environment); an unsynced writer's kill and two writer processes on an object store
are in test_object_wal_crash.py.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import signal
import time

import lsm
from storage.ssts import open_sst
from tests import _store
from tests.lsm._lsm_proc import Forks

KEYS_PER_BATCH = 4
MEMTABLE_BYTES = 2048  # about 10 batches per memtable: a flush every few writes


def run_and_kill(forks: Forks, path, rng: random.Random, how: str) -> set[int]:
    """Start a writer (forked by `forks`: no Python start-up before it opens the store), SIGKILL it per
    `how`, return the batch ids it acknowledged."""
    pid = forks.start("writer", path, KEYS_PER_BATCH, MEMTABLE_BYTES)
    out = b""
    acked: set[int] = set()
    flushes_seen = 0
    start = time.monotonic()
    if how == "at once":
        deadline = start + rng.uniform(0.0, 0.4)  # before, during or just after open + recovery
    elif how == "random":
        deadline = None
        delay = rng.uniform(0.0, 0.25)
    else:  # "flush": kill right after the writer reported its n-th flush under way
        deadline = None
        delay = None
        target_flushes = rng.randint(1, 4)
    fd = forks.stdout.fileno()
    try:
        while True:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            if now - start > 10:
                raise AssertionError("writer made no progress in 10 s")
            ready, _, _ = select.select([fd], [], [], 0.005)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise AssertionError("the forks process exited: " + forks.close())
                out += chunk
                *lines, out = out.split(b"\n")  # a partial last line is not an acknowledgement
                for line in lines:
                    if line.startswith(b"END "):
                        raise AssertionError("writer exited: " + forks.close())
                    parts = line.split()
                    acked.add(int(parts[1]))
                    if len(parts) > 2:
                        flushes_seen += 1
                if how == "random" and deadline is None and acked:
                    deadline = time.monotonic() + delay  # the clock starts once the writer is writing
                if how == "flush" and flushes_seen >= target_flushes:
                    break
    finally:
        with contextlib.suppress(ProcessLookupError):  # gone already: it failed, and forks says so
            os.kill(pid, signal.SIGKILL)
        if forks.err is None:
            rest, _ = forks.rest(out)  # acknowledgements already in the pipe count too
            for line in rest:
                acked.add(int(line.split()[1]))
    return acked


def stored_batches(db: lsm.DB) -> list[int]:
    """The ids of the batches in the store, ascending, each checked whole (all its keys, its value);
    ``last`` must name the newest."""
    batches: dict[int, dict[bytes, bytes]] = {}
    last = None
    for k, v in db.scan():
        if k == b"last":
            last = int(v)
            continue
        batch = int(k.split(b"-")[0])
        batches.setdefault(batch, {})[k] = v
    for b, rows in batches.items():
        assert len(rows) == KEYS_PER_BATCH, f"batch {b} is partial: {sorted(rows)}"
        assert set(rows.values()) == {b"%d:" % b + b"x" * 40}, f"batch {b} has mixed values"
    assert (last or 0) == max(batches, default=0)
    return sorted(batches)


def check(path, acked_ever: set[int]) -> int:
    """Open (recovering), verify the invariants of the module docstring, return the newest batch id."""
    with lsm.DB.open(path, lsm.DbOptions(background_compaction=False)) as db:
        batches = stored_batches(db)
        newest = max(batches, default=0)
        assert batches == list(range(1, newest + 1)), "a batch was lost while a later one survived"
        missing = acked_ever - set(batches)
        assert not missing, f"acknowledged batches lost: {sorted(missing)[:10]}"
        for e in db.manifest.all_ssts():  # every SST the manifest names is whole
            with open_sst(_store.path(path, "sst", e.name)) as r:
                r.verify()
        return newest


def test_sigkill_during_sync_batches_and_flushes(shared_root):
    path = shared_root
    rng = random.Random(int(os.environ.get("LSM_CRASH_SEED", "0")) or None)
    plan = ["at once", "random", "flush", "random", "flush", "at once", "random", "flush", "random", "flush"]
    enough = 20
    if not _store.store(path).storage.appends:
        # a sync batch is a PUT over HTTP: fewer rounds on S3, each "flush" round a memtable or more
        plan, enough = ["flush", "at once", "random", "flush"], 10
    acked_ever: set[int] = set()
    t0 = time.monotonic()
    newest = 0
    forks = Forks()
    try:
        for how in plan:
            if time.monotonic() - t0 > 20:  # a slow, shared machine: fewer rounds, same checks
                break
            acked_ever |= run_and_kill(forks, path, rng, how)
            newest = check(path, acked_ever)
    finally:
        forks.close()
    assert newest > enough, "the writer hardly wrote anything; the test proved little"
    with lsm.DB.open(path, lsm.DbOptions(background_compaction=False)) as db:
        assert len(db.manifest.l0) > 2  # flushes happened
