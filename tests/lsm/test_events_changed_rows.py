"""`EventListener.wants_changed_rows`: a listener that asks gets, in each compaction's stats, the newest
rows the job dropped or rewrote; without one, jobs report nothing (and pay nothing)."""

from __future__ import annotations

import lsm
from lsm.events import CompactionInfo, EventListener

T0 = 1_700_000_000_000


class Ends(EventListener):
    def __init__(self) -> None:
        self.ends: list[CompactionInfo] = []

    def on_compaction_end(self, info: CompactionInfo) -> None:
        self.ends.append(info)


class Wants(Ends):
    wants_changed_rows = True


def _fill_and_compact(open_db, listener) -> None:
    clock = lsm.ManualClock(T0)
    with open_db(clock, event_listeners=(listener,)) as db:
        db.put(b"gone", b"x", ttl=1_000)
        db.put(b"kept", b"y")
        db.put(b"deleted", b"z")
        db.flush()
        db.delete(b"deleted")
        db.flush()
        clock.advance(5_000)  # "gone" expired
        db.compact(full=True)


def test_a_listener_that_asks_gets_the_purged_rows(open_db) -> None:
    w = Wants()
    _fill_and_compact(open_db, w)
    (info,) = w.ends
    changed = info.stats.changed_rows
    # the full compaction writes the oldest run: the expired row and the delete's tombstone are purged;
    # "kept" came out unchanged; "deleted"'s older put is no newest row
    assert sorted((k, new) for k, _seq, new in changed) == [(b"deleted", None), (b"gone", None)]


def test_no_report_unless_a_listener_asks(open_db) -> None:
    e = Ends()
    _fill_and_compact(open_db, e)
    (info,) = e.ends
    assert info.stats is not None and info.stats.changed_rows is None
