"""Fault injection: fail every I/O call of an operation in turn, crash, reopen, compare with an oracle.

The model is RocksDB's fault_injection_test / FaultInjectionTestFS. For each operation (put with and
without sync, write batches, flush, compaction in this thread and in the worker process, the manifest
commits, close, a bulk load, remap compaction between ingest batches) the sweep first counts the calls `formats.fileio` sees, then for every call index and
every kind (ENOSPC, EIO, a short write followed by ENOSPC) reruns the operation on a fresh store with that
one call failing, drops the handle without closing it (a crash that keeps the page cache, like kill -9),
reopens with the faults disarmed and checks the rule of docs/architecture.md "Failure model":

* the store opens, and `lsm check` finds nothing wrong;
* every acknowledged write is there with its value and seq;
* a write that raised the failure may be there (with its own seq) or not, never half (a batch is whole);
* a write refused because the store had already failed is not there;
* no two writes share a seq, and the next write after reopen gets a seq above all of them;
* every error a write raised is `DbFailedError` naming the file and the call;
* an ingested source is there exactly once up to its stored frontier (`Oracle.check_source`).

The faults are a directory's file calls, so these tests run on one; an object store's request faults
are in test_object_faults.py. A failure that is not the backend's (an install that fails after the
commit) runs on every backend.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Callable

import pytest

import lsm
from formats import fileio
from lsm.ingest import compact_remap
from lsm.inspect import check_database
from lsm.sources import LogWriter, PartitionedLog

T0 = 1_700_000_000_000
KINDS = ("enospc", "eio", "short")
VALUE = b"v" * 40


def opts(**kw) -> lsm.DbOptions:
    base = dict(
        clock=lsm.ManualClock(T0),
        background_compaction=False,
        memtable_bytes=1024,
        block_bytes=256,
        compaction_process=False,
    )
    base.update(kw)
    return lsm.DbOptions(**base)


@dataclasses.dataclass
class Oracle:
    """What the workload was told: write id -> (keys, value, seq) for acknowledged writes, and the ids of
    writes that raised while the store was healthy (maybe durable) or after it had failed (never)."""

    acked: dict[int, tuple[list[bytes], bytes, int]] = dataclasses.field(default_factory=dict)
    maybe: dict[int, tuple[list[bytes], bytes]] = dataclasses.field(default_factory=dict)
    refused: dict[int, list[bytes]] = dataclasses.field(default_factory=dict)
    errors: list[BaseException] = dataclasses.field(default_factory=list)
    next_id: int = 0
    # ingested sources (SOURCE_RECORDS as source "events"): the frontier and the remap since last acknowledged
    frontier: dict[int, int] | None = None
    since: int | None = None

    def attempt(self, op: Callable[[], object]) -> object:
        """Run an ingest, bulk load or remap compaction; None if it raised the failed state."""
        try:
            return op()
        except lsm.DbFailedError as e:
            self.errors.append(e)
            return None

    def write(self, db: lsm.DB, nkeys: int = 1, sync: bool = False) -> None:
        wid = self.next_id
        self.next_id += 1
        keys = [b"w%05d-%d" % (wid, j) for j in range(nkeys)]
        value = b"%d:" % wid + VALUE
        failed_before = db.failure is not None
        try:
            wo = lsm.WriteOptions(sync=sync)
            if nkeys == 1:
                seq = db.put(keys[0], value, options=wo)
            else:
                b = lsm.WriteBatch()
                for k in keys:
                    b.put(k, value)
                seq = db.write(b, wo)
        except lsm.DbFailedError as e:
            self.errors.append(e)
            if failed_before:
                self.refused[wid] = keys
            else:
                self.maybe[wid] = (keys, value)
            return
        self.acked[wid] = (keys, value, seq)

    def check(self, db: lsm.DB, case: str) -> None:
        seq_owner: dict[int, int] = {}

        def own(seq: int, wid: int) -> None:
            assert seq_owner.setdefault(seq, wid) == wid, f"{case}: seq {seq} shared by writes {wid} and {seq_owner[seq]}"

        for wid, (keys, value, seq) in self.acked.items():
            for k in keys:
                e = db.get_entry(k)
                assert e is not None, f"{case}: acknowledged write {wid} ({k!r}, seq {seq}) lost"
                assert (e.value, e.seq) == (value, seq), f"{case}: write {wid} came back as {e}"
            own(seq, wid)
        for wid, (keys, value) in self.maybe.items():
            got = [db.get_entry(k) for k in keys]
            if all(e is None for e in got):
                continue
            assert all(e is not None for e in got), f"{case}: write {wid} is half visible: {got}"
            assert {(e.value, e.seq) for e in got} == {(value, got[0].seq)}, f"{case}: write {wid}: {got}"
            own(got[0].seq, wid)
        for wid, keys in self.refused.items():
            assert all(db.get(k) is None for k in keys), f"{case}: write {wid} was refused but is visible"
        stored = {e.key: e.seq for e in db.scan_entries()}
        for k, seq in stored.items():
            own(seq, int(k[1:6]) if k.startswith(b"w") else -1)  # -1: a row of the ingested source
        if self.frontier is not None:
            self.check_source(db, case)
        if stored:
            after = db.put(b"zz-after-reopen", b"x")
            assert after > max(stored.values()), f"{case}: seq {after} reused after reopen"
        for e in self.errors:
            assert isinstance(e.__cause__, OSError) and (e.op in str(e)), f"{case}: {e!r}"


    def check_source(self, db: lsm.DB, case: str) -> None:
        """Exactly once: the stored frontier reaches the acknowledged one, each record below it is visible
        with its value and none above it (a batch or a bulk load whole with its binding, or absent)."""
        remap = db.remap("events") if "events" in db.sources() else None
        got = remap.frontier if remap is not None else {}
        for p, off in self.frontier.items():
            assert got.get(p, 0) >= off, f"{case}: acknowledged frontier {self.frontier}, stored {got}"
        for p, off, key, value in SOURCE_RECORDS:
            want = value if off < got.get(p, 0) else None
            assert db.get(key) == want, f"{case}: {key!r} at offset {off} vs frontier {got}"
        if self.since is not None:
            assert remap.since is not None and remap.since >= self.since, f"{case}: remap since {remap.since}"


# -- workloads: (setup before arming, the armed operation) -----------------------------------------------
def fill(db: lsm.DB, o: Oracle, n: int, **kw) -> None:
    for _ in range(n):
        o.write(db, **kw)


def prepopulate(db: lsm.DB, o: Oracle, flushes: int = 4) -> None:
    for _ in range(flushes):
        fill(db, o, 12)
        db.flush()


def run_compaction(db: lsm.DB, o: Oracle) -> None:
    try:
        db.compact(full=True)
    except lsm.DbFailedError as e:
        o.errors.append(e)
    o.write(db)  # refused if the compaction failed the store


def run_worker_compaction(db: lsm.DB, o: Oracle) -> None:
    try:
        db.engine.compactor.step()  # what the background thread runs: the job goes to the worker process
    except lsm.DbFailedError as e:
        o.errors.append(e)
    o.write(db)


def run_flushes(db: lsm.DB, o: Oracle) -> None:
    for _ in range(3):
        fill(db, o, 3)
        try:
            db.flush()
        except lsm.DbFailedError as e:
            o.errors.append(e)
    o.write(db)


def run_close(db: lsm.DB, o: Oracle) -> None:
    fill(db, o, 20)
    try:
        db.close()
    except lsm.DbFailedError as e:
        o.errors.append(e)
    assert db.closed, "close() must release the handle even when it fails"


SOURCE_RECORDS = [(p, off, b"s%d-%03d" % (p, off), b"%d.%d:" % (p, off) + VALUE) for p in range(3) for off in range(40)]


def source(db: lsm.DB) -> PartitionedLog:
    """SOURCE_RECORDS as a partitioned log beside the store (written afresh, before the faults are armed)."""
    log = os.path.join(os.path.dirname(db.path), "log")
    if not os.path.isdir(log):
        with LogWriter(log) as w:
            for p, _off, key, value in SOURCE_RECORDS:
                w.append(p, key, value)
    return PartitionedLog(log)


def start_source(db: lsm.DB, o: Oracle) -> None:
    """Setup: the log, plain writes, and a first streaming ingest of 30 records in 3 batches."""
    shutil.rmtree(os.path.join(os.path.dirname(db.path), "log"), ignore_errors=True)
    fill(db, o, 3)
    o.frontier = db.ingest(source(db), "events", max_records=30, batch_records=10).frontier


def run_bulk_load(db: lsm.DB, o: Oracle) -> None:
    o.write(db)
    stats = o.attempt(lambda: db.ingest(source(db), "events", engine="local", tasks=3))
    if stats is not None:
        o.frontier = stats.frontier
    o.write(db)  # refused if the load failed the store


def run_remap_compaction(db: lsm.DB, o: Oracle) -> None:
    """Compact the remap, ingest 4 more batches, compact again later, flush the remap's rows to an SST."""
    for _ in range(2):
        since = db.engine.now()
        if o.attempt(lambda s=since: compact_remap(db, "events", s)) is not None:
            o.since = since
        stats = o.attempt(lambda: db.ingest(source(db), "events", max_records=40, batch_records=10))
        if stats is not None:
            o.frontier = stats.frontier
        db.options.clock.advance(1000)
    try:
        db.flush()
    except lsm.DbFailedError as e:
        o.errors.append(e)
    o.write(db)


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    run: Callable[[lsm.DB, Oracle], None]
    setup: Callable[[lsm.DB, Oracle], None] | None = None
    path: str | None = None  # only calls on files whose path contains this
    options: dict = dataclasses.field(default_factory=dict)
    min_faults: int = 20


COMPACTION = {"target_sst_bytes": 1024, "l0_compaction_threshold": 2}
WORKLOADS = [
    Workload("put", lambda db, o: fill(db, o, 60), min_faults=240),
    Workload("put_sync", lambda db, o: fill(db, o, 60, sync=True), min_faults=330),
    Workload("batch", lambda db, o: [o.write(db, nkeys=3, sync=i % 2 == 0) for i in range(24)], min_faults=190),
    Workload("flush", run_flushes, min_faults=100),
    Workload("compaction_thread", run_compaction, prepopulate, options=COMPACTION, min_faults=45),
    Workload("compaction_worker", run_worker_compaction, prepopulate,
             options={**COMPACTION, "compaction_process": True}, min_faults=45),
    Workload("manifest_commit", run_flushes, prepopulate, path="/manifest/", min_faults=30),
    Workload("close", run_close, min_faults=110),
    Workload("bulk_load", run_bulk_load, start_source, min_faults=70),
    Workload("remap_compaction", run_remap_compaction, start_source, min_faults=150),
]


def test_the_sweep_injects_at_least_1000_faults():
    """Each workload asserts its own floor (test_fault_sweep); together they make the issue's 1,000."""
    assert sum(w.min_faults for w in WORKLOADS) >= 1000


def settle(db: lsm.DB) -> None:
    """Wait (briefly) for the flush thread to finish or fail what the workload handed it."""
    deadline = time.monotonic() + 10
    while not db.closed and db.lsm_shape()["immutable_memtables"] and db.failure is None and time.monotonic() < deadline:
        time.sleep(0.001)


def crash(db: lsm.DB) -> None:
    """Drop the handle as a killed process would: no final WAL sync, no flush, no manifest commit."""
    if db.closed:
        return
    db.engine.crash()


def one_case(tmp, w: Workload, kind: str | None, nth: int) -> tuple[int, fileio.FaultPlan]:
    """Run `w` with call `nth` failing (kind None: count only); return (faults fired, plan)."""
    path = tmp / "db"
    shutil.rmtree(path, ignore_errors=True)
    o = Oracle()
    case = f"{w.name} {kind} #{nth}"
    db = lsm.DB.open(path, opts(**w.options))
    try:
        if w.setup is not None:
            w.setup(db, o)
        ops = fileio.WRITE_OPS if kind == "short" else None
        plan = fileio.inject(kind or "eio", nth, ops=ops, path=w.path)
        try:
            w.run(db, o)
            settle(db)
        finally:
            fileio.clear()
        if plan.fired and plan.log[nth - 1][0] == "unlink":
            pass  # deleting a file nothing references any more may fail: garbage collection retries it
        elif plan.fired:
            assert o.errors or db.failure is not None, f"{case}: {plan.log[nth - 1]} failed, nobody noticed"
            for e in o.errors:
                assert isinstance(e, lsm.DbFailedError) and e.file, f"{case}: {e!r}"
                code = e.__cause__.errno
                assert code == (errno.EIO if kind == "eio" else errno.ENOSPC), f"{case}: {e!r}"
        else:
            assert not o.errors, f"{case}: nothing was injected, yet {o.errors}"
    finally:
        fileio.clear()
        crash(db)
    # a minute later: a workload may have moved its clock (no row of the sweep has a TTL)
    with lsm.DB.open(path, opts(clock=lsm.ManualClock(T0 + 60_000))) as db2:
        o.check(db2, case)
    check_database(str(path))  # raises lsm.inspect.CheckError on anything `lsm check` would report
    return plan.fired, plan


@pytest.fixture
def fast_dir(tmp_path):
    """A directory on tmpfs when there is one: the sweep's thousands of fsyncs then cost nothing (the
    crash it simulates keeps the page cache anyway)."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        d = tempfile.mkdtemp(prefix="lsm-faults-", dir="/dev/shm")
        yield pathlib.Path(d)
        shutil.rmtree(d, ignore_errors=True)
    else:
        yield tmp_path


@pytest.mark.parametrize("w", WORKLOADS, ids=[w.name for w in WORKLOADS])
def test_fault_sweep(fast_dir, w, capsys):
    tmp_path = fast_dir
    _, counted = one_case(tmp_path, w, None, 0)
    calls = counted.calls
    assert calls > 0
    fired = {k: 0 for k in KINDS}
    for kind in KINDS:
        n = sum(1 for op, _ in counted.log if op in fileio.WRITE_OPS) if kind == "short" else calls
        for nth in range(1, n + 1):
            f, _plan = one_case(tmp_path, w, kind, nth)
            fired[kind] += f
    total = sum(fired.values())
    with capsys.disabled():
        print(f"\nfault sweep {w.name}: {calls} calls, faults injected {fired} = {total}")
    assert all(fired[k] > 0 for k in KINDS), fired
    assert total >= w.min_faults


def test_failed_state_refuses_writes_keeps_reads_and_names_the_call(tmp_path):
    db = lsm.DB.open(tmp_path / "db", opts())
    db.put(b"a", b"1")
    with fileio.faults("enospc", 1, ops={"write"}, path="/wal/"):
        with pytest.raises(lsm.DbFailedError, match=r"write of .*\.wal failed .*Errno 28") as ei:
            db.put(b"b", b"2")
    assert ei.value.op == "write" and ei.value.file.endswith(".wal")
    assert isinstance(ei.value.__cause__, OSError) and ei.value.__cause__.errno == errno.ENOSPC
    # the disk has room again: still refused (the WAL may end in a partial record) until reopened
    for attempt in (lambda: db.put(b"c", b"3"), lambda: db.delete(b"a"), db.flush):
        with pytest.raises(lsm.DbFailedError, match="failed state"):
            attempt()
    assert db.get(b"a") == b"1" and db.get(b"b") is None
    assert dict(db.scan()) == {b"a": b"1"}
    db.close()
    with lsm.DB.open(tmp_path / "db", opts()) as db2:
        assert dict(db2.scan()) == {b"a": b"1"}
        assert db2.put(b"c", b"3") == 2


def test_failed_fdatasync_write_never_shares_a_seq(tmp_path):
    """Issue 12 item 4: the write whose fdatasync failed is in the page cache; after reopen it is visible
    with its own seq and the next write gets a new one."""
    db = lsm.DB.open(tmp_path / "db", opts())
    s1 = db.put(b"a", b"1", options=lsm.WriteOptions(sync=True))
    with fileio.faults("eio", 1, ops={"fdatasync"}):
        with pytest.raises(lsm.DbFailedError, match="fdatasync"):
            db.put(b"b", b"2", options=lsm.WriteOptions(sync=True))
    with pytest.raises(lsm.DbFailedError):
        db.put(b"c", b"3")
    crash(db)
    with lsm.DB.open(tmp_path / "db", opts()) as db2:
        assert db2.get_entry(b"b").seq == s1 + 1
        assert db2.put(b"c", b"3") == s1 + 2


@pytest.mark.parametrize("op", ["link", "fsync_dir"])
def test_manifest_error_after_writing_keeps_the_new_sst(tmp_path, op):
    """Issue 12 item 3: a failure at or after the manifest link may have published the version, so the
    SST it names is kept; the next open resolves from what is on disk."""
    db = lsm.DB.open(tmp_path / "db", opts())
    db.put(b"a", b"1")
    with fileio.faults("eio", 1, ops={op}, path="/manifest"):
        with pytest.raises(lsm.DbFailedError, match=op) as ei:
            db.flush()
    assert ei.value.published is None
    crash(db)
    with lsm.DB.open(tmp_path / "db", opts()) as db2:
        assert db2.get(b"a") == b"1"
    check_database(str(tmp_path / "db"))


def test_short_manifest_write_is_never_published(tmp_path):
    """Issue 12 item 2: a short write of the manifest fails the commit; the WAL it would replace stays."""
    db = lsm.DB.open(tmp_path / "db", opts())
    db.put(b"a", b"1")
    ids = db.engine.versions.store.ids()
    with fileio.faults("short", 1, ops={"write"}, path="/manifest/"):
        with pytest.raises(lsm.DbFailedError, match="write of .*manifest/.tmp-"):
            db.flush()
    assert db.engine.versions.store.ids() == ids
    assert not [n for n in (tmp_path / "db" / "manifest").iterdir() if n.name.startswith(".tmp-")]
    crash(db)
    with lsm.DB.open(tmp_path / "db", opts()) as db2:
        assert db2.get(b"a") == b"1"


def test_stale_manifest_tmp_files_are_removed_at_open(tmp_path):
    with lsm.DB.open(tmp_path / "db", opts()) as db:
        db.put(b"a", b"1")
    stale = tmp_path / "db" / "manifest" / ".tmp-0123456789abcdef"
    stale.write_bytes(b"half a manifest")
    with lsm.DB.open(tmp_path / "db", opts(), read_only=True) as ro:
        assert ro.get(b"a") == b"1"
    assert stale.exists()  # a read-only open changes nothing
    with lsm.DB.open(tmp_path / "db", opts()) as db:
        assert db.get(b"a") == b"1"
    assert not stale.exists()


def test_compaction_worker_error_names_the_file(tmp_path):
    db = lsm.DB.open(tmp_path / "db", opts(compaction_process=True, l0_compaction_threshold=2))
    prepopulate(db, Oracle())
    with fileio.faults("enospc", 1, ops={"write"}, path="/sst/") as plan:
        with pytest.raises(lsm.DbFailedError, match=r"write of .*\.sst failed") as ei:
            db.engine.compactor.step()
    assert plan.fired == 1 and plan.log[0][1].endswith(".sst")
    assert ei.value.op == "write"
    before = sorted(p.name for p in (tmp_path / "db" / "sst").iterdir())
    db.close()
    with lsm.DB.open(tmp_path / "db", opts()) as db2:
        assert len(list(db2.scan())) == 48
    assert sorted(p.name for p in (tmp_path / "db" / "sst").iterdir()) == before


def test_a_version_published_but_not_installed_keeps_its_sst(db_root, monkeypatch):
    """The manifest naming a flushed SST is on disk when installing it into the read path fails (its reader
    cannot be opened): the DB fails with published=True and keeps the SST, which the next open reads."""
    db = lsm.DB.open(db_root, opts())
    db.put(b"a", b"1")

    def no_reader(m, drop_imm=None):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(db.engine.versions, "install", no_reader)
    with pytest.raises(lsm.DbFailedError, match="Too many open files") as ei:
        db.flush()
    assert ei.value.published is True
    with pytest.raises(lsm.DbFailedError):
        db.put(b"b", b"2")
    crash(db)
    with lsm.DB.open(db_root, opts()) as db2:
        assert db2.get(b"a") == b"1" and len(db2.manifest.l0) == 1
    check_database(db_root)
