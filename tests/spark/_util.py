"""Helpers for the Spark tests: identical databases from a seed, their stored rows, their visible content,
and module-level compaction filters (Spark workers import this module to unpickle them)."""

from __future__ import annotations

import os
import random
import re
from typing import Any

import lsm
from compaction.filter import CompactionFilter, CompactionFilterFactory, Decision
from lsm.manifest import ManifestStore
from lsm.options import ReadOptions
from storage.ssts import open_sst

T0 = 1_700_000_000_000
TASK_MARK = re.compile(r"-t(\d{4})-[0-9a-f]{8}-\d{4}\.sst$")
INCLUDE_EXPIRED = ReadOptions(include_expired=True)


# -- filters (module level: picklable by reference) -------------------------------------------------------
class _Rewrite(CompactionFilter):
    """Deterministic decisions by the key's last character, so both executors must agree."""

    name = "rewrite"

    def filter(self, entry):
        last = entry.key[-1:]
        if last == b"3":
            return Decision.change_value(entry.value.upper() + b"!")
        if last == b"5":
            return Decision.REMOVE
        if last == b"7":
            return Decision.DROP
        return Decision.KEEP


class RewriteFactory(CompactionFilterFactory):
    def create(self, ctx):
        return _Rewrite()


class _FailFirstAttempt(CompactionFilter):
    """Fails every task's first attempt once it has seen `after` rows (so outputs already exist):
    task 0 raises, the other tasks kill their Python worker (as a lost executor would), leaving files."""

    name = "fail-first-attempt"

    def __init__(self, after: int) -> None:
        self.after = after
        self.seen = 0

    def filter(self, entry):
        from pyspark import TaskContext

        self.seen += 1
        tc = TaskContext.get()
        if tc is not None and tc.attemptNumber() == 0 and self.seen > self.after:
            if tc.partitionId() == 0:
                raise RuntimeError("injected failure on the first attempt")
            os._exit(17)
        return Decision.KEEP


class FailFirstAttemptFactory(CompactionFilterFactory):
    def __init__(self, after: int = 40) -> None:
        self.after = after

    def create(self, ctx):
        return _FailFirstAttempt(self.after)


class _AlwaysFails(CompactionFilter):
    name = "always-fails"

    def filter(self, entry):
        raise RuntimeError("filter exploded on purpose")


class AlwaysFailsFactory(CompactionFilterFactory):
    def create(self, ctx):
        return _AlwaysFails()


# -- databases --------------------------------------------------------------------------------------------
def make_ops(seed: int, n: int = 700, keys: int = 150) -> list[tuple]:
    """A random workload: puts (some with TTLs), deletes, batches, clock steps, flushes, scheduled
    compactions, and one snapshot taken part way. Replayed identically on every database."""
    rng = random.Random(seed)
    ops: list[tuple] = []
    snap_at = rng.randrange(n // 3, 2 * n // 3)
    for i in range(n):
        k = b"key%04d" % rng.randrange(keys)
        r = rng.random()
        if r < 0.15:
            ops.append(("delete", k))
        elif r < 0.45:
            ops.append(("put", k, b"v%d-%d" % (i, seed), rng.choice([20, 300, 5_000])))
        elif r < 0.50:
            ops.append(("batch", [(b"key%04d" % rng.randrange(keys), b"b%d" % i) for _ in range(3)]))
        else:
            ops.append(("put", k, b"v%d-%d" % (i, seed) * rng.randrange(1, 4), None))
        ops.append(("advance", rng.randrange(0, 15)))
        if i % 90 == 89:
            ops.append(("flush",))
        if i % 300 == 299:
            ops.append(("compact",))  # the scheduler's jobs (local): sorted runs below the L0 SSTs
        if i == snap_at:
            ops.append(("snapshot",))
    ops.append(("flush",))
    ops.append(("advance", 400))  # some TTL rows are now expired
    return ops


def build_db(path: os.PathLike | str, seed: int, **options: Any) -> tuple[lsm.DB, lsm.ManualClock, list]:
    """Open a database at `path` and replay `make_ops(seed)`; returns (db, clock, open snapshots)."""
    clock = lsm.ManualClock(T0)
    opts = dict(
        clock=clock,
        background_compaction=False,
        memtable_bytes=1 << 20,
        block_bytes=256,
        l0_compaction_threshold=3,
    )
    opts.update(options)
    db = lsm.DB.open(path, lsm.DbOptions(**opts))
    snaps = []
    for op in make_ops(seed):
        kind = op[0]
        if kind == "put":
            db.put(op[1], op[2], ttl=op[3])
        elif kind == "delete":
            db.delete(op[1])
        elif kind == "batch":
            b = lsm.WriteBatch()
            for k, v in op[1]:
                b.put(k, v)
            db.write(b)
        elif kind == "advance":
            clock.advance(op[1])
        elif kind == "flush":
            db.flush()
        elif kind == "compact":
            db.compact(executor="local")
        elif kind == "snapshot":
            snaps.append(db.snapshot())
    return db, clock, snaps


def stored_runs(db: lsm.DB) -> list[list[tuple]]:
    """Every stored version (key, seq, ts, expire_ts, value) of every live SST: L0 files one by one,
    then each sorted run's files concatenated (so how a run is split into files does not matter)."""
    m = db.manifest
    out = []
    for e in m.l0:
        with open_sst(db.sst_path(e.name)) as r:
            out.append(list(r))
    for run in m.runs:
        rows: list[tuple] = []
        for e in run.ssts:
            with open_sst(db.sst_path(e.name)) as r:
                rows += list(r)
        out.append(rows)
    return out


def visible(db: lsm.DB, snaps: list) -> dict[str, Any]:
    """What the read path shows: scans (with and without expired rows), point reads, snapshot reads."""
    keys = sorted({row[0] for run in stored_runs(db) for row in run})
    return {
        "scan": list(db.scan_entries()),
        "scan_expired": list(db.scan_entries(options=INCLUDE_EXPIRED)),
        "reverse": list(db.scan(reverse=True)),
        "gets": [db.get_entry(k, INCLUDE_EXPIRED) for k in keys],
        "snapshots": [
            (
                list(s.scan(include_expired=True)),
                list(s.scan()),
                [s.get_entry(k, include_expired=True) for k in keys],
            )
            for s in snaps
        ],
    }


def latest_manifest(db: lsm.DB) -> tuple[int, Any]:
    return ManifestStore(db.path).latest()


def sst_files(db: lsm.DB) -> set[str]:
    return {n for n in os.listdir(os.path.join(db.path, "sst")) if n.endswith(".sst")}


def manifest_files(db: lsm.DB) -> set[str]:
    return {e.name for e in db.manifest.all_ssts()}


def task_marks(names) -> set[int]:
    """The task indexes in Spark output names ``<prefix>-t<task>-<attempt id>-<n>.sst``."""
    return {int(m[1]) for m in map(TASK_MARK.search, names) if m}


STAT_FIELDS = (
    "jobs",
    "bytes_in",
    "rows_in",
    "rows_out",
    "versions_dropped",
    "tombstones_dropped",
    "expired_dropped",
    "filters",
)


def comparable_stats(stats) -> dict[str, Any]:
    d = stats.to_dict()
    return {k: d[k] for k in STAT_FIELDS}
