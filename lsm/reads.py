"""The read path of a handle: a point read or a scan over the state the version set publishes, at the
last committed seq or at a snapshot's, with expiry judged at the clock's time or the read's own.

Structures are searched newest first (the active memtable, frozen memtables, L0 SSTs, sorted runs) and
the first version with seq <= the read's seq decides: their seq ranges are ordered the same way. Point
reads take the published `State` without a pin (a retired file stays open while any state references
it); scans pin it (lsm.versions) and unpin when they end. The engine's own rows (the reserved key space,
lsm.syskeys) are not the user's to read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from compaction.filter import Entry
from formats.row import MAX_KEY_LEN, check_key
from lsm.errors import ClosedError
from lsm.options import ReadOptions
from lsm.readpath import clip_to_prefix, find_row_below_mem, scan_state, user_ranges
from lsm.syskeys import SYSTEM_PREFIX, is_system
from lsm.timeline import parse_time

if TYPE_CHECKING:
    from lsm.clock import MonotonicClock
    from lsm.versions import VersionSet
    from lsm.write_path import WritePath


class ReadPath:
    """Point reads and scans of one handle (module docstring). `owner` is the DB whose snapshots a read
    may name; `as_of_seq(t)` maps a time to the seq an as-of read sees (lsm.time_travel)."""

    def __init__(self, path: str, owner: Any, versions: VersionSet, writer: WritePath, clock: MonotonicClock,
                 as_of_seq: Callable[[int], int]) -> None:
        self.path = path
        self.owner = owner
        self.versions = versions
        self.writer = writer
        self.clock = clock
        self.as_of_seq = as_of_seq
        self.closed = False

    def check_open(self) -> None:
        """ClosedError once the handle is closed."""
        if self.closed:
            raise ClosedError(f"{self.path}: DB is closed")

    # -- point reads ---------------------------------------------------------------------------------------
    def visible(self, key: bytes, max_seq: int | None, include_expired: bool, now: int | None) -> tuple | None:
        """The row of `key` a read at `max_seq` (None: now) and time `now` sees, or None."""
        if self.closed:
            self.check_open()
        if type(key) is not bytes or not 0 < len(key) <= MAX_KEY_LEN:
            check_key(key)
        if key >= SYSTEM_PREFIX and is_system(key):
            return None  # the engine's own rows are not the user's to read
        st = self.versions.state
        if max_seq is None:
            # A batch is seen whole or not at all: its rows reach the memtable before its seq is
            # published, so rows newer than the seq are ignored. The state is read BEFORE the seq: a
            # flush that completes in between may drop versions <= seq that newer rows shadow, so a
            # state read after the seq can lack them. Read first, it holds every commit up to the
            # last one in its memtable, a consistent prefix of what the seq allows.
            max_seq = self.writer.seq
        mem = st.mem
        row = mem.get(key, max_seq) if key in mem.data else None  # most keys miss: no call for them
        if row is None:
            row = find_row_below_mem(st, key, max_seq)
        if row is None or row[4] is None:
            return None
        exp = row[3]
        if exp is not None and not include_expired:
            if now is None:
                now = self.clock.read()
            if now > exp:
                return None
        return row

    def get(self, key: bytes, options: ReadOptions | None = None) -> bytes | None:
        """The value of `key`, or None if it is absent, deleted or expired (`lsm.db.DB.get`)."""
        if options is None:
            row = self.visible(key, None, False, None)
        else:
            row = self.visible(key, *self.read_point(options))
        return None if row is None else row[4]

    def get_entry(self, key: bytes, options: ReadOptions | None = None) -> Entry | None:
        """The visible row of `key` with its seq, ts and expire_ts, or None."""
        row = self.visible(key, None, False, None) if options is None else self.visible(key, *self.read_point(options))
        return None if row is None else Entry(row[0], row[4], row[1], row[2], row[3])

    def read_point(self, options: ReadOptions) -> tuple[int | None, bool, int | None]:
        """(max_seq, include_expired, now) of a read with `options` (its snapshot and its time)."""
        now = options.now
        if now is not None and type(now) is not int:
            now = parse_time(now)
        snap = options.snapshot
        if snap is None:
            return None, options.include_expired, now
        if snap.db is not self.owner:
            raise ValueError("ReadOptions.snapshot belongs to another DB handle")
        if snap.closed:
            raise ClosedError("snapshot is released")
        return snap.seq, options.include_expired, snap.read_ts if now is None else now

    # -- scans ---------------------------------------------------------------------------------------------
    def user_scan(self, start: bytes | None, end: bytes | None, reverse: bool, prefix: bytes | None,
                  options: ReadOptions | None, as_of: int | str | None, entries: bool) -> Iterator:
        """`DB.scan` and `DB.scan_entries`: the user's key space, at the latest seq, a snapshot's or a time's."""
        self.check_open()
        max_seq, include, now = (None, False, None) if options is None else self.read_point(options)
        if as_of is not None:
            if max_seq is not None:
                raise ValueError("scan() takes as_of= or ReadOptions.snapshot, not both")
            t = parse_time(as_of)
            max_seq, now = self.as_of_seq(t), t if now is None else now
        start, end = clip_to_prefix(start, end, prefix)
        return self.scan(start, end, reverse, None, max_seq, include, now, entries, user_ranges(start, end))

    def scan(
        self,
        start: bytes | None,
        end: bytes | None,
        reverse: bool,
        prefix: bytes | None,
        max_seq: int | None,
        include_expired: bool,
        now: int | None,
        entries: bool,
        ranges: list[tuple[bytes | None, bytes | None]] | None = None,
    ) -> Iterator:
        """Rows with start <= key < end (and the prefix) as of `max_seq` (None: the latest), in key order;
        the engine's own rows included unless `ranges` leaves them out."""
        for k in (start, end, prefix):
            if k is not None and type(k) is not bytes:
                raise TypeError(f"scan bounds must be bytes, not {type(k).__name__}")
        start, end = clip_to_prefix(start, end, prefix)
        if now is None:
            now = self.clock.read()
        vs = self.versions
        if max_seq is None:
            writer = self.writer
            st, max_seq = vs.pin_with(lambda: writer.seq)  # the seq read with the state, see `visible`
        else:
            st = vs.pin()
        it = scan_state(st, vs.unpin, start, end, reverse, max_seq, include_expired, now, entries, ranges)
        next(it)  # run it to its first yield, inside the try: dropped unread, it still unpins st.gen
        return it



def check_range(start: bytes | None, end: bytes | None) -> None:
    """TypeError unless both bounds are bytes or None; ValueError if start is after end."""
    for name, key in (("start", start), ("end", end)):
        if key is not None and type(key) is not bytes:
            raise TypeError(f"{name} must be bytes or None, not {type(key).__name__}")
    if start is not None and end is not None and start > end:
        raise ValueError(f"start {start!r} is after end {end!r}")

__all__ = ["ReadPath", "check_range"]
