"""``lsm simulate``'s output on a terminal: the summary table fits 120 columns unless --wide, and a
progress bar shows while the plots are drawn. Real `lsm` subprocesses."""

from __future__ import annotations

from pathlib import Path

from tests.tools._cli import run_lsm_each, without_matplotlib
from tests.tools._pty import run_lsm_tty
from tools.simulate.output import SUMMARY_DROP

SPEC = """seed = 5
sample_every = "6h"
[workload]
keys = 200
value_bytes = 30
[[workload.phases]]
duration = "1d"
ops_per_sec = 0.005
mix = { put = 0.9, delete = 0.1 }
ttl = [{ fraction = 0.5, ttl = "6h" }, { fraction = 0.5, ttl = "none" }]
[[policy]]
name = "size-tiered-with-a-long-name"
[[policy]]
name = "periodic-6h"
periodic_compaction_interval = "6h"
"""


def _spec(tmp_path: Path) -> Path:
    p = tmp_path / "spec.toml"
    p.write_text(SPEC)
    return p


def test_the_table_fits_120_columns_and_wide_shows_every_column(tmp_path: Path) -> None:
    spec, quick = _spec(tmp_path), without_matplotlib(tmp_path)
    narrow, wide = run_lsm_each(
        [("simulate", spec, "--out", tmp_path / "n"), ("simulate", spec, "--out", tmp_path / "w", "--wide")],
        env=quick,
    )
    assert narrow.code == 0 and wide.code == 0, narrow.err + wide.err
    lines = narrow.out.splitlines()
    # the line naming the output directory is as long as its path (a pytest-xdist worker's is longer)
    table = [line for line in lines if str(tmp_path) not in line]
    assert len(table) == len(lines) - 1 and max(map(len, table)) <= 120, lines
    note = next(line for line in lines if "left out to fit 120 columns" in line)
    left_out = note.strip("()").split(" left out")[0].split(", ")
    assert left_out == list(SUMMARY_DROP[: len(left_out)]) and note.endswith("--wide shows them)")
    header = lines[0]
    for column in ("policy", "disk", "space amp", "write amp", "purge p99", "unpurged expired", "compactions"):
        assert column in header
    assert all(column not in header.split("  ") for column in left_out)
    assert max(map(len, wide.out.splitlines())) > 120 and "left out" not in wide.out
    for column in SUMMARY_DROP:
        assert column in wide.out.splitlines()[0]


def test_a_progress_bar_shows_while_the_plots_are_drawn(tmp_path: Path) -> None:
    r = run_lsm_tty("simulate", _spec(tmp_path), "--out", tmp_path / "o", env={"TQDM_MININTERVAL": "0"})
    assert r.code == 0, r.err
    assert "plots:" in r.err and "/4" in r.err  # plots written / plots, on the terminal (stderr)
    assert "plots" not in r.out.splitlines()[0]  # stdout has the table, then the files written
