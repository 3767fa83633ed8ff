"""The DB's side of compaction (lsm/compactor.py, lsm/db.py): compact(), stats, write amplification,
background compaction, the lifetime of input files, atomic installs, gc(), and a stateful model test; each
on a local directory, a memory store and S3 (the `open_db` and `db_root` fixtures of tests/conftest.py).
"""

from __future__ import annotations

import gc as pygc
import itertools
import threading
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import lsm
from compaction import scheduler
from compaction.filter import CompactionFilter, CompactionFilterFactory, Decision
from storage.ssts import open_sst
from tests import _store


def sst_files(db):
    return [n for n in _store.names(db.path, "sst") if n.endswith(".sst")]


def rows_on_disk(db):
    out = []
    for name in sst_files(db):
        with open_sst(db.sst_path(name)) as r:
            out += list(r)
    return out


def sched_opts(db):
    o = db.options
    return scheduler.SchedulerOptions(
        l0_compaction_threshold=o.l0_compaction_threshold,
        size_ratio=o.size_ratio,
        max_merge_inputs=o.max_merge_inputs,
        periodic_compaction_interval=o.periodic_compaction_interval,
    )


def fill(db, rounds, keys=60, flush=True, model=None, first=0):
    """Overlapping writes, overwrites and deletes over `rounds` flushes; returns the expected contents
    (`model` updated in place when given)."""
    model = {} if model is None else model
    for r in range(first, first + rounds):
        for i in range(r % 3, keys, 2):
            k = b"key%03d" % i
            if (i + r) % 7 == 0:
                db.delete(k)
                model.pop(k, None)
            else:
                v = b"r%02d-" % r + b"v" * (i % 17)
                db.put(k, v)
                model[k] = v
        if flush:
            db.flush()
    return model


# -- compact() ---------------------------------------------------------------------------------------------


def test_compact_runs_until_nothing_is_due(open_db):
    with open_db(l0_compaction_threshold=2, size_ratio=1.5) as db:
        model = fill(db, 9)
        assert len(db.manifest.l0) == 9
        stats = db.compact()
        m = db.manifest
        assert scheduler.pick(m.l0, m.runs, db.engine.now(), sched_opts(db)) is None
        assert len(m.l0) < 2
        assert stats.jobs >= 1
        assert dict(db.scan()) == model
        # a second call finds nothing to do
        assert db.compact().jobs == 0


def test_compact_runs_several_jobs_when_one_leaves_more_due(open_db):
    with open_db(l0_compaction_threshold=2, size_ratio=4.0) as db:
        model = {}
        for i in range(4):  # build several runs: each compact() turns 2 L0 SSTs into a run
            fill(db, 2, model=model, first=2 * i)
            db.compact()
        # runs of similar size above each other are merged in the same compact() call
        m = db.manifest
        assert scheduler.pick(m.l0, m.runs, db.engine.now(), sched_opts(db)) is None
        assert db.compaction_stats.jobs >= 4
        assert dict(db.scan()) == model


def test_full_compaction_leaves_one_run(open_db):
    with open_db(l0_compaction_threshold=2, target_sst_bytes=1024) as db:
        model = fill(db, 6, keys=200)
        db.compact()
        fill(db, 1, keys=200, model=model, first=6)
        assert db.manifest.l0 and db.manifest.runs
        db.compact(full=True)
        m = db.manifest
        assert m.l0 == () and len(m.runs) == 1
        run = m.runs[0].ssts
        assert len(run) > 1  # split at the target size
        assert all(a.info.last_key < b.info.first_key for a, b in zip(run, run[1:], strict=False))
        assert dict(db.scan()) == model
        assert sorted(sst_files(db)) == sorted(e.name for e in run)
        # one row per live key: shadowed versions and tombstones are gone
        assert len(rows_on_disk(db)) == len(model)
    with open_db() as db:
        assert dict(db.scan()) == model


def test_full_compaction_on_empty_db_is_a_no_op(open_db):
    with open_db() as db:
        assert db.compact(full=True).jobs == 0
        assert db.compact().jobs == 0


def test_unknown_executor_is_refused(open_db):
    with open_db() as db:
        with pytest.raises(ValueError, match="executor"):
            db.compact(executor="gpu")


# -- stats and write amplification --------------------------------------------------------------------


def test_compaction_stats_are_accurate_and_accumulate(open_db):
    with open_db(l0_compaction_threshold=2) as db:
        fill(db, 4)
        in_entries = db.manifest.all_ssts()
        in_rows = sum(e.info.num_rows for e in in_entries)
        in_tombstones = sum(e.info.num_tombstones for e in in_entries)
        in_disk = sum(_store.size(db.path, "sst", e.name) for e in in_entries)
        stats = db.compact(full=True)
        out_entries = db.manifest.all_ssts()
        assert stats.jobs == 1
        assert stats.bytes_in == sum(e.info.file_size for e in in_entries) == in_disk
        assert stats.bytes_out == sum(e.info.file_size for e in out_entries)
        assert stats.bytes_out == sum(_store.size(db.path, "sst", e.name) for e in out_entries)
        assert stats.rows_in == in_rows
        assert stats.rows_out == sum(e.info.num_rows for e in out_entries) == len(rows_on_disk(db))
        assert stats.tombstones_dropped > 0 and stats.versions_dropped > 0
        assert stats.tombstones_dropped <= in_tombstones
        # every input row is accounted for: kept, shadowed, or a dropped tombstone
        assert stats.rows_in == stats.rows_out + stats.versions_dropped + stats.tombstones_dropped
        assert stats.seconds > 0
        first = stats
        fill(db, 2, first=4)
        second = db.compact(full=True)
        total = db.compaction_stats
        assert total.jobs == 2
        for f in ("bytes_in", "bytes_out", "rows_in", "rows_out", "tombstones_dropped", "versions_dropped"):
            assert getattr(total, f) == getattr(first, f) + getattr(second, f), f
        assert total.seconds == pytest.approx(first.seconds + second.seconds)
        assert total.to_dict()["bytes_out"] == total.bytes_out


class _DropD(CompactionFilter):
    def filter(self, entry):
        return Decision.DROP if entry.key.startswith(b"d") else Decision.KEEP


class DropDFactory(CompactionFilterFactory):
    def create(self, ctx):
        return _DropD()


def test_every_input_row_is_accounted_for(open_db):
    clock = lsm.ManualClock(0)
    with open_db(clock, compaction_filters=[DropDFactory()]) as db:
        for r in range(3):
            for i in range(40):
                k = b"abcd"[i % 4 : i % 4 + 1] + b"%02d" % i
                if (i + r) % 5 == 0:
                    db.delete(k)
                else:
                    db.put(k, b"v%d" % r, ttl=10 if i % 3 == 0 else None)
            db.flush()
        clock.advance(20)
        s = db.compact(full=True)
        dropped_by_filters = sum(c.dropped for c in s.filters.values())
        assert s.filters["ttl"].removed > 0 and dropped_by_filters > 0 and s.tombstones_dropped > 0
        assert s.rows_in == (
            s.rows_out + s.versions_dropped + s.tombstones_dropped + s.expired_dropped + dropped_by_filters
        )
        assert s.rows_out == len(rows_on_disk(db)) == len(list(db.scan()))


def test_write_amplification_grows_above_one_with_compactions(open_db):
    with open_db(l0_compaction_threshold=2) as db:
        assert db.write_amplification() == 0.0
        fill(db, 3)
        before = db.write_amplification()
        db.compact(full=True)
        fill(db, 2, first=3)
        db.compact(full=True)
        after = db.write_amplification()
        assert after > 1
        assert after > before
        expected = (db.flush_bytes_written + db.compaction_stats.bytes_out) / db.user_bytes_written
        assert after == pytest.approx(expected)


# -- background compaction ------------------------------------------------------------------------------


def test_background_compaction_eventually_compacts_l0(open_db):
    with open_db(background_compaction=True, l0_compaction_threshold=3) as db:
        model = fill(db, 5)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            m = db.manifest
            if len(m.l0) < 3 and m.runs:
                break
            time.sleep(0.01)
        else:
            pytest.fail(f"background compaction did not compact L0: {db.lsm_shape()}")
        assert db.compaction_stats.jobs >= 1
        assert db.compaction_error is None
        assert dict(db.scan()) == model


# -- input files: deleted after commit and after the last reader --------------------------------------


class _CheckInputs(CompactionFilter):
    def __init__(self, owner, ctx):
        self.owner, self.ctx = owner, ctx
        self.checked = False

    def filter(self, entry):
        if not self.checked:
            self.checked = True
            db = self.owner.db
            live = {e.name: e.info for e in db.manifest.all_ssts()}
            for info in self.ctx.inputs:
                names = [n for n, i in live.items() if i == info]
                self.owner.seen.append(bool(names) and all(db.store.storage.exists(db.sst_path(n)) for n in names))
        return Decision.KEEP


class CheckInputsFactory(CompactionFilterFactory):
    """While a job runs, its inputs must still be referenced by the manifest and present on disk."""

    def __init__(self):
        self.db = None
        self.seen = []

    def create(self, ctx):
        return _CheckInputs(self, ctx)


def test_inputs_stay_until_the_job_commits(open_db):
    f = CheckInputsFactory()
    with open_db(l0_compaction_threshold=2, compaction_filters=[f]) as db:
        f.db = db
        fill(db, 4)
        inputs = sst_files(db)
        db.compact(full=True)
        assert f.seen and all(f.seen)
        assert not set(inputs) & set(sst_files(db))  # deleted once committed (no reader holds them)


def test_inputs_outlive_an_open_iterator(open_db):
    with open_db(l0_compaction_threshold=2) as db:
        model = fill(db, 4, keys=300)
        inputs = set(sst_files(db))
        it = db.scan()
        head = [next(it) for _ in range(50)]
        db.compact(full=True)
        assert inputs <= set(sst_files(db)), "an input file was deleted under an open iterator"
        assert db.compact(full=True).jobs == 1  # another job meanwhile: still fine
        assert inputs <= set(sst_files(db))
        rest = list(it)  # the iterator finishes on the state it started on
        assert dict(head + rest) == model
        assert len(head + rest) == len(model)
        # exhausted: the old files go now
        assert not inputs & set(sst_files(db))
        assert set(sst_files(db)) == {e.name for e in db.manifest.all_ssts()}


def test_closing_a_partly_read_iterator_releases_its_files(open_db):
    with open_db(l0_compaction_threshold=2) as db:
        fill(db, 3)
        inputs = set(sst_files(db))
        it = db.scan(reverse=True)
        next(it)
        snap = db.snapshot()
        sit = snap.scan()
        next(sit)
        db.compact(full=True)
        assert inputs <= set(sst_files(db))
        it.close()
        assert inputs <= set(sst_files(db))  # the snapshot's iterator still reads them
        sit.close()
        assert not inputs & set(sst_files(db))
        snap.close()


def test_an_iterator_dropped_before_its_first_row_does_not_pin_files(open_db):
    with open_db(l0_compaction_threshold=2) as db:
        fill(db, 3)
        inputs = set(sst_files(db))
        it = db.scan()
        del it
        pygc.collect()
        db.compact(full=True)
        assert not inputs & set(sst_files(db)), "a never-read iterator kept compacted files alive"
        it = db.scan()  # created, not started, dropped after the compaction
        db.put(b"x", b"y")
        db.flush()
        db.compact(full=True)
        before = set(sst_files(db))
        del it
        pygc.collect()
        db.put(b"x2", b"y")
        db.flush()
        db.compact(full=True)
        assert not before & set(sst_files(db))


def test_readers_never_see_a_half_applied_compaction(open_db, backend):
    rounds = 8 if backend == "s3" else 16  # each of a reader's scans is many requests on S3
    with open_db(l0_compaction_threshold=2, target_sst_bytes=1024, size_ratio=4.0) as db:
        model = fill(db, 4, keys=120)
        deleted = [b"key%03d" % i for i in range(120) if b"key%03d" % i not in model]
        stop = threading.Event()
        errors = []
        scans = [0]

        def reader():
            try:
                while not stop.is_set():
                    got = dict(db.scan())
                    if got != model:
                        errors.append(("scan", sorted(set(got.items()) ^ set(model.items()))[:5]))
                    rev = list(db.scan(reverse=True))
                    if dict(rev) != model or [k for k, _ in rev] != sorted(model, reverse=True):
                        errors.append(("reverse", len(rev)))
                    for k in list(model)[::9] + deleted[::5]:
                        if db.get(k) != model.get(k):
                            errors.append(("get", k))
                    scans[0] += 1
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(("raised", repr(e)))

        t = threading.Thread(target=reader)
        t.start()
        try:
            for r in range(rounds):
                # rewrite the same contents: new versions and tombstones, the model does not change
                for k in list(model)[r % 4 :: 4]:
                    db.put(k, model[k])
                for k in deleted[r % 3 :: 3]:
                    db.delete(k)
                db.flush()
                db.compact(full=(r % 3 == 2))
                time.sleep(0.005)
        finally:
            stop.set()
            t.join()
        assert errors == []
        assert scans[0] > 3
        assert db.compaction_stats.jobs >= 5


# -- gc of unreferenced files ---------------------------------------------------------------------------
# gc ages a file by the store's clock (Storage.now) against the file's modification time. An object's time
# is the server's and cannot be set back, so these tests move the store's clock instead of the files' times.


def _store_clock_at(monkeypatch, db, seconds):
    """Stop the clock `db`'s store ages its files by at `seconds` since the epoch."""
    monkeypatch.setattr(db.store.storage, "now", lambda: seconds)


def _mtimes(db):
    return db.store.storage.list_mtimes(db.store.paths.sst_dir)


def _write_newer(db, name, data, than):
    """Write sst/`name` until the store stamps it at least 50 ms after `than` (seconds since the epoch):
    time stamps have a resolution of the store's own (a whole second on some object stores). Returns the
    file's modification time."""
    deadline = time.monotonic() + 10
    while True:
        _store.write(db.path, "sst", name, data)
        mtime = _mtimes(db)[name]
        if mtime >= than + 0.05:
            return mtime
        assert time.monotonic() < deadline, f"the store stamps {name} at {mtime}, not after {than}"
        time.sleep(0.05)


def test_gc_removes_old_unreferenced_files_and_never_a_referenced_one(open_db, monkeypatch):
    with open_db(l0_compaction_threshold=2) as db:
        model = fill(db, 4)
        db.compact()
        fill(db, 1, model=model, first=4)
        live = {e.name for e in db.manifest.all_ssts()}
        some = _store.read(db.path, "sst", sorted(live)[0])
        _store.write(db.path, "sst", "leftover-old.sst", some)
        _store.write(db.path, "sst", "notes.txt", b"not an sst")
        old = max(_mtimes(db).values())  # everything old, referenced files too
        now = _write_newer(db, "leftover-new.sst", some, old)
        _store_clock_at(monkeypatch, db, now)
        removed = db.gc(grace_ms=int((now - old) * 1000) // 2)  # older than the grace: all but leftover-new
        assert removed == ["leftover-old.sst"]
        assert set(sst_files(db)) == live | {"leftover-new.sst"}
        assert "notes.txt" in _store.names(db.path, "sst")
        # the default grace period (DbOptions.gc_grace_ms) spares a fresh file
        assert db.gc() == []
        # with no grace at all, still only unreferenced files go
        assert db.gc(grace_ms=0) == ["leftover-new.sst"]
        assert set(sst_files(db)) == live
        assert dict(db.scan()) == model
    with open_db() as db:
        assert dict(db.scan()) == model


def test_gc_spares_files_an_open_iterator_still_reads(open_db):
    with open_db(l0_compaction_threshold=2) as db:
        model = fill(db, 3)
        inputs = set(sst_files(db))
        it = db.scan()
        next(it)
        db.compact(full=True)
        assert db.gc(grace_ms=0) == []
        assert inputs <= set(sst_files(db))
        assert len(list(it)) == len(model) - 1
        assert not inputs & set(sst_files(db))


def test_gc_cleans_up_outputs_of_a_job_that_died_before_commit(open_db, monkeypatch):
    """A crash between writing outputs and committing leaves unreferenced files: gc removes them."""
    with open_db(l0_compaction_threshold=2) as db:
        model = fill(db, 3)
        live = set(sst_files(db))
        m = db.manifest
        plan = scheduler.pick_full(m.l0, m.runs)
        job = db.engine.compactor.make_job(plan, m, db.engine.now())
        from compaction.merge import run_job

        orphans = {n for n, _ in run_job(job).outputs}
        assert orphans and set(sst_files(db)) == live | orphans
        _store_clock_at(monkeypatch, db, max(_mtimes(db).values()) + 3_600)  # every file an hour old
        assert sorted(db.gc(grace_ms=1_000)) == sorted(orphans)
        assert set(sst_files(db)) == live
        assert dict(db.scan()) == model


# -- stateful model test ----------------------------------------------------------------------------------

KEYS = [b"a", b"b", b"c", b"d", b"e", b"f"]


class CompactionMachine(RuleBasedStateMachine):
    """put/delete/flush/compact/compact(full)/snapshot/advance clock against a dict model.

    The model maps key -> (value, expire_ts); a row is visible while now <= expire_ts. Snapshots keep a
    copy of the model; their reads judge expiry at the current time, as the engine does."""

    def __init__(self, root):
        super().__init__()
        self.root = root
        self.clock = lsm.ManualClock(10_000)
        self.opts = lsm.DbOptions(
            clock=self.clock,
            background_compaction=False,
            l0_compaction_threshold=2,
            memtable_bytes=1024,
            target_sst_bytes=1024,
        )
        self.db = lsm.DB.open(root, self.opts)
        self.model: dict[bytes, tuple[bytes, int | None]] = {}
        self.snaps: list[tuple[lsm.Snapshot, dict]] = []

    def teardown(self):
        for s, _ in self.snaps:
            s.close()
        self.db.close()

    def _visible(self, model):
        now = self.clock.now()
        return {k: v for k, (v, exp) in model.items() if exp is None or now <= exp}

    @rule(key=st.sampled_from(KEYS), value=st.binary(min_size=0, max_size=40),
          ttl=st.none() | st.integers(0, 300))
    def put(self, key, value, ttl):
        self.db.put(key, value, ttl=ttl)
        self.model[key] = (value, None if ttl is None else self.clock.now() + ttl)

    @rule(key=st.sampled_from(KEYS))
    def delete(self, key):
        self.db.delete(key)
        self.model.pop(key, None)

    @rule()
    def flush(self):
        self.db.flush()

    @rule()
    def compact(self):
        self.db.compact()

    @rule()
    def compact_full(self):
        self.db.flush()
        self.db.compact(full=True)
        m = self.db.manifest
        assert m.l0 == () and len(m.runs) <= 1
        if not self.snaps:
            # nothing pins history: one live, unexpired row per visible-or-not-yet-purged key
            now = self.clock.now()
            rows = rows_on_disk(self.db)
            assert all(r[4] is not None and (r[3] is None or now <= r[3]) for r in rows), rows
            assert sorted(r[0] for r in rows) == sorted(self._visible(self.model))

    @precondition(lambda self: len(self.snaps) < 3)
    @rule()
    def snapshot(self):
        self.snaps.append((self.db.snapshot(), dict(self.model)))

    @precondition(lambda self: self.snaps)
    @rule(i=st.integers(0, 2))
    def release(self, i):
        s, _ = self.snaps.pop(i % len(self.snaps))
        s.close()

    @rule(ms=st.sampled_from([1, 50, 150, 400]))
    def advance(self, ms):
        self.clock.advance(ms)

    @precondition(lambda self: not self.snaps)
    @rule()
    def reopen(self):
        self.db.close()
        self.db = lsm.DB.open(self.root, self.opts)

    @invariant()
    def reads_match_model(self):
        want = self._visible(self.model)
        assert dict(self.db.scan()) == want
        for k in KEYS:
            assert self.db.get(k) == want.get(k), k
        for s, m in self.snaps:
            assert dict(s.scan()) == self._visible(m)
            for k in KEYS:
                assert s.get(k) == self._visible(m).get(k), k

    @invariant()
    def files_match_manifest(self):
        # no open iterators between steps and the flush thread idle: exactly the referenced files
        self.db.engine.flusher.wait_flushed()
        assert sst_files(self.db) == sorted(e.name for e in self.db.manifest.all_ssts())


def test_compaction_model(backend, new_root):
    """The machine on the test's backend, each example on a store of its own (fewer examples on S3,
    where an example takes ~2 s of requests)."""
    fresh = (f"model{n}" for n in itertools.count())
    examples = 5 if backend == "s3" else 30
    run_state_machine_as_test(
        lambda: CompactionMachine(new_root(next(fresh))),
        settings=settings(
            max_examples=min(examples, settings.default.max_examples),  # the fast profile's bound, if loaded
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
