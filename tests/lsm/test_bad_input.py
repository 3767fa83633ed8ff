"""Bad input: each mistake raises a specific exception with a clear message, and NOTHING is written.

"Nothing" is checked in the store: its tree (names and contents of every file, and a directory's
sub-directories) and the database's seq are the same before and after the failed call. The database
ones run on every backend; what a path on the local file system can be that an object-store URL cannot
(a file, a directory of something else) stays local.
"""

from __future__ import annotations

import hashlib
import struct

import pytest
import xxhash

import formats.row
import lsm
import lsm.db
from formats import manifest as manifest_codec
from lsm.manifest import ManifestStore
from storage.paths import open_store
from tests import _store

T0 = 1_700_000_000_000


def tree(root) -> dict[str, str]:
    """Every file under `root` with a digest of its content, and every directory (a prefix some object
    lies under, on an object store) as "dir", named relative to `root`."""
    storage = open_store(str(root)).storage
    out = {}

    def walk(directory: str, rel: str) -> None:
        for name in storage.list_entries(directory):
            path = f"{directory}/{name}"
            try:
                out[rel + name] = hashlib.sha256(storage.read(path)).hexdigest()
            except (IsADirectoryError, FileNotFoundError):  # a sub-directory (a common prefix)
                out[rel + name + "/"] = "dir"
                walk(path, rel + name + "/")

    walk(str(root), "")
    return out


@pytest.fixture
def db(open_db):
    d = open_db()
    d.put(b"existing", b"value")
    d.flush_wal()  # in the WAL now, not whenever an object store's group commit fires
    return d


class Unchanged:
    """Context manager: asserts the database's store and seq are the same on exit (after writing out
    anything an object store's group commit holds: a write that got through would show)."""

    def __init__(self, db: lsm.DB) -> None:
        self.db = db

    def __enter__(self) -> Unchanged:
        self.before = (tree(self.db.path), self.db.seq)
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.db.closed:
            self.db.flush_wal()
        assert (tree(self.db.path), self.db.seq) == self.before


NOT_BYTES = ["str key", bytearray(b"k"), memoryview(b"k"), 7, None, [b"k"]]


@pytest.mark.parametrize("key", NOT_BYTES, ids=lambda v: type(v).__name__)
def test_non_bytes_keys(db, key):
    with Unchanged(db):
        for call in (
            lambda: db.put(key, b"v"),
            lambda: db.delete(key),
            lambda: lsm.WriteBatch().put(key, b"v"),
            lambda: lsm.WriteBatch().delete(key),
            lambda: db.get(key),
            lambda: db.get_entry(key),
        ):
            with pytest.raises(TypeError, match="key must be bytes"):
                call()


@pytest.mark.parametrize("value", ["str value", bytearray(b"v"), memoryview(b"v"), 7, None])
def test_non_bytes_values(db, value):
    with Unchanged(db):
        with pytest.raises(TypeError, match="value must be bytes"):
            db.put(b"k", value)
        with pytest.raises(TypeError, match="value must be bytes"):
            lsm.WriteBatch().put(b"k", value)


@pytest.mark.parametrize("key", [b"", b"k" * 65_536, b"k" * 100_000], ids=["empty", "64KiB", "100KB"])
def test_empty_or_oversized_keys(db, key):
    with Unchanged(db):
        for call in (
            lambda: db.put(key, b"v"),
            lambda: db.delete(key),
            lambda: lsm.WriteBatch().put(key, b"v"),
            lambda: db.get(key),
        ):
            with pytest.raises(ValueError, match=r"key must be 1\.\.65535 bytes long"):
                call()


def test_largest_key_is_accepted(db):
    key = b"k" * 65_535
    db.put(key, b"v")
    db.flush()
    assert db.get(key) == b"v"


def test_oversized_value(db, monkeypatch):
    """The real limit is 0xFFFFFFFE bytes (4 GiB); lower it rather than allocate that much."""
    monkeypatch.setattr(formats.row, "MAX_VALUE_LEN", 16)
    monkeypatch.setattr(lsm.db, "MAX_VALUE_LEN", 16)  # DB.put's inlined fast check (lsm/db.py)
    with Unchanged(db):
        with pytest.raises(ValueError, match="value must be shorter than"):
            db.put(b"k", b"v" * 17)
        with pytest.raises(ValueError, match="value must be shorter than"):
            lsm.WriteBatch().put(b"k", b"v" * 17)
    db.put(b"k", b"v" * 16)


@pytest.mark.parametrize(
    "ttl, exc, msg",
    [
        (-1, ValueError, "ttl must be >= 0 ms, got -1"),
        (1.5, TypeError, "ttl must be int milliseconds, not float"),
        ("10", TypeError, "ttl must be int milliseconds, not str"),
        (True, TypeError, "ttl must be int milliseconds, not bool"),
    ],
)
def test_bad_ttl(db, ttl, exc, msg):
    with Unchanged(db):
        with pytest.raises(exc, match=msg):
            db.put(b"k", b"v", ttl=ttl)
        with pytest.raises(exc, match=msg):
            lsm.WriteBatch().put(b"k", b"v", ttl=ttl)
    with pytest.raises(exc, match=msg):
        lsm.DbOptions(default_ttl=ttl)


def test_bad_write_and_scan_arguments(db):
    with Unchanged(db):
        with pytest.raises(TypeError, match="write\\(\\) takes a WriteBatch"):
            db.write([(b"k", b"v")])
        with pytest.raises(ValueError, match="empty WriteBatch"):
            db.write(lsm.WriteBatch())
        for kw in ({"start": "a"}, {"end": 1}, {"prefix": bytearray(b"a")}):
            with pytest.raises(TypeError, match="scan bounds must be bytes"):
                db.scan(**kw)


def test_a_failed_batch_put_leaves_the_batch_usable(db):
    b = lsm.WriteBatch().put(b"a", b"1")
    with pytest.raises(TypeError):
        b.put(b"b", "not bytes")
    assert len(b) == 1
    db.write(b)
    assert db.get(b"a") == b"1" and db.get(b"b") is None


def test_every_call_on_a_closed_db_raises_closed_error(db):
    snap = db.snapshot()
    db.close()
    db.close()  # idempotent
    calls = {
        "put": lambda: db.put(b"k", b"v"),
        "delete": lambda: db.delete(b"k"),
        "write": lambda: db.write(lsm.WriteBatch().put(b"k", b"v")),
        "get": lambda: db.get(b"existing"),
        "get_entry": lambda: db.get_entry(b"existing"),
        "scan": lambda: db.scan(),
        "scan_entries": lambda: db.scan_entries(),
        "snapshot": lambda: db.snapshot(),
        "flush": lambda: db.flush(),
        "compact": lambda: db.compact(),
        "snapshot.get": lambda: snap.get(b"existing"),
        "snapshot.scan": lambda: list(snap.scan()),
    }
    with Unchanged(db):
        for name, call in calls.items():
            with pytest.raises(lsm.ClosedError, match="closed") as ei:
                call()
            assert db.path in str(ei.value) or name.startswith("snapshot."), name
    snap.close()


def test_path_that_is_a_file(tmp_path):
    # a path on the file system can name a file; an object-store URL is a prefix, never a file
    p = tmp_path / "afile"
    p.write_bytes(b"not a database")
    before = tree(tmp_path)
    with pytest.raises(lsm.NotADatabaseError, match="is a file"):
        lsm.DB.open(p)
    with pytest.raises(lsm.NotADatabaseError):
        lsm.DB.open(p, read_only=True)
    assert tree(tmp_path) == before


def test_directory_that_is_not_a_database(tmp_path):
    # a directory is refused when it holds other things; an object store has no directories (a database
    # is its objects, storage.base.Storage.prepare_database), so a prefix holding others is not
    d = tmp_path / "photos"
    d.mkdir()
    (d / "cat.jpg").write_bytes(b"\xff\xd8")
    (d / "sst").mkdir()  # even with a plausible sub-directory
    before = tree(tmp_path)
    with pytest.raises(
        lsm.NotADatabaseError, match="not an lsm-sim database|holds no lsm-sim database"
    ) as ei:
        lsm.DB.open(d)
    assert str(d) in str(ei.value)
    with pytest.raises(lsm.NotADatabaseError):
        lsm.DB.open(d, read_only=True)
    assert tree(tmp_path) == before


def test_directory_with_a_manifest_file_is_not_a_database(tmp_path):
    d = tmp_path / "webapp"
    d.mkdir()
    (d / "manifest").write_text("{}")  # a file named like our folder is not our folder
    before = tree(tmp_path)
    with pytest.raises(lsm.NotADatabaseError, match="holds no lsm-sim database"):
        lsm.DB.open(d)
    assert tree(tmp_path) == before


def test_read_only_open_of_a_missing_path_creates_nothing(db_root):
    parent = db_root.rsplit("/", 1)[0]
    assert tree(parent) == {}
    with pytest.raises(lsm.NotADatabaseError):
        lsm.DB.open(db_root, read_only=True)
    assert tree(parent) == {}


def _rewrite_version(root: str, name: str, version: int) -> None:
    """Patch the format_version field of a manifest file and fix its checksum."""
    buf = bytearray(_store.read(root, "manifest", name))
    magic, _v, length = manifest_codec.HEADER.unpack_from(buf, 0)
    manifest_codec.HEADER.pack_into(buf, 0, magic, version, length)
    end = manifest_codec.HEADER.size + length
    struct.pack_into(">Q", buf, end, xxhash.xxh3_64_intdigest(bytes(buf[:end])))
    _store.write(root, "manifest", name, bytes(buf))


def test_manifest_from_a_newer_format_version(db_root):
    path = db_root
    with lsm.DB.open(path, lsm.DbOptions(clock=lsm.ManualClock(T0))) as db:
        db.put(b"k", b"v")
    store = ManifestStore(path)
    newest = store.path(store.ids()[-1])
    name = newest.rsplit("/", 1)[1]
    _rewrite_version(path, name, manifest_codec.FORMAT_VERSION + 1)
    before = tree(path)
    for read_only in (False, True):
        with pytest.raises(lsm.FormatVersionError, match="newer") as ei:
            lsm.DB.open(path, lsm.DbOptions(clock=lsm.ManualClock(T0)), read_only=read_only)
        assert ei.value.path == newest
        assert newest in str(ei.value) and str(manifest_codec.FORMAT_VERSION + 1) in str(ei.value)
    assert tree(path) == before  # no manifest version was published on top of it
    # the patch is a clean one: restoring the version makes the database readable again
    _rewrite_version(path, name, manifest_codec.FORMAT_VERSION)
    with lsm.DB.open(path, lsm.DbOptions(clock=lsm.ManualClock(T0))) as db:
        assert db.get(b"k") == b"v"


def test_bad_options_fail_before_anything_is_created(tmp_path):
    cases = [
        ({"clock": object()}, TypeError, "now"),
        ({"memtable_bytes": 10}, ValueError, "memtable_bytes"),
        ({"sst_format_version": 2}, ValueError, "sst_format_version"),
        ({"sst_format_version": 0, "default_ttl": 1_000}, ValueError, "format version 0"),
        ({"compression": "brotli"}, ValueError, "compression must be one of none .*zlib, zstd, lz4, got 'brotli'"),
        ({"compression": ["zstd"]}, ValueError, "compression"),
    ]
    for kw, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            lsm.DbOptions(**kw)
    assert tree(tmp_path) == {}
    for codec in (None, "none", "zlib", "zstd", "lz4"):
        assert lsm.DbOptions(compression=codec).compression == codec
