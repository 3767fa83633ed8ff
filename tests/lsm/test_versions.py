"""The version set's pins (lsm/versions.py): the one owner of which states readers still read.

A pin taken through `VersionSet.pin` / `pin_with` keeps the SST files of its state on disk after a
compaction replaces them, until `unpin`; a `pin_with` whose read raises pins nothing; the DB's readers
(scan, changes) release their pins; and no module but lsm/versions.py counts pins by hand.
"""

from __future__ import annotations

import pathlib

import pytest

from tests import _store

ROOT = pathlib.Path(__file__).resolve().parents[2]


def sst_files(db) -> set[str]:
    return {n for n in _store.names(db.path, "sst") if n.endswith(".sst")}


def fill(db, flushes: int = 3) -> dict[bytes, bytes]:
    model = {}
    for r in range(flushes):
        for i in range(r, 40, 2):
            k, v = b"k%03d" % i, b"r%d" % r
            db.put(k, v)
            model[k] = v
        db.flush()
    return model


@pytest.mark.parametrize("how", ["pin", "pin_with"])
def test_a_pin_keeps_the_files_a_compaction_replaced_until_its_unpin(open_db, how):
    with open_db() as db:
        vs = db.engine.versions
        model = fill(db)
        inputs = sst_files(db)
        if how == "pin":
            st = vs.pin()
        else:
            st, seq = vs.pin_with(lambda: db.seq)
            assert seq == db.seq
        db.compact(full=True)
        assert not inputs & {e.name for e in db.manifest.all_ssts()}  # retired: only the pin holds them
        assert inputs <= sst_files(db), "a compaction deleted a file a pinned state still names"
        db.put(b"z", b"1")
        db.flush()
        db.compact(full=True)  # a later compaction, retiring more, still spares them
        assert inputs <= sst_files(db)
        names = {e.name for e, _r in st.l0} | {e.name for run in st.runs for e in run.record.ssts}
        assert names == inputs  # the pinned state is the one that read them
        vs.unpin(st.gen)
        assert not inputs & sst_files(db)
        assert dict(db.scan()) == {**model, b"z": b"1"}


def test_a_pin_with_whose_read_raises_pins_nothing(open_db):
    with open_db() as db:
        fill(db)
        inputs = sst_files(db)

        def read():
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            db.engine.versions.pin_with(read)
        db.compact(full=True)
        assert not inputs & sst_files(db)


def test_scan_and_changes_release_their_pins(open_db):
    with open_db() as db:
        model = fill(db)
        inputs = sst_files(db)
        assert dict(db.scan()) == model
        with db.snapshot() as snap:
            assert dict(snap.scan()) == model  # a scan at a given seq pins through `pin`
        assert {k for _seq, k, _v, _ts in db.changes(seq=0)} == set(model)
        db.compact(full=True)
        assert not inputs & sst_files(db), "a finished read kept compacted files alive"


def test_only_the_version_set_counts_pins():
    hits = []
    for pkg in ("lsm", "compaction", "formats", "tools"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel != "lsm/versions.py" and "iter_gens" in path.read_text():
                hits.append(rel)
    assert hits == []
