"""A pytest plugin: an lsm-sim store with a clock the test controls, in one line.

It is registered through the ``pytest11`` entry point of the distribution (``lsm = "lsm.testing"``), so
any project that installs lsm-sim and pytest gets these fixtures without a ``conftest.py``::

    def test_session_expires(lsm_db, lsm_clock):
        lsm_db.put(b"session", b"alice", ttl=30_000)
        lsm_clock.advance(30_000)
        assert lsm_db.get(b"session") == b"alice"   # visible at now == expire_ts
        lsm_clock.advance(1)
        assert lsm_db.get(b"session") is None       # gone one millisecond later

Fixtures (all function-scoped):

``lsm_clock``
    An `lsm.ManualClock` starting at `LSM_CLOCK_START` (1_700_000_000_000 ms, November 2023). Time moves
    only when the test calls ``advance(ms)`` or ``set(ms)``; setting it back makes writes raise
    `lsm.ClockError`, as the engine promises.
``lsm_options``
    The `lsm.DbOptions` that ``lsm_db`` opens with: ``clock=lsm_clock`` and
    ``background_compaction=False`` (so the shape of the tree changes only when the test says so), the
    engine's defaults otherwise. Override it in a ``conftest.py`` or a test module to change them::

        @pytest.fixture
        def lsm_options(lsm_clock):
            return lsm.DbOptions(clock=lsm_clock, default_ttl=60_000, memtable_bytes=4096)

``lsm_path``
    The directory of the database: ``tmp_path / "db"`` (created by the first open).
``lsm_db``
    An `lsm.DB` opened on ``lsm_path`` with ``lsm_options``; closed at teardown (closing it earlier in
    the test is fine, `DB.close` is idempotent). To reopen, close it and call
    ``lsm.DB.open(lsm_path, lsm_options)``.

Importing this module defines the fixtures and nothing else: no hooks, no global state.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import lsm

LSM_CLOCK_START = 1_700_000_000_000  # ms; a realistic epoch time, far from 0 so off-by-epoch bugs show

__all__ = ["LSM_CLOCK_START", "lsm_clock", "lsm_db", "lsm_options", "lsm_path"]


@pytest.fixture
def lsm_clock() -> lsm.ManualClock:
    """A `ManualClock` at `LSM_CLOCK_START` ms that moves only when the test moves it."""
    return lsm.ManualClock(LSM_CLOCK_START)


@pytest.fixture
def lsm_options(lsm_clock: lsm.ManualClock) -> lsm.DbOptions:
    """Options for ``lsm_db``: the manual clock, no background compaction, engine defaults otherwise."""
    return lsm.DbOptions(clock=lsm_clock, background_compaction=False)


@pytest.fixture
def lsm_path(tmp_path: Path) -> Path:
    """Where ``lsm_db`` lives: ``tmp_path / "db"``."""
    return tmp_path / "db"


@pytest.fixture
def lsm_db(lsm_path: Path, lsm_options: lsm.DbOptions) -> Iterator[lsm.DB]:
    """An open `lsm.DB` on ``lsm_path`` with ``lsm_options``; closed when the test ends."""
    db = lsm.DB.open(lsm_path, lsm_options)
    try:
        yield db
    finally:
        db.close()
