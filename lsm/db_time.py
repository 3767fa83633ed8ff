"""The DB's time methods: seq<->time lookups, as-of snapshots, the change feed (part of `lsm.db.DB`).

`DB` is one class assembled from mixins, one module per concern (lsm/db.py: open, close, the read path
and the `Engine`; lsm/db_write.py: the write path and flushes; this module: time; lsm/db_admin.py:
compaction, ingest and introspection). A mixin's ``self`` is the DB: it uses the DB's own members,
documented in `DB._init`. Nothing but `DB` inherits these classes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from lsm import clock_repair
from lsm.clock import I64_MAX, I64_MIN
from lsm.clock_repair import ClockRepair, RepairSurvey
from lsm.commit_time import first_seq_after
from lsm.errors import ClockRepairError, NotYetCompleteError, RetentionError
from lsm.ingest_state import NOT_READ
from lsm.options import ReadOptions
from lsm.readpath import changed_rows
from lsm.seq_tracker import Round
from lsm.snapshot import Snapshot
from lsm.timeline import parse_time


class TimeMixin:
    """Time lookups and time travel of `lsm.db.DB` (see the module docstring)."""

    # -- time --------------------------------------------------------------------------------------
    def timestamp_for_seq(self, seq: int, round: Round = Round.UP) -> int | None:
        """Approximate commit time (ms, whole seconds) of `seq` from the seq tracker.

        Without an exact entry, Round.UP takes the next tracked seq's time, Round.DOWN the previous
        one's; None when there is none in that direction."""
        self._check_open()
        return self._timeline.timestamp_for_seq(seq, round)

    def seq_tracker_entries(self) -> list[tuple[int, int]]:
        """The seq tracker's (seq, unix second) pairs, oldest first: what timestamp_for_seq and
        seq_for_timestamp interpolate between."""
        self._check_open()
        return self._timeline.tracker_entries()

    def seq_for_timestamp(self, ts_ms: int | str, round: Round = Round.DOWN) -> int | None:
        """The seq tracked at time `ts_ms` (ms or RFC 3339); otherwise the previous (DOWN) or next (UP)."""
        self._check_open()
        return self._timeline.seq_for_timestamp(parse_time(ts_ms), round)

    def _complete_upto(self) -> tuple[int, int]:
        """(upper, seq): every commit with ts < upper is in the state at `seq`, and no commit still to come
        can have ts < upper, so a read as of a time below `upper` never changes.

        A writable handle reads its clock under the write lock (no commit is between its tick and its
        memtable insert then); later commits tick at or after that reading. A read-only handle knows only
        what was durable when it opened: another process may still commit at the last commit's time, so
        its upper is that time (a closed writer records its clock's reading at close). A running bulk load
        commits later at the time it reserved its seqs: upper stays at or below that time (a lower bound
        of it from the seq tracker)."""
        if self.read_only:
            upper, seq = self._last_commit_ts, self._seq
        else:
            with self._write_lock:
                upper, seq = self._clock.read(), self._seq
        with self._state_lock:
            reserved = self._reserved
        for first, _last in reserved:
            at = self._timeline.timestamp_for_seq(first, Round.DOWN)
            upper = min(upper, I64_MIN if at is None else at)
        return upper, seq

    def _as_of_seq(self, ts_ms: int) -> int:
        """The seq of the last commit with ts <= `ts_ms`: the state as-of reads at `ts_ms` see.
        NotYetCompleteError at or after the store's upper, RetentionError before the history window."""
        upper, top = self._complete_upto()
        if ts_ms >= upper:
            raise NotYetCompleteError(
                f"{self.path}: cannot read as of {ts_ms} ms yet: the store is complete for times before "
                f"{upper} ms only (a commit still to come may have a time at or before {ts_ms} ms)"
            )
        now = self._clock.read()
        keep = self.options.history_retention
        if ts_ms < now - keep:
            raise RetentionError(
                f"{self.path}: cannot read as of {ts_ms} ms: the database keeps history back to "
                f"{now - keep} ms only (history_retention={keep} ms)"
            )
        if ts_ms >= self._last_commit_ts:
            seq = top  # every commit up to `top` was at or before the last commit's time
        else:
            lo, hi = self._timeline.seq_bounds(ts_ms)
            hi = top + 1 if hi is None else min(hi, top + 1)
            st = self._vs.pin()
            try:
                first = first_seq_after(st, ts_ms, lo, hi)
            finally:
                self._vs.unpin(st.gen)
            seq = (hi if first is None else first) - 1
        with self._state_lock:
            return self._before_partial_load(seq)

    def snapshot_at(self, ts_ms: int | str) -> Snapshot:
        """A snapshot of the state as of `ts_ms` (ms or RFC 3339): exactly the commits with ts <= ts_ms.

        The seq tracker narrows the search, the rows' own commit times decide it (lsm.commit_time).
        Expiry is judged at `ts_ms`. The time must lie within DbOptions.history_retention of now (else
        RetentionError) and before the store's upper (else NotYetCompleteError: a later commit could
        still land at or before it)."""
        self._check_open()
        t = parse_time(ts_ms)
        seq = self._as_of_seq(t)
        with self._state_lock:
            self._snapshots[seq] += 1
            snap = Snapshot(self, seq, read_ts=t, release=self._release_snapshot)
            self._as_of_snapshots.add(snap)
        return snap

    def changes(
        self,
        since: int | str | None = None,
        *,
        seq: int | None = None,
        options: ReadOptions | None = None,
        with_expire_ts: bool = False,
    ) -> Iterator[tuple]:
        """(seq, key, value or None, ts) for keys whose latest version is newer than a point, oldest
        change first, one per key (its newest version; None for a delete or an expired row).

        The point is `since` (ms or RFC 3339, mapped through the decaying time bins: it errs towards
        too many changes, never too few) or `seq=` directly. SSTs whose max_seq is not newer are skipped.
        Only final seqs are returned: none above `stable_seq` (a running bulk load holds the feed below
        its range until it commits, then its rows come in one answer, whatever their seqs in the range).
        ReadOptions as in `get`: `now` judges expiry at that time, `include_expired` reports an expired
        row with its value, and `snapshot` ends the changes at its seq instead of the latest.
        `with_expire_ts=True` yields (seq, key, value or None, ts, expire_ts) instead: a delete has no
        expire_ts, a row with a TTL has its own, so an expiry is told from a delete.
        """
        self._check_open()
        if (since is None) == (seq is None):
            raise ValueError("changes() needs exactly one of since= or seq=")
        max_seq, include_expired, now = (None, False, None) if options is None else self._read_point(options)
        if seq is None:
            seq = self._timeline.since_seq(parse_time(since))
            if seq is None:
                return iter(())
        if now is None:
            now = self._clock.read()
        st, top = self._vs.pin_with(lambda: self.stable_seq if max_seq is None else min(max_seq, self.stable_seq))
        try:
            out = changed_rows(st, seq, top, now, include_expired, with_expire_ts)
        finally:
            self._vs.unpin(st.gen)
        return iter(out)

    def time_seq_histogram(self) -> list[tuple[str, int]]:
        """(RFC 3339 bin start, number of updates) oldest first, from the decaying time bins."""
        self._check_open()
        return self._timeline.histogram(self._seq)

    def repair_clock(self, to_ms: int | None = None, *, force: bool = False) -> ClockRepair:
        """Mend a store whose clock watermark is in the future (a far-future clock reading was once
        accepted): every row stamped after `to_ms` is restamped at `to_ms` with its expire_ts moved back as
        much, remap times are clamped likewise, the seq tracker forgets the pairs after it and the time
        bins are reset; then the watermark becomes `to_ms` (or the handle's clock, if later). Seqs and the
        order of versions are unchanged. A full compaction does the rewrite. Returns a
        `lsm.clock_repair.ClockRepair`; with nothing after `to_ms` it changes nothing (docs/time.md).

        `to_ms` defaults to the host's wall clock now, or the newest row committed within the skew guard
        if later (`plan_clock_repair`). A `to_ms` below a row committed within the guard (stamped at most
        DbOptions.max_clock_skew_ms ahead of the host's clock) raises `ClockRepairError` naming what would
        move, unless `force`; one before 1970 always does. Nothing is changed then."""
        self._check_writable()
        if to_ms is not None:
            clock_repair.check_repair_time(to_ms)
        vs = self._vs
        with self._write_lock:
            self._check_fence()
            # surveyed under the write lock: no commit comes between what it counts and the clock's lowering
            plan = self._repair_survey(to_ms)
            if plan.watermark <= plan.to:
                return ClockRepair(plan.watermark, plan.watermark, 0)
            why = plan.refusal()
            if why is not None and not force:
                raise ClockRepairError(f"{self.path}: {why}")
            to = plan.to
            # from here on writes are stamped from `to` on; the rows still in the memtable go to L0 with
            # the rest of the future, which the compaction below moves back
            self._clock.lower_to(to)
            self._last_commit_ts = min(self._last_commit_ts, to)
            self._timeline.clamp(to // 1000)
            self._rotate_locked()
        self._wait_flushed()
        self._compactor.compact(full=True, executor="local", row_map=clock_repair.ClampTs(to))
        for st in self._ingest_states.values():  # cached remap heads hold the old times
            with st.lock:
                st.head = NOT_READ
        after = vs.commit(
            lambda cur: cur.replace(clock_watermark=max(to, self._clock.last), **self._manifest_extras(cur))
        ).clock_watermark
        return ClockRepair(plan.watermark, after, plan.rows_moved, plan.legit_moved)

    def plan_clock_repair(self, to_ms: int | None = None) -> RepairSurvey:
        """What `repair_clock(to_ms)` would do, changing nothing (a read-only handle may ask): the repair
        time (`to`: the default resolved), the watermark, the rows it would move and, of those, the ones
        committed within the skew guard, which make the repair refuse without force (`refusal()`).
        ClockRepairError for a time before 1970. Reads every row of the SSTs whose ts bounds straddle the
        repair time or the guard's limit."""
        self._check_open()
        if to_ms is not None:
            clock_repair.check_repair_time(to_ms)
        return self._repair_survey(to_ms)

    def _repair_survey(self, to_ms: int | None) -> RepairSurvey:
        host = time.time_ns() // 1_000_000
        skew = self.options.max_clock_skew_ms
        limit = min(host + (clock_repair.DEFAULT_SKEW_MS if skew is None else skew), I64_MAX)
        now = self.options.clock.now()
        now = now if type(now) is int else host  # expiry after the repair is judged at max(clock, to)
        watermark = max(self._vs.manifest.clock_watermark, self._clock.last)
        st = self._vs.pin()
        try:
            sources = [clock_repair.RowSource(None, None, len(m), m.iter) for m in (st.mem, *st.imm)]
            ssts = [*st.l0, *(p for run in st.runs for p in zip(run.record.ssts, run.readers, strict=True))]
            sources += [clock_repair.RowSource(e.info.min_ts, e.info.max_ts, e.info.num_rows, r.iter) for e, r in ssts]
            to = host if to_ms is None else to_ms
            plan = clock_repair.survey(sources, to, limit, max(now, to), watermark)
            if to_ms is None and plan.newest_legit is not None and plan.newest_legit > to:
                to = plan.newest_legit  # the default never moves a row the guard let through
                plan = clock_repair.survey(sources, to, limit, max(now, to), watermark)
            return plan
        finally:
            self._vs.unpin(st.gen)

    def reset_time_seq(self) -> None:
        """Forget the time bins (after a clock mishap); committed to the manifest at once."""
        self._check_writable()
        self._timeline.reset_bins()
        self._vs.commit(lambda m: m.replace(**self._manifest_extras(m)))
