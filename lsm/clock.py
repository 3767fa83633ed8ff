"""Clocks: where the engine gets the time (ms) it stamps on rows and judges expiry by."""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

from lsm.errors import ClockError

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1  # the on-disk range of every timestamp (i64)
_time_ns = time.time_ns


def check_i64_ms(v: int, what: str) -> int:
    """ValueError naming `v` unless it fits the formats' i64 (a time or an expiry in ms)."""
    if not I64_MIN <= v <= I64_MAX:
        raise ValueError(f"{what} {v} does not fit a signed 64-bit integer of milliseconds")
    return v


@runtime_checkable
class Clock(Protocol):
    """Anything with ``now() -> int`` milliseconds. It should not go back; the engine enforces that."""

    def now(self) -> int:
        """The current time in milliseconds since the Unix epoch."""


class SystemClock:
    """Wall-clock time in ms since the Unix epoch."""

    def now(self) -> int:
        """`time.time_ns()` in whole milliseconds."""
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that moves only when told to; for tests and simulations.

    >>> c = ManualClock(1_000); _ = c.advance(500); c.now()
    1500
    """

    def __init__(self, start_ms: int | str = 0) -> None:
        """`start_ms`: epoch milliseconds, or an RFC 3339 time with its offset (``"2026-01-01T00:00:00Z"``)."""
        self._now = _check_ms(_time_ms(start_ms))
        self._lock = threading.Lock()

    def now(self) -> int:
        """The time last set or advanced to (ms)."""
        return self._now

    def advance(self, ms: int) -> int:
        """Move forward by `ms` (>= 0); returns the new time."""
        if _check_ms(ms) < 0:
            raise ValueError("ManualClock.advance needs ms >= 0")
        with self._lock:
            self._now += ms
            return self._now

    def set(self, ms: int | str) -> None:
        """Jump to `ms` (or an RFC 3339 time; backwards too: the engine then refuses to write until time
        catches up)."""
        self._now = _check_ms(_time_ms(ms))

    def __repr__(self) -> str:
        return f"ManualClock({self._now})"


def _time_ms(v: object) -> object:
    """A time argument as given to every other time parameter: a string (RFC 3339 with its offset, or
    digits) becomes epoch ms through `lsm.timeline.parse_time`; anything else is left for `_check_ms`."""
    if isinstance(v, str):
        from lsm.timeline import parse_time  # here: lsm.timeline imports this module

        return parse_time(v)
    return v


def _check_ms(v: object) -> int:
    if type(v) is not int:
        raise TypeError(f"clock times are int milliseconds, not {type(v).__name__}")
    return check_i64_ms(v, "clock time")


class MonotonicClock:
    """The engine's view of a user clock: never goes back.

    `tick()` (for writes) raises ClockError when the user clock reads below a time already used, or
    (`max_skew_ms`) more than that far ahead of the host's wall clock; `read()` (for reads) returns
    max(user clock, last used), ignoring a reading tick would refuse, and never raises. A time a read used counts
    as used: expiry was judged by it, so a row once seen expired never comes back when the clock steps
    back, and a later write may not be stamped before it.

    Driven by a source (from the first commit at a source's time, `tick_at`, which ``db.ingest(...,
    times="source")`` makes): time is what the source's
    commits set (`tick_at`); the user clock is no longer read, `read()` returns the last source time and
    `tick()` (any other writer) raises ClockError: a write stamped by the user clock could land after
    times the source has yet to commit, which would then go back. A source time more than `max_skew_ms`
    ahead of the host's wall clock is refused, whatever the user clock: it is no reading of it.
    """

    def __init__(self, clock: Clock, floor: int = 0, max_skew_ms: int | None = None) -> None:
        self.clock = clock
        self.last = floor
        self.driver: str | None = None  # the source driving the clock (`drive`), if any
        self._lock = threading.Lock()
        self._now = clock.now  # bound once: tick runs on every write
        self._system = type(clock) is SystemClock  # tick reads it inline, without a method call
        # The skew guard (DbOptions.max_clock_skew_ms): a user clock's reading more than max_skew_ms ahead of
        # the host's wall clock is refused, so that one glitch cannot become the floor of every later write.
        # SystemClock IS the host clock and a ManualClock moves on purpose: neither is judged. `_limit` is
        # the highest reading accepted without looking at the host clock: host time when last looked at,
        # plus the skew. The host clock moves on, so the cached limit is only ever stricter than the true
        # one, and it is refreshed (one time_ns call) only when a reading passes it: a write on a user
        # clock pays one comparison, and SystemClock none (its limit is I64_MAX, the check tick already does).
        self._skew = None if self._system or isinstance(clock, ManualClock) else max_skew_ms
        # a source's own times (`tick_at`) come from no clock of ours, whatever `clock` is: the guard
        # applies to them always (a ManualClock moves on purpose, a progress marker in year 9999 does not)
        self._source_skew = max_skew_ms
        self._limit = I64_MAX
        if self._skew is not None:
            self._refresh_limit()

    def _refresh_limit(self) -> int:
        """Host time now (ms); moves `_limit` to it plus the skew (capped at I64_MAX)."""
        host = _time_ns() // 1_000_000
        self._limit = min(host + self._skew, I64_MAX)  # type: ignore[operator]
        return host

    def lower_to(self, ms: int) -> None:
        """Make `ms` the last time used, even below the current one (a clock repair: DB.repair_clock)."""
        with self._lock:
            self.last = ms

    def drive(self, source: str) -> None:
        """From now on the clock is driven by the commits of source `source` (`tick_at`), until the handle
        closes: reads return the last source time and other writers' `tick` raises ClockError. A second
        source with source times shares the clock (each of its commits is checked the same way)."""
        with self._lock:
            if self.driver is None:
                self.driver = source
            self._system = False  # tick's lock-free path must not run any more

    def tick_at(self, ts: object, source: str, committed: int) -> int:
        """The time for a commit of source `source` at its own time `ts`: ClockError naming both if `ts`
        lies below `committed`, the newest commit's time (the store's watermark), or more than the skew
        guard (DbOptions.max_clock_skew_ms) ahead of the host's wall clock; nothing is written. Reads made before the clock was driven, at the user clock's time, do not hold it back: the
        store's time becomes the source's."""
        if type(ts) is not int or not I64_MIN <= ts <= I64_MAX:
            raise ClockError(f"source {source!r} gave time {ts!r}, not int milliseconds of a signed 64-bit range")
        if ts < committed:
            raise ClockError(
                f"source {source!r} time {ts} ms is below the store's watermark {committed} ms (its newest "
                "commit; the store's clock never goes back); nothing was written"
            )
        skew = self._source_skew
        if skew is not None and ts > (host := _time_ns() // 1_000_000) + skew:
            raise ClockError(
                f"source {source!r} time {ts} ms is {ts - host} ms ahead of the host's wall clock ({host} "
                f"ms), more than DbOptions.max_clock_skew_ms={skew}; nothing was written (it would become "
                "the floor of every later write; max_clock_skew_ms=None turns this check off)"
            )
        self.drive(source)
        with self._lock:
            self.last = ts
        return ts

    def tick(self) -> int:
        """The time for a write: the user clock, which must not be below any time already used
        (ClockError otherwise, before anything is written); it becomes the last used time."""
        if self._system and (now := _time_ns() // 1_000_000) == self.last:
            # the system clock has not moved since the last write or read (most writes of a busy writer):
            # nothing to store, so no lock. A read that moves `last` on concurrently is ordered after
            # this tick, as if it had waited for the lock: the tick read the clock first. (A user clock
            # is read once per tick, under the lock: its now() may have effects.)
            return now
        # Read the user clock under the lock: reads advance `last` too, and a read that slipped in
        # between our clock reading and the comparison would make time look as if it went back.
        lock = self._lock
        lock.acquire()  # not `with`: this runs on every write, and acquire/release is cheaper
        try:
            if self.driver is not None:
                raise ClockError(
                    f"the store's clock is driven by source {self.driver!r} (an ingest with times='source'), "
                    f"now at {self.last} ms: a write stamped by {self.clock!r} could go back in its time; "
                    "nothing was written (write through the source, or reopen the store)"
                )
            now = _time_ns() // 1_000_000 if self._system else self._now()
            if type(now) is not int or not self.last <= now <= self._limit:
                self._refuse(now)  # returns when only the cached skew limit was stale
            self.last = now
        finally:
            lock.release()
        return now

    def _refuse(self, now: object) -> None:
        """Raise the ClockError for a reading `tick` cannot use; return if it can after all (it only
        passed a stale skew limit)."""
        if type(now) is not int:
            raise ClockError(f"clock {self.clock!r} returned {now!r}, not int milliseconds")
        if not I64_MIN <= now <= I64_MAX:  # refused before it is used or becomes the watermark
            raise ClockError(
                f"clock {self.clock!r} returned {now} ms, which does not fit a signed 64-bit integer; "
                "nothing was written"
            )
        if now < self.last:
            raise ClockError(f"clock went back: {now} ms is below {self.last} ms already used; nothing was written")
        if self._too_far_ahead(now):
            host = self._refresh_limit()
            raise ClockError(
                f"clock {self.clock!r} returned {now} ms, {now - host} ms ahead of the host's wall clock "
                f"({host} ms), more than DbOptions.max_clock_skew_ms={self._skew}; nothing was written "
                "(max_clock_skew_ms=None turns this check off)"
            )

    def _too_far_ahead(self, now: int) -> bool:
        """The skew guard: whether `now` lies beyond max_skew_ms ahead of the host clock (which is
        looked at only when `now` passes the cached limit)."""
        return now > self._limit and now > self._refresh_limit() + self._skew  # type: ignore[operator]

    def read(self) -> int:
        """The time for a read: max(user clock, last used time); never raises (a clock returning a
        non-int leaves time where it was, for `tick` to report). Driven by a source: the last source time."""
        if self.driver is not None:
            return self.last
        now = self.clock.now()
        if type(now) is not int or not I64_MIN <= now <= I64_MAX or (now > self._limit and self._too_far_ahead(now)):
            return self.last  # tick() reports the bad clock; a read just does not move time
        if now == self.last:  # time has not moved: nothing to store
            return now
        with self._lock:
            if now > self.last:
                self.last = now
            return self.last
