"""Counts in CLI output agree with their nouns: "1 SST", "2 SSTs", never "1 SSTs" (`tools.render.plural`)."""

from __future__ import annotations

from pathlib import Path

import lsm
from tests.tools._cli import T0, run_lsm
from tools.render import plural


def test_plural() -> None:
    assert [plural(n, "SST") for n in (0, 1, 2)] == ["0 SSTs", "1 SST", "2 SSTs"]
    assert plural(1, "entry", "entries") == "1 entry" and plural(3, "entry", "entries") == "3 entries"


def _lines(out: str) -> dict[str, str]:
    return {k: v.strip() for k, _, v in (line.partition("  ") for line in out.splitlines()) if v}


def test_one_of_each_is_singular(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with lsm.DB.open(str(path), lsm.DbOptions(clock=lsm.ManualClock(T0), background_compaction=False)) as db:
        db.put(b"k", b"v")
        db.flush()
    r = run_lsm("compact", path)
    assert r.code == 0, r.err
    got = _lines(r.out)
    assert got["inputs"] == "1 SST in 1 sorted source" and got["outputs"] == "1 SST", r.out
    r = run_lsm("check", path)
    assert r.code == 0, r.err
    got = _lines(r.out)
    assert "1 row," in got["ssts"] and got["ssts"].endswith("and 1 run"), r.out
    r = run_lsm("gc", path)
    assert r.code == 0 and r.out.splitlines()[-1] == "removed 0 files", r.out
