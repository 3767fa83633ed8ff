"""The columnar merge (compaction/columnar.py, `SstOutput.write_stream`) against the row merge.

`run_job` with rounds of alike arrays resolved in numpy must write the same SST files, byte for byte, and
return the same stats (counts, history floor, the purge-lag histogram) as `run_job(columnar=False)`, the
row path, on random inputs: snapshots, a history window, tombstones (ragged arrays), values of another
length (a group read as rows, so rounds mix both paths), TTLs on and next to the expiry boundary, keys with NUL and 0xFF bytes,
a protected prefix, the oldest run or not, a Spark task's key range, outputs cut at small target sizes.
"""

from __future__ import annotations

import dataclasses
import os
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compaction.columnar as columnar_mod
import compaction.merge as merge_mod
import compaction.output as output_mod
from compaction.filter import Reason
from compaction.merge import CompactionJob, OutputSpec, run_job
from compaction.output import SstOutput
from formats.sst import SstWriter
from storage import storage_for
from storage.ssts import open_sst
from tests.formats._records import records_of

TICK = 10_000
ALPHABET = [0x00, 0x01, 0x7F, 0xFE, 0xFF]
# expiries around the tick (the TTL filter's boundary: expired once tick > expire_ts) and the cutoff
EXPIRIES = st.one_of(
    st.sampled_from([TICK - 1, TICK, TICK + 1, 4999, 5000, 5001]), st.integers(TICK - 300, TICK + 300)
)


@st.composite
def sources(draw) -> list[list[list[tuple]]]:
    """1-4 sources, newest first, each 1-2 SSTs of rows over 3-byte keys (NUL/0xFF bytes included)."""
    width = 3
    vlen = draw(st.sampled_from([0, 4, 9]))
    keyspace = st.tuples(*[st.sampled_from(ALPHABET)] * width).map(bytes)
    out = []
    for _ in range(draw(st.integers(1, 4))):
        keys = sorted(draw(st.sets(keyspace, min_size=1, max_size=40)))
        deletes = draw(st.booleans())  # tombstones: the source's groups are ragged arrays
        ttl = draw(st.booleans())
        odd = draw(st.integers(0, 3)) == 0
        rows = []
        for k in keys:
            for s in sorted(draw(st.sets(st.integers(1, 60), min_size=1, max_size=3)), reverse=True):
                value = b"%c" % (s % 256) * vlen
                if deletes and draw(st.integers(0, 4)) == 0:
                    value = None
                elif odd and draw(st.integers(0, 9)) == 0:
                    value = b"longer" + value  # a value of another length: that group is read as rows
                exp = draw(st.one_of(st.none(), EXPIRIES)) if ttl else None
                rows.append((k, s, s * 100, exp, value))
        cut = draw(st.integers(0, len(rows)))
        while 0 < cut < len(rows) and rows[cut][0] == rows[cut - 1][0]:
            cut += 1  # an SST of a sorted run holds whole keys
        out.append([part for part in (rows[:cut], rows[cut:]) if part])
    return out


def write_sources(root: str, srcs: list[list[list[tuple]]], block_bytes: int) -> tuple[tuple[str, ...], ...]:
    paths = []
    for i, ssts in enumerate(srcs):
        ps = []
        for j, rows in enumerate(ssts):
            p = os.path.join(root, f"in-{i}-{j}.sst")
            w = SstWriter(p, sync=False, block_bytes=block_bytes)
            for r in rows:
                w.add(r)
            w.finish()
            ps.append(p)
        paths.append(tuple(ps))
    return tuple(paths)


def run_both(root: str, job: CompactionJob) -> tuple:
    """Run `job` on the columnar and the row path into two directories under `root` (a path or a URL):
    (files, stats) of each."""
    results = []
    storage = storage_for(root)
    for name, columnar in (("col", True), ("row", False)):
        d = f"{root}/{name}"
        storage.makedirs(d)
        j = dataclasses.replace(job, output=dataclasses.replace(job.output, directory=d))
        res = run_job(j, columnar=columnar)
        files = [(fname, storage.read(f"{d}/{fname}"), info) for fname, info in res.outputs]
        results.append((files, res.stats))
    return results


def _bytes(directory: str, name: str) -> bytes:
    return storage_for(directory).read(f"{directory}/{name}")


# the tests below write into a directory or an object store (SstOutput puts each file through the store):
# local and memory://, the object store's writing path at memory speed
ON_A_STORE = pytest.mark.parametrize("backend", ["local", "memory"])


@pytest.fixture
def out_root(new_root) -> str:
    """A fresh root for outputs on the test's backend (made, where a directory must exist)."""
    root = new_root("out")
    storage_for(root).makedirs(root)
    return root


def comparable(stats) -> dict:
    d = stats.to_dict()
    for k in ("seconds", "read_seconds", "write_seconds", "purge_lag"):
        d.pop(k)
    return d


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    srcs=sources(),
    last=st.booleans(),
    snapshots=st.lists(st.integers(1, 60), max_size=3).map(lambda s: tuple(sorted(set(s)))),
    cutoff=st.one_of(st.none(), st.integers(0, 6000)),
    protected=st.sampled_from([None, b"\xff\xff", b"\x00"]),
    target=st.sampled_from([None, 60, 300, 2000]),
    block_bytes=st.sampled_from([64, 256, 4096]),
    bounds=st.one_of(
        st.just((None, None)),
        st.tuples(*[st.one_of(st.none(), st.tuples(*[st.sampled_from(ALPHABET)] * 2).map(bytes))] * 2),
    ),
)
def test_columnar_merge_writes_the_bytes_and_stats_of_the_row_merge(
    tmp_path_factory, srcs, last, snapshots, cutoff, protected, target, block_bytes, bounds
):
    root = str(tmp_path_factory.mktemp("cmerge"))
    paths = write_sources(root, srcs, block_bytes)
    infos = []
    for ps in paths:
        for p in ps:
            with open_sst(p) as r:
                infos.append(r.info)
    job = CompactionJob(
        sources=paths,
        inputs=tuple(infos),
        is_last_run=last,
        tick=TICK,
        reason=Reason.MANUAL,
        output=OutputSpec(root, "c", target_bytes=target, block_bytes=block_bytes, sync=False),
        snapshots=snapshots,
        retention_cutoff=cutoff,
        protected_prefix=protected,
        start=bounds[0],  # a Spark task's key range
        end=bounds[1],
    )
    (col_files, col_stats), (row_files, row_stats) = run_both(root, job)
    assert [(n, b) for n, b, _ in col_files] == [(n, b) for n, b, _ in row_files]
    assert [i for _, _, i in col_files] == [i for _, _, i in row_files]
    assert comparable(col_stats) == comparable(row_stats)
    assert col_stats.purge_lag == row_stats.purge_lag


def _alike_run(root: str, name: str, keys: range, seq: int, exp_every: int = 0) -> str:
    p = os.path.join(root, name)
    w = SstWriter(p, sync=False)
    for i in keys:
        exp = TICK - 5 if exp_every and i % exp_every == 0 else None
        w.add((b"key%06d" % i, seq, 100, exp, b"v" * 16))
    w.finish()
    return p


@ON_A_STORE
def test_alike_inputs_take_the_columnar_path(tmp_path, out_root, monkeypatch):
    """Rows all alike (one key and value length, no tombstone) are resolved by `resolve_round`, not row
    by row; the files are still those of the row path. The inputs are local files, the outputs go to
    `out_root`."""
    root = str(tmp_path)
    new = _alike_run(root, "new.sst", range(0, 6000, 3), 200, exp_every=7)
    old = _alike_run(root, "old.sst", range(6000), 100, exp_every=5)
    infos = []
    for p in (new, old):
        with open_sst(p) as r:
            infos.append(r.info)
    calls = {"rounds": 0, "rows": 0}
    real = columnar_mod.resolve_round

    def counting(pieces, resolver):
        calls["rounds"] += 1
        return real(pieces, resolver)

    monkeypatch.setattr(columnar_mod, "resolve_round", counting)  # merge imports it when it runs
    monkeypatch.setattr(
        merge_mod.Resolver, "run_batches", lambda *a: pytest.fail("a round of alike arrays went row by row")
    )
    job = CompactionJob(
        sources=((new,), (old,)),
        inputs=tuple(infos),
        is_last_run=True,
        tick=TICK,
        reason=Reason.MANUAL,
        output=OutputSpec(root, "c", target_bytes=40_000, sync=False),
    )
    res = run_job(dataclasses.replace(job, output=dataclasses.replace(job.output, directory=out_root)))
    assert calls["rounds"] > 0
    assert res.stats.versions_dropped == 2000
    assert res.stats.tombstones_dropped > 0  # expired rows: TTL tombstones, then purged
    monkeypatch.undo()
    (col_files, col_stats), (row_files, row_stats) = run_both(f"{out_root}/both", job)
    assert [b for _, b, _ in col_files] == [b for _, b, _ in row_files]
    assert len(col_files) > 1
    assert comparable(col_stats) == comparable(row_stats)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(1, 300),
    target=st.sampled_from([None, 0, 100, 700, 5000]),
    chunk=st.integers(1, 50),
    slab=st.sampled_from([1 << 20, 64, 250]),
    data=st.data(),
)
def test_write_stream_writes_the_files_write_writes(tmp_path_factory, n, target, chunk, slab, data):
    """Row lists and record arrays (of both layouts, mixed in one file), cut anywhere between keys, make
    the files `write` makes; also when the buffers that hold a file's pending records are small enough
    that a piece is split across them (`slab`), and when a buffer holds less than one record."""
    rows = []
    for i in range(n):
        for v in range(data.draw(st.integers(1, 2), label="versions")):
            rows.append((b"k%04d" % i, 1000 - v, 5 + i, None if i % 3 else 77, None if v else b"x" * 12))
    d = tmp_path_factory.mktemp("out")
    a = SstOutput(OutputSpec(str(d), "row", target_bytes=target, sync=False), 7).write(iter(rows))
    chunks: list = []
    i = 0
    while i < len(rows):
        j = min(len(rows), i + chunk)
        while j < len(rows) and rows[j][0] == rows[j - 1][0]:
            j += 1
        part = rows[i:j]
        if data.draw(st.booleans(), label="as records"):
            # the expire_ts slot where a row needs it, else either: a file gets records of two layouts
            slot = any(r[3] is not None for r in part) or data.draw(st.booleans(), label="slot")
            junk = data.draw(st.sampled_from([0, 0xAB]), label="junk")
            chunks.append(records_of(part, vlen=12, junk=junk, ttl=slot))
        else:
            chunks.append(part)
        i = j
    with mock.patch.object(output_mod._HeldRecords, "SLAB", slab):
        b = SstOutput(OutputSpec(str(d), "stream", target_bytes=target, sync=False), 7).write_stream(chunks)
    assert [i for _, i in a] == [i for _, i in b]
    for (na, _), (nb, _) in zip(a, b, strict=True):
        assert (d / na).read_bytes() == (d / nb).read_bytes()


@ON_A_STORE
def test_write_stream_holds_a_files_pending_records_in_buffers_kept_from_file_to_file(out_root):
    """The record pieces of the file being filled are copied into kept buffers, not held as the rounds'
    own arrays: writing forty files takes the buffers one file needs, and every file is the one `write`
    makes from the same rows."""
    rows = [(b"k%05d" % i, 9, i, None, b"x" * 40) for i in range(4000)]
    target = 8000  # about a hundred rows a file
    a = SstOutput(OutputSpec(out_root, "row", target_bytes=target, sync=False), 7).write(iter(rows))
    chunks = [records_of(rows[i : i + 37], vlen=40) for i in range(0, len(rows), 37)]
    out = SstOutput(OutputSpec(out_root, "stream", target_bytes=target, sync=False), 7)
    with mock.patch.object(output_mod._HeldRecords, "SLAB", 2048):
        b = out.write_stream(chunks)
    assert len(b) == len(a) >= 40
    for (na, _), (nb, _) in zip(a, b, strict=True):
        assert _bytes(out_root, na) == _bytes(out_root, nb)
    itemsize = chunks[0].dtype.itemsize
    per_file = max(i.num_rows for _, i in b) * itemsize
    assert len(out._held._slabs) <= per_file // (2048 // itemsize * itemsize) + 2, len(out._held._slabs)


@ON_A_STORE
def test_write_stream_joins_each_run_of_one_layout_apart(out_root):
    """A file's records join per run of one layout, each run in its own kept buffer: a second run (a
    smaller one, of the other layout) must not land on the first."""
    rows = [(b"k%04d" % i, 9, i, None if i < 60 or i % 2 else 5000 + i, b"x" * 12) for i in range(100)]
    a = SstOutput(OutputSpec(out_root, "row", target_bytes=None, sync=False), 7).write(iter(rows))
    cuts = [(0, 30), (30, 60), (60, 75), (75, 90), (90, 100)]
    chunks = [records_of(rows[i:j], vlen=12, ttl=i >= 60) for i, j in cuts]
    b = SstOutput(OutputSpec(out_root, "stream", target_bytes=None, sync=False), 7).write_stream(chunks)
    assert len(a) == len(b) == 1
    assert _bytes(out_root, b[0][0]) == _bytes(out_root, a[0][0])
