"""The idle release of the writer's WAL segment lock (lsm/wal_lock.py): the lock is given up after a
tick without a commit, taken again by the next write and given up again, and an idle handle's thread
sleeps instead of waking every tick. A directory's: an object store's WAL is written as objects, with
no segment file to lock."""

from __future__ import annotations

import time

import lsm
from lsm.wal_lock import IdleReleaser
from lsm.write_path import WritePath


def _until(cond, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.002)
    return cond()


def test_the_lock_is_released_after_each_idle_spell_and_the_idle_thread_sleeps(tmp_path, monkeypatch):
    with lsm.DB.open(tmp_path / "db") as db:
        engine = db.engine
        calls = []
        real = WritePath.release_idle_lock  # the writer host the idle releaser ticks (lsm.wal_lock)
        monkeypatch.setattr(WritePath, "release_idle_lock", lambda self, last: calls.append(1) or real(self, last))
        for round_ in range(3):
            db.put(b"k%d" % round_, b"v")
            assert engine.segment_lock_held()  # a write takes it and keeps it across writes
            assert _until(lambda: not engine.segment_lock_held()), f"round {round_}: never released"
            asleep = len(calls)
            time.sleep(0.1)  # twenty ticks
            assert len(calls) == asleep, (
                f"round {round_}: the idle thread kept waking ({len(calls) - asleep})"
            )
        assert db.get(b"k2") == b"v"
    with lsm.DB.open(tmp_path / "db") as db:
        assert [k for k, _ in db.scan()] == [b"k0", b"k1", b"k2"]


class _StoppedWhileLooking:
    """A writer host whose first look at the lock stops the releaser in the middle of its idle step:
    the interleaving where `stop` runs between the releaser's look and its clearing of the wake-up."""

    def __init__(self) -> None:
        self.releaser: IdleReleaser | None = None
        self.looks = 0

    def release_idle_lock(self, last_seq: int) -> int:
        return 0

    def segment_lock_held(self) -> bool:
        self.looks += 1
        if self.looks == 1:
            self.releaser.stop()  # on the releaser's own thread: sets the flags, joins nothing
        return False


def test_a_stop_between_the_look_and_the_sleep_is_not_lost():
    host = _StoppedWhileLooking()
    releaser = IdleReleaser.__new__(IdleReleaser)
    host.releaser = releaser
    releaser.__init__(host, tick_s=0.001)
    releaser._thread.join(timeout=5)
    assert not releaser._thread.is_alive(), "the releaser slept through its stop"
