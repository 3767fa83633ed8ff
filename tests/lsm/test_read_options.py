"""Reading at a chosen time and through a snapshot on the public path (issue 11 item 2):
`ReadOptions(now=...)` judges expiry at that time and `ReadOptions(snapshot=...)` reads as of the
snapshot, for get, get_entry, scan and scan_entries alike; `Snapshot` is a thin caller of that path
(`closed`, `scan_entries`); and no module outside lsm/db.py reaches into a private DB member.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

import pytest

import lsm
from lsm.options import ReadOptions
from lsm.timeline import parse_time

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def lsm_path(db_root: str) -> str:
    """lsm_db (lsm.testing) on every backend: a local directory, a memory store and the S3 test server."""
    return db_root


def reads(db: lsm.DB, key: bytes, options: ReadOptions) -> list:
    """What each of the four read calls returns for `key` under `options` (values only)."""
    e = db.get_entry(key, options)
    return [
        db.get(key, options),
        None if e is None else e.value,
        dict(db.scan(options=options)).get(key),
        {x.key: x.value for x in db.scan_entries(options=options)}.get(key),
    ]


def test_now_judges_expiry_at_that_time(lsm_db, lsm_clock):
    lsm_db.put(b"k", b"v", ttl=1_000)
    written = lsm_db.get_entry(b"k").ts
    assert reads(lsm_db, b"k", ReadOptions(now=written + 1_000)) == [b"v"] * 4  # expiry is exclusive
    assert reads(lsm_db, b"k", ReadOptions(now=written + 1_001)) == [None] * 4
    lsm_clock.advance(5_000)  # expired by the clock; a read at an earlier time still sees it
    assert lsm_db.get(b"k") is None
    assert reads(lsm_db, b"k", ReadOptions(now=written + 10)) == [b"v"] * 4
    assert reads(lsm_db, b"k", ReadOptions(include_expired=True)) == [b"v"] * 4


def test_now_accepts_rfc3339_and_refuses_other_types(lsm_db):
    lsm_db.put(b"k", b"v", ttl=1_000)
    ts = lsm_db.get_entry(b"k").ts
    later = "2999-01-01T00:00:00Z"
    assert parse_time(later) > ts + 1_000
    assert reads(lsm_db, b"k", ReadOptions(now=later)) == [None] * 4
    with pytest.raises(TypeError, match="ReadOptions.now"):
        ReadOptions(now=1.5)
    with pytest.raises(ValueError):
        lsm_db.get(b"k", ReadOptions(now="not a time"))


def test_snapshot_in_read_options_reads_the_old_state(lsm_db):
    lsm_db.put(b"a", b"1")
    snap = lsm_db.snapshot()
    lsm_db.put(b"a", b"2")
    lsm_db.put(b"b", b"new")
    lsm_db.flush()
    opts = ReadOptions(snapshot=snap)
    assert reads(lsm_db, b"a", opts) == [b"1"] * 4
    assert reads(lsm_db, b"b", opts) == [None] * 4
    assert [e.key for e in snap.scan_entries()] == [b"a"]
    assert [(e.key, e.value, e.seq) for e in snap.scan_entries(reverse=True)] == [(b"a", b"1", snap.seq)]
    assert not snap.closed
    snap.close()
    assert snap.closed
    with pytest.raises(lsm.ClosedError, match="snapshot is released"):
        lsm_db.get(b"a", opts)
    with pytest.raises(lsm.ClosedError, match="snapshot is released"):
        snap.scan_entries()
    assert lsm_db.snapshot_seqs() == ()


def test_snapshot_of_another_handle_and_as_of_with_a_snapshot_are_refused(new_root, lsm_options):
    with lsm.DB.open(new_root("a"), lsm_options) as a, lsm.DB.open(new_root("b"), lsm_options) as b:
        a.put(b"k", b"a")
        b.put(b"k", b"b")
        with b.snapshot() as snap:
            with pytest.raises(ValueError, match="another DB"):
                a.get(b"k", ReadOptions(snapshot=snap))
            with pytest.raises(ValueError, match="not both"):
                b.scan(as_of=b.get_entry(b"k").ts, options=ReadOptions(snapshot=snap))
            assert b.get(b"k", ReadOptions(snapshot=snap)) == b"b"


def test_as_of_snapshot_judges_expiry_at_its_time_unless_now_is_given(lsm_path, lsm_options, lsm_clock):
    lsm_db = lsm.DB.open(lsm_path, dataclasses.replace(lsm_options, history_retention=60_000))
    lsm_db.put(b"k", b"v", ttl=1_000)
    ts = lsm_db.get_entry(b"k").ts
    lsm_clock.advance(2_000)
    with lsm_db.snapshot_at(ts + 500) as snap:
        assert snap.get(b"k") == b"v"
        assert [e.key for e in snap.scan_entries()] == [b"k"]
        assert lsm_db.get(b"k", ReadOptions(snapshot=snap)) == b"v"
        assert lsm_db.get(b"k", ReadOptions(snapshot=snap, now=ts + 1_500)) is None
    lsm_db.close()


def test_no_module_reaches_into_a_private_db_member():
    """The issue's check: no `db._x` (or `self.db._x`, `self._db._x`) outside lsm/db.py."""
    pattern = re.compile(r"\b(db|_db|self\.db|self\._db)\._[a-z]")
    hits = []
    for pkg in ("lsm", "compaction", "formats", "tools"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "lsm/db.py":
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    hits.append(f"{rel}:{n}: {line.strip()}")
    assert hits == []
