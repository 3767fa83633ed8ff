"""`lsm bench compact`'s isolated runs (tools/bench/compact_rss.py): a full scan and a full compaction of
the same copy, each in a fresh process, report the scan ratio and the compaction's peak RSS."""

from __future__ import annotations

import json

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
