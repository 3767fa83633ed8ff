"""The flat block index (`formats.sst_index.BlockIndex`): it finds the block a plain ``bisect`` over a
list of the blocks' keys finds, for fixed-size and varying keys alike, and keeps no Python object per
block."""

from __future__ import annotations

import bisect
import gc
import os
import struct
import sys
import tempfile
import types

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formats.sst import SstReader
from formats.sst_index import FENCE, parse_fixed, parse_general
from tests.formats.test_sst import write

# bytes rich in NUL and 0xFF, the edges of the key order
_BYTES = st.sampled_from([0, 1, 0x7F, 0xFE, 0xFF])


def _reference_entries(idx: bytes) -> list[tuple[int, int, int, bytes, bytes]]:
    """The index payload parsed entry by entry exactly as docs/format.md (2.3) draws it."""
    (count,) = struct.unpack_from(">I", idx, 0)
    pos, out = 4, []
    for _ in range(count):
        offset, size, rows = struct.unpack_from(">QII", idx, pos)
        pos += 16
        (fl,) = struct.unpack_from(">H", idx, pos)
        first = idx[pos + 2 : pos + 2 + fl]
        pos += 2 + fl
        (ll,) = struct.unpack_from(">H", idx, pos)
        last = idx[pos + 2 : pos + 2 + ll]
        pos += 2 + ll
        out.append((offset, size, rows, first, last))
    return out


def _key(width: int | None) -> st.SearchStrategy[bytes]:
    size = {"min_size": width, "max_size": width} if width else {"min_size": 1, "max_size": 12}
    return st.one_of(st.binary(**size), st.lists(_BYTES, **size).map(bytes))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), width=st.one_of(st.none(), st.integers(1, 6)))
def test_find_is_bisect_over_the_last_keys(data, width):
    """For any probe key (in the file or not, shorter or longer than the stored ones, before the first
    key, after the last, NUL and 0xFF bytes): `find` is ``bisect_left`` over the blocks' last keys and
    `count_before` is ``bisect_left`` over their first keys, with fixed-size entries (`parse_fixed`)
    and with the entry-by-entry parse (`parse_general`) of the same payload; and each handle is the
    entry as stored."""
    keys = sorted(data.draw(st.lists(_key(width), min_size=1, max_size=150, unique=True)))
    versions = data.draw(st.lists(st.integers(1, 3), min_size=len(keys), max_size=len(keys)))
    rows, seq = [], 10**6
    for k, n in zip(keys, versions, strict=True):
        for _ in range(n):  # a key's versions may straddle two blocks
            rows.append((k, seq, 1000, None, b"v" * (seq % 5)))
            seq -= 1
    probes = data.draw(st.lists(st.one_of(_key(None), st.sampled_from(keys)), min_size=1, max_size=40))
    probes += [b"", b"\x00", b"\xff" * 13, keys[0], keys[-1], keys[0] + b"\x00", keys[-1] + b"\x00"]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.sst")
        write(path, rows, block_bytes=data.draw(st.sampled_from([64, 96, 128])))
        with SstReader(path) as r:
            idx = r._block_payload(r.info.index_offset, r.info.index_size)
            entries = _reference_entries(idx)
            count, size = len(entries), r.info.data_size
            indexes = [parse_general(idx, count, size)]
            fixed = parse_fixed(idx, count, size)
            if fixed is not None:
                indexes.append(fixed)
            if width is not None:
                assert fixed is not None  # every entry of one shape: the fast parse takes it
            firsts = [e[3] for e in entries]
            lasts = [e[4] for e in entries]
            for ix in [r.blocks, *indexes]:
                assert list(ix) == entries and len(ix) == count
                assert ix[-1] == entries[-1] and ix[1:3] == entries[1:3]
                for k in probes:
                    assert ix.find(k) == bisect.bisect_left(lasts, k), k
                    assert ix.count_before(k) == bisect.bisect_left(firsts, k), k
            for k in probes:  # and the reader's point read and range agree with the rows
                newest = next((row for row in rows if row[0] == k), None)
                assert r.get(k) == newest
                assert [row[0] for row in r.iter(start=k)] == [row[0] for row in rows if row[0] >= k]
                assert [row[0] for row in r.iter(end=k)] == [row[0] for row in rows if row[0] < k]


def _owned(root: object, shared: tuple) -> tuple[int, int]:
    """(objects, bytes) reachable from `root` but not through `shared` (nor types, functions, modules)."""
    seen: set[int] = set(map(id, shared))
    todo, count, size = [root], 0, 0
    while todo:
        o = todo.pop()
        if id(o) in seen or isinstance(o, (type, types.FunctionType, types.ModuleType)):
            continue
        seen.add(id(o))
        count += 1
        size += sys.getsizeof(o)
        todo += gc.get_referents(o)
    return count, size


def test_an_open_index_holds_no_object_per_block(tmp_path):
    """An open SST's index of thousands of blocks is a few objects per `FENCE` blocks and about its
    stored size (before it was flat: a named tuple, two keys and two ints per block, ~230 bytes), and
    two SSTs of one shape share the slices that search them."""
    rows = [(b"key%013d" % i, i + 1, 7, None, b"v" * 20) for i in range(20_000)]
    write(tmp_path / "a.sst", rows, block_bytes=256)
    write(tmp_path / "b.sst", rows[:5000], block_bytes=256)
    with SstReader(tmp_path / "a.sst") as r, SstReader(tmp_path / "b.sst") as small:
        n = len(r.blocks)
        assert n > 2000
        shared = (getattr(r.blocks, "search", None), getattr(r.blocks, "firsts", None))
        objects, size = _owned(r.blocks, shared)
        assert objects < n // FENCE + 20, (objects, n)
        assert size < 2 * r.info.index_size, (size, r.info.index_size)  # 52 bytes a block, 8 of fence
        assert small.blocks.search is shared[0] and small.blocks.firsts is shared[1]  # one list per shape
        assert [r.get(rows[i][0]) for i in range(0, 20_000, 997)] == rows[0:20_000:997]
