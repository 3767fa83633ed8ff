"""The pytest plugin `lsm.testing`: a store with a controllable clock in one line.

On the plugin's own `lsm_path` (a directory under tmp_path): what is tested is the plugin's fixtures as a
user gets them; the engine's behaviour on every backend is the other files' (test_read_options runs
`lsm_db` on each backend by overriding `lsm_path`)."""

from __future__ import annotations

import pytest

import lsm
from lsm.testing import LSM_CLOCK_START

pytest_plugins = ["pytester"]


def test_fixtures_give_a_store_on_a_manual_clock(lsm_db, lsm_clock, lsm_path, lsm_options):
    assert isinstance(lsm_clock, lsm.ManualClock) and lsm_clock.now() == LSM_CLOCK_START
    assert lsm_options.clock is lsm_clock and lsm_options.background_compaction is False
    assert lsm_db.path == str(lsm_path)
    lsm_db.put(b"session", b"alice", ttl=30_000)
    assert lsm_db.get_entry(b"session").ts == LSM_CLOCK_START
    lsm_clock.advance(30_000)
    assert lsm_db.get(b"session") == b"alice"
    lsm_clock.advance(1)
    assert lsm_db.get(b"session") is None


def test_fixture_db_can_be_closed_and_reopened_by_the_test(lsm_db, lsm_path, lsm_options):
    lsm_db.put(b"k", b"v")
    lsm_db.close()  # the fixture's teardown close is then a no-op
    with lsm.DB.open(lsm_path, lsm_options) as db:
        assert db.get(b"k") == b"v"


def test_each_test_gets_a_fresh_store(lsm_db):
    assert list(lsm_db.scan()) == [] and lsm_db.seq == 0


@pytest.fixture
def lsm_options(lsm_clock):
    """Overriding `lsm_options` in a test module changes what `lsm_db` opens with."""
    return lsm.DbOptions(clock=lsm_clock, default_ttl=1_000, background_compaction=False)


def test_overridden_options_apply(lsm_db, lsm_clock):
    lsm_db.put(b"k", b"v")
    assert lsm_db.get_entry(b"k").expire_ts == lsm_clock.now() + 1_000


def test_plugin_is_loaded_through_the_entry_point_and_closes_the_db(pytester):
    pytester.makepyfile(
        """
        import lsm

        opened = []

        def test_use(lsm_db, lsm_clock):
            opened.append(lsm_db)
            lsm_db.put(b"k", b"v", ttl=10)
            lsm_clock.advance(11)
            assert lsm_db.get(b"k") is None

        def test_closed_after_teardown():
            (db,) = opened
            try:
                db.get(b"k")
            except lsm.ClosedError:
                return
            raise AssertionError("lsm_db was not closed at teardown")
        """
    )
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:hypothesispytest")
    result.assert_outcomes(passed=2)


def test_importing_the_plugin_has_no_side_effects():
    import lsm.testing as plugin

    hooks = [n for n in vars(plugin) if n.startswith("pytest_")]
    assert hooks == []
    assert set(plugin.__all__) == {"LSM_CLOCK_START", "lsm_clock", "lsm_db", "lsm_options", "lsm_path"}
