"""`lsm bench --profile` and the write-amplification figures of the db suite, through the real command."""

from __future__ import annotations

import json
import re

from tests.tools._cli import run_lsm


def tables(text: str) -> dict[str, str]:
    """``# profile: TITLE`` -> the table under it."""
    out, title = {}, None
    for line in text.splitlines():
        if line.startswith("# profile: "):
            title = line[len("# profile: ") :]
            out[title] = ""
        elif title is not None:
            out[title] += line + "\n"
    return out


def test_profile_prints_the_engines_top_functions_per_benchmark(tmp_path):
    r = run_lsm(
        "bench",
        "--num",
        "3000",
        "--benchmarks",
        "fillrandom,readrandom",
        "--no-progress",
        "--profile",
        "12",
        cwd=tmp_path,
    )
    assert r.code == 0, r.err
    t = tables(r.out)
    fill = t["lsm fillrandom, the calling thread"]
    read = t["lsm readrandom, the calling thread"]
    # pstats rows: ncalls tottime percall cumtime percall file:line(function), at most 12 of them
    rows = [ln for ln in fill.splitlines() if re.match(r"\s*\d+(/\d+)?\s+\d+\.\d{3}", ln)]
    assert 0 < len(rows) <= 12
    assert re.search(r"\d+\s+.*\(put\)$", fill, re.M)  # the engine's put, called once per write
    assert "3000" in fill.split("(put)")[0].splitlines()[-1]
    assert re.search(r"\(get\)$", read, re.M)
    assert any(title.startswith("lsm background threads") for title in t)
    assert re.search(r"^fillrandom\s+: write-amp lsm \d+\.\d\d ", r.out, re.M)


def test_profile_goes_to_stderr_with_json_and_write_amp_is_in_the_json(tmp_path):
    r = run_lsm("bench", "--num", "120000", "--benchmarks", "fillseq", "--json", "--profile", cwd=tmp_path)
    assert r.code == 0, r.err
    (row,) = json.loads(r.out)
    # 4 MiB memtables flushed during the fill, nothing rewritten (a fillseq job is a trivial move)
    assert 0.5 < row["write_amp"] < 1.5
    assert "# profile: lsm fillseq, the calling thread" in r.err and "(put)" in r.err


def test_profile_takes_a_positive_count(tmp_path):
    r = run_lsm("bench", "--num", "10", "--profile", "0", cwd=tmp_path)
    assert r.code == 2 and "--profile" in r.err
