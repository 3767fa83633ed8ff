"""`lsm bench compact`'s isolated runs (tools/bench/compact_rss.py): a full scan and a full compaction of
the same copy, each in a fresh process, report the scan ratio and the compaction's peak RSS."""

from __future__ import annotations

import json

import pytest

from tools.bench import compact as bench_compact
from tools.bench import compact_rss


def test_isolated_runs_report_scan_ratio_and_peak_rss(tmp_path, capsys):
    argv = ["--num", "3000", "--runs", "3", "--repeat", "2", "--executors", "local", "--dir", str(tmp_path)]
    assert bench_compact.main([*argv, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    iso = r["isolated"]
    assert len(iso["runs"]) == 2
    local = r["results"]["local"][0]
    for run in iso["runs"]:
        assert run["rows_in"] == local["rows_in"] == 3000
        assert run["rows_out"] == local["rows_out"]
        assert 0 < run["scan_rows"] <= 3000  # the live keys a scan sees: tombstones and expired rows hidden
        assert run["ratio"] == run["compact_seconds"] / run["scan_seconds"]
        assert run["peak_rss_mib"] >= run["base_rss_mib"] > 0
        assert run["job_rows_out"] == run["rows_out"]
        assert run["job_peak_rss_mib"] >= run["job_base_rss_mib"] > 0
    assert iso["median"]["peak_rss_mib"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base"]  # the work copy is removed


def test_peak_rss_reset_drops_an_earlier_peak():
    big = bytearray(64 << 20)
    big[::4096] = b"\1" * len(range(0, len(big), 4096))  # touch every page
    before = compact_rss.peak_rss_kib()
    del big
    if compact_rss.reset_peak_rss():
        assert compact_rss.peak_rss_kib() < before - 32 * 1024


def test_isolated_runs_compare_with_rocksdb_and_report_rss_anon(tmp_path, capsys):
    pytest.importorskip("rocksdict")
    argv = ["--num", "3000", "--runs", "3", "--repeat", "1", "--executors", "local", "--dir", str(tmp_path)]
    assert bench_compact.main([*argv, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["rocksdb_database"]["rows"] == 3000
    run = r["isolated"]["runs"][0]
    assert run["rocksdb_files_before"] == 3 and run["rocksdb_files_after"] == 1  # one L0 file a run -> one
    assert run["vs_rocksdb"] == run["compact_seconds"] / run["rocksdb_seconds"]
    assert run["peak_anon_mib"] >= run["base_anon_mib"] > 0
    assert run["anon_growth_mib"] == run["peak_anon_mib"] - run["base_anon_mib"]
    assert run["job_peak_anon_mib"] >= run["job_base_anon_mib"] > 0
    assert "vs_rocksdb" in r["isolated"]["median"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base"]  # the copies and RocksDB's base removed


def test_anon_peak_sees_a_short_allocation():
    """A 64 MiB buffer alive for 50 ms and freed before the block ends is in the peak (RssAnon sampled
    every 5 ms by another process), though RssAnon at the end is back down."""
    import time

    with compact_rss.AnonPeak() as p:
        if p.base_kib is None:
            pytest.skip("no RssAnon in /proc/self/status (not Linux)")
        big = bytearray(64 << 20)
        big[::4096] = b"\1" * len(range(0, len(big), 4096))
        time.sleep(0.05)
        del big
    assert p.peak_kib is not None and p.peak_kib >= p.base_kib + 60 * 1024
