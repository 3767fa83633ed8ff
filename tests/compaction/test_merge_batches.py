"""The batched merge (compaction/stream.py, compaction/merge.py) against the row-at-a-time reference.

`merge_batches` + `Resolver.run_batches` (what `run_job` and `flush_rows` use) must keep exactly the rows,
and count exactly the stats, of `merge_sources` + `group_versions` + `Resolver.resolve` key by key (the
documented rule); `SstOutput.write_batches` must write the files `SstOutput.write` writes. And a full
compaction streams: at most one input SST per source is open at a time, and the cyclic garbage collector
is back on after a job, failed or not.
"""

from __future__ import annotations

import gc
import itertools
import weakref

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compaction.stream as stream_mod
import storage.ssts
from compaction.filter import Reason, TtlFilter
from compaction.merge import (
    CompactionJob,
    CompactionStats,
    OutputSpec,
    Resolver,
    SstOutput,
    flush_rows,
    group_versions,
    merge_batches,
    merge_sources,
    run_job,
)
from formats.errors import CorruptionError
from formats.sst import SstReader
from storage.ssts import open_sst, write_sst
from tests import _store

TICK = 10_000


@st.composite
def sources(draw) -> list[list[tuple]]:
    """1-4 sorted sources over a small key space; seqs may repeat across sources (a duplicate version)."""
    out = []
    for _ in range(draw(st.integers(1, 4))):
        keys = sorted(draw(st.sets(st.sampled_from([b"k%02d" % i for i in range(40)]), max_size=30)))
        rows = []
        for k in keys:
            seqs = sorted(draw(st.sets(st.integers(1, 60), min_size=1, max_size=3)), reverse=True)
            for s in seqs:
                value = draw(st.one_of(st.none(), st.just(b"v%d" % s)))
                exp = draw(st.one_of(st.none(), st.integers(TICK - 50, TICK + 50)))
                if k.startswith(b"k0"):  # the protected prefix: the engine's own keys carry no TTL
                    exp = None
                rows.append((k, s, s * 100, exp, value))
        out.append(rows)
    return out


def blocks(rows: list[tuple], size: int) -> list[list[tuple]]:
    """A source cut into blocks of about `size` rows; a key may continue into the next block."""
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def reference(srcs, resolver_kw) -> tuple[list[tuple], dict]:
    stats = CompactionStats()
    r = Resolver(stats=stats, **resolver_kw)
    out = []
    for versions in group_versions(merge_sources(srcs)):
        stats.rows_in += len(versions)
        out += r.resolve(versions)
    return out, stats.to_dict()


resolver_kwargs = st.fixed_dictionaries(
    {
        "tick": st.just(TICK),
        "is_last_run": st.booleans(),
        "snapshots": st.lists(st.integers(1, 60), max_size=2).map(sorted),
        "retention_cutoff": st.one_of(st.none(), st.integers(0, 6000)),
        "filters": st.sampled_from([(), (TtlFilter(TICK),)]),
        "protected_prefix": st.sampled_from([None, b"k0"]),
    }
)


@settings(max_examples=75, deadline=None)
@given(srcs=sources(), kw=resolver_kwargs, block=st.integers(1, 7), batch=st.sampled_from([1, 3, 1024]))
def test_batched_merge_keeps_and_counts_what_the_reference_does(srcs, kw, block, batch):
    want, want_stats = reference(srcs, kw)
    old = stream_mod._BATCH_ROWS
    stream_mod._BATCH_ROWS = batch
    try:
        stats = CompactionStats()
        r = Resolver(stats=stats, **kw)
        got_batches = list(r.run_batches(merge_batches([blocks(s, block) for s in srcs])))
        # Resolver.run (the row-stream entry) over the same merged stream
        stats2 = CompactionStats()
        got_run = list(Resolver(stats=stats2, **kw).run(merge_sources(srcs)))
    finally:
        stream_mod._BATCH_ROWS = old
    got = list(itertools.chain.from_iterable(got_batches))
    assert got == want
    assert stats.to_dict() == want_stats
    assert got_run == want
    assert stats2.to_dict() == want_stats
    keys_per_batch = [{row[0] for row in b} for b in got_batches]  # no key is split between two batches
    for a, b in itertools.combinations(keys_per_batch, 2):
        assert not a & b


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(1, 400),
    target=st.sampled_from([None, 300, 2000, 9000]),
    batch=st.integers(1, 60),
    data=st.data(),
)
def test_write_batches_writes_the_files_write_writes(tmp_path_factory, n, target, batch, data):
    rows = []
    for i in range(n):
        versions = data.draw(st.integers(1, 2), label="versions")
        for v in range(versions):
            rows.append((b"key%05d" % i, 1000 - v, 50 + i, None, None if v else b"x" * (i % 70)))
    d = tmp_path_factory.mktemp("out")
    a = SstOutput(OutputSpec(str(d), "row", target_bytes=target, sync=False), 7).write(iter(rows))
    groups = list(group_versions(rows))
    cuts = [groups[i : i + batch] for i in range(0, len(groups), batch)]
    b = SstOutput(OutputSpec(str(d), "batch", target_bytes=target, sync=False), 7).write_batches(
        [list(itertools.chain.from_iterable(c)) for c in cuts]
    )
    assert [i for _, i in a] == [i for _, i in b]
    for (na, _), (nb, _) in zip(a, b, strict=True):
        with open(d / na, "rb") as fa, open(d / nb, "rb") as fb:
            assert fa.read() == fb.read()


def _job(tmp_path, srcs_paths, last=True, out=None) -> CompactionJob:
    """A job over the SSTs at `srcs_paths` (local files or a store's), its outputs to `out` (a directory
    or URL that exists; default tmp/out)."""
    infos = []
    for paths in srcs_paths:
        for p in paths:
            with open_sst(p) as r:
                infos.append(r.info)
    if out is None:
        out = tmp_path / "out"
        out.mkdir(exist_ok=True)
    return CompactionJob(
        sources=tuple(tuple(p) for p in srcs_paths),
        inputs=tuple(infos),
        is_last_run=last,
        tick=TICK,
        reason=Reason.MANUAL,
        output=OutputSpec(str(out), "c", target_bytes=4096, sync=False),
    )


def _runs(where, nruns=3, files=4, per_file=50) -> list[list[str]]:
    """`nruns` sorted runs of `files` SSTs each, written to `where` (a directory or URL that exists)."""
    srcs = []
    for r in range(nruns):
        paths = []
        for f in range(files):
            p = f"{where}/r{r}-{f}.sst"
            rows = []
            for i in range(per_file):
                k = b"k%06d" % ((f * per_file + i) * nruns + r)
                rows.append((k, 1000 - r, 10, None, b"v" * 20))
            write_sst(p, rows, sync=False)
            paths.append(p)
        srcs.append(paths)
    return srcs


@pytest.fixture
def sst_dir(db_root) -> str:
    """The sst/ of a fresh database on the test's backend: where a compaction's inputs and outputs are."""
    store = _store.store(db_root)
    store.storage.makedirs(store.paths.sst_dir)
    return store.paths.sst_dir


def test_full_compaction_opens_one_sst_per_source_at_a_time(tmp_path, sst_dir, monkeypatch):
    """Inputs and outputs in a database's sst/, on every backend."""
    srcs = _runs(sst_dir)
    job = _job(tmp_path, srcs, out=sst_dir)  # its input metadata read before, as the manifest holds it
    live = {"now": 0, "max": 0, "opened": 0}

    class Counting(SstReader):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            live["now"] += 1
            live["opened"] += 1
            live["max"] = max(live["max"], live["now"])

        def close(self):
            live["now"] -= 1
            super().close()

    monkeypatch.setattr(storage.ssts, "SstReader", Counting)  # what open_sst builds
    result = run_job(job)
    assert live["now"] == 0
    assert live["opened"] == sum(map(len, srcs))  # each of the 12 input files opened exactly once
    assert live["max"] <= len(srcs)  # at most one per source at a time, never all 12 at once
    assert result.stats.rows_in == result.stats.rows_out == 3 * 4 * 50
    rows = []
    for name, _ in result.outputs:
        with open_sst(f"{sst_dir}/{name}") as r:
            rows += list(r)
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)


def test_input_readers_are_freed_without_the_cyclic_collector(tmp_path, sst_dir, monkeypatch):
    """The collector is paused during a merge: a reader caught in a reference cycle would keep its index
    and filter in memory until the job ends. Each must be freed by reference counting alone, also over
    an object store's views (inputs in a database's sst/ on every backend)."""
    srcs = _runs(sst_dir, nruns=2, files=3, per_file=20)
    job = _job(tmp_path, srcs, out=sst_dir)  # its input metadata read before, as the manifest holds it
    refs = []

    class Tracked(SstReader):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            refs.append(weakref.ref(self))

    monkeypatch.setattr(storage.ssts, "SstReader", Tracked)  # what open_sst builds
    gc.disable()
    try:
        run_job(job)
        assert len(refs) == 6
        assert [r() for r in refs] == [None] * 6
    finally:
        gc.enable()


def test_gc_is_back_on_after_a_job_and_after_a_failed_one(tmp_path):
    srcs = _runs(tmp_path, nruns=2, files=1, per_file=5)
    assert gc.isenabled()
    run_job(_job(tmp_path, srcs))
    assert gc.isenabled()
    job = _job(tmp_path, srcs)  # its input metadata read before the damage, as the manifest holds it
    with open(srcs[0][0], "r+b") as f:  # damage a data block of the first source: the job fails
        f.seek(10)
        f.write(b"\xff\xff\xff\xff")
    with pytest.raises(CorruptionError):
        run_job(job)
    assert gc.isenabled()
    gc.disable()
    try:
        flush_rows([(b"a", 1, 1, None, b"x")], OutputSpec(str(tmp_path), "f", sync=False), tick=5)
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()
