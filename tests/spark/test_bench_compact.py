"""Smoke test of `lsm bench compact` on a tiny database and the shared session: the shape of the report and
that both executors produced the same rows, not timings."""

from __future__ import annotations

import json

from tools.bench import compact as bench_compact


def test_bench_compact_reports_both_executors(spark, tmp_path, capsys):
    argv = ["--num", "3000", "--runs", "3", "--repeat", "1", "--tiny-repeat", "1", "--tasks", "2"]
    assert bench_compact.main([*argv, "--dir", str(tmp_path), "--verify", "--json"], session=spark) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["database"]["rows"] == 3000 and len(r["database"]["runs"]) == 3
    assert r["verified"] is True and r["same_output"] is True
    local, remote = r["results"]["local"][0], r["results"]["spark"][0]
    assert local["rows_in"] == remote["rows_in"] == 3000
    assert local["rows_out"] == remote["rows_out"] > 0
    assert local["tombstones_dropped"] > 0 and local["expired_dropped"] + local["versions_dropped"] > 0
    assert [t["index"] for t in remote["tasks"]] == [0, 1]
    assert sum(t["rows_in"] for t in remote["tasks"]) == 3000
    for t in remote["tasks"]:
        assert t["seconds"] >= t["read_seconds"] + t["write_seconds"] > 0
    assert r["tiny"]["median"]["seconds"] > 0 and r["speedup"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base"]  # the work copies are removed
