"""A point-read index over a state's L0 SSTs: key -> the newest L0 file holding some version of it.

L0 files overlap, so a point read that misses the memtables probes every one of them before the sorted
runs (each probe: a range check, a bisect, a block lookup). This index answers "which L0 files can
hold this key" with one dict probe: none for most keys once the data has aged into runs, and the
newest one holding it otherwise. It belongs to one `lsm.versions.State` (L0 files are immutable and a
state's L0 list never changes), is shared by the states that keep that list (a memtable rotation), and
is dropped with them.

It is built lazily from the key indexes of the L0 blocks (`SstReader.key_index`, the index a point read
gives a block it loads), about half a microsecond per row. With a block cache those blocks and their
indexes stay cached for the reads that follow, so most of the build is work the reads would do anyway:
it is built once the state has served a sixteenth as many point reads as its L0 files hold rows (each
of those reads probes every L0 file whose range holds the key, a microsecond or so apiece). Without a
cache the build's blocks are thrown away, so it waits until the state has served as many reads as L0
holds rows; a state that serves few reads never builds one either way. Memory: one dict entry per L0
row (about 100 bytes each, the key shared with the block's key index), not charged to the block
cache; L0 is bounded by the compaction trigger times the memtable size.

On an object store every block the build read would be a GET, and a point read must cost at most one
GET per SST it probes (docs/object-store.md): there it is built only once every L0 block is in the block
cache already (checked every `OBJECT_CHECK_EVERY` reads past the threshold), so it costs no request.
"""

from __future__ import annotations

from collections.abc import Sequence

from formats.sst import SstReader

# with a block cache, the build waits for rows // CACHED_BUILD_DIVISOR reads (see the module docstring)
CACHED_BUILD_DIVISOR = 16
# on an object store, how often (in reads past the threshold) to check whether every L0 block is cached
OBJECT_CHECK_EVERY = 1024


class L0Index:
    """The lazily built key -> L0 position dict of one state (see the module docstring)."""

    __slots__ = ("gets", "keys", "readers", "rows")

    def __init__(self) -> None:
        self.gets = 0  # point reads that reached L0 while there was no index
        self.rows = -1  # reads to serve before the build (-1 until the first read counts L0's rows)
        self.keys: dict[bytes, int] | None = None
        self.readers: tuple[SstReader, ...] | None = None  # the state's L0 readers, set by the read path

    def lookup(self, readers: Sequence[SstReader]) -> dict[bytes, int] | None:
        """The index for `readers` (the state's L0 readers, newest first), or None while it is not worth
        building (fewer than two files, or too few reads so far). Safe from several threads: two that
        build at once build the same dict."""
        keys = self.keys
        if keys is not None:
            return keys
        if len(readers) < 2:
            return None
        if self.rows < 0:
            rows = sum(r.info.num_rows for r in readers)
            self.rows = rows // CACHED_BUILD_DIVISOR if readers[0].cache is not None else rows
        self.gets += 1
        if self.gets <= self.rows:
            return None
        if not readers[0].mapped and (self.gets % OBJECT_CHECK_EVERY or not all(r.all_cached() for r in readers)):
            # an object store: a block the build would read is a GET (see the module docstring); until
            # every L0 block is cached a point read probes the L0 files' blooms and reads at most one
            # block per file they admit
            return None
        keys: dict[bytes, int] = {}
        for j in range(len(readers) - 1, -1, -1):  # oldest first: a newer file overwrites the position
            r = readers[j]
            for i in range(len(r.blocks)):
                keys.update(dict.fromkeys(r.key_index(i), j))
        self.keys = keys
        return keys
