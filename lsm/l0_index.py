"""A point-read index over a state's L0 SSTs: key -> the newest L0 file holding some version of it.

L0 files overlap, so a point read that misses the memtables probes every one of them before the sorted
runs (each probe: a range check, a bisect, a block lookup). This index answers "which L0 files can
hold this key" with one dict probe: none for most keys once the data has aged into runs, and the
newest one holding it otherwise. It belongs to one `lsm.versions.State` (L0 files are immutable and a
state's L0 list never changes), is shared by the states that keep that list (a memtable rotation), and
is dropped with them.

It is built lazily, once the state has served as many point reads as its L0 files hold rows: the build
decodes every L0 row (through the block cache, about a microsecond per row), and a probe it saves costs
about as much, so the build pays for itself before it is made and a state that serves few reads never
builds one. Memory: one dict entry and key per L0 row (about 100 bytes each), not charged to the block
cache; L0 is bounded by the compaction trigger times the memtable size.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

from formats.sst import SstReader

_key = operator.itemgetter(0)


class L0Index:
    """The lazily built key -> L0 position dict of one state (see the module docstring)."""

    __slots__ = ("gets", "keys", "readers", "rows")

    def __init__(self) -> None:
        self.gets = 0  # point reads that reached L0 while there was no index
        self.rows = -1  # rows in the state's L0 files (-1 until the first read counts them)
        self.keys: dict[bytes, int] | None = None
        self.readers: tuple[SstReader, ...] | None = None  # the state's L0 readers, set by the read path

    def lookup(self, readers: Sequence[SstReader]) -> dict[bytes, int] | None:
        """The index for `readers` (the state's L0 readers, newest first), or None while it is not worth
        building (fewer than two files, or fewer reads than rows so far). Safe from several threads: two
        that build at once build the same dict."""
        keys = self.keys
        if keys is not None:
            return keys
        if len(readers) < 2:
            return None
        if self.rows < 0:
            self.rows = sum(r.info.num_rows for r in readers)
        self.gets += 1
        if self.gets <= self.rows:
            return None
        keys = {}
        for j in range(len(readers) - 1, -1, -1):  # oldest first: a newer file overwrites the position
            for rows in readers[j].iter_blocks():
                keys.update(dict.fromkeys(map(_key, rows), j))
        self.keys = keys
        return keys
