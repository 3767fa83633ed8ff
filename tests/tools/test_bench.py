"""Smoke test of `python -m tools.bench`: tiny workloads, checking the shape of the output, not timings."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINE = re.compile(
    r"^(?P<name>\S+)\s+:\s+(?P<us>\d+\.\d{3}) micros/op (?P<ops>\d+) ops/sec;\s+(?P<mb>\d+\.\d) MB/s"
    r" \[(?P<engine>[a-z]+)\]( \((?P<details>.*)\))?$"
)
RATIO = re.compile(r"^(?P<name>\S+)\s+: ratio( lsm/[a-z]+ \d+\.\d\dx)+ \(micros/op; above 1 = lsm slower\)$")
BENCHMARKS = ["fillseq", "fillrandom", "overwrite", "readrandom", "readseq"]


def bench(*args: str, tmp_path=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    if tmp_path is not None:
        env["TMPDIR"] = str(tmp_path)
    return subprocess.run(
        [sys.executable, "-m", "tools.bench", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def result_lines(stdout: str) -> list[re.Match]:
    return [m for m in map(LINE.match, stdout.splitlines()) if m]


def test_db_suite_prints_one_db_bench_line_per_benchmark(tmp_path):
    p = bench("--num", "300", "--no-progress", tmp_path=tmp_path)
    assert p.returncode == 0, p.stderr
    lines = result_lines(p.stdout)
    assert [m["name"] for m in lines] == BENCHMARKS
    assert {m["engine"] for m in lines} == {"lsm"}
    for m in lines:
        assert float(m["us"]) > 0 and int(m["ops"]) > 0
    read = lines[BENCHMARKS.index("readrandom")]
    found = re.match(r"(\d+) of 300 found; cpu \d+\.\d{3} micros/op; after flush\(\)", read["details"])
    assert found and 0 < int(found[1]) <= 300
    assert "Keys:       16 bytes each" in p.stdout
    assert list(tmp_path.iterdir()) == []  # the temporary DB is removed


def test_db_suite_keeps_an_explicit_db_dir_and_runs_batches_with_sync(tmp_path):
    db = tmp_path / "db"
    p = bench(
        "--num",
        "200",
        "--benchmarks",
        "fillrandom,readseq",
        "--batch-size",
        "7",
        "--sync",
        "--db",
        str(db),
        "--no-progress",
    )
    assert p.returncode == 0, p.stderr
    lines = result_lines(p.stdout)
    assert [m["name"] for m in lines] == ["fillrandom", "readseq"]
    assert re.fullmatch(r"cpu \d+\.\d{3} micros/op; batch 7; sync", lines[0]["details"])
    assert (db / "lsm" / "manifest").is_dir()


@pytest.mark.skipif(
    not (importlib.util.find_spec("rocksdict") and importlib.util.find_spec("plyvel")),
    reason="needs the bench extra (rocksdict, plyvel)",
)
def test_compare_prints_the_engines_side_by_side_with_ratios(tmp_path):
    p = bench(
        "--num",
        "200",
        "--benchmarks",
        "fillrandom,readrandom",
        "--compare",
        "rocksdict,plyvel",
        "--no-progress",
        tmp_path=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    out = [ln for ln in p.stdout.splitlines() if LINE.match(ln) or RATIO.match(ln)]
    names = [(LINE.match(ln) or RATIO.match(ln))["name"] for ln in out]
    assert names == ["fillrandom"] * 4 + ["readrandom"] * 4
    engines = [m["engine"] for m in map(LINE.match, out) if m]
    assert engines == ["lsm", "rocksdict", "plyvel"] * 2
    assert "lsm/rocksdict" in out[3] and "lsm/plyvel" in out[3]
    founds = {m["details"].split(";")[0] for m in map(LINE.match, out[4:7])}
    assert len(founds) == 1  # same keys for every engine


@pytest.mark.skipif(not importlib.util.find_spec("plyvel"), reason="needs the bench extra (plyvel)")
def test_a_benchmark_run_twice_prints_each_run_once_beside_the_other_engine(tmp_path):
    # a cold and a warm pass of the same benchmark: grouped by position, not by name
    p = bench("--num", "200", "--benchmarks", "fillseq,readseq,readseq", "--compare", "plyvel", "--no-progress",
              tmp_path=tmp_path)
    assert p.returncode == 0, p.stderr
    out = [ln for ln in p.stdout.splitlines() if LINE.match(ln) or RATIO.match(ln)]
    names = [(LINE.match(ln) or RATIO.match(ln))["name"] for ln in out]
    assert names == ["fillseq"] * 3 + ["readseq"] * 6, p.stdout
    assert [m["engine"] for m in map(LINE.match, out) if m] == ["lsm", "plyvel"] * 3


def test_json_output(tmp_path):
    p = bench("--num", "200", "--benchmarks", "fillseq,readrandom", "--json", tmp_path=tmp_path)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert [(r["engine"], r["benchmark"]) for r in rows] == [("lsm", "fillseq"), ("lsm", "readrandom")]
    for r in rows:
        for k in ("micros_per_op", "ops_per_sec", "mb_per_s", "cpu_micros_per_op"):
            assert isinstance(r[k], float) and r[k] > 0
    assert rows[1]["found"] > 0


def test_formats_suite_prints_one_line_per_figure(tmp_path):
    p = bench("formats", "--num", "3000", "--no-progress", tmp_path=tmp_path)
    assert p.returncode == 0, p.stderr
    lines = result_lines(p.stdout)
    assert [m["name"] for m in lines] == [
        "row_encode",
        "row_decode",
        "row_encode_ttl",
        "row_decode_ttl",
        "sst_write",
        "sst_scan",
    ]
    assert all(int(m["ops"]) > 0 and m["engine"] == "formats" for m in lines)
    assert "TimeToLive" in lines[2]["details"] and "TimeToLive" not in lines[0]["details"]


def test_unknown_benchmark_is_a_usage_error():
    p = bench("--benchmarks", "fillrandom,nosuch")
    assert p.returncode == 2
    assert "unknown benchmark(s) nosuch" in p.stderr


def test_unknown_suite_is_a_usage_error_listing_the_suites():
    from tests.tools._cli import run_lsm
    from tools.bench import SUITES

    cli, module = run_lsm("bench", "nosuchsuite"), bench("nosuchsuite")
    want = f"lsm bench: error: unknown suite 'nosuchsuite'; suites: {', '.join(SUITES)} (lsm bench SUITE --help)"
    for code, err in ((cli.code, cli.err), (module.returncode, module.stderr)):
        assert code == 2 and err.splitlines()[-1] == want, err
        assert err.startswith("usage: lsm bench [SUITE]"), err


def test_merge_suite_and_the_registry(tmp_path):
    """Every suite is reachable through the one registry; the merge suite prints its three figures."""
    import tools.bench
    from tools.bench import compact, compression, db, formats, merge, timemaps
    from tools.bench import ingest as bench_ingest
    from tools.bench import load as bench_load
    from tools.bench import simulate as bench_simulate

    assert tools.bench.SUITES == {
        "db": db.main,
        "formats": formats.main,
        "compression": compression.main,
        "merge": merge.main,
        "compact": compact.main,
        "time": timemaps.main,
        "ingest": bench_ingest.main,
        "load": bench_load.main,
        "simulate": bench_simulate.main,
    }
    p = bench("merge", "--num", "2000", "--repeat", "1", "--no-wa", tmp_path=tmp_path)
    assert p.returncode == 0, p.stderr
    assert [ln.split(":")[0].strip() for ln in p.stdout.splitlines()] == ["merge", "decode+encode", "merge/limit"]


def test_numeric_options_are_usage_errors_naming_the_option():
    for args, message in (
        (("--num", "0"), "argument --num: '0' is below 1"),
        (("--compression-ratio", "1.5"), "argument --compression-ratio: '1.5' is not in (0, 1]"),
        (("formats", "--value-size", "-3"), "argument --value-size: '-3' is negative"),
        (("merge", "--repeat", "x"), "argument --repeat: 'x' is not an integer"),
        (("compact", "--ttl-fraction", "2"), "argument --ttl-fraction: '2' is not in [0, 1]"),
        (("time", "--runs", "0"), "argument --runs: '0' is below 1"),
    ):
        p = bench(*args)
        assert p.returncode == 2 and message in p.stderr, (args, p.stderr)
