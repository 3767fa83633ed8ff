"""`CompactionJob.report_changes` / `ChangeReporter`: the merge notes what became of each key's newest
input version when it did not come out unchanged, and writes exactly what the plain `Resolver` writes."""

from __future__ import annotations

import dataclasses
import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compaction.stream as stream_mod
from compaction.filter import TtlFilter
from compaction.merge import (
    ChangeReporter,
    CompactionStats,
    Resolver,
    group_versions,
    merge_batches,
    merge_sources,
    run_job,
)
from storage.ssts import open_sst
from tests import _store
from tests.compaction.test_merge import TICK, _job, expired, key_history, tomb, val
from tests.compaction.test_merge_batches import blocks, resolver_kwargs
from tests.compaction.test_merge_batches import sources as batch_sources


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    versions=key_history(),
    snapshots=st.lists(st.integers(0, 42), max_size=3, unique=True),
    tick_extra=st.integers(0, 80),
    last=st.booleans(),
)
def test_reporter_keeps_what_the_resolver_keeps_and_names_the_newest_change(versions, snapshots, tick_extra, last):
    tick = max(v[2] for v in versions) + tick_extra

    def make(cls, stats):
        return cls(tick=tick, is_last_run=last, snapshots=snapshots, filters=[TtlFilter(tick)], stats=stats)

    plain = make(Resolver, CompactionStats()).resolve(list(versions))
    stats = CompactionStats(changed_rows=[])
    reported = make(ChangeReporter, stats).resolve(list(versions))
    assert reported == plain
    v0 = versions[0]
    if plain and plain[0] == v0:
        assert stats.changed_rows == []
    else:  # dropped (None) or rewritten in place (the same seq)
        new = plain[0] if plain and plain[0][1] == v0[1] else None
        assert stats.changed_rows == [(v0[0], v0[1], new)]


def _rows(job, result):
    rows = []
    for name, _info in result.outputs:
        with open_sst(f"{job.output.directory}/{name}") as r:
            rows += list(r)
    return rows


def test_run_job_reports_only_when_asked_and_writes_the_same_rows(tmp_path, db_root):
    """The outputs go to a database's sst/ on every backend (the inputs are local files: input)."""
    store = _store.store(db_root)
    store.storage.makedirs(store.paths.sst_dir)
    newer = [(b"a", 9, 90, None, None), (b"b", 8, 80, 85, b"e"), (b"c", 7, 70, None, b"c7")]
    older = [(b"a", 2, 20, None, b"a2"), (b"c", 3, 30, None, b"c3"), (b"d", 4, 40, None, b"d4")]
    job = _job(tmp_path, [newer, older], last=True, outdir=store.paths.sst_dir)
    plain = run_job(job)
    assert plain.stats.changed_rows is None
    asked = dataclasses.replace(job, report_changes=True, output=dataclasses.replace(job.output, prefix="asked"))
    result = run_job(asked)
    assert _rows(asked, result) == _rows(job, plain) == [(b"c", 7, 70, None, b"c7"), (b"d", 4, 40, None, b"d4")]
    # a's delete and b's expired row are purged in the oldest run; c's older version is no newest row
    assert result.stats.changed_rows == [(b"a", 9, None), (b"b", 8, None)]
    # per job, never summed into the DB's totals
    total = CompactionStats().add(result.stats)
    assert total.changed_rows is None


def test_ttl_filter_rewrite_is_reported_with_the_new_row(tmp_path):
    job = _job(tmp_path, [[expired(9)], [val(1, b"z", ts=5)]], last=False)
    result = run_job(dataclasses.replace(job, report_changes=True))
    assert result.stats.changed_rows == [(b"k", 9, (b"k", 9, 90, 95, None))]
    (tmp_path / "t").mkdir()
    job = _job(tmp_path / "t", [[tomb(9)], [val(5, b"a")]], last=False)
    assert run_job(dataclasses.replace(job, report_changes=True)).stats.changed_rows == []
    assert TICK > 95


class _CountingReporter(ChangeReporter):
    """Counts the keys that went through the key-by-key `resolve` (not the batched path)."""

    keyed = 0

    def resolve(self, versions):
        self.keyed += 1
        return super().resolve(versions)


@settings(max_examples=75, deadline=None)
@given(
    srcs=batch_sources(),
    kw=resolver_kwargs,
    fast=st.booleans(),
    block=st.integers(1, 7),
    batch=st.sampled_from([1, 3, 1024]),
)
def test_batched_path_reports_exactly_what_the_key_by_key_path_reports(srcs, kw, fast, block, batch):
    if fast:  # no snapshot, no history window: run_batches takes the batched `_resolve_batch`
        kw = {**kw, "snapshots": [], "retention_cutoff": None}
    want_stats = CompactionStats(changed_rows=[])
    ref = ChangeReporter(stats=want_stats, **kw)
    want = []
    for versions in group_versions(merge_sources(srcs)):
        want_stats.rows_in += len(versions)
        want += ref.resolve(versions)
    old = stream_mod._BATCH_ROWS
    stream_mod._BATCH_ROWS = batch
    try:
        stats = CompactionStats(changed_rows=[])
        r = _CountingReporter(stats=stats, **kw)
        got = list(itertools.chain.from_iterable(r.run_batches(merge_batches([blocks(s, block) for s in srcs]))))
    finally:
        stream_mod._BATCH_ROWS = old
    assert got == want
    assert stats.changed_rows == want_stats.changed_rows
    assert stats.to_dict() == want_stats.to_dict()
    if fast:
        assert r.keyed == 0  # the batched path noted the changes itself
    # and the plain resolver keeps the same rows, counts the same, and notes nothing
    plain = CompactionStats()
    plain_batches = Resolver(stats=plain, **kw).run_batches(merge_batches([blocks(s, block) for s in srcs]))
    assert list(itertools.chain.from_iterable(plain_batches)) == want
    assert plain.changed_rows is None
    assert {**plain.to_dict(), "changed_rows": None} == {**want_stats.to_dict(), "changed_rows": None}


def test_run_job_reports_through_the_batched_path(tmp_path, monkeypatch):
    """A job with only the TTL filter and no snapshot reports its changes without `resolve` key by key."""
    calls = []
    monkeypatch.setattr(ChangeReporter, "resolve", lambda self, v: calls.append(v) or Resolver.resolve(self, v))
    newer = [(b"a", 9, 90, None, None), (b"b", 8, 80, 85, b"e"), (b"c", 7, 70, None, b"c7")]
    older = [(b"a", 2, 20, None, b"a2"), (b"c", 3, 30, None, b"c3"), (b"d", 4, 40, None, b"d4")]
    job = _job(tmp_path, [newer, older], last=True)
    result = run_job(dataclasses.replace(job, report_changes=True))
    assert result.stats.changed_rows == [(b"a", 9, None), (b"b", 8, None)]
    assert calls == []
    (tmp_path / "t").mkdir()
    job = _job(tmp_path / "t", [[expired(9)], [val(1, b"z", ts=5)]], last=False)
    assert run_job(dataclasses.replace(job, report_changes=True)).stats.changed_rows == [
        (b"k", 9, (b"k", 9, 90, 95, None))
    ]
    assert calls == []
