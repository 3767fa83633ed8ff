"""Which seqs are final while a bulk load runs (issue 24, defects 1 and 3): a load's reserved range holds
`DB.stable_seq` and `DatabaseLog.end` back until it commits or is abandoned, a committed load is ONE
commit for a follower (`DatabaseLog`, `changes`) and for `snapshot_at_seq`; the reservation is recorded
in the manifest, abandoned by a failed load and by the reopen after a crash or a fencing open. On every
backend; the tests with a second process on a directory and on S3 (`shared_root`)."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest

import lsm
from lsm.sources import DatabaseLog, LogWriter, PartitionedLog, SourceRecord, verify_source
from tests.lsm._bulk_util import spawn_slow_load, write_log
from tests.lsm._lsm_proc import Served
from tests.lsm.test_ingest import ListSource

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # children import this tree's lsm, not an installed one
T0 = 1_700_000_000_000
YEAR = 365 * 86_400_000
# a write a DatabaseLog must see at once is synced: on an object store an unsynced one waits in the
# group commit's buffer (up to wal_flush_interval_ms) before a reader of the store can see it
SYNC = lsm.WriteOptions(sync=True)


class HookSource(ListSource):
    """A `ListSource` that calls `hook()` when a bulk-load task starts reading it (mid-load: the seqs are
    reserved, nothing is committed). A function survives the local engine's deepcopy of the source."""

    name = "hooked"

    def __init__(self, records: list[SourceRecord], hook) -> None:
        super().__init__(records)
        self.hook = hook

    def read(self, partition, start, stop=None):
        self.hook()
        yield from super().read(partition, start, stop)


def user_rows(db: lsm.DB, snap: lsm.Snapshot | None = None) -> dict[bytes, bytes]:
    return dict(db.scan(options=None if snap is None else lsm.ReadOptions(snapshot=snap)))


def bulk_records(n: int, prefix: bytes = b"bulk-") -> list[SourceRecord]:
    return [SourceRecord(0, i, prefix + b"%d" % i, b"v%d" % i) for i in range(n)]


# -- defect 1: a follower polling during a load never skips it ----------------------------------------------
def test_a_follower_polling_during_a_bulk_load_gets_its_rows(open_db, new_root) -> None:
    up = open_db(path=new_root("up"), history_retention=YEAR)
    replica = open_db(path=new_root("replica"), history_retention=YEAR)
    seen: list[int] = []

    def mid_load() -> None:
        up.put(b"a", b"1")  # plain writes commit (durably) above the reserved range meanwhile
        up.put(b"b", b"2", options=SYNC)
        seen.append(DatabaseLog(up.path).end(0))
        seen.append(len(list(DatabaseLog(up.path).read(0, 0, 10**6))))  # nothing above it either
        replica.ingest(DatabaseLog(up.path), name="up")

    try:
        up.ingest(HookSource(bulk_records(10), mid_load), name="bulk", engine="local", tasks=1)
        replica.ingest(DatabaseLog(up.path), name="up")
        assert sorted(user_rows(replica)) == sorted(user_rows(up)) == [b"a", b"b"] + sorted(
            b"bulk-%d" % i for i in range(10)
        )
        # while the load ran, the upstream's end stayed at its first reserved seq: nothing was final yet
        assert seen == [1, 0]
    finally:
        up.close()
        replica.close()


def test_stable_seq_and_changes_wait_for_the_reservation(open_db) -> None:
    db = open_db(history_retention=YEAR)
    got: dict[str, object] = {}

    once = threading.Lock()

    def mid_load() -> None:
        if not once.acquire(blocking=False):  # the first task only
            return
        got["put"] = db.put(b"late", b"x")
        got["seq"], got["stable"] = db.seq, db.stable_seq
        got["changes"] = list(db.changes(seq=0))
        got["reserved"] = db.manifest.seq_reservations
        with lsm.DB.open(db.path, read_only=True) as ro:  # a reader of the files sees the reservation
            got["ro"] = (ro.stable_seq, [c[1] for c in ro.changes(seq=0)])

    try:
        db.put(b"early", b"e")
        db.ingest(HookSource(bulk_records(6), mid_load), name="bulk", engine="local", tasks=3)
        # seqs 2..4 for the slices, 5 for the binding; the put took 6
        assert got["reserved"] == ((2, 5),) and got["put"] == 6 and got["seq"] == 6
        assert got["stable"] == 1 and [c[1] for c in got["changes"]] == [b"early"]
        assert got["ro"] == (1, [b"early"])
        assert db.stable_seq == db.seq == 6 and db.manifest.seq_reservations == ()
        assert db.manifest.bulk_loads == ((2, 5),)
        assert sorted(c[1] for c in db.changes(seq=1)) == sorted([b"late"] + [b"bulk-%d" % i for i in range(6)])
    finally:
        db.close()


def test_a_failed_load_abandons_its_reservation(open_db) -> None:
    db = open_db()

    def boom() -> None:
        raise RuntimeError("task failed on purpose")

    try:
        db.put(b"a", b"1")
        with pytest.raises(RuntimeError, match="on purpose"):
            db.ingest(HookSource(bulk_records(4), boom), name="bulk", engine="local", tasks=2)
        assert db.manifest.seq_reservations == () and db.stable_seq == db.seq == 4  # 2..4: a gap
        assert DatabaseLog(db.path).end(0) == 5
        assert db.put(b"b", b"2", options=SYNC) == 5
        assert [r.key for r in DatabaseLog(db.path).read(0, 0)] == [b"a", b"b"]
    finally:
        db.close()


def test_a_load_killed_mid_job_holds_readers_back_until_the_reopen_abandons_it(
    tmp_path, monkeypatch, shared_root, db_options
) -> None:
    monkeypatch.setenv("PYTHONPATH", ROOT)
    log = str(tmp_path / "log")
    write_log(log, seed=3, n=600, partitions=3)
    path = shared_root  # the loader is another process
    db = lsm.DB.open(path, db_options())
    db.put(b"before", b"x")
    db.close()
    proc = spawn_slow_load(path, log)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (tmp_path / "reading").exists():
            time.sleep(0.02)
        assert (tmp_path / "reading").exists(), proc.stderr.read1().decode() if proc.poll() is not None else ""
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()
    follower = DatabaseLog(path)
    assert follower.end(0) == 2  # the dead loader's range is reserved: nothing from seq 2 on is final
    db = lsm.DB.open(path, db_options())
    try:
        top = db.seq
        assert top > 2 and db.manifest.seq_reservations == () and db.manifest.last_seq == top
        assert follower.end(0) == top + 1 and db.stable_seq == top
        assert db.put(b"after", b"y", options=SYNC) == top + 1  # the abandoned seqs are never handed out again
        assert [r.key for r in follower.read(0, 0)] == [b"before", b"after"]
    finally:
        db.close()


# -- defect 3: a load is one upstream commit --------------------------------------------------------------
def test_a_follower_takes_a_bulk_loaded_transaction_whole(open_db, new_root) -> None:
    up = open_db(path=new_root("up"), history_retention=YEAR)
    replica = open_db(path=new_root("replica"), history_retention=YEAR)
    try:
        up.put(b"a", b"1")
        tx = [SourceRecord(0, i, b"tx-%d" % i, b"t", tx="T", tx_end=i == 5) for i in range(6)]
        up.ingest(ListSource(tx), name="bulk", engine="local", tasks=3)
        up.put(b"b", b"2", options=SYNC)
        replica.ingest(DatabaseLog(up.path), name="up", batch_records=1)
        for b in replica.remap("up").bindings():
            with replica.snapshot_at_seq(b.seq) as snap:
                n = sum(k.startswith(b"tx-") for k in user_rows(replica, snap))
            assert n in (0, 6), f"binding {b}: {n} of the transaction's 6 rows"
        assert user_rows(replica) == user_rows(up)
        offsets = [r.offset for r in DatabaseLog(up.path).read(0, 0)]
        assert offsets == [1] + [5] * 6 + [6]  # the load's slices took seqs 2..4, its binding 5
        # a read starting inside the load's range still takes the whole load; one ending inside it none
        assert [r.key for r in DatabaseLog(up.path).read(0, 3)] == [b"tx-%d" % i for i in range(6)] + [b"b"]
        assert [r.key for r in DatabaseLog(up.path).read(0, 0, 5)] == [b"a"]
        assert verify_source(DatabaseLog(up.path)) == []  # read in pieces, the load stays whole
    finally:
        up.close()
        replica.close()


def test_snapshot_at_a_seq_inside_a_load_reads_the_state_before_it(open_db) -> None:
    db = open_db(history_retention=YEAR)
    try:
        db.ingest(ListSource(bulk_records(6)), name="bulk", engine="local", tasks=3)  # seqs 1..4
        for s in (0, 1, 2, 3):  # inside the load (below its binding) is before it: nothing yet
            with db.snapshot_at_seq(s) as snap:
                assert user_rows(db, snap) == {} and snap.seq == 0
        with db.snapshot_at_seq(4) as snap:
            assert len(user_rows(db, snap)) == 6 and snap.seq == 4
        # a feed consumer resuming from the largest seq it was given gets nothing twice
        got = list(db.changes(seq=0))
        assert len(got) == 6 and list(db.changes(seq=max(c[0] for c in got))) == []
        assert db.manifest.bulk_loads == ((1, 4),)
    finally:
        db.close()


# -- a second process opens the store during a load ---------------------------------------------------------
def test_an_open_by_another_process_fences_the_loader_and_nothing_of_the_load_shows(
    monkeypatch, shared_root, db_options
) -> None:
    monkeypatch.setenv("PYTHONPATH", ROOT)
    path = shared_root  # the fencing open is another process's
    db = lsm.DB.open(path, db_options())
    db.put(b"a", b"1")
    other: list[Served] = []
    once = threading.Lock()

    def mid_load() -> None:
        with once:  # the tasks run in threads: one child only
            if not other:
                other.append(Served(path, T0 + 10_000))  # a writable open in a second process: fences us
                assert other[0].call("put b 2") == "ok"

    try:
        with pytest.raises(lsm.FencedError):
            db.ingest(HookSource(bulk_records(8), mid_load), name="bulk", engine="local", tasks=2)
        assert other[0].call("get a") == "ok 1" and other[0].call("get bulk-0") == "ok <none>"
        assert other[0].call("close") == "ok"
    finally:
        for o in other:
            o.kill()
        db.close()
    follower = DatabaseLog(path)
    db = lsm.DB.open(path, db_options())
    try:
        assert user_rows(db) == {b"a": b"1", b"b": b"2"} and db.sources() == []
        assert [r.key for r in follower.read(0, 0, follower.end(0))] == [b"a", b"b"]
        assert db.manifest.seq_reservations == () and db.manifest.bulk_loads == ()
    finally:
        db.close()


# -- everything at once ------------------------------------------------------------------------------------
class TickingClock(lsm.ManualClock):
    """A ManualClock that moves 1 ms forward at every reading."""

    def now(self) -> int:
        return self.advance(1)


# not on S3: 10 s of requests through the code memory:// runs
@pytest.mark.parametrize("backend", ["local", "memory"])
def test_bulk_loads_race_writes_streaming_ingest_compaction_and_a_follower(tmp_path, open_db, new_root) -> None:
    rnd = random.Random(24)
    up = open_db(path=new_root("up"), history_retention=YEAR, memtable_bytes=4096)
    # the replica's clock moves on every reading, so each of its batches is a binding of its own (bindings
    # of one millisecond merge into one)
    replica = open_db(TickingClock(T0), path=new_root("replica"), history_retention=YEAR)
    stream_log = str(tmp_path / "stream")
    with LogWriter(stream_log) as w:
        for i in range(600):
            w.append(i % 2, b"s-%04d" % i, b"s%d" % i)
    loads = 5
    bulk: list[SourceRecord] = []
    plain_seqs: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def guarded(fn):
        def run() -> None:
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported by the test thread
                errors.append(e)
                done.set()

        return threading.Thread(target=run)

    def poll_mid_load() -> None:
        # every load is polled while it runs (its seqs reserved, plain writes going on above them),
        # beside the follower's random moments
        replica.ingest(DatabaseLog(up.path), name="up", batch_records=rnd.randrange(1, 200))

    def loader() -> None:
        for n in range(loads):
            at = len(bulk)
            bulk.extend(SourceRecord(0, at + i, b"b-%d-%d" % (n, i), b"b%d" % n) for i in range(150))
            source = HookSource(list(bulk), poll_mid_load)
            while True:
                try:
                    up.ingest(source, name="bulk", engine="local", tasks=rnd.randrange(1, 5))
                    break
                except lsm.BulkLoadConflictError:
                    continue  # a compaction merged across the range: nothing committed, run it again

    def writer() -> None:
        for i in range(400):
            if i % 5:
                plain_seqs.append(up.put(b"p-%04d" % i, b"p%d" % i))
            else:
                plain_seqs.append(up.write(lsm.WriteBatch().put(b"p-%04d" % i, b"w").put(b"q-%04d" % i, b"w")))

    def streamer() -> None:
        while up.ingest(PartitionedLog(stream_log), name="stream", batch_records=25, max_records=100).records:
            pass

    def compactor() -> None:
        while not done.is_set():
            up.compact()
            time.sleep(0.005)

    def follower() -> None:
        while not done.is_set():
            replica.ingest(DatabaseLog(up.path), name="up", batch_records=rnd.randrange(1, 200))
            time.sleep(rnd.random() * 0.01)

    workers = [guarded(f) for f in (loader, writer, streamer)]
    background = [guarded(compactor), guarded(follower)]
    try:
        for t in workers + background:
            t.start()
        for t in workers:
            t.join(timeout=300)
        done.set()
        for t in background:
            t.join(timeout=60)
        assert not errors, errors
        up.flush_wal()  # the last unsynced writes, which an object store's WAL buffer may still hold
        replica.ingest(DatabaseLog(up.path), name="up")
        want = user_rows(up)
        # no lost row: every plain write, every loaded and every streamed record is there
        counts = {p: sum(k.startswith(p) for k in want) for p in (b"p-", b"q-", b"b-", b"s-")}
        assert counts == {b"p-": 400, b"q-": 80, b"b-": loads * 150, b"s-": 600}
        assert user_rows(replica) == want  # the follower ends equal to the upstream
        # each binding atomic with its rows: the replica at each binding is the upstream at its frontier
        bindings = replica.remap("up").bindings()
        assert len(bindings) > 3
        for b in bindings:
            with replica.snapshot_at_seq(b.seq) as mine, up.snapshot_at_seq(b.frontier[0] - 1) as theirs:
                assert theirs.seq == b.frontier[0] - 1  # never inside a load's range
                assert user_rows(replica, mine) == user_rows(up, theirs)
        # no duplicate seq: plain commits, streaming batches and the loads' ranges are disjoint
        spans = [(s, s) for s in plain_seqs] + [(b.seq, b.seq) for b in up.remap("stream").bindings()]
        spans += list(up.manifest.bulk_loads)
        assert len(up.manifest.bulk_loads) == loads
        spans.sort()
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False)), spans
    finally:
        done.set()
        up.close()
        replica.close()
