"""``lsm bench --compare slatedb``: SlateDB beside lsm, in a directory and on the same S3 server."""

from __future__ import annotations

import os

from tests.tools._cli import ROOT, run_lsm

BENCHMARKS = ["fillrandom", "readrandom", "readseq"]
ENGINES = ["lsm", "lsm-s3", "slatedb", "slatedb-s3"]


def test_compare_slatedb_runs_both_engines_locally_and_on_s3(s3_server) -> None:
    r = run_lsm("bench", "--compare", "slatedb", "--store", "s3", "--num", "2000", "--benchmarks",
                ",".join(BENCHMARKS), "--json", "--no-progress", env={**s3_server.env, "LSM_BENCH_BUCKET": "lsm-test"})
    assert r.code == 0, r.err
    rows = r.json()
    # every engine ran every benchmark, in order, with positive figures
    assert [(x["engine"], x["benchmark"]) for x in rows] == [(e, b) for e in ENGINES for b in BENCHMARKS]
    assert all(x["micros_per_op"] > 0 and x["ops"] > 0 and x["cpu_seconds"] > 0 for x in rows), rows
    by = {(x["engine"], x["benchmark"]): x for x in rows}
    # the same keys were written and read back: the same finds, the same rows scanned (fillrandom's keys
    # repeat, so fewer distinct rows than writes)
    found = {by[e, "readrandom"]["found"] for e in ENGINES}
    scanned = {by[e, "readseq"]["ops"] for e in ENGINES}
    assert len(found) == 1 and 0 < found.pop() <= 2000, rows
    assert len(scanned) == 1 and 0 < scanned.pop() < 2000, rows
    # SlateDB's own request counters on S3, in the note lsm-s3 has
    fill = by["slatedb-s3", "fillrandom"]["note"]
    assert fill.startswith("requests: ") and not fill.startswith("requests: 0 PUT"), fill
    assert "requests" not in by["slatedb", "fillrandom"]["note"]
    assert by["slatedb", "readrandom"]["note"].startswith("after flush(MemTable)")


def test_compare_slatedb_without_the_package_names_it_in_one_line(tmp_path) -> None:
    # a directory ahead of site-packages whose `slatedb` fails to import as an absent package does
    shadow = tmp_path / "shadow" / "slatedb"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'slatedb'\", name='slatedb')\n")
    env = {"PYTHONPATH": f"{shadow.parent}{os.pathsep}{ROOT}", "TMPDIR": str(tmp_path)}
    r = run_lsm("bench", "--compare", "slatedb", "--num", "100", "--no-progress", env=env)
    assert r.code == 2, (r.out, r.err)
    assert r.err.splitlines() == [
        "lsm bench: error: --compare slatedb: the Python package 'slatedb' is not installed: "
        "pip install slatedb (or 'lsm-sim[bench]')"
    ], r.err
    assert r.out == ""  # nothing ran
    # everything else runs without it
    r = run_lsm("bench", "--num", "100", "--benchmarks", "fillseq,readseq", "--no-progress", env=env)
    assert r.code == 0 and "[lsm]" in r.out, r.err
