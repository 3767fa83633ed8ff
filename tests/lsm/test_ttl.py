"""TTL: expire_ts = ts + ttl, a row is visible at now == expire_ts and gone at expire_ts + 1.

Each boundary is checked where the row lives: the memtable, an L0 SST after flush, and an SST read by a
new handle after reopen.
"""

from __future__ import annotations

import pytest

import lsm
from formats.row import RowFeature
from storage.ssts import open_sst

T0 = 1_700_000_000_000
WHERE = ["memtable", "sst", "reopened"]


class Store:
    """A DB on a ManualClock that can move its rows to an SST or to a new handle on request."""

    def __init__(self, path, db_options, **opts) -> None:
        self.path = path
        self.clock = lsm.ManualClock(T0)
        self.opts = db_options(self.clock, **opts)
        self.db = lsm.DB.open(path, self.opts)

    def move(self, where: str) -> None:
        if where in ("sst", "reopened"):
            self.db.flush()
        if where == "reopened":
            self.db.close()
            self.db = lsm.DB.open(self.path, self.opts)

    def sst_rows(self) -> list[tuple]:
        rows = []
        for e in self.db.manifest.l0:
            with open_sst(self.db.sst_path(e.name)) as r:
                rows += list(r)
        return rows

    def close(self) -> None:
        self.db.close()


@pytest.fixture
def store(db_root, db_options):
    s = Store(db_root, db_options)
    yield s
    s.close()


@pytest.fixture
def store_default_ttl(db_root, db_options):
    s = Store(db_root, db_options, default_ttl=1_000)
    yield s
    s.close()


def visible(db: lsm.DB, key: bytes) -> bool:
    """Whether every read path agrees that `key` is visible (and they must agree)."""
    got = db.get(key) is not None
    entry = db.get_entry(key) is not None
    scanned = any(k == key for k, _ in db.scan())
    back = any(k == key for k, _ in db.scan(reverse=True))
    ranged = [k for k, _ in db.scan(key, key + b"\x00")] == [key]
    assert got == entry == scanned == back == ranged, (got, entry, scanned, back, ranged)
    return got


@pytest.mark.parametrize("where", WHERE)
def test_visible_at_expire_ts_gone_one_ms_later(store, where):
    seq = store.db.put(b"k", b"v", ttl=1_000)
    store.db.put(b"other", b"stays")
    store.move(where)
    e = store.db.get_entry(b"k")
    assert e == lsm.Entry(b"k", b"v", seq, T0, T0 + 1_000)
    store.clock.set(T0 + 999)
    assert visible(store.db, b"k")
    store.clock.set(T0 + 1_000)  # now == expire_ts: still visible
    assert visible(store.db, b"k")
    store.clock.set(T0 + 1_001)
    assert not visible(store.db, b"k")
    assert store.db.get(b"other") == b"stays"
    assert list(store.db.scan()) == [(b"other", b"stays")]


@pytest.mark.parametrize("where", WHERE)
def test_ttl_zero_expires_one_ms_after_the_write(store, where):
    store.db.put(b"k", b"v", ttl=0)
    store.move(where)
    assert store.db.get_entry(b"k").expire_ts == T0
    assert visible(store.db, b"k")
    store.clock.advance(1)
    assert not visible(store.db, b"k")


@pytest.mark.parametrize("where", WHERE)
def test_default_ttl_applies_to_puts_and_batches(store_default_ttl, where):
    s = store_default_ttl
    s.db.put(b"p", b"1")
    s.db.write(lsm.WriteBatch().put(b"b1", b"2").put(b"b2", b"3"))
    s.move(where)
    for k in (b"p", b"b1", b"b2"):
        e = s.db.get_entry(k)
        assert (e.ts, e.expire_ts) == (T0, T0 + 1_000)
    s.clock.set(T0 + 1_000)
    assert [k for k, _ in s.db.scan()] == [b"b1", b"b2", b"p"]
    s.clock.set(T0 + 1_001)
    assert list(s.db.scan()) == []


@pytest.mark.parametrize("where", WHERE)
def test_per_write_ttl_and_no_ttl_override_the_default(store_default_ttl, where):
    s = store_default_ttl
    s.db.put(b"short", b"v", ttl=10)
    s.db.put(b"long", b"v", ttl=5_000)
    s.db.put(b"forever", b"v", ttl=lsm.NO_TTL)
    s.db.write(lsm.WriteBatch().put(b"bshort", b"v", ttl=10).put(b"bforever", b"v", ttl=lsm.NO_TTL))
    s.db.put(b"default", b"v")
    s.move(where)
    exp = {k: s.db.get_entry(k).expire_ts for k, _ in s.db.scan()}
    assert exp == {
        b"short": T0 + 10,
        b"bshort": T0 + 10,
        b"long": T0 + 5_000,
        b"default": T0 + 1_000,
        b"forever": None,
        b"bforever": None,
    }
    s.clock.set(T0 + 11)
    assert [k for k, _ in s.db.scan()] == [b"bforever", b"default", b"forever", b"long"]
    s.clock.set(T0 + 1_001)
    assert [k for k, _ in s.db.scan()] == [b"bforever", b"forever", b"long"]
    s.clock.set(T0 + 10**9)
    assert [k for k, _ in s.db.scan()] == [b"bforever", b"forever"]


@pytest.mark.parametrize("where", WHERE)
def test_overwrite_sets_ttl_afresh(store_default_ttl, where):
    s = store_default_ttl
    s.db.put(b"a", b"1", ttl=100)  # then overwritten without ttl: the default applies from the new ts
    s.db.put(b"b", b"1")  # then overwritten with NO_TTL: never expires
    s.db.put(b"c", b"1", ttl=lsm.NO_TTL)  # then overwritten with a ttl: expires
    s.clock.advance(50)
    s.db.put(b"a", b"2")
    s.db.put(b"b", b"2", ttl=lsm.NO_TTL)
    s.db.put(b"c", b"2", ttl=20)
    s.move(where)
    assert s.db.get_entry(b"a").expire_ts == T0 + 50 + 1_000
    assert s.db.get_entry(b"b").expire_ts is None
    assert s.db.get_entry(b"c").expire_ts == T0 + 50 + 20
    s.clock.set(T0 + 101)  # past the first ttl of a: the overwrite decides
    assert s.db.get(b"a") == b"2"
    s.clock.set(T0 + 71)  # c expired, and it does not fall back to its older, TTL-less version
    assert s.db.get(b"c") is None
    assert dict(s.db.scan()) == {b"a": b"2", b"b": b"2"}
    s.clock.set(T0 + 1_051)
    assert dict(s.db.scan()) == {b"b": b"2"}


def test_overwriting_an_expired_key_makes_it_visible_again(store):
    store.db.put(b"k", b"old", ttl=5)
    store.clock.advance(6)
    assert store.db.get(b"k") is None
    store.db.flush()
    store.db.put(b"k", b"new")
    assert store.db.get_entry(b"k")[1:] == (b"new", 2, T0 + 6, None)


def test_deletes_carry_ts_and_no_expire_ts(store_default_ttl):
    s = store_default_ttl
    s.db.put(b"a", b"1")
    s.db.put(b"b", b"1", ttl=50)
    s.clock.advance(7)
    d1 = s.db.delete(b"a")
    s.clock.advance(3)
    d2 = s.db.write(lsm.WriteBatch().delete(b"b").put(b"c", b"1"))
    assert s.db.get(b"a") is None and s.db.get(b"b") is None
    s.db.flush()
    by_key = {r[0]: r for r in s.sst_rows()}
    # (key, seq, ts, expire_ts, value): a tombstone keeps its ts and has no expire_ts, even with default_ttl
    assert by_key[b"a"] == (b"a", d1, T0 + 7, None, None)
    assert by_key[b"b"] == (b"b", d2, T0 + 10, None, None)
    assert by_key[b"c"] == (b"c", d2, T0 + 10, T0 + 1_010, b"1")
    (entry,) = s.db.manifest.l0
    info = entry.info
    assert info.num_tombstones == 2
    assert info.num_expiring == 1  # only c: the tombstones do not count as rows with an expire_ts
    assert info.min_expire_ts == info.max_expire_ts == T0 + 1_010
    assert RowFeature.Timestamp in info.row_features and RowFeature.TimeToLive in info.row_features


def test_sst_without_ttl_rows_has_no_time_to_live_feature(store):
    store.db.put(b"a", b"1")
    store.db.delete(b"b")
    store.db.flush()
    (entry,) = store.db.manifest.l0
    assert RowFeature.TimeToLive not in entry.info.row_features
    assert entry.info.num_expiring == 0 and entry.info.min_expire_ts is None
    assert [r[3] for r in store.sst_rows()] == [None, None]


@pytest.mark.parametrize("where", WHERE)
def test_include_expired_shows_expired_rows(store, where):
    inc = lsm.ReadOptions(include_expired=True)
    store.db.put(b"exp", b"v", ttl=10)
    store.db.put(b"live", b"w")
    store.db.put(b"gone", b"x", ttl=10)
    store.db.delete(b"gone")  # a tombstone hides the key even from include_expired
    store.move(where)
    store.clock.advance(11)
    assert store.db.get(b"exp") is None
    assert store.db.get(b"exp", inc) == b"v"
    assert store.db.get_entry(b"exp", inc) == lsm.Entry(b"exp", b"v", 1, T0, T0 + 10)
    assert store.db.get(b"gone", inc) is None
    assert list(store.db.scan()) == [(b"live", b"w")]
    assert list(store.db.scan(options=inc)) == [(b"exp", b"v"), (b"live", b"w")]
    assert list(store.db.scan(reverse=True, options=inc)) == [(b"live", b"w"), (b"exp", b"v")]
    assert [e.key for e in store.db.scan_entries(options=inc)] == [b"exp", b"live"]
    with store.db.snapshot() as snap:
        assert snap.get(b"exp") is None
        assert snap.get_entry(b"exp", include_expired=True).value == b"v"
        assert list(snap.scan(include_expired=True)) == [(b"exp", b"v"), (b"live", b"w")]


def test_snapshot_judges_expiry_at_read_time(store):
    store.db.put(b"k", b"v", ttl=100)
    snap = store.db.snapshot()
    store.db.flush()
    store.clock.advance(100)
    assert snap.get(b"k") == b"v"
    store.clock.advance(1)
    assert snap.get(b"k") is None  # the row expired while the snapshot was open
    assert list(snap.scan()) == []
    snap.close()


def test_expired_rows_stay_expired_when_the_clock_steps_back(store):
    """A row once judged expired never comes back: reads never move time backwards."""
    store.db.put(b"k", b"v", ttl=100)
    store.clock.set(T0 + 101)
    assert store.db.get(b"k") is None
    store.clock.set(T0 + 50)
    assert store.db.get(b"k") is None
    assert list(store.db.scan()) == []
    with pytest.raises(lsm.ClockError):  # ... and no write may be stamped before the time reads used
        store.db.put(b"x", b"y")
