"""Time on a handle: seq<->time lookups, snapshots at a seq or a time, the change feed, and mending a
clock that ran ahead.

Times map to seqs through the seq tracker and the decaying time bins (lsm.timeline); an as-of read at a
time finds its seq from the rows' own commit times (lsm.commit_time), within the history the store
keeps (`DbOptions.history_retention`, RetentionError before it) and below the store's upper (a commit
still to come could land at or before it: NotYetCompleteError). A bulk load is ONE commit at its last
seq: a read never sees part of one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from lsm.clock import I64_MAX, I64_MIN
from lsm.clock_repair import (
    DEFAULT_SKEW_MS,
    ClampTs,
    ClockRepair,
    RepairSurvey,
    RowSource,
    check_repair_time,
    survey,
)
from lsm.commit_time import first_seq_after
from lsm.errors import ClockRepairError, NotYetCompleteError, RetentionError
from lsm.history import stable_seq
from lsm.options import ReadOptions
from lsm.readpath import changed_rows
from lsm.seq_tracker import Round
from lsm.snapshot import Snapshot
from lsm.timeline import parse_time

if TYPE_CHECKING:
    from lsm.clock import MonotonicClock
    from lsm.flusher import Flusher
    from lsm.options import DbOptions
    from lsm.reads import ReadPath
    from lsm.snapshots import SnapshotList
    from lsm.timeline import Timeline
    from lsm.versions import VersionSet
    from lsm.write_path import WritePath


class TimeTravel:
    """The time methods of one handle (module docstring); `owner` is the DB its snapshots read through."""

    def __init__(self, path: str, owner: Any, options: DbOptions, versions: VersionSet, writer: WritePath,
                 snapshots: SnapshotList, clock: MonotonicClock, timeline: Timeline, read_only: bool) -> None:
        self.path = path
        self.owner = owner
        self.options = options
        self.versions = versions
        self.writer = writer
        self.snapshots = snapshots
        self.clock = clock
        self.timeline = timeline
        self.read_only = read_only
        self.reads: ReadPath | None = None  # set by the DB once its read path exists
        self.flusher: Flusher | None = None

    # -- seq <-> time ------------------------------------------------------------------------------------
    def stable_seq(self) -> int:
        """The largest seq S such that every seq <= S is committed or can never commit (`DB.stable_seq`)."""
        seq = self.writer.seq  # read before the reservations: a reservation made in between is >= seq + 1
        return stable_seq(self.writer.reserved, seq)

    def complete_upto(self) -> tuple[int, int]:
        """(upper, seq): every commit with ts < upper is in the state at `seq`, and no commit still to come
        can have ts < upper, so a read as of a time below `upper` never changes.

        A writable handle reads its clock under the write lock (no commit is between its tick and its
        memtable insert then); later commits tick at or after that reading. A read-only handle knows only
        what was durable when it opened: another process may still commit at the last commit's time, so
        its upper is that time (a closed writer records its clock's reading at close). A running bulk load
        commits later at the time it reserved its seqs: upper stays at or below that time (a lower bound
        of it from the seq tracker)."""
        w = self.writer
        if self.read_only:
            upper, seq = w.last_commit_ts, w.seq
        else:
            with w.lock:
                upper, seq = self.clock.read(), w.seq
        with self.versions.lock:
            reserved = w.reserved
        for first, _last in reserved:
            at = self.timeline.timestamp_for_seq(first, Round.DOWN)
            upper = min(upper, I64_MIN if at is None else at)
        return upper, seq

    def as_of_seq(self, ts_ms: int) -> int:
        """The seq of the last commit with ts <= `ts_ms`: the state as-of reads at `ts_ms` see.
        NotYetCompleteError at or after the store's upper, RetentionError before the history window."""
        upper, top = self.complete_upto()
        if ts_ms >= upper:
            raise NotYetCompleteError(
                f"{self.path}: cannot read as of {ts_ms} ms yet: the store is complete for times before "
                f"{upper} ms only (a commit still to come may have a time at or before {ts_ms} ms)"
            )
        now = self.clock.read()
        keep = self.options.history_retention
        if ts_ms < now - keep:
            raise RetentionError(
                f"{self.path}: cannot read as of {ts_ms} ms: the database keeps history back to "
                f"{now - keep} ms only (history_retention={keep} ms)"
            )
        if ts_ms >= self.writer.last_commit_ts:
            seq = top  # every commit up to `top` was at or before the last commit's time
        else:
            lo, hi = self.timeline.seq_bounds(ts_ms)
            hi = top + 1 if hi is None else min(hi, top + 1)
            vs = self.versions
            st = vs.pin()
            try:
                first = first_seq_after(st, ts_ms, lo, hi)
            finally:
                vs.unpin(st.gen)
            seq = (hi if first is None else first) - 1
        with self.versions.lock:
            return self.before_partial_load(seq)

    def before_partial_load(self, seq: int) -> int:
        """`seq`, or the seq just before the bulk load whose range holds it when the state as of `seq`
        would show part of the load (a committed load below its last seq, any seq of a reserved range)."""
        for first, last in self.versions.manifest.bulk_loads:
            if first <= seq < last:
                return first - 1
        for first, last in self.writer.reserved:
            if first <= seq <= last:
                return first - 1
        return seq

    # -- snapshots -----------------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """Pin the current seq (`DB.snapshot`)."""
        with self.versions.lock:
            seq = self.writer.seq
            self.snapshots.pin(seq)
        return Snapshot(self.owner, seq, release=self.snapshots.release)

    def snapshot_at(self, ts_ms: int | str) -> Snapshot:
        """A snapshot of exactly the commits with ts <= ts_ms (`DB.snapshot_at`)."""
        t = parse_time(ts_ms)
        seq = self.as_of_seq(t)
        with self.versions.lock:
            snap = Snapshot(self.owner, seq, read_ts=t, release=self.snapshots.release)
            self.snapshots.pin(seq, snap)
        return snap

    def snapshot_at_seq(self, seq: int, read_ts: int | None) -> Snapshot:
        """A snapshot of the state exactly as of `seq` (`DB.snapshot_at_seq`)."""
        if type(seq) is not int:
            raise TypeError(f"seq must be an int, not {type(seq).__name__}")
        if read_ts is not None and type(read_ts) is not int:
            raise TypeError(f"read_ts must be int ms, not {type(read_ts).__name__}")
        w = self.writer
        with self.versions.lock:
            if not 0 <= seq <= w.seq:
                raise ValueError(f"{self.path}: seq {seq} is not in 0..{w.seq}")
            seq = self.before_partial_load(seq)
            if seq < w.seq:
                now = self.clock.read()
                keep = self.options.history_retention
                after = self.timeline.timestamp_for_seq(seq + 1, Round.DOWN)  # <= the next commit's ts
                if after is None or after <= now - keep or (read_ts is not None and read_ts <= now - keep):
                    raise RetentionError(
                        f"{self.path}: cannot read as of seq {seq}: the database keeps history back to "
                        f"{now - keep} ms only (history_retention={keep} ms; the commit after seq {seq} is "
                        f"known to be no later than {after} ms)"
                    )
            snap = Snapshot(self.owner, seq, read_ts=read_ts, release=self.snapshots.release)
            self.snapshots.pin(seq, snap)
        return snap

    # -- the change feed -----------------------------------------------------------------------------------
    def changes(self, since: int | str | None, seq: int | None, options: ReadOptions | None,
                with_expire_ts: bool = False) -> Iterator[tuple]:
        """(seq, key, value or None, ts) for keys whose latest version is newer than a point (`DB.changes`)."""
        if (since is None) == (seq is None):
            raise ValueError("changes() needs exactly one of since= or seq=")
        max_seq, include_expired, now = (None, False, None) if options is None else self.reads.read_point(options)
        if seq is None:
            seq = self.timeline.since_seq(parse_time(since))
            if seq is None:
                return iter(())
        if now is None:
            now = self.clock.read()
        vs = self.versions
        st, top = vs.pin_with(lambda: self.stable_seq() if max_seq is None else min(max_seq, self.stable_seq()))
        try:
            out = changed_rows(st, seq, top, now, include_expired, with_expire_ts)
        finally:
            vs.unpin(st.gen)
        return iter(out)

    # -- mending time ------------------------------------------------------------------------------------
    def repair_clock(self, to_ms: int | None, force: bool, compact: Callable[[ClampTs], object],
                     forget_heads: Callable[[], None]) -> ClockRepair:
        """Restamp every row after the repair time at it (`DB.repair_clock`); `compact(row_map)` runs the
        full compaction that rewrites them, `forget_heads()` drops cached remap heads (they hold old times)."""
        w = self.writer
        w.check_writable()
        if to_ms is not None:
            check_repair_time(to_ms)
        vs = self.versions
        with w.lock:
            w.check_fence()
            # surveyed under the write lock: no commit comes between what it counts and the clock's lowering
            plan = self.survey(to_ms)
            if plan.watermark <= plan.to:
                return ClockRepair(plan.watermark, plan.watermark, 0)
            why = plan.refusal()
            if why is not None and not force:
                raise ClockRepairError(f"{self.path}: {why}")
            to = plan.to
            # from here on writes are stamped from `to` on; the rows still in the memtable go to L0 with
            # the rest of the future, which the compaction below moves back
            self.clock.lower_to(to)
            w.last_commit_ts = min(w.last_commit_ts, to)
            self.timeline.clamp(to // 1000)
            w.rotate()
        self.flusher.wait_flushed()
        compact(ClampTs(to))
        forget_heads()
        after = vs.commit(
            lambda cur: cur.replace(clock_watermark=max(to, self.clock.last), **self.timeline.to_manifest())
        ).clock_watermark
        return ClockRepair(plan.watermark, after, plan.rows_moved, plan.legit_moved)

    def plan_clock_repair(self, to_ms: int | None) -> RepairSurvey:
        """What `repair_clock(to_ms)` would do, changing nothing (`DB.plan_clock_repair`)."""
        if to_ms is not None:
            check_repair_time(to_ms)
        return self.survey(to_ms)

    def survey(self, to_ms: int | None) -> RepairSurvey:
        """The rows a repair to `to_ms` (None: the default) would move, and which of them the guard let
        through (lsm.clock_repair.survey), over the memtables and every SST."""
        host = time.time_ns() // 1_000_000
        skew = self.options.max_clock_skew_ms
        limit = min(host + (DEFAULT_SKEW_MS if skew is None else skew), I64_MAX)
        now = self.options.clock.now()
        now = now if type(now) is int else host  # expiry after the repair is judged at max(clock, to)
        vs = self.versions
        watermark = max(vs.manifest.clock_watermark, self.clock.last)
        st = vs.pin()
        try:
            sources = [RowSource(None, None, len(m), m.iter) for m in (st.mem, *st.imm)]
            ssts = [*st.l0, *(p for run in st.runs for p in zip(run.record.ssts, run.readers, strict=True))]
            sources += [RowSource(e.info.min_ts, e.info.max_ts, e.info.num_rows, r.iter) for e, r in ssts]
            to = host if to_ms is None else to_ms
            plan = survey(sources, to, limit, max(now, to), watermark)
            if to_ms is None and plan.newest_legit is not None and plan.newest_legit > to:
                to = plan.newest_legit  # the default never moves a row the guard let through
                plan = survey(sources, to, limit, max(now, to), watermark)
            return plan
        finally:
            vs.unpin(st.gen)

    def reset_time_seq(self) -> None:
        """Forget the time bins (after a clock mishap); committed to the manifest at once."""
        self.writer.check_writable()
        self.timeline.reset_bins()
        self.versions.commit(lambda m: m.replace(**self.timeline.to_manifest()))


__all__ = ["TimeTravel"]
