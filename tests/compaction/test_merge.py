"""The one merge (compaction/merge.py): version resolution, filters, the oldest-run rule, SST output.

Rows are ``(key, seq, ts, expire_ts, value)``; value None is a tombstone. Every worked example of the
module docstring's table is a test below, through `Resolver.resolve` and (for a few) through `run_job`
on real SST files; a hypothesis property checks that resolution never changes what any reader sees.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.filter import (
    CompactionFilter,
    CompactionFilterFactory,
    Decision,
    Reason,
    TtlFilter,
)
from compaction.merge import (
    CompactionJob,
    CompactionStats,
    OutputSpec,
    Resolver,
    SstOutput,
    run_job,
)
from formats.sst import SstWriter, write_sst
from storage.registry import storage_for
from storage.ssts import open_sst
from tests import _store

TICK = 1_000
K = b"k"


def val(seq: int, value: bytes, ts: int | None = None) -> tuple:
    """A live version with no TTL; ts defaults to seq * 10 (ts grows with seq, as the engine's clock)."""
    return (K, seq, seq * 10 if ts is None else ts, None, value)


def tomb(seq: int) -> tuple:
    return (K, seq, seq * 10, None, None)


def expired(seq: int, value: bytes = b"e") -> tuple:
    """A version whose expire_ts lies before TICK: expired at the compaction tick."""
    return (K, seq, seq * 10, seq * 10 + 5, value)


def resolve(versions, snapshots=(), last=False, *, tick=TICK, filters=None, stats=None):
    r = Resolver(
        tick=tick,
        is_last_run=last,
        snapshots=snapshots,
        filters=[TtlFilter(tick)] if filters is None else filters,
        stats=stats,
    )
    return r.resolve(list(versions))


# -- the docstring's worked examples ------------------------------------------------------------------


def test_shadowed_version_dropped_without_snapshot():
    stats = CompactionStats()
    assert resolve([val(9, b"b"), val(5, b"a")], stats=stats) == [val(9, b"b")]
    assert stats.versions_dropped == 1


def test_snapshot_between_versions_keeps_older():
    assert resolve([val(9, b"b"), val(5, b"a")], [7]) == [val(9, b"b"), val(5, b"a")]


def test_tombstone_kept_when_not_oldest_run():
    stats = CompactionStats()
    assert resolve([tomb(9), val(5, b"a")], stats=stats) == [tomb(9)]
    assert stats.tombstones_dropped == 0


def test_tombstone_and_shadowed_dropped_in_oldest_run():
    stats = CompactionStats()
    assert resolve([tomb(9), val(5, b"a")], last=True, stats=stats) == []
    assert stats.tombstones_dropped == 1
    assert stats.versions_dropped == 1


def test_snapshot_keeps_tombstone_and_older_in_oldest_run():
    assert resolve([tomb(9), val(5, b"a")], [7], last=True) == [tomb(9), val(5, b"a")]


def test_ttl_filter_turns_expired_row_into_tombstone_keeping_ts():
    stats = CompactionStats()
    out = resolve([expired(9)], stats=stats)
    assert out == [(K, 9, 90, 95, None)]  # same seq, ts and expire_ts (for the purge lag), no value
    assert stats.filters["ttl"].removed == 1


def test_ttl_tombstone_dropped_in_oldest_run():
    stats = CompactionStats()
    assert resolve([expired(9)], last=True, stats=stats) == []
    assert stats.filters["ttl"].removed == 1
    assert stats.tombstones_dropped == 1


def test_expired_old_version_invisible_to_snapshot_dropped_in_oldest_run():
    stats = CompactionStats()
    assert resolve([val(9, b"b"), expired(5)], [7], last=True, stats=stats) == [val(9, b"b")]
    assert stats.expired_dropped == 1


def test_filters_skip_version_a_snapshot_sees():
    assert resolve([expired(9)], [10]) == [expired(9)]


def test_row_expiring_exactly_at_tick_is_not_expired():
    row = (K, 9, 90, TICK, b"v")  # expired when tick > expire_ts, so not yet
    assert resolve([row]) == [row]
    assert resolve([row], last=True) == [row]
    assert resolve([row], tick=TICK + 1) == [(K, 9, 90, TICK, None)]


def test_snapshot_at_exact_seq_sees_that_version():
    # snapshot 5 reads 5:a (seq <= 5), snapshot 9 reads 9:b: both kept; 3:z shares 5:a's stripe.
    assert resolve([val(9, b"b"), val(5, b"a"), val(3, b"z")], [5, 9]) == [val(9, b"b"), val(5, b"a")]


def test_history_retention_keeps_versions_current_after_cutoff():
    # cutoff 60: 5:a (ts 50) was current until 9:b was written at ts 90 > 60, so as-of reads need it;
    # 3:z was replaced at ts 50 <= 60 and is dropped.
    r = Resolver(tick=TICK, is_last_run=False, retention_cutoff=60)
    assert r.resolve([val(9, b"b"), val(5, b"a"), val(3, b"z")]) == [val(9, b"b"), val(5, b"a")]


# -- filters in the resolver ------------------------------------------------------------------------


class _Fn(CompactionFilter):
    def __init__(self, fn, name="fn"):
        self.fn = fn
        self._name = name
        self.seen = []

    @property
    def name(self):
        return self._name

    def filter(self, entry):
        self.seen.append(entry)
        return self.fn(entry)


def test_user_filters_run_after_ttl_and_in_order():
    first = _Fn(lambda e: Decision.change_value(e.value + b"1"), "first")
    second = _Fn(lambda e: Decision.change_value(e.value + b"2"), "second")
    stats = CompactionStats()
    filters = [TtlFilter(TICK), first, second]
    out = resolve([val(9, b"v")], filters=filters, stats=stats)
    assert out == [(K, 9, 90, None, b"v12")]
    assert [e.value for e in second.seen] == [b"v1"]
    # an expired row is removed by TTL first: the user filters never see it
    out = resolve([(b"x", 8, 80, 85, b"old")], filters=filters, stats=stats)
    assert out == [(b"x", 8, 80, 85, None)]
    assert [e.key for e in first.seen] == [K]
    assert stats.filters["first"].changed == 1 and stats.filters["second"].changed == 1
    assert stats.filters["ttl"].removed == 1


def test_remove_keeps_seq_and_ts_and_later_filters_do_not_run():
    later = _Fn(lambda e: Decision.KEEP)
    f = _Fn(lambda e: Decision.REMOVE)
    out = resolve([(K, 9, 90, 5_000, b"v")], filters=[f, later])
    assert out == [(K, 9, 90, None, None)]
    assert later.seen == []


def test_drop_leaves_no_row_and_older_versions_surface():
    f = _Fn(lambda e: Decision.DROP)
    stats = CompactionStats()
    assert resolve([val(9, b"b")], filters=[f], stats=stats) == []
    # with a snapshot keeping 5:a, dropping 9:b lets the latest read fall through to 5:a
    assert resolve([val(9, b"b"), val(5, b"a")], [7], filters=[f]) == [val(5, b"a")]
    assert stats.filters["fn"].dropped == 1


def test_filters_never_see_tombstones():
    f = _Fn(lambda e: Decision.KEEP)
    resolve([tomb(9), val(5, b"a")], filters=[f])
    assert f.seen == []


# -- property: resolution never changes what a reader sees -------------------------------------------


@st.composite
def key_history(draw):
    n = draw(st.integers(1, 6))
    seqs = sorted(draw(st.sets(st.integers(1, 40), min_size=n, max_size=n)), reverse=True)
    ts_steps = draw(st.lists(st.integers(0, 20), min_size=n, max_size=n))
    ts = 100
    ts_by_seq = {}
    for s, step in zip(sorted(seqs), ts_steps, strict=True):  # ts never decreases as seq grows
        ts += step
        ts_by_seq[s] = ts
    versions = []
    for s in seqs:
        kind = draw(st.sampled_from(["value", "tombstone", "ttl"]))
        t = ts_by_seq[s]
        if kind == "tombstone":
            versions.append((K, s, t, None, None))
        elif kind == "ttl":
            versions.append((K, s, t, t + draw(st.integers(0, 60)), b"v%d" % s))
        else:
            versions.append((K, s, t, None, b"v%d" % s))
    return versions


def _visible(versions, snap):
    """The version a read at seq `snap` (None = latest) finds: the newest with seq <= snap."""
    for v in versions:
        if snap is None or v[1] <= snap:
            return v
    return None


def _result(v, now):
    """What the reader gets from that version at time `now`: tombstones and expired rows are absent."""
    if v is None or v[4] is None or (v[3] is not None and now > v[3]):
        return None
    return v[4]


def _as_of(versions, t):
    """The version an as-of read at time `t` finds: the newest written at or before t."""
    return next((v for v in versions if v[2] <= t), None)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    versions=key_history(),
    snapshots=st.lists(st.integers(0, 42), max_size=4, unique=True),
    tick_extra=st.integers(0, 80),
    retention=st.none() | st.integers(0, 120),
    last=st.booleans(),
    ttl_filter=st.booleans(),
)
def test_resolve_preserves_every_readers_view(versions, snapshots, tick_extra, retention, last, ttl_filter):
    """For every snapshot (and the latest state) the visible version is the same before and after
    resolution; with the TTL filter or into the oldest run, what the reader gets is the same (tombstones
    and expired rows read as absent). With a history window, as-of reads back to the cutoff too."""
    tick = max(v[2] for v in versions) + tick_extra
    cutoff = None if retention is None else tick - retention
    expired_before = tick if cutoff is None else min(tick, cutoff)  # as make_filters builds the TTL filter
    filters = [TtlFilter(expired_before)] if ttl_filter else []
    r = Resolver(tick=tick, is_last_run=last, snapshots=snapshots, retention_cutoff=cutoff, filters=filters)
    out = r.resolve(list(versions))
    exact = not last and not ttl_filter
    # newest first, distinct seqs, nothing invented
    assert [v[1] for v in out] == sorted({v[1] for v in out}, reverse=True)
    assert {v[1] for v in out} <= {v[1] for v in versions}
    for snap in [*snapshots, None]:
        before, after = _visible(versions, snap), _visible(out, snap)
        if exact:
            assert after == before, f"snapshot {snap}"
        for now in (tick, tick + 30, tick + 1_000):  # reads happen at or after the tick
            assert _result(after, now) == _result(before, now), f"snapshot {snap} at {now}"
    if cutoff is not None:
        for t in range(cutoff, tick + 1):
            before, after = _as_of(versions, t), _as_of(out, t)
            if exact:
                assert after == before, f"as of {t}"
            assert _result(after, t) == _result(before, t), f"as of {t}"
    if last and out:
        # nothing lies beneath the oldest run: its bottom version is no tombstone and not expired
        bottom = out[-1]
        assert bottom[4] is not None
        assert not (bottom[3] is not None and expired_before > bottom[3])
    if not snapshots and cutoff is None:
        # without readers pinning history, one version per key is enough
        assert len(out) <= 1


# -- run_job on real SSTs ---------------------------------------------------------------------------
# A job's input SSTs are local files (they are input); its outputs go to a database's sst/ on the test's
# backend, as a compaction's, a Spark task's or a bulk load's do.


@pytest.fixture
def out_dir(db_root):
    """The sst/ directory of a fresh database root on the test's backend."""
    store = _store.store(db_root)
    store.storage.makedirs(store.paths.sst_dir)
    return store.paths.sst_dir


def _listed(directory):
    """Every name in `directory` (temporaries too), through the backend that serves it."""
    return sorted(storage_for(directory).list_names(directory))


def _sst(path, rows, creation=0):
    return write_sst(path, rows, creation_timestamp=creation, sync=False)


def _job(tmp_path, sources_rows, *, last, snapshots=(), filters=(), target=None, tick=TICK, outdir=None):
    """Write each source's rows to an SST under tmp/in and build a job with outputs to `outdir` (a
    directory or URL that exists; default tmp/out)."""
    indir = tmp_path / "in"
    indir.mkdir(exist_ok=True)
    if outdir is None:
        outdir = tmp_path / "out"
        outdir.mkdir(exist_ok=True)
    sources, infos = [], []
    for i, rows in enumerate(sources_rows):
        p = str(indir / f"src{i}.sst")
        infos.append(_sst(p, rows))
        sources.append((p,))
    spec = OutputSpec(directory=str(outdir), prefix="job", target_bytes=target, sync=False)
    return CompactionJob(
        sources=tuple(sources),
        inputs=tuple(infos),
        is_last_run=last,
        tick=tick,
        reason=Reason.MANUAL,
        output=spec,
        filters=tuple(filters),
        snapshots=tuple(snapshots),
    )


def _out_rows(job, result):
    rows = []
    for name, info in result.outputs:
        assert info.creation_timestamp == job.tick
        with open_sst(f"{job.output.directory}/{name}") as r:
            rows += list(r)
    return rows


@pytest.mark.parametrize(
    ("newer", "older", "snapshots", "last", "expected"),
    [
        ([val(9, b"b")], [val(5, b"a")], [7], False, [val(9, b"b"), val(5, b"a")]),
        ([tomb(9)], [val(5, b"a")], [], False, [tomb(9)]),
        ([tomb(9)], [val(5, b"a")], [], True, []),
        ([tomb(9)], [val(5, b"a")], [7], True, [tomb(9), val(5, b"a")]),
        ([val(9, b"b")], [expired(5)], [7], True, [val(9, b"b")]),
        ([expired(9)], [val(1, b"z", ts=5)], [], False, [(K, 9, 90, 95, None)]),
    ],
)
def test_worked_examples_through_run_job(tmp_path, out_dir, newer, older, snapshots, last, expected):
    job = _job(tmp_path, [newer, older], last=last, snapshots=snapshots, outdir=out_dir)
    result = run_job(job)
    assert _out_rows(job, result) == expected
    assert result.stats.rows_in == len(newer) + len(older)
    assert result.stats.rows_out == len(expected)
    assert result.stats.bytes_in == sum(i.file_size for i in job.inputs)
    if not expected:
        assert result.outputs == [] and _listed(job.output.directory) == []


def test_run_job_merges_many_keys_across_sources(tmp_path, out_dir):
    older = [(b"k%03d" % i, 1 + i, 10, None, b"old") for i in range(0, 100, 2)]
    newer = [(b"k%03d" % i, 200 + i, 20, None, b"new") for i in range(0, 100, 3)]
    newer = sorted(newer)
    job = _job(tmp_path, [newer, older], last=True, outdir=out_dir)
    rows = _out_rows(job, run_job(job))
    expect = {r[0]: r for r in older}
    expect.update({r[0]: r for r in newer})
    assert rows == [expect[k] for k in sorted(expect)]


# -- SstOutput ----------------------------------------------------------------------------------------


def _many_versions_rows():
    rows = []
    for k in range(40):
        nver = 1 + (k % 5) * 3  # some keys with many versions, so a key can straddle a target boundary
        for j in range(nver):
            rows.append((b"key%03d" % k, 10_000 - k * 50 - j, 5, None, b"x" * 40))
    return rows


def test_sst_output_splits_at_target_and_never_splits_a_key(tmp_path, out_dir):
    target = 1024
    spec = OutputSpec(directory=out_dir, prefix="o", target_bytes=target, sync=False)
    rows = _many_versions_rows()
    outputs = SstOutput(spec, creation_timestamp=77).write(iter(rows))
    assert len(outputs) > 3
    files = []
    for name, info in outputs:
        assert info.creation_timestamp == 77
        with open_sst(f"{out_dir}/{name}") as r:
            files.append(list(r))
    # all rows, in order, nothing lost or duplicated
    assert [row for f in files for row in f] == rows
    # consecutive files do not share a key: the run's SSTs never overlap
    for a, b in zip(files, files[1:], strict=False):
        assert a[-1][0] < b[0][0]
    # each file but the last was cut at the first key boundary once it reached the target
    for f in files[:-1]:
        last_key = f[-1][0]
        w_all, w_less = SstWriter(tmp_path / "probe1"), SstWriter(tmp_path / "probe2")  # sizes only
        for row in f:
            w_all.add(row)
            if row[0] != last_key:
                w_less.add(row)
        assert w_less.estimated_size < target <= w_all.estimated_size
    names = sorted(n for n, _ in outputs)
    assert _listed(out_dir) == names


def test_sst_output_without_target_writes_one_file(out_dir):
    spec = OutputSpec(directory=out_dir, prefix="o", target_bytes=None, sync=False)
    outputs = SstOutput(spec, creation_timestamp=1).write(iter(_many_versions_rows()))
    assert len(outputs) == 1
    assert _listed(out_dir) == [outputs[0][0]]


def test_sst_output_one_key_bigger_than_target_stays_in_one_file(out_dir):
    spec = OutputSpec(directory=out_dir, prefix="o", target_bytes=1024, sync=False)
    rows = [(b"a", 1, 1, None, b"a")]
    rows += [(b"big", 1000 - j, 1, None, b"y" * 100) for j in range(50)]  # ~6.6 KiB of one key
    rows += [(b"c", 1, 1, None, b"c")]
    outputs = SstOutput(spec, creation_timestamp=1).write(iter(rows))
    holding_big = [n for n, i in outputs if i.first_key <= b"big" <= i.last_key]
    assert len(holding_big) == 1
    with open_sst(f"{out_dir}/{holding_big[0]}") as r:
        assert sum(1 for row in r if row[0] == b"big") == 50


class _Boom(Exception):
    pass


class _RaiseAt(CompactionFilter):
    def __init__(self, key):
        self.key = key

    def filter(self, entry):
        if entry.key == self.key:
            raise _Boom(entry.key)
        return Decision.KEEP


class RaiseAtFactory(CompactionFilterFactory):
    def __init__(self, key):
        self.key = key

    def create(self, ctx):
        return _RaiseAt(self.key)


def test_failing_job_leaves_no_output_files(tmp_path, db_root):
    """On every backend: a job writing into a database's sst/ (a Spark or bulk-load task writing into an
    s3:// database too) removes what it wrote when it fails. Its input SSTs are local: they are input."""
    store = _store.store(db_root)
    store.storage.makedirs(store.paths.sst_dir)
    rows = [(b"k%04d" % i, 10_000 - i, 5, None, b"z" * 60) for i in range(400)]
    # fail late, after several output files (target 1 KiB) have been written
    job = _job(
        tmp_path, [rows], last=False, filters=[RaiseAtFactory(b"k0350")], target=1024, outdir=store.paths.sst_dir
    )
    with pytest.raises(_Boom):
        run_job(job)
    listed = lambda: store.storage.list_names(store.paths.sst_dir)  # noqa: E731 - temporaries too
    assert listed() == []
    # the same job without the failing filter writes many files: the failure really came late
    ok = _job(tmp_path, [rows], last=False, target=1024, outdir=store.paths.sst_dir)
    assert len(run_job(ok).outputs) > 5
    assert len(listed()) > 5


def test_failing_factory_leaves_no_output_files(tmp_path, out_dir):
    class Bad(CompactionFilterFactory):
        def create(self, ctx):
            raise _Boom("create")

    job = _job(tmp_path, [[val(1, b"a")]], last=False, filters=[Bad()], outdir=out_dir)
    with pytest.raises(_Boom):
        run_job(job)
    assert _listed(out_dir) == []
