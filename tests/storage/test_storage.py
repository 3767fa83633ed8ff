"""The storage seam: both backends answer the engine's questions the same way."""

from __future__ import annotations

import os
import time

import pytest

from storage import LOCAL, detach, register, storage_for
from storage.objstore import READAHEAD_BYTES, TAIL_BYTES, ObjectStorage
from storage.simstore import SimTime


@pytest.fixture(params=["local", "s3", "memory"])
def root(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "local":
        d = tmp_path / "store"
        d.mkdir()
        return str(d)
    if request.param == "memory":
        return f"memory://seam-{os.urandom(4).hex()}/db"
    return request.getfixturevalue("s3_server").new_url()


def test_local_paths_are_the_file_system_and_urls_are_objects(root: str) -> None:
    st = storage_for(root)
    assert (st is LOCAL) == ("://" not in root)
    assert storage_for(os.path.join(root, "sst", "x.sst")) is st


def test_write_read_list_delete(root: str) -> None:
    st = storage_for(root)
    d = os.path.join(root, "wal")
    st.makedirs(d)
    for i in (3, 1, 20):
        st.write_file(os.path.join(d, f"{i:020d}.wal"), (b"seg", str(i).encode()))
    st.write_file(os.path.join(d, "notes.txt"), (b"x",))
    assert [i for i, _ in st.list_numbered(d, ".wal")] == [1, 3, 20]
    assert st.read(os.path.join(d, f"{20:020d}.wal")) == b"seg20"
    assert st.read_range(os.path.join(d, f"{20:020d}.wal"), 1, 4) == b"eg2"
    assert st.size(os.path.join(d, f"{3:020d}.wal")) == 4
    assert set(st.list_mtimes(d)) == {f"{i:020d}.wal" for i in (1, 3, 20)} | {"notes.txt"}
    assert st.list_sizes(d) == {f"{1:020d}.wal": 4, f"{3:020d}.wal": 4, f"{20:020d}.wal": 5, "notes.txt": 1}
    st.delete(os.path.join(d, f"{3:020d}.wal"))
    st.delete(os.path.join(d, f"{3:020d}.wal"))  # already gone: fine
    assert [i for i, _ in st.list_numbered(d, ".wal")] == [1, 20]
    assert not st.exists(os.path.join(d, f"{3:020d}.wal"))
    with pytest.raises(FileNotFoundError):
        st.read(os.path.join(d, "missing"))


def test_put_if_absent_lets_exactly_one_writer_create(root: str) -> None:
    st = storage_for(root)
    d = os.path.join(root, "manifest")
    st.makedirs(d)
    p = os.path.join(d, "00000000000000000001.manifest")
    assert st.put_if_absent(p, b"first")
    assert not st.put_if_absent(p, b"second")
    assert st.read(p) == b"first"
    assert [n for n in st.list_names(d) if n.startswith(".tmp-")] == []  # no temporaries left


def test_a_create_refused_at_its_first_attempt_is_another_writers_even_with_the_same_bytes(root: str) -> None:
    # two openers claim a WAL id with the same (empty) object, or publish byte-identical manifests: only
    # one may win. Bytes are compared only after an attempt of our own may have landed (the lost
    # response of tests/formats/test_objstore_faults.py)
    st = storage_for(root)
    st.makedirs(os.path.join(root, "wal"))
    p = os.path.join(root, "wal", f"{7:020d}.wal")
    assert st.put_if_absent(p, b"")
    assert not st.put_if_absent(p, b"")
    assert not st.put_if_absent(p, b"another writer's object")
    assert st.read(p) == b""


def test_range_file_reads_the_tail_once_and_ranges_on_demand(s3_server) -> None:
    st = storage_for(s3_server.new_url())
    p = st.root + "/sst/big.sst"
    data = bytes(range(256)) * ((TAIL_BYTES * 3) // 256)
    st.write_file(p, (data,))
    st.reset_stats()
    m = st.open_map(p)
    assert st.stats()["get"] == 1 and len(m) == len(data)
    assert m[len(data) - 10 :] == data[-10:]
    assert st.stats()["get"] == 1  # served from the cached tail
    assert m[5:17] == data[5:17]
    assert st.stats()["get"] == 2  # one ranged GET
    m.prefetch(TAIL_BYTES)
    gets = st.stats()["get"]
    assert m[TAIL_BYTES : TAIL_BYTES + 100] == data[TAIL_BYTES : TAIL_BYTES + 100]
    assert st.stats()["get"] == gets


def test_a_sequential_reader_fetches_a_window_per_get(s3_server) -> None:
    st = storage_for(s3_server.new_url())
    p = st.root + "/sst/big.sst"
    data = os.urandom(TAIL_BYTES + 3 * READAHEAD_BYTES)
    st.write_file(p, (data,))
    m = st.open_map(p)
    m.read_ahead()
    st.reset_stats()
    end = len(data) - TAIL_BYTES
    got = [m[i : min(i + 4096, end)] for i in range(0, end, 4096)]  # block after block, as a compaction reads
    assert b"".join(got) == data[:end]
    assert st.stats()["get"] == 3  # one per window, not one per block
    assert m[100:200] == data[100:200]  # not sequential: one GET of just that slice
    assert st.stats()["get"] == 4 and st.stats()["get_bytes"] == end + 100


@pytest.mark.parametrize("kind", ["memory", pytest.param("s3", marks=pytest.mark.s3)])
def test_a_store_on_a_simulated_clock_ages_what_it_writes_by_that_clock(kind, request) -> None:
    """A simulation registers its store with its simulated clock (tools.simulate): the objects it writes
    are as old as that clock says, however fast the host runs, while the store stays what it was (the
    same objects, read ahead by windows, reachable by other processes if it is S3)."""
    url = f"memory://sim-{os.urandom(4).hex()}/db" if kind == "memory" else request.getfixturevalue("s3_server").new_url()
    now = [1_000.0]
    st = register(url, clock=SimTime(now=lambda: now[0]))
    assert register(url) is st and st.fetch_ahead and st.shared == (kind == "s3")
    other = ObjectStorage(url)  # another writer on the same store, on the host's clock
    d = url + "/wal"
    try:
        st.write_file(d + "/1.wal", (b"a",))
        now[0] = 1_066.0
        assert st.put_if_absent(d + "/2.wal", b"b")
        other.write_file(d + "/3.wal", (b"c",))
        now[0] = 5_000.0
        assert not st.put_if_absent(d + "/3.wal", b"mine")  # refused: the object keeps the store's stamp
        assert st.now() == 5_000.0
        ages = st.list_mtimes(d)
        assert (ages["1.wal"], ages["2.wal"]) == (1_000.0, 1_066.0)
        assert abs(ages["3.wal"] - time.time()) < 120  # written by another: stamped by the store
        st.delete(d + "/1.wal")
        other.write_file(d + "/1.wal", (b"again",))  # deleted, then written by another: not ours now
        assert abs(st.list_mtimes(d)["1.wal"] - time.time()) < 120
        assert st.stats()["put"] == 3 and st.stats()["list"] == 2  # one request each, the refused PUT too
    finally:
        for name in st.list_names(d):
            st.delete(f"{d}/{name}")
        detach(url)


def test_requests_are_counted_per_database(s3_server) -> None:
    a = register(s3_server.new_url("a"))
    b = register(s3_server.new_url("b"))
    a.write_file(a.root + "/x", (b"12345",))
    a.read(a.root + "/x")
    a.list_names(a.root)
    a.delete(a.root + "/x")
    sa = a.stats()
    assert (sa["put"], sa["get"], sa["list"], sa["delete"]) == (1, 1, 1, 1)
    assert sa["put_bytes"] == 5 and sa["get_bytes"] == 5
    assert b.stats()["put"] == 0
    assert LOCAL.stats()["put"] == 0


def test_a_listing_counts_one_list_request_per_page_of_1000_keys(s3_server) -> None:
    st = register(s3_server.new_url("many"))
    for i in range(120):
        st.write_file(f"{st.root}/wal/{i:020d}.wal", (b"x" * i,))
    st.reset_stats()
    sizes = st.list_sizes(st.root + "/wal")
    assert st.stats()["list"] == 1  # S3 answered with one page
    assert len(sizes) == 120 and sizes[f"{7:020d}.wal"] == 7
    assert len(st.list_names(st.root + "/wal")) == 120 and st.stats()["list"] == 2


def test_an_unreachable_store_is_an_os_error_naming_the_object(s3_server) -> None:
    opts = s3_server.options(endpoint="http://127.0.0.1:9")  # nothing listens on port 9
    st = register(s3_server.new_url("down"), {**opts, "max_retries": 1, "retry_timeout_ms": 200})
    with pytest.raises(OSError, match="down/sst/x"):
        st.read(st.root + "/sst/x")


def test_an_open_sst_keeps_only_its_data_bytes_of_the_tail_and_still_reads_everything(s3_server) -> None:
    from storage.ssts import open_sst, write_sst

    url = s3_server.new_url()
    rows = [(b"k%05d" % i, i + 1, 1_700_000_000_000, None, b"v" * 30) for i in range(3000)]
    write_sst(f"{url}/sst/a.sst", rows, block_bytes=1024)
    r = open_sst(f"{url}/sst/a.sst")
    m = r._map
    assert m._tail_at + len(m._tail) <= r.info.data_size  # metadata, index and filter bytes dropped
    assert [row[0] for row in r] == [row[0] for row in rows]
    r.verify()  # reads the index and filter again, by range
    assert r.get(b"k01234")[4] == b"v" * 30
    r.close()


def test_a_reader_with_a_block_cache_keeps_none_of_the_tail_and_still_reads_everything(s3_server) -> None:
    """A database's reader: what it reads again is the block cache's (bounded), so open SSTs hold no
    tail bytes however many are open."""
    from lsm.cache import LruCache
    from storage.ssts import open_sst, write_sst

    url = s3_server.new_url()
    rows = [(b"k%05d" % i, i + 1, 1_700_000_000_000, None, b"v" * 30) for i in range(3000)]
    write_sst(f"{url}/sst/a.sst", rows, block_bytes=1024)
    r = open_sst(f"{url}/sst/a.sst", cache=LruCache(1 << 20))
    assert r._map._tail == b""
    assert r.get(b"k02999")[4] == b"v" * 30  # the last block, which the tail held at open
    assert [row[0] for row in r] == [row[0] for row in rows]
    r.close()


def test_sequential_readers_refill_two_pooled_windows_and_give_them_back(s3_server) -> None:
    """Read-ahead windows come from one pool and are refilled, not allocated per GET; a closed reader
    gives its windows back, and the next reader refills them."""
    from storage.objstore import READAHEAD_BYTES, WINDOWS

    st = storage_for(s3_server.new_url())
    data = os.urandom(6 * READAHEAD_BYTES)
    st.write_file(st.root + "/sst/w.sst", (data,))
    m = st.open_map(st.root + "/sst/w.sst")
    m.read_ahead()
    buffers = set()
    for i in range(0, m._tail_at, 4096):
        assert m[i : min(i + 4096, m._tail_at)] == data[i : min(i + 4096, m._tail_at)]
        buffers.add(id(m._window[2]))
    assert len(buffers) == 2
    m.close()
    assert WINDOWS.idle >= 2
    again = st.open_map(st.root + "/sst/w.sst")
    again.read_ahead()
    assert again[0:4096] == data[:4096] and id(again._window[2]) in buffers
    again.close()


def test_a_sequential_reader_gets_every_byte_right_across_windows_fetched_ahead(s3_server) -> None:
    import random

    from storage.objstore import READAHEAD_BYTES

    st = storage_for(s3_server.new_url())
    p = st.root + "/sst/seq.sst"
    data = os.urandom(5 * READAHEAD_BYTES + 12345)
    st.write_file(p, (data,))
    m = st.open_map(p)
    m.read_ahead()
    rng = random.Random(3)
    st.reset_stats()
    pos, end = 0, m._tail_at
    while pos < end:  # slices of block-like sizes, many straddling a window's end
        n = min(end - pos, rng.choice((4096, 4096, 70_000, 300_000)))
        assert m[pos : pos + n] == data[pos : pos + n]
        pos += n
    # one GET per window (each fetched while the one before it was read), none wasted
    assert st.stats()["get"] <= end // READAHEAD_BYTES + 2
    m.close()


class _Noop:
    """A worker job (one with a run()) that does nothing: it starts the process."""

    def run(self) -> None:
        return None


class _ReadObject:
    """A worker job that reads one object in the worker process."""

    def __init__(self, url: str) -> None:
        self.url = url

    def run(self) -> bytes:
        return storage_for(self.url).read(self.url)


@pytest.mark.slow  # starts a worker process of its own
def test_a_worker_process_builds_a_store_as_its_parent_did(s3_server, monkeypatch) -> None:
    """A store its process made from the AWS variables is made the same in a compaction worker started
    before those variables were set: the worker gets the parent's configuration, not its own environment."""
    from compaction.worker import Worker

    for k in s3_server.env:
        monkeypatch.delenv(k)
    w = Worker()
    try:
        w.run(_Noop())  # the worker process starts without the variables
        for k, v in s3_server.env.items():
            monkeypatch.setenv(k, v)
        root = s3_server.new_url("w")
        register(root).write_file(f"{root}/o", [b"x"])
        assert w.run(_ReadObject(f"{root}/o")) == b"x"
    finally:
        w.close()


def test_a_database_under_a_root_registered_with_options_is_reached_with_them(s3_server, monkeypatch) -> None:
    """A bucket registered with its configuration (a test's, a Spark driver's credentials) serves the
    databases under it with that configuration, each with counters of its own; a root opened without
    options took the environment's instead (here an endpoint where nothing listens)."""
    from lsm.inspect import is_database_dir
    from storage.paths import open_store

    bucket = s3_server.new_url("registered")
    register(bucket, s3_server.options())
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    db = open_store(bucket + "/db")
    db.storage.write_file(db.paths.manifest_dir + "/x", (b"1",))
    assert is_database_dir(bucket + "/db") and not is_database_dir(bucket + "/other")
    assert db.storage is not storage_for(bucket) and db.storage.stats()["put"] == 1
    assert storage_for(bucket).stats()["put"] == 0
    detach(bucket)
    detach(bucket + "/db")
    detach(bucket + "/other")
