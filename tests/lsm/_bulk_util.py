"""Helpers for the bulk-load tests (tests/lsm/test_bulk.py, tests/spark/test_bulk*.py): a seeded partitioned
log, what a store holds, module-level source wrappers (Spark workers import this module to unpickle
them) and `Stores`, stores by name on a test's backend. Also a script: ``python _bulk_util.py load DB LOG
ENGINE [MASTER]`` runs one bulk load of the `SlowLog` over LOG (what the kill -9 tests kill mid-job)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import lsm
from lsm.options import ReadOptions
from lsm.sources import LogWriter, PartitionedLog

T0 = 1_700_000_000_000
ALL = ReadOptions(include_expired=True)


def write_log(
    log_dir: str, seed: int, n: int, partitions: int = 4, keys: int = 200, tx: bool = True, **writer: Any
) -> None:
    """`n` records over `partitions`: overlapping keys across partitions, deletes, TTLs, event times, and
    closed transactions (some long) when `tx`. `writer`: LogWriter options (``segment_bytes`` on a URL)."""
    rnd = random.Random(seed)
    with LogWriter(log_dir, **writer) as w:
        open_tx: dict[int, tuple[int, int]] = {}  # partition -> (tx id, records left)
        for i in range(n):
            p = rnd.randrange(partitions)
            key = b"k%04d" % rnd.randrange(keys)
            value = None if rnd.random() < 0.1 else b"v%d-%d" % (i, p)
            ttl = rnd.choice([None, None, 60_000, 5_000])
            ets = T0 - rnd.randrange(10_000) if rnd.random() < 0.5 else None
            t = None
            end = False
            if tx:
                if p in open_tx:
                    t, left = open_tx[p]
                    end = left <= 1
                    if end:
                        del open_tx[p]
                    else:
                        open_tx[p] = (t, left - 1)
                elif rnd.random() < 0.05:
                    t = i
                    open_tx[p] = (t, rnd.randrange(1, 40))
            w.append(p, key, value, ttl=ttl, event_ts=ets, tx=t, tx_end=end)
        for p, (t, _left) in open_tx.items():  # close them: the log ends at a cut
            w.append(p, b"close%d" % p, b"c", tx=t, tx_end=True)


def open_db(path: str, **kw: Any) -> lsm.DB:
    kw.setdefault("clock", lsm.ManualClock(T0))
    kw.setdefault("background_compaction", False)
    return lsm.DB.open(path, lsm.DbOptions(**kw))


def contents(db: lsm.DB, name: str = "events") -> dict:
    """Everything a user can see: key -> (value, expire_ts, ts) including expired rows, every key's
    get(), the remap's bindings (ts, frontier) and what waits in its TEMP collection."""
    rows = {e.key: (e.value, e.expire_ts, e.ts) for e in db.scan_entries(options=ALL)}
    try:
        remap = db.remap(name)
        bindings, pending = [(b.ts, b.frontier) for b in remap.bindings()], remap.pending
    except lsm.UnknownSourceError:
        bindings, pending = [], None
    return {"rows": rows, "visible": dict(db.scan()), "bindings": bindings, "pending": pending}


def ingest_contents(db: lsm.DB, log_dir: str, engine: str, source: Any = None, **kw: Any) -> dict:
    """Ingest `source` (default: the PartitionedLog in `log_dir`) into `db` as source "events" with
    `engine` (stream: in one batch), return contents."""
    if engine == "stream":
        kw.setdefault("batch_records", 10**9)
    db.ingest(source or PartitionedLog(log_dir), name="events", engine=engine, **kw)
    return contents(db)


def load(path: str, log_dir: str, engine: str, source: Any = None, **kw: Any) -> dict:
    """Open `path`, `ingest_contents`, close."""
    db = open_db(path)
    try:
        return ingest_contents(db, log_dir, engine, source, **kw)
    finally:
        db.close()


class Stores:
    """Stores called by name on a test's backend, opened with its `open_db` fixture: a module's fixture
    ``stores`` returns ``Stores(open_db, new_root)``."""

    def __init__(self, open_db: Callable[..., lsm.DB], new_root: Callable[[str], str]) -> None:
        self._open_db, self._new_root = open_db, new_root
        self._roots: dict[str, str] = {}

    def root(self, name: str) -> str:
        """The root of the store called `name`, the same at every call (new_root gives a fresh one)."""
        if name not in self._roots:
            self._roots[name] = self._new_root(name)
        return self._roots[name]

    def open(self, name: str, **kw: Any) -> lsm.DB:
        """The store called `name`, opened by `open_db` with `kw`."""
        return self._open_db(path=self.root(name), **kw)

    def load(self, name: str, log_dir: str, engine: str, source: Any = None, default_ttl: int | None = None,
             **kw: Any) -> dict:
        """`ingest_contents` into the store called `name` (opened with `default_ttl`), closed again."""
        db = self.open(name, default_ttl=default_ttl)
        try:
            return ingest_contents(db, log_dir, engine, source, **kw)
        finally:
            db.close()


class WrappedLog:
    """A generic `Source` over a PartitionedLog (picklable: it holds only the directory), so a bulk load
    reads it through `SourceSlice`; subclasses hook into `read`."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.name = directory

    def _log(self) -> PartitionedLog:
        return PartitionedLog(self.directory)

    def partitions(self) -> list[int]:
        return self._log().partitions()

    def end(self, partition: int) -> int:
        return self._log().end(partition)

    def read(self, partition: int, start: int, stop: int | None = None):
        return self._log().read(partition, start, stop)


class FailFirstAttempt(WrappedLog):
    """Spark: the first attempt of every task fails half-way through its slice (task 0 raises, the others
    kill their Python worker, as a lost executor would), leaving `<directory>/../failed-<task>`."""

    def read(self, partition: int, start: int, stop: int | None = None):
        from pyspark import TaskContext

        tc = TaskContext.get()
        for i, rec in enumerate(self._log().read(partition, start, stop)):
            if tc is not None and tc.attemptNumber() == 0 and i == 20:
                mark = os.path.join(os.path.dirname(self.directory), f"failed-{tc.partitionId()}")
                with open(mark, "w"):  # the test checks that every task did fail once
                    pass
                if tc.partitionId() == 0:
                    raise RuntimeError("injected failure on the first attempt")
                os._exit(17)
            yield rec


class FailsOn(WrappedLog):
    """Reading partition `bad` always fails (after a few records)."""

    def __init__(self, directory: str, bad: int) -> None:
        super().__init__(directory)
        self.bad = bad

    def read(self, partition: int, start: int, stop: int | None = None):
        for i, rec in enumerate(self._log().read(partition, start, stop)):
            if partition == self.bad and i == 5:
                raise RuntimeError(f"partition {partition} exploded on purpose")
            yield rec


class SlowLog(WrappedLog):
    """Partition 0 is read at once; every other partition touches `<directory>/../reading` and then
    stalls forever (a task the test kills the driver in the middle of)."""

    def read(self, partition: int, start: int, stop: int | None = None):
        if partition != 0:
            with open(os.path.join(os.path.dirname(self.directory), "reading"), "w") as f:
                f.write(str(os.getpid()))
            while True:
                time.sleep(0.05)
        return self._log().read(partition, start, stop)


def spawn_slow_load(path: str, log_dir: str, engine: str = "local") -> subprocess.Popen:
    """A process running `_main`: a bulk load of `log_dir` into `path` through `SlowLog` (it writes
    ``reading`` beside the log, then hangs), its stdout and stderr piped."""
    here = os.path.dirname(os.path.abspath(__file__))
    return subprocess.Popen(
        [sys.executable, os.path.join(here, "_bulk_util.py"), "load", path, log_dir, engine],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _main(argv: list[str]) -> int:
    mode, path, log_dir, engine = argv[:4]
    assert mode == "load"
    kw: dict[str, Any] = {}
    if engine == "spark":
        kw["master"] = argv[4]
    db = open_db(path)
    db.ingest(SlowLog(log_dir), name="events", engine=engine, tasks=4, **kw)
    db.close()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    sys.exit(_main(sys.argv[1:]))
