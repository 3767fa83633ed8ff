"""`DB.approximate_size` (lsm/approx.py), RocksDB's GetApproximateSizes: the SSTs' data blocks that can
hold keys of a range, from their block indexes, and the memtables' versions in it.

Checked against what the files hold: every row of the range is in a counted block (never an
underestimate of the rows), at most one block too many at each end of an SST, the whole key space adds
up to the data blocks of every SST, and the memtable part is exactly its versions in the range."""

from __future__ import annotations

import pytest

from lsm.memtable import ROW_OVERHEAD
from storage.ssts import open_sst


def _db(db):
    for i in range(3000):
        db.put(b"k%05d" % i, b"x" * 60)
    db.flush()
    db.compact(full=True)  # one run of many SSTs
    for i in range(0, 3000, 10):
        db.put(b"k%05d" % i, b"y" * 60)  # an L0 over the whole range
    db.flush()
    return db


def _blocks(db):
    """(first key, last key, stored size, rows) of every data block of every SST."""
    out = []
    for e in db.manifest.all_ssts():
        with open_sst(db.sst_path(e.name)) as r:
            out += [(b.first_key, b.last_key, b.size, b.num_rows) for b in r.blocks]
    return out


def test_sizes_come_from_the_blocks_that_can_hold_the_range(open_db):
    with _db(open_db(target_sst_bytes=8192, block_bytes=1024)) as db:
        blocks = _blocks(db)
        whole = db.approximate_size()
        assert whole.sst_bytes == sum(b[2] for b in blocks) and whole.sst_rows == 3000 + 300
        assert whole.sst_files == len(db.manifest.all_ssts()) and whole.memtable_rows == 0
        for start, end in ((b"k00500", b"k01500"), (b"k02990", None), (None, b"k00003"), (b"k01000", b"k01001")):
            est = db.approximate_size(start, end)
            inside = [b for b in blocks if (end is None or b[0] < end) and (start is None or b[1] >= start)]
            assert (est.sst_bytes, est.sst_rows) == (sum(b[2] for b in inside), sum(b[3] for b in inside))
            rows = sum(1 for k, _ in db.scan(start, end))
            assert est.sst_rows >= rows + rows // 10  # the L0 holds a tenth of them again
        assert db.approximate_size(b"z", None).total_bytes == 0
        assert db.approximate_size(b"k1", b"k1").sst_bytes == 0  # an empty range


def test_memtables_count_their_versions_in_the_range(open_db):
    with open_db() as db:
        db.put(b"a", b"1")
        db.put(b"b", b"22")
        db.put(b"b", b"333")  # two versions of b
        db.delete(b"c")
        est = db.approximate_size(b"b", None)
        assert (est.memtable_rows, est.memtable_bytes) == (3, 3 * (1 + ROW_OVERHEAD) + 2 + 3)
        assert est.sst_bytes == 0 and est.total_bytes == est.memtable_bytes
        assert db.approximate_size(include_memtables=False).total_bytes == 0
        with pytest.raises(ValueError, match="after end"):
            db.approximate_size(b"z", b"a")
        with pytest.raises(TypeError, match="start must be bytes"):
            db.approximate_size("a")  # type: ignore[arg-type]


def test_the_engines_own_rows_are_not_counted(tmp_path, open_db):
    """An ingested source's remap lives in the reserved key space: not a user's bytes (the source log is
    input on a local directory; the database on each backend)."""
    from lsm.sources import LogWriter, PartitionedLog

    with LogWriter(tmp_path / "log") as w:
        w.append(0, b"k", b"v")
    with open_db() as db:
        db.ingest(PartitionedLog(tmp_path / "log"), name="s")
        assert db.approximate_size().memtable_rows == 1  # k, not the remap's rows
