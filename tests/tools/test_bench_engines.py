"""`lsm bench`'s engines, like for like: RocksDB configured as lsm is, write amplification read the same way.

The options are checked where RocksDB itself records them (the OPTIONS file of the DB it opened), and the
write counters against the SST files on disk.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import lsm
from compaction.policy import POLICIES
from tests.tools._cli import lsm_env, run_lsm
from tools.bench.engines import ENGINES, ROCKSDB_STYLE, bench_policies, lsm_options, rocksdb_like_lsm

needs_rocksdict = pytest.mark.skipif(
    importlib.util.find_spec("rocksdict") is None, reason="needs the bench extra (rocksdict)"
)


def rocksdb_options_file(path: Path) -> dict[str, str]:
    """``name=value`` pairs of the newest OPTIONS file RocksDB wrote in `path` (every section merged)."""
    newest = max((p for p in path.iterdir() if p.name.startswith("OPTIONS-")), key=lambda p: p.name)
    pairs = {}
    for line in newest.read_text().splitlines():
        m = re.fullmatch(r"\s*([a-z0-9_]+)=(.*)", line)
        if m:
            pairs[m[1]] = m[2].strip()
    return pairs


def sst_sizes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*.sst"))


def test_rocksdb_like_lsm_takes_lsms_own_options():
    o = lsm.DbOptions()
    assert rocksdb_like_lsm("tiered") == {
        "write_buffer_size": o.memtable_bytes,
        "level0_file_num_compaction_trigger": o.l0_compaction_threshold,
        "compression": "none",
        "compaction_style": "universal",
    }
    assert lsm_options("tiered").memtable_bytes == o.memtable_bytes


def test_every_policy_has_a_rocksdb_style_and_is_a_bench_choice():
    """A policy added to lsm's registry needs its RocksDB counterpart here to be compared like for like."""
    assert set(POLICIES) <= set(ROCKSDB_STYLE)
    assert bench_policies() == list(POLICIES)
    assert {ROCKSDB_STYLE[p] for p in ("tiered", "leveled", "fifo")} == {"universal", "level", "fifo"}


@needs_rocksdict
def test_rocksdict_opens_with_lsms_memtable_trigger_compression_and_universal(tmp_path):
    eng = ENGINES["rocksdict"](str(tmp_path / "r"), sync=False, policy="tiered")
    eng.open(fresh=True)
    try:
        got = rocksdb_options_file(tmp_path / "r")
    finally:
        eng.close()
    o = lsm.DbOptions()
    assert got["write_buffer_size"] == str(o.memtable_bytes)
    assert got["level0_file_num_compaction_trigger"] == str(o.l0_compaction_threshold)
    assert got["compaction_style"] == "kCompactionStyleUniversal"
    assert got["compression"] == "kNoCompression"


@needs_rocksdict
def test_rocksdict_defaults_keeps_rocksdbs_defaults(tmp_path):
    eng = ENGINES["rocksdict-defaults"](str(tmp_path / "d"), sync=False, policy="tiered")
    eng.open(fresh=True)
    try:
        got = rocksdb_options_file(tmp_path / "d")
    finally:
        eng.close()
    assert got["write_buffer_size"] == str(64 << 20)
    assert got["compaction_style"] == "kCompactionStyleLevel"
    assert got["compression"] != "kNoCompression"


@pytest.mark.parametrize("name", ["lsm", pytest.param("rocksdict", marks=needs_rocksdict)])
def test_sst_bytes_written_is_the_bytes_of_the_flushed_ssts(tmp_path, name):
    """Two flushes and no compaction: the counter is exactly the SST files' sizes, for either engine."""
    eng = ENGINES[name](str(tmp_path / name), sync=False, policy="tiered")
    eng.open(fresh=True)
    try:
        assert eng.sst_bytes_written() == 0
        put = eng.put_fn()
        for batch in range(2):
            for i in range(2000):
                put(b"%016d" % (i * 2 + batch), b"v" * 100)
            eng.prepare_reads()  # a flush (lsm: and a compaction pass, which has nothing to do yet)
        written, on_disk = eng.sst_bytes_written(), sst_sizes(tmp_path / name)
        assert on_disk > 2 * 2000 * 116 * 0.9
        # lsm: exactly; RocksDB's flush ticker counts a few hundred bytes more than the files hold
        assert on_disk <= written <= on_disk * 1.005 if name == "rocksdict" else written == on_disk
    finally:
        eng.close()


@needs_rocksdict
def test_bench_compare_rocksdict_reports_write_amp_for_both(tmp_path):
    """Both engines report a write amplification (how much of it is flushed by the end of the loop
    depends on the background flushes, so only its presence and range are checked)."""
    r = run_lsm(
        "bench",
        "--num",
        "80000",
        "--benchmarks",
        "fillseq",
        "--compare",
        "rocksdict",
        "--compaction-policy",
        "tiered",
        "--db",
        str(tmp_path / "b"),
        "--json",
    )
    assert r.code == 0, r.err
    rows = {x["engine"]: x for x in json.loads(r.out)}
    assert set(rows) == {"lsm", "rocksdict"}
    for x in rows.values():  # fillseq: flushes, and trivial moves that write nothing
        assert 0 <= x["write_amp"] < 1.5, x
    assert os.path.isdir(tmp_path / "b" / "rocksdict")
    opts = rocksdb_options_file(tmp_path / "b" / "rocksdict")
    assert opts["compaction_style"] == "kCompactionStyleUniversal"


@needs_rocksdict
def test_bench_header_says_how_each_engine_is_configured(tmp_path):
    r = run_lsm(
        "bench", "--num", "100", "--benchmarks", "fillseq", "--compare", "rocksdict,rocksdict-defaults",
        "--no-progress", "--db", str(tmp_path / "h"),
    )  # fmt: skip
    assert r.code == 0, r.err
    assert "  lsm:                DbOptions(compaction_policy='tiered')" in r.out
    assert "compaction_style=universal" in r.out and "write_buffer_size=4194304" in r.out
    assert "  rocksdict-defaults: RocksDB's default options" in r.out


def test_unknown_compaction_policy_is_a_usage_error():
    r = run_lsm("bench", "--compaction-policy", "nosuch", "--num", "10")
    assert r.code == 2
    assert "argument --compaction-policy: invalid choice: 'nosuch'" in r.err


@pytest.mark.parametrize("name", ["lsm", pytest.param("rocksdict", marks=needs_rocksdict)])
def test_settle_flushes_and_leaves_nothing_due(tmp_path, name):
    """After settle() every row written is in an SST (the counter covers them all) and nothing is due."""
    eng = ENGINES[name](str(tmp_path / name), sync=False, policy="tiered")
    eng.open(fresh=True)
    try:
        put = eng.put_fn()
        for i in range(3000):
            put(b"%016d" % i, b"v" * 100)
        assert eng.sst_bytes_written() == 0  # still in the memtable
        assert eng.settle().startswith("settled: ")
        assert eng.sst_bytes_written() >= 3000 * 100  # at least the values (RocksDB shares key prefixes)
        if name == "lsm":
            assert eng.db.lsm_shape()["l0"] and eng.db.compact().jobs == 0
        else:
            assert eng.db.property_int_value("rocksdb.num-running-compactions") == 0
    finally:
        eng.close()


@needs_rocksdict
def test_bench_settle_counts_every_flushed_row_for_both_engines(tmp_path):
    """15,000 rows fit one 4 MiB memtable: without --settle nothing is written, with it all of them."""
    args = ["bench", "--num", "15000", "--benchmarks", "fillseq", "--compare", "rocksdict", "--json"]
    loose = {x["engine"]: x for x in json.loads(run_lsm(*args).out)}
    r = run_lsm(*args, "--settle")
    assert r.code == 0, r.err
    settled = {x["engine"]: x for x in json.loads(r.out)}
    for e in ("lsm", "rocksdict"):
        assert loose[e]["write_amp"] == 0.0
        assert 0.9 < settled[e]["write_amp"] < 1.5, settled[e]
        assert settled[e]["flush_amp"] == settled[e]["write_amp"]  # one flush, nothing to compact
        assert settled[e]["write_amp_flushed"] == 1.0  # RocksDB's W-Amp: bytes written / bytes flushed
        assert loose[e]["write_amp_flushed"] is None  # nothing flushed: no figure, not a division by 0
        assert settled[e]["note"].startswith("settled: ")


@needs_rocksdict
def test_rocksdict_for_leveled_runs_level_compaction_with_lsms_level_targets(tmp_path):
    eng = ENGINES["rocksdict"](str(tmp_path / "l"), sync=False, policy="leveled")
    eng.open(fresh=True)
    try:
        got = rocksdb_options_file(tmp_path / "l")
    finally:
        eng.close()
    o = lsm.DbOptions(compaction_policy="leveled")
    assert got["compaction_style"] == "kCompactionStyleLevel"
    assert got["max_bytes_for_level_base"] == str(o.max_bytes_for_level_base)
    assert float(got["max_bytes_for_level_multiplier"]) == o.max_bytes_for_level_multiplier
    assert got["target_file_size_base"] == str(o.target_sst_bytes)
    assert got["write_buffer_size"] == str(o.memtable_bytes)


def test_write_amp_lines_give_both_measures_per_engine():
    """The write-amp lines: per user byte, then per flushed byte (RocksDB's W-Amp), which is the first
    divided by the flushes' share, so a format whose flushed rows are larger does not count twice."""
    from tools.bench.db import write_amp_line
    from tools.bench.harness import Result

    rows = [
        Result("lsm", "fillrandom", 10, 1.0, 1160, write_amp=3.6, flush_amp=1.2),
        Result("rocksdict", "fillrandom", 10, 1.0, 1160, write_amp=3.0, flush_amp=0.96),
        Result("lsm", "readrandom", 10, 1.0, 1160),
    ]
    per_user, per_flushed = write_amp_line("fillrandom", rows, settled=True).splitlines()
    assert "write-amp lsm 3.60 rocksdict 3.00 (SST bytes written" in per_user
    assert "write-amp lsm 3.00 rocksdict 3.12 (the same bytes / bytes the flushes wrote" in per_flushed
    assert rows[0].to_dict()["write_amp_flushed"] == pytest.approx(3.0)
    assert write_amp_line("readrandom", rows) is None
    # nothing flushed yet: only the first line
    alone = [Result("lsm", "fillseq", 10, 1.0, 1160, write_amp=0.0, flush_amp=0.0)]
    assert write_amp_line("fillseq", alone).count("\n") == 0


def test_the_lsm_engines_open_with_numpy_loaded_so_no_benchmark_times_its_import(tmp_path) -> None:
    # lsm imports numpy at its first scan or merge; in a bench that would be inside the first readseq
    code = (
        "import sys\n"
        "from tools.bench.engines import ENGINES\n"
        f"e = ENGINES['lsm']({str(tmp_path / 'db')!r}, sync=False)\n"
        "assert 'numpy' not in sys.modules\n"
        "e.open(fresh=True)\n"
        "assert 'numpy' in sys.modules, 'numpy is imported by the first timed scan'\n"
        "e.close()\n"
    )
    p = subprocess.run([sys.executable, "-c", code], env=lsm_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
