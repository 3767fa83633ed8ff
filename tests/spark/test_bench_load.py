"""Smoke test of `lsm bench load` on a tiny log and the shared session: the shape of the report and that
every engine produced the same state, not timings."""

from __future__ import annotations

import json

from tools.bench import load as bench_load


def test_bench_load_reports_every_engine(spark, tmp_path, capsys):
    argv = ["--num", "3000", "--partitions", "8", "--tasks", "2", "--dir", str(tmp_path), "--json"]
    assert bench_load.main(argv, session=spark) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["same_state"] is True and r["tasks"] == 2
    assert set(r["results"]) == {"spark", "local", "stream", "rocksdb"}
    for engine, runs in r["results"].items():
        (run,) = runs
        assert run["records"] == 3000 and run["seconds"] > 0, engine
        assert 1000 < run["keys"] < 3000  # keys drawn with repeats
    assert {x["digest"] for e in ("spark", "local", "rocksdb") for x in r["results"][e]} == {
        r["results"]["local"][0]["digest"]
    }
    assert r["results"]["spark"][0]["batches"] == 1 and r["results"]["stream"][0]["batches"] == 1
    assert set(r["speedups"]) >= {"spark_vs_local", "local_vs_stream", "spark_vs_rocksdb"}
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # the work copies and the log are removed
