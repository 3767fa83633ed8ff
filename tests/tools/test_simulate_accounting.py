"""The simulator's incremental accounting (tools/simulate/accounting.py) against `lsm du` in the cases
the engine's reports do not cover alone: outputs whose row layout differs from their inputs', a
compaction that reports nothing, and the end-of-run recount that catches drift."""

from __future__ import annotations

import pytest

from lsm.inspect import space_usage
from tests.tools.test_simulate import _du_classes, small_spec
from tools.simulate import runner
from tools.simulate.accounting import AccountingMismatch, DiskAccount
from tools.simulate.runner import Simulation
from tools.simulate.spec import MAX_KEYS, parse_spec
from tools.simulate.workload import generate


def _run_checked(spec_dict, d):
    spec = parse_spec(spec_dict)
    checked = []

    def check(_sim_ms, _ops):
        now = sim.clock.now()
        mine = sim.account.classes()
        mine["size"] = sim.account.disk_bytes
        assert mine == _du_classes(space_usage(d, now)), now
        checked.append(now)

    sim = Simulation(spec, spec.policies[0], generate(spec), d, check)
    res = sim.run()
    assert len(checked) == res.summary["samples"]
    return sim, res


def test_outputs_that_lose_the_ttl_column_are_resized(tmp_path):
    """Short TTLs purged by periodic compaction leave runs of rows without TTL: their SSTs have no
    TimeToLive column, so the rows shrink as they move; the account reads those outputs to resize."""
    spec = small_spec(periodic_compaction_interval="2h")
    spec["workload"]["phases"][0]["ttl"] = [{"fraction": 0.5, "ttl": "1h"}, {"fraction": 0.5, "ttl": "none"}]
    spec["workload"]["phases"][0]["mix"] = {"put": 0.9, "get": 0.1}
    sim, res = _run_checked(spec, str(tmp_path / "db"))
    try:
        m = sim.db.manifest
        ends_without_ttl = [e for e in m.all_ssts() if not e.info.has_ttl]
        assert ends_without_ttl
        # more SSTs read than the end-of-run recount's: some outputs were resized on the way
        assert res.summary["ssts_read_for_accounting"] > len(m.all_ssts())
    finally:
        sim.close()


class _Unreported(DiskAccount):
    wants_changed_rows = False  # the engine then reports nothing: every compaction is recounted


def test_a_compaction_without_a_report_is_recounted_from_the_files(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "DiskAccount", _Unreported)
    sim, res = _run_checked(small_spec(periodic_compaction_interval="8h"), str(tmp_path / "db"))
    try:
        assert isinstance(sim.account, _Unreported)
        assert res.summary["compactions"]["size_tiered"] > 0
        assert res.summary["ssts_read_for_accounting"] > res.summary["compactions"]["size_tiered"]
    finally:
        sim.close()


def test_verify_raises_when_the_account_drifted(tmp_path):
    spec = small_spec()
    spec["workload"]["phases"][0]["duration"] = "6h"
    spec["workload"]["phases"][1]["duration"] = "1h"
    sim, _res = _run_checked(spec, str(tmp_path / "db"))
    try:
        now = sim.clock.now()
        sim.account.verify(sim.db.manifest, now)  # in step: no error
        acct = sim.account
        live = int(((acct.seq >= 0) & ~acct.tomb & (acct.expire >= now)).argmax())  # a live key's row
        assert acct.seq[live] >= 0 and not acct.tomb[live]
        acct.size[live] += 7  # as if a report had been lost
        with pytest.raises(AccountingMismatch, match="live_bytes"):
            sim.account.verify(sim.db.manifest, now)
    finally:
        sim.close()


def test_the_account_grows_with_the_keys_written_not_the_key_space(tmp_path):
    """The largest key space a spec may ask for (MAX_KEYS) with a few thousand writes: the account's
    columns hold one slot per key written, and every sample still equals `lsm du`, through periodic
    compactions that purge expired rows."""
    spec = small_spec(periodic_compaction_interval="6h")
    spec["workload"]["keys"] = MAX_KEYS
    spec["workload"]["key_distribution"] = "uniform"
    sim, res = _run_checked(spec, str(tmp_path / "db"))
    try:
        acct = sim.account
        writes = res.summary["ops_by_kind"]["put"] + res.summary["ops_by_kind"]["delete"]
        assert 0 < len(acct.seq) <= writes
        assert len(acct.seq) == len(acct.size) == len(acct.expire)
        assert res.summary["purge_lag_ms"]["count"] > 0
    finally:
        sim.close()


@pytest.mark.parametrize("periodic", [None, "6h"])
def test_fifo_drops_leave_the_account_as_du_sees_them(tmp_path, periodic):
    """fifo drops whole expired SSTs with no merge and no changed rows reported: the account must see
    their rows leave (checked against `lsm du` at every sample and by the end-of-run recount)."""
    policy = {"compaction_policy": "fifo"}
    if periodic:
        policy["periodic_compaction_interval"] = periodic
    spec = small_spec(**policy)
    spec["workload"]["phases"][0]["ttl"] = [{"fraction": 0.5, "ttl": "1h"}, {"fraction": 0.5, "ttl": "12h"}]
    spec["workload"]["phases"][0]["mix"] = {"put": 0.9, "get": 0.1}
    sim, res = _run_checked(spec, str(tmp_path / "db"))
    try:
        assert res.summary["compactions"]["fifo"] > 0
        drops = res.summary["sst_drop_lag_ms"]
        if not periodic:  # each expired SST went at the first db.compact() after its last row expired
            assert drops["count"] > 0 and 0 <= drops["max"] <= 10 * 60_000  # compact_every = 10m
        # two quiet days: every SST expired and went (without periodic compaction the last memtable is
        # never flushed, so its rows wait in the WAL)
        assert list(sim.db.manifest.all_ssts()) == []
        if periodic:
            assert res.summary["unpurged_expired_rows_final"] == 0
    finally:
        sim.close()
