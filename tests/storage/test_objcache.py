"""The local disk cache of SST ranges (storage.objcache): what it serves, what it refuses, its bound."""

from __future__ import annotations

import multiprocessing
import os

from storage import register
from storage.objcache import HEADER, ObjectCache
from storage.objstore import TAIL_BYTES

DATA = bytes(range(256)) * ((TAIL_BYTES * 2) // 256)


def _store(tmp_path, name: str):
    st = register(f"memory://objcache-{os.urandom(4).hex()}/db")
    st.cache = ObjectCache(str(tmp_path / name), 1 << 20)
    p = st.root + "/sst/1.sst"
    st.write_file(p, (DATA,))
    return st, p


def _files(cache: ObjectCache) -> list[str]:
    return sorted(os.path.join(cache.directory, n) for n in os.listdir(cache.directory))


def test_a_range_read_once_is_served_from_the_disk_by_the_next_reader(tmp_path) -> None:
    st, p = _store(tmp_path, "c")
    m = st.open_map(p)
    assert m[10:5000] == DATA[10:5000]
    st.reset_stats()
    m2 = st.open_map(p)  # another reader of the same object: its open reads the tail
    assert st.stats()["get"] == 1
    assert m2[10:5000] == DATA[10:5000]
    assert m2[5000:9000] == DATA[5000:9000]  # not cached yet: one GET
    assert st.stats()["get"] == 2
    assert st.cache.hits == 1


def test_damaged_or_short_cache_files_are_ignored_and_fetched_again(tmp_path) -> None:
    st, p = _store(tmp_path, "c")
    st.open_map(p)[100:4196]
    (path,) = _files(st.cache)
    raw = open(path, "rb").read()
    for bad in (raw[: HEADER.size + 100], raw[:-1] + bytes([raw[-1] ^ 1]), b"", raw + b"x"):
        with open(path, "wb") as f:
            f.write(bad)
        st.reset_stats()
        assert st.open_map(p)[100:4196] == DATA[100:4196]
        assert st.stats()["get"] == 2  # the tail, then the range again from the store
        assert open(path, "rb").read() == raw  # and the cache holds it whole again


def test_an_object_written_again_under_its_name_is_not_served_stale(tmp_path) -> None:
    st, p = _store(tmp_path, "c")
    assert st.open_map(p)[0:4096] == DATA[:4096]
    other = bytes(reversed(DATA))
    st.write_file(p, (other,))
    assert st.open_map(p)[0:4096] == other[:4096]


def test_eviction_keeps_the_recently_used_ranges_within_the_bound(tmp_path) -> None:
    bound = 64 << 10
    c = ObjectCache(str(tmp_path / "c"), bound)
    chunk = b"y" * 2000
    for i in range(8):
        c.put("obj", i * 2000, (i + 1) * 2000, chunk)
    os.utime(c._path("obj", 0, 2000), (1, 1))  # make every file old, then use the first one
    for i in range(1, 8):
        os.utime(c._path("obj", i * 2000, (i + 1) * 2000), (1, 1))
    assert c.get("obj", 0, 2000) == chunk
    for i in range(8, 200):  # the bound holds about 30 of them
        c.put("obj", i * 2000, (i + 1) * 2000, chunk)
        assert c.total_bytes() <= bound
        if i % 10 == 0:
            assert c.get("obj", 0, 2000) == chunk  # used again and again: kept
    assert c.get("obj", 2000, 4000) is None  # the least recently used: gone
    assert c.get("obj", 199 * 2000, 200 * 2000) == chunk
    c.put("big", 0, bound, b"z" * bound)  # larger than a sixteenth of the bound: not kept
    assert c.get("big", 0, bound) is None


def _fill(directory: str, who: int, bound: int) -> None:
    c = ObjectCache(directory, bound)
    for i in range(300):
        c.put(f"obj{i % 40}", 0, 1500, bytes([who]) * 1500)
        c.get(f"obj{(i * 7) % 40}", 0, 1500)


def test_two_processes_can_share_a_cache_directory(tmp_path) -> None:
    d = str(tmp_path / "shared")
    bound = 32 << 10
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_fill, args=(d, who, bound)) for who in (1, 2)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join(60)
        assert pr.exitcode == 0
    c = ObjectCache(d, bound)
    names = os.listdir(d)
    assert names and not [n for n in names if n.startswith(".tmp-")]  # every write was renamed into place
    for i in range(40):
        got = c.get(f"obj{i}", 0, 1500)
        assert got in (None, b"\x01" * 1500, b"\x02" * 1500)  # whole, from one writer or the other
    # each process keeps the directory within the bound, plus what the other added since its last pass
    assert c.total_bytes() <= bound * (1 + 1 / 16)
