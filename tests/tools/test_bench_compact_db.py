"""`lsm bench compact`'s database (tools/bench/compact_db.py) is published by the engine's own commit.

The build writes its SSTs under an open handle and publishes them with one commit of that handle's
version set, so a fault injected into the publication (formats.fileio) surfaces as the engine's
`DbFailedError`: one known not to have published (the manifest's temporary file failed to sync) leaves
no SST behind and the store empty; one that may have (its link failed) keeps the SSTs, and the reopened
store names only files that exist. Without faults the build is the database the benchmark expects.
"""

from __future__ import annotations

import os

import pytest

from formats import fileio
from lsm import DB, DbFailedError, DbOptions, ManualClock
from lsm.manifest import ManifestStore
from tools.bench.compact_db import Spec, build_database

SPEC = Spec(
    num=600, runs=3, value_size=30, seed=3, ttl_fraction=0.2, delete_fraction=0.1, target_sst_bytes=8_000,
    block_bytes=1024,
)


def ssts(path: str) -> set[str]:
    return {n for n in os.listdir(os.path.join(path, "sst")) if n.endswith(".sst")}


def publication(tmp_path) -> tuple[int, list[tuple[str, str]]]:
    """A fault-free build's (id of the manifest version that publishes the runs, the fsync and link calls
    in the manifest directory, in order): which calls a faulty build must fail."""
    path = str(tmp_path / "clean")
    with fileio.faults(ops={"fsync", "link"}, path="/manifest/") as plan:
        build_database(path, SPEC)
    store = ManifestStore(path)
    first = next(i for i in store.ids() if store.read(i).runs)
    return first, plan.log


def test_the_build_commits_every_run_once(tmp_path):
    path = str(tmp_path / "db")
    built = build_database(path, SPEC)
    _mid, m = ManifestStore(path).latest()
    assert [len(r.ssts) for r in m.runs] == built["runs"] and built["ssts"] == sum(built["runs"])
    assert {e.name for e in m.all_ssts()} == ssts(path)
    assert m.last_seq == SPEC.num and m.clock_watermark < built["tick"]
    assert m.next_sst_id > max(int(n.split("-")[0]) for n in ssts(path))  # the ids came from the version set
    with DB.open(path, DbOptions(clock=ManualClock(built["tick"]), background_compaction=False)) as db:
        before = dict(db.scan())
        assert db.compact(full=True).rows_in == SPEC.num
        assert dict(db.scan()) == before


def test_a_publication_that_failed_before_its_link_leaves_nothing(tmp_path):
    pub, log = publication(tmp_path)
    link = log.index(("link", ManifestStore(str(tmp_path / "clean")).path(pub)))
    assert log[link - 1][0] == "fsync"  # the fsync of the version's temporary file
    nth = sum(1 for op, _p in log[:link] if op == "fsync")
    path = str(tmp_path / "db")
    with fileio.faults("eio", nth, ops={"fsync"}, path="/manifest/") as plan:
        with pytest.raises(DbFailedError) as e:
            build_database(path, SPEC)
    assert plan.fired == 1
    assert e.value.published is False and e.value.op == "fsync"
    assert isinstance(e.value.__cause__, fileio.FileOpError)
    assert ssts(path) == set()  # the SSTs nothing can name are gone
    with DB.open(path, DbOptions(clock=ManualClock(1), background_compaction=False)) as db:
        assert db.manifest.runs == () and list(db.scan()) == []


def test_a_publication_whose_link_failed_keeps_its_files(tmp_path):
    pub, _log = publication(tmp_path)
    path = str(tmp_path / "db")
    with fileio.faults("eio", 1, ops={"link"}, path=f"{pub:020d}.manifest") as plan:
        with pytest.raises(DbFailedError) as e:
            build_database(path, SPEC)
    assert plan.fired == 1
    assert e.value.published is None and e.value.op == "link"  # maybe published: the next open decides
    kept = ssts(path)
    assert kept
    with DB.open(path, DbOptions(clock=ManualClock(1), background_compaction=False)) as db:
        assert {e.name for e in db.manifest.all_ssts()} <= kept
