"""What survives a kill on an object store, with real processes against the S3 test server. (A writer of
``sync=True`` batches killed while it writes, opens or flushes: test_crash.py, on every backend a
process can share.)

* A writer committing ``sync=False`` batches (group-committed), every 100th with ``sync=True``, is
  SIGKILLed: what survives is a prefix of the acknowledged order (batches 1..n, whole), never a later
  batch without an earlier one; every batch up to the last acknowledged sync batch is in it; and a batch
  acknowledged well before the kill (many group-commit intervals) is in it.
* Two writer processes on one prefix: the second's open fences the first, whose next WAL object fails
  with FencedError; a put that raised FencedError is never visible, and no acknowledged put is lost.

The children reach the server through the AWS variables the `s3_server` fixture put in the environment.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import signal
import time

import lsm
from tests.lsm._lsm_proc import Forks, spawn
from tests.lsm.test_crash import KEYS_PER_BATCH, stored_batches

# the unsynced writer's memtable: a rotation (which writes the buffer's last object) every ~200 batches
GROUP_MEMTABLE_BYTES = 64 << 10
# a batch acknowledged this long before the kill must have reached its WAL object (the interval is
# 100 ms; the margin absorbs a loaded machine)
SURELY_DURABLE_S = 2.0


def _kill_group_writer(forks: Forks, url: str, delay: float) -> tuple[list[tuple[int, float, bool]], float]:
    """Run a ``writer ... group`` child (forked by `forks`) for `delay` seconds after its first
    acknowledgement, SIGKILL it; return its acknowledgements (batch id, when read, durable) and the time
    of the kill."""
    pid = forks.start("writer", url, KEYS_PER_BATCH, GROUP_MEMTABLE_BYTES, "group")
    acks: list[tuple[int, float, bool]] = []
    out = b""
    deadline = None
    start = time.monotonic()
    fd = forks.stdout.fileno()

    def take(lines: list[bytes], at: float) -> None:
        for line in lines:
            parts = line.split()
            acks.append((int(parts[1]), at, len(parts) > 2))

    try:
        while deadline is None or time.monotonic() < deadline:
            assert time.monotonic() - start < 30, "writer made no progress in 30 s"
            ready, _, _ = select.select([fd], [], [], 0.005)
            if ready:
                chunk = os.read(fd, 65536)
                assert chunk, "the forks process exited: " + forks.close()
                out += chunk
                *lines, out = out.split(b"\n")  # a partial last line is not an acknowledgement
                assert not any(ln.startswith(b"END ") for ln in lines), "writer exited: " + forks.close()
                take(lines, time.monotonic())
                if deadline is None and acks:
                    deadline = time.monotonic() + delay
    finally:
        killed_at = time.monotonic()
        with contextlib.suppress(ProcessLookupError):  # gone already: it failed, and forks says so
            os.kill(pid, signal.SIGKILL)
        if forks.err is None:
            take(forks.rest(out)[0], killed_at)
    return acks, killed_at


def test_sigkill_of_an_unsynced_writer_loses_only_a_suffix(s3_url):
    rng = random.Random(int(os.environ.get("LSM_CRASH_SEED", "0")) or None)
    lost_any = False
    survivors: list[int] = []
    forks = Forks()
    try:
        for delay in (rng.uniform(0.1, 0.4), rng.uniform(2.5, 3.0), rng.uniform(0.4, 1.0)):
            acks, killed_at = _kill_group_writer(forks, s3_url, delay)
            acked = [i for i, _, _ in acks]
            assert acked == list(range(acked[0], acked[-1] + 1))  # the child acknowledges in order
            with lsm.DB.open(s3_url, lsm.DbOptions(background_compaction=False)) as db:
                survivors = stored_batches(db)
            # a prefix of the acknowledged order: 1..n, whole; what is lost is the suffix after n
            assert survivors == list(range(1, len(survivors) + 1)), "a batch was lost while a later one survived"
            n = survivors[-1] if survivors else 0
            assert n >= acked[0] - 1  # the earlier rounds' survivors stay
            synced = [i for i, _, durable in acks if durable]
            if synced:
                assert n >= synced[-1], f"batch {synced[-1]} was acknowledged with sync=True and is gone"
            old = [i for i, at, _ in acks if at < killed_at - SURELY_DURABLE_S]
            if old:
                assert n >= old[-1], f"batch {old[-1]} was acknowledged {SURELY_DURABLE_S} s before the kill and is gone"
            lost_any |= n < acked[-1]
    finally:
        forks.close()
    assert len(survivors) > 40, "the writer hardly wrote anything; the test proved little"
    assert lost_any, "no kill caught an unsynced write in the buffer; the test proved little"


def _lines(proc) -> list[str]:
    out = proc.stdout.read()  # until the child exits
    proc.wait(timeout=60)
    return out.splitlines()


def test_two_writer_processes_fenced_writes_never_appear_acknowledged_ones_stay(s3_url):
    acked: set[bytes] = set()
    fenced: set[bytes] = set()
    for trial in range(2):
        first = spawn("racer", s3_url, 2048, f"t{trial}a")
        second = None
        try:
            early = [first.stdout.readline() for _ in range(1 + 5 * trial)]  # vary where the takeover lands
            assert early[0].startswith("A "), early[0] + first.stderr.read()
            second = spawn("racer", s3_url, 2048, f"t{trial}b", 30)  # its open fences the first
            lines = [ln.strip() for ln in early] + _lines(first) + _lines(second)
            errors = first.stderr.read() + second.stderr.read()
        finally:
            for p in (first, second):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
        mine_fenced = [ln.split()[1].encode() for ln in lines if ln.startswith("F ")]
        assert len(mine_fenced) == 3, (lines[-8:], errors)
        assert all(k.startswith(b"t%da" % trial) for k in mine_fenced)  # only the first was fenced
        assert sum(ln.startswith(f"A t{trial}b") for ln in lines) == 30
        acked |= {ln.split()[1].encode() for ln in lines if ln.startswith("A ")}
        fenced |= set(mine_fenced)
        with lsm.DB.open(s3_url, lsm.DbOptions(background_compaction=False)) as db:
            visible = {k for k, _ in db.scan()}
        assert acked <= visible, f"trial {trial}: acknowledged writes lost: {sorted(acked - visible)[:5]}"
        assert not fenced & visible, f"trial {trial}: FencedError writes visible: {sorted(fenced & visible)}"
        assert visible == acked, f"trial {trial}: unexplained rows {sorted(visible - acked)[:5]}"
