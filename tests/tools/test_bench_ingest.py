"""`lsm bench ingest` runs end to end and reports every figure (the figures themselves are not judged)."""

from __future__ import annotations

from tests.tools._cli import run_lsm


def test_bench_ingest_json(tmp_path) -> None:
    r = run_lsm(
        "bench",
        "ingest",
        "--num",
        "600",
        "--partitions",
        "3",
        "--batch-records",
        "100",
        "--runs",
        "1",
        "--histories",
        "5,40",
        "--dir",
        tmp_path,
        "--json",
    )
    assert r.code == 0, r.err
    out = r.json()
    t = out["throughput"]
    for path in ("ingest", "write", "read+write"):
        assert t[path]["records_per_s"] > 0 and t[path]["cpu_us_per_record"] > 0
    assert t["ingest_over_write"] > 0 and t["ingest_over_read_write"] > 0
    assert [row["bindings"] for row in out["resume"]] == [5, 40]
    assert all(row["frontier_ms_median"] > 0 for row in out["resume"])


def test_bench_ingest_text_and_bad_input(tmp_path) -> None:
    r = run_lsm("bench", "ingest", "--num", "200", "--runs", "1", "--histories", "3", "--dir", tmp_path)
    assert r.code == 0, r.err
    assert "ingest / write" in r.out and "frontier ms" in r.out
    bad = run_lsm("bench", "ingest", "--histories", "x")
    assert bad.code == 2 and "histories" in bad.err
