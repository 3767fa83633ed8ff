"""`lsm bench compression`: one SST per codec on the same rows, through the real `lsm` command."""

from __future__ import annotations

import os

from tests.tools._cli import run_lsm


def test_every_codec_is_measured_on_the_same_rows(tmp_path):
    r = run_lsm(
        "bench",
        "compression",
        "--num",
        "3000",
        "--reads",
        "500",
        "--repeat",
        "2",
        "--json",
        env={"TMPDIR": str(tmp_path)},
    )
    assert r.code == 0, r.err
    report = {x["codec"]: x for x in r.json()}
    assert list(report) == ["none", "zlib", "zstd", "lz4"]
    none = report["none"]
    assert none["vs_none"] == 1.0 and none["file_bytes"] > 3000 * (16 + 100)
    for codec in ("zlib", "zstd", "lz4"):
        x = report[codec]
        # db_bench's values compress to about half, and the keys share their prefixes: every codec saves
        assert x["file_bytes"] < 0.7 * none["file_bytes"], codec
        assert x["vs_none"] == x["file_bytes"] / none["file_bytes"]
    for x in report.values():
        assert len(x["runs"]) == 2
        assert all(run["file_bytes"] == x["file_bytes"] for run in x["runs"])  # the same bytes every run
        figures = ("write_mb_s", "scan_mb_s", "get_us", "write_cpu_mb_s", "scan_cpu_mb_s", "get_cpu_us")
        assert all(x[k] > 0 for k in figures)
        assert sorted(run["get_us"] for run in x["runs"])[0] <= x["get_us"]  # a median of the runs
    assert os.listdir(tmp_path) == []  # the temporary SSTs are gone


def test_table_and_a_codec_subset(tmp_path):
    r = run_lsm(
        "bench",
        "compression",
        "--num",
        "2000",
        "--repeat",
        "1",
        "--codecs",
        "lz4,zstd",
        "--dir",
        str(tmp_path / "kept"),
    )
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split() == [
        "codec",
        "file_bytes",
        "vs_none",
        "write_MB/s",
        "cpu",
        "scan_MB/s",
        "cpu",
        "get_us",
        "cpu_us",
    ]
    # none always runs (the ratios are against it); the codecs in their fixed order
    assert [line.split()[0] for line in lines[1:4]] == ["none", "zstd", "lz4"]
    assert lines[1].split()[2] == "1.000"
    assert lines[4].startswith("2000 rows (16-byte keys, 100-byte values") and "medians of 1 run;" in lines[4]
    # --dir keeps the last run's SSTs, each written with its codec
    assert sorted(os.listdir(tmp_path / "kept")) == ["lz4.sst", "none.sst", "zstd.sst"]
    show = run_lsm("sst", "show", "--json", tmp_path / "kept" / "lz4.sst")
    assert show.json()["compression"] == "lz4" and show.json()["num_rows"] == 2000


def test_an_unknown_codec_is_a_usage_error():
    r = run_lsm("bench", "compression", "--codecs", "zstd,brotli")
    assert r.code == 2
    assert "argument --codecs: unknown codec brotli; known: none, zlib, zstd, lz4" in r.err.splitlines()[-1]
