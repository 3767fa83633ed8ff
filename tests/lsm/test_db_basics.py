"""The DB's basic promises: recovery, snapshots, scans, get_entry, flush, mixed SST versions, threads."""

from __future__ import annotations

import hashlib
import sys
import threading

import pytest

import lsm
from formats import wal as wal_codec
from lsm.manifest import ManifestStore
from lsm.versions import VersionSet
from storage.ssts import open_sst
from tests import _store
from tests.lsm import _wal
from tests.lsm._lsm_proc import Served

T0 = 1_700_000_000_000


def name_of(segment: str) -> str:
    return segment.rsplit("/", 1)[1]


def digest(root, segment: str) -> str:
    return hashlib.sha256(_store.read(root, "wal", name_of(segment))).hexdigest()


def wal_digests(root) -> dict[str, str]:
    """{name: sha256} of every WAL segment (object) of the database."""
    return {n: hashlib.sha256(_store.read(root, "wal", n)).hexdigest() for n in _store.names(root, "wal")}


def segment_files(root) -> bool:
    """Whether the WAL is a segment file per memtable, deleted as soon as a flush covers it (a directory),
    rather than group-committed WAL objects, kept for the WAL's grace after that (lsm.wal_object)."""
    return _store.store(root).storage.appends


def held_records(root) -> list[tuple[str, wal_codec.WalRecord]]:
    """(segment path, record) of every record the database's WAL holds, in segment order."""
    return [(p, r) for _, p in _wal.segments(root) for r in _wal.records(root, p)[0]]


def crashed_writer(open_db, *keys: bytes) -> None:
    """`killed_writer` in this process: the handle is dropped as a kill would drop it (`Engine.crash`)."""
    db = open_db()
    for k in keys:
        db.put(k, k.upper(), options=lsm.WriteOptions(sync=True))
    db.engine.crash()


def killed_writer(root, *keys: str) -> None:
    """A child process puts each key (value = the key upper-cased, sync: one WAL record each, in a
    segment file, or a WAL object each) and is SIGKILLed."""
    child = Served(root, T0)
    try:
        for k in keys:
            assert child.call(f"put {k} {k.upper()}") == "ok"
    finally:
        child.kill()


# -- recovery ---------------------------------------------------------------------------------------
def test_reopen_replays_the_wal_of_a_killed_process(shared_root, db_options):
    root = shared_root
    killed_writer(root, "a", "b", "c")
    flushed = [i for i, _ in _wal.segments(root)]
    with lsm.DB.open(root, db_options()) as db:
        assert dict(db.scan()) == {b"a": b"A", b"b": b"B", b"c": b"C"}
        assert db.seq == 3
        assert [db.get_entry(k).seq for k in (b"a", b"b", b"c")] == [1, 2, 3]
        # recovery flushed what it replayed and retired the old segments: replay starts past them all
        assert len(db.manifest.l0) == 1 and db.manifest.last_seq == 3
        assert db.manifest.wal_replay_from > max(flushed)
        if segment_files(root):  # deleted at once: what is left is the new, empty segment
            assert not held_records(root)
        else:  # WAL objects stay for the WAL's grace, but replay reads none of them
            assert all(i < db.manifest.wal_replay_from for i, _ in _wal.segments(root))
        db.put(b"d", b"D")
    with lsm.DB.open(root, db_options()) as db:
        assert db.seq == 4 and db.get(b"d") == b"D"


@pytest.mark.parametrize("cut", [1, 3, 12, "header"])
def test_torn_final_wal_record_is_dropped(tmp_path, db_options, cut):
    # a torn record is the tail of an append cut short: a local segment file's. An object is written
    # whole (one PUT), so an object store never holds one.
    root = str(tmp_path / "db")
    crashed_writer(lambda: lsm.DB.open(root, db_options()), b"a", b"b", b"c")
    ((_, seg),) = _wal.segments(root)
    records, torn = _wal.records(root, seg)
    assert torn is None and len(records) == 3
    data = _store.read(root, "wal", name_of(seg))
    # cut into the payload of the last record, or leave only part of its header
    new_size = records[-1].offset + 5 if cut == "header" else len(data) - cut
    _store.write(root, "wal", name_of(seg), data[:new_size])
    with lsm.DB.open(root, db_options()) as db:
        assert dict(db.scan()) == {b"a": b"A", b"b": b"B"}
        assert db.seq == 2
        assert db.put(b"c", b"again") == 3  # the torn record's seq is free again
    assert seg not in [p for _, p in _wal.segments(root)]  # the damaged segment is retired after recovery
    with lsm.DB.open(root, db_options()) as db:
        assert dict(db.scan()) == {b"a": b"A", b"b": b"B", b"c": b"again"}


@pytest.mark.parametrize("victim", [0, 1])
def test_wal_checksum_failure_before_the_end_is_corruption(db_root, open_db, victim):
    # on a directory the victim is a record before the last of its segment; on an object store each
    # sync put is a WAL object of its own, and the victim's is followed by the others
    root = db_root
    crashed_writer(open_db, b"a", b"b", b"c")
    held = held_records(root)
    assert len(held) == 3
    seg, record = held[victim]
    data = bytearray(_store.read(root, "wal", name_of(seg)))
    data[record.offset + wal_codec.HEADER.size + 3] ^= 0x01  # flip one bit of the record's payload (its seq)
    _store.write(root, "wal", name_of(seg), bytes(data))
    damaged = digest(root, seg)
    for _ in range(2):  # the failed open leaves the evidence in place: a second try fails the same way
        with pytest.raises(lsm.CorruptionError) as ei:
            open_db()
        assert ei.value.path == seg and ei.value.offset == record.offset
        assert f"{seg}: corruption at offset {record.offset}" in str(ei.value)
        assert "checksum" in str(ei.value)
        assert digest(root, seg) == damaged


# -- snapshots --------------------------------------------------------------------------------------
def test_snapshots_see_exactly_their_state(open_db):
    clock = lsm.ManualClock(T0)
    db = open_db(clock, memtable_bytes=1024)
    model: dict[bytes, bytes] = {}
    snaps: list[tuple[lsm.Snapshot, dict[bytes, bytes]]] = []

    def check():
        for snap, state in snaps:
            assert dict(snap.scan()) == state
            assert list(snap.scan(reverse=True)) == sorted(state.items(), reverse=True)
            for k in (b"k00", b"k03", b"k07", b"zz"):
                assert snap.get(k) == state.get(k)
        assert dict(db.scan()) == model

    for step in range(60):
        k = b"k%02d" % (step % 9)
        if step % 7 == 3:
            db.delete(k)
            model.pop(k, None)
        elif step % 11 == 5:
            batch = lsm.WriteBatch().put(k, b"b%d" % step).delete(b"k00").put(b"k01", b"b%d" % step)
            db.write(batch)
            model[k] = b"b%d" % step
            model.pop(b"k00", None)
            model[b"k01"] = b"b%d" % step
        else:
            db.put(k, b"v%d-" % step + b"x" * 40)
            model[k] = b"v%d-" % step + b"x" * 40
        clock.advance(1)
        if step % 5 == 0:
            snaps.append((db.snapshot(), dict(model)))
        if step % 13 == 0:
            db.flush()
        check()
    assert len(db.manifest.l0) > 4  # the memtable filled and flushed by itself too
    first, state = snaps.pop(0)
    with first:
        assert first.seq <= db.seq
    with pytest.raises(lsm.ClosedError, match="released"):
        first.get(b"k01")
    db.flush()
    check()
    for snap, _ in snaps:
        snap.close()
    assert db.snapshot_seqs() == ()
    db.close()


def test_snapshot_is_pinned_by_seq(open_db):
    db = open_db()
    db.put(b"a", b"1")
    with db.snapshot() as snap:
        assert snap.seq == db.seq == 1
        assert db.snapshot_seqs() == (1,)
        db.put(b"a", b"2")
        db.delete(b"a")
        db.put(b"b", b"new")
        db.flush()
        assert snap.get_entry(b"a") == lsm.Entry(b"a", b"1", 1, db.get_entry(b"b").ts, None)
        assert list(snap.scan()) == [(b"a", b"1")]
    assert db.snapshot_seqs() == ()


# -- scans ------------------------------------------------------------------------------------------
KEYS = [b"", b"\x00", b"a", b"a\x00", b"a\xff", b"ab", b"abc", b"b", b"ba", b"\xff", b"\xff\x00", b"\xff\xff"]


def expected_scan(model, start, end, prefix, reverse):
    keys = sorted(
        k
        for k in model
        if (start is None or k >= start)
        and (end is None or k < end)
        and (prefix is None or k.startswith(prefix))
    )
    if reverse:
        keys.reverse()
    return [(k, model[k]) for k in keys]


def test_scan_ranges_reverse_and_prefix(open_db):
    db = open_db()
    model = {}
    stored = [k for k in KEYS if k]  # keys are 1..65535 bytes
    for i, k in enumerate(stored):  # three layers: two L0 SSTs and the memtable, with shadowing
        db.put(k, b"old%d" % i)
        model[k] = b"old%d" % i
    db.flush()
    for i, k in enumerate(stored[::2]):
        db.put(k, b"new%d" % i)
        model[k] = b"new%d" % i
    db.delete(b"ab")
    model.pop(b"ab")
    db.flush()
    db.delete(b"\xff")
    model.pop(b"\xff")
    db.put(b"ab", b"back")
    model[b"ab"] = b"back"
    bounds = [None, b"\x00", b"a", b"a\x00", b"aa", b"ab", b"b", b"c", b"\xff", b"\xff\xff", b"\xff\xff\xff"]
    prefixes = [None, b"a", b"ab", b"\xff", b"\xff\xff", b"zz"]
    n = 0
    for start in bounds:
        for end in bounds:
            for prefix in prefixes:
                for reverse in (False, True):
                    want = expected_scan(model, start, end, prefix, reverse)
                    got = list(db.scan(start, end, reverse, prefix=prefix))
                    assert got == want, (start, end, prefix, reverse)
                    n += 1
    assert n == len(bounds) ** 2 * len(prefixes) * 2
    entries = list(db.scan_entries(b"a", b"b"))
    assert [(e.key, e.value) for e in entries] == expected_scan(model, b"a", b"b", None, False)
    assert all(e.seq >= 1 and e.ts == T0 for e in entries)
    db.close()


def test_scan_is_a_consistent_view_while_writes_go_on(open_db):
    db = open_db()
    for i in range(10):
        db.put(b"k%d" % i, b"1")
    it = db.scan()
    first = next(it)
    for i in range(10):
        db.put(b"k%d" % i, b"2")
    db.put(b"k99", b"new")
    db.flush()
    assert [first] + list(it) == [(b"k%d" % i, b"1") for i in range(10)]


class _PausingVersions(VersionSet):
    """A version set whose next look at its read state first runs `pause_hook` in another thread: the
    reader is 'descheduled' right there, at a moment of the test's choosing. Installed on an open DB
    through its public `db.engine.versions` (the property shadows the instance attribute)."""

    pause_hook = None
    hook_thread = None

    @property
    def state(self):
        hook, self.pause_hook = self.pause_hook, None
        if hook is not None:
            t = threading.Thread(target=hook)
            t.start()
            t.join(2)  # a reader holding a lock here would block the hook: then the race cannot happen
            self.hook_thread = t
        return self.__dict__["state"]

    @state.setter
    def state(self, value):
        self.__dict__["state"] = value


@pytest.mark.parametrize("call", ["get", "get_entry"])
def test_point_read_survives_a_flush_landing_mid_read(open_db, call):
    """While a get is between reading the seq and the state, the key is overwritten and the memtable
    flushed; the flush drops the version the get's seq would select. The get must still return a
    value the key had during the call, never an older one or None."""
    db = open_db()
    vs = db.engine.versions
    vs.__class__ = _PausingVersions
    db.put(b"k", b"1")
    db.flush()
    db.put(b"k", b"2")

    def overwrite_and_flush():
        db.put(b"k", b"3")
        db.flush()

    vs.pause_hook = overwrite_and_flush
    got = db.get(b"k") if call == "get" else db.get_entry(b"k").value
    vs.hook_thread.join(10)
    assert got in (b"2", b"3")
    assert db.get(b"k") == b"3"
    db.close()


# -- get_entry --------------------------------------------------------------------------------------
def test_get_entry(open_db, lsm_clock):
    db = open_db(lsm_clock)
    s1 = db.put(b"a", b"1", ttl=500)
    lsm_clock.advance(10)
    s2 = db.write(lsm.WriteBatch().put(b"b", b"2").put(b"a", b"3").delete(b"c"))
    assert s2 == s1 + 1 == db.seq
    want = {
        b"a": lsm.Entry(b"a", b"3", s2, lsm_clock.now(), None),
        b"b": lsm.Entry(b"b", b"2", s2, lsm_clock.now(), None),
    }
    for stage in ("memtable", "sst", "reopened"):
        if stage == "sst":
            db.flush()
        if stage == "reopened":
            db.close()
            db = open_db(lsm_clock)
        for k, e in want.items():
            assert db.get_entry(k) == e, stage
            assert isinstance(db.get_entry(k), tuple) and db.get_entry(k).key == k
        assert db.get_entry(b"c") is None and db.get_entry(b"missing") is None
    db.close()


# -- flush ------------------------------------------------------------------------------------------
def test_flush_writes_an_l0_sst_into_the_manifest_and_retires_the_wal(db_root, open_db):
    db = open_db()
    db.put(b"a", b"1")
    db.delete(b"b")
    db.flush_wal()  # an object store's group commit writes its WAL object now rather than at its timer
    held = held_records(db_root)
    assert [r.seq for _, r in held] == [1, 2]
    flushed_ids = [i for i, _ in _wal.segments(db_root)]
    store = ManifestStore(db_root)
    ids_before = store.ids()
    db.flush()
    assert store.ids()[-1] == ids_before[-1] + 1
    man = store.read(store.ids()[-1])
    assert man == db.manifest
    (entry,) = man.l0
    assert man.runs == () and man.last_seq == db.seq == 2
    assert _store.names(db_root, "sst") == [entry.name]
    with open_sst(_store.path(db_root, "sst", entry.name)) as r:
        assert r.info == entry.info
        assert [(row[0], row[1], row[4]) for row in r] == [(b"a", 1, b"1"), (b"b", 2, None)]
    assert (entry.info.min_seq, entry.info.max_seq, entry.info.num_rows) == (1, 2, 2)
    # the manifest replays from past every segment that held the flushed rows
    assert man.wal_replay_from > max(flushed_ids)
    if segment_files(db_root):  # the flushed segment is gone; only the new, empty one remains
        ((new_id, new_seg),) = _wal.segments(db_root)
        assert new_seg not in [p for p, _ in held] and _store.size(db_root, "wal", name_of(new_seg)) == 0
        assert man.wal_replay_from == new_id
    else:  # WAL objects stay for the WAL's grace, but replay reads none of them
        assert all(i < man.wal_replay_from for i, _ in _wal.segments(db_root))
    db.flush()  # nothing to flush: no new SST, no new manifest version
    assert len(db.manifest.l0) == 1 and store.ids()[-1] == ids_before[-1] + 1
    db.close()
    db = open_db()
    assert db.manifest.l0 == man.l0 and db.get(b"a") == b"1"


def test_manifest_versions_advance_one_id_at_a_time(db_root, open_db):
    store = ManifestStore(db_root)
    db = open_db(manifest_history=5)
    for i in range(24):
        last = store.ids()[-1]
        db.put(b"k%d" % i, b"v")
        db.flush()
        ids = store.ids()
        assert ids[-1] == last + 1
        assert ids == list(range(ids[0], ids[-1] + 1))  # no gaps, even after pruning
        assert store.read(ids[-1]).l0[0].info.max_seq == db.seq
    assert len(store.ids()) < 24  # old versions were pruned
    db.close()
    last = store.ids()[-1]
    db = open_db(manifest_history=5)
    assert store.ids()[-1] == last + 1  # the open (epoch bump) is one version
    db.close()


# -- v0 and v1 --------------------------------------------------------------------------------------
def test_v0_and_v1_ssts_in_one_database(db_root, open_db):
    clock = lsm.ManualClock(T0)
    with open_db(clock, sst_format_version=0) as db:
        db.put(b"a", b"v0-a")
        db.put(b"b", b"v0-b")
        db.put(b"c", b"v0-c")
        db.delete(b"d")
        db.flush()
        v0_max_seq = db.seq
    clock.advance(100)
    with open_db(clock, sst_format_version=1) as db:
        db.put(b"b", b"v1-b", ttl=1_000)
        db.put(b"d", b"v1-d")
        db.delete(b"c")
        db.flush()
        infos = {e.info.format_version: e for e in db.manifest.l0}
        assert sorted(infos) == [0, 1]
        assert infos[0].info.row_features == () and infos[1].info.row_features
        with open_sst(_store.path(db_root, "sst", infos[0].name)) as r:
            # v0 rows carry no ts/expire_ts/seq: the reader reports ts None and the file's max_seq
            assert list(r) == [
                (b"a", v0_max_seq, None, None, b"v0-a"),
                (b"b", v0_max_seq, None, None, b"v0-b"),
                (b"c", v0_max_seq, None, None, b"v0-c"),
                (b"d", v0_max_seq, None, None, None),
            ]
        for reopened in (False, True):
            if reopened:
                db.close()
                db = open_db(clock)
            assert db.get_entry(b"a") == lsm.Entry(b"a", b"v0-a", v0_max_seq, None, None)
            assert db.get_entry(b"b") == lsm.Entry(b"b", b"v1-b", v0_max_seq + 1, T0 + 100, T0 + 1_100)
            assert db.get(b"c") is None
            assert db.get_entry(b"d").ts == T0 + 100
            assert list(db.scan()) == [(b"a", b"v0-a"), (b"b", b"v1-b"), (b"d", b"v1-d")]
            assert list(db.scan(reverse=True)) == [(b"d", b"v1-d"), (b"b", b"v1-b"), (b"a", b"v0-a")]
        db.close()  # the reopened handle: the with statement closes the first one


def test_ssts_of_every_compression_in_one_database(db_root, open_db):
    # the codec is an option of the writer, not of the database: each reopen with another one flushes
    # SSTs in it, every SST reads whatever its blocks hold, and a full compaction rewrites them all in
    # the codec of the day
    from lsm.inspect import check_database

    expected = {}
    codecs = [None, "zstd", "lz4", "zlib", "none"]
    for i, codec in enumerate(codecs):
        with open_db(compression=codec) as db:
            for k in range(50):
                key = b"k%03d" % (k * len(codecs) + i)
                expected[key] = b"value of %d, written under %s " % (k, str(codec).encode()) * 4
                db.put(key, expected[key])
            db.flush()
            assert db.manifest.l0[0].info.compression == (None if codec == "none" else codec)
    with open_db(compression="zstd") as db:
        assert sorted(e.info.compression or "none" for e in db.manifest.l0) == sorted(
            c or "none" for c in codecs
        )
        assert dict(db.scan()) == expected and db.get(b"k003") == expected[b"k003"]
        db.compact(full=True)
        ssts = [e for run in db.manifest.runs for e in run.ssts] + list(db.manifest.l0)
        assert ssts and {e.info.compression for e in ssts} == {"zstd"}
        assert dict(db.scan()) == expected
    assert check_database(db_root).ssts == len(ssts)


@pytest.mark.xfail(
    strict=True,
    reason="v0 rows carry no seq: every row of a v0 SST reports the file's max_seq, so a snapshot older "
    "than that cannot find the version it should read once the memtable is flushed",
)
def test_v0_snapshot_reads_after_flush(open_db):
    with open_db(sst_format_version=0) as db:
        db.put(b"a", b"1")
        with db.snapshot() as snap:
            db.put(b"a", b"2")
            db.flush()
            assert snap.get(b"a") == b"1"


def test_ttl_on_a_v0_database_is_refused_and_writes_nothing(db_root, open_db):
    with open_db(sst_format_version=0) as db:
        db.put(b"k", b"v")
        db.flush_wal()  # on an object store, the WAL object of the put is written now, not at a timer
        seq, wal = db.seq, wal_digests(db_root)
        with pytest.raises(ValueError, match="format.version 0"):
            db.put(b"x", b"y", ttl=1_000)
        with pytest.raises(ValueError, match="format.version 0"):
            db.put(b"x", b"y", ttl=0)
        with pytest.raises(ValueError, match="format.version 0"):
            db.write(lsm.WriteBatch().put(b"x", b"y").put(b"z", b"w", ttl=5))
        db.flush_wal()  # anything the refused writes had buffered would be written now
        assert db.seq == seq and wal_digests(db_root) == wal
        assert db.get(b"x") is None and db.get(b"z") is None
        db.put(b"x", b"y", ttl=lsm.NO_TTL)  # explicitly no TTL is fine
        assert db.get_entry(b"x").expire_ts is None
    with pytest.raises(ValueError, match="format version 0"):
        lsm.DbOptions(sst_format_version=0, default_ttl=10)


# -- threads ----------------------------------------------------------------------------------------
def test_readers_see_monotonic_atomic_states_while_a_writer_runs(backend, open_db):
    db = open_db(lsm.SystemClock(), memtable_bytes=2048)
    keys = (b"a", b"b", b"c")
    db.write(_batch(keys, 0))
    done = threading.Event()
    errors: list[BaseException] = []
    n_batches = 100 if backend == "s3" else 300  # each flush is a few requests to the S3 server

    def writer():
        try:
            for i in range(1, n_batches + 1):
                db.write(_batch(keys, i))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            done.set()

    def reader(mode: int):
        seen = seen_seq = 0
        try:
            while not done.is_set():
                seq = db.seq
                assert seq >= seen_seq
                seen_seq = seq
                if mode == 0:  # point reads, in key order: a later read never sees an older batch
                    vals = [int(db.get(k)) for k in keys]
                    assert seen <= vals[0] <= vals[1] <= vals[2], vals
                elif mode == 1:  # a scan sees whole batches only
                    vals = [int(v) for _, v in db.scan()]
                    assert len(vals) == 3 and vals[0] == vals[1] == vals[2] >= seen, vals
                else:
                    with db.snapshot() as snap:
                        vals = [int(snap.get(k)) for k in keys]
                        assert vals[0] == vals[1] == vals[2] >= seen, vals
                        assert [int(v) for _, v in snap.scan(reverse=True)] == vals
                seen = vals[-1]
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            done.set()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # interleave the threads as finely as possible
    try:
        threads = [threading.Thread(target=writer)] + [
            threading.Thread(target=reader, args=(m,)) for m in (0, 0, 1, 2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[0]
    assert [db.get(k) for k in keys] == [b"%08d" % n_batches] * 3
    assert len(db.manifest.l0) > 1  # flushes happened while readers read
    db.close()


def _batch(keys, i: int) -> lsm.WriteBatch:
    b = lsm.WriteBatch()
    for k in keys:
        b.put(k, b"%08d" % i)
    return b
