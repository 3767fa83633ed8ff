"""What a sweep leaves for people: short labels (P1..) with their key (terminal table, policies.csv,
summary.json), plots whose legends sit outside the data, and progress for --jobs on a terminal."""

from __future__ import annotations

import csv
import json

import pytest

from tests.tools._cli import NO_PLOTS, run_lsm, without_matplotlib
from tests.tools._pty import run_lsm_tty
from tools import simulate
from tools.simulate import output

SWEEP = """seed = 3
sample_every = "2h"
compact_every = "10m"
[workload]
keys = 300
value_bytes = 40
[[workload.phases]]
duration = "1d"
ops_per_sec = 0.01
mix = { put = 0.9, delete = 0.1 }
ttl = [{ fraction = 0.5, ttl = "6h" }, { fraction = 0.5, ttl = "none" }]
[[workload.phases]]
duration = "12h"
ops_per_sec = 0
[[policy]]
name = "tiered"
memtable_bytes = 4096
[[policy]]
name = "periodic-6h"
memtable_bytes = 4096
periodic_compaction_interval = "6h"
[sweep]
"workload.key_distribution" = ["uniform", "zipfian"]
"policy.l0_compaction_threshold" = [3]
"""
KEY = [
    ("P1", "tiered", "uniform"),
    ("P2", "periodic-6h", "uniform"),
    ("P3", "tiered", "zipfian"),
    ("P4", "periodic-6h", "zipfian"),
]


def _sweep_spec(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP)
    return path


def test_a_sweep_is_labelled_p1_to_pn_with_its_key_in_the_table_and_policies_csv(tmp_path) -> None:
    out = tmp_path / "out"
    r = run_lsm("simulate", _sweep_spec(tmp_path), "--out", out, "--no-progress")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    # the key first: label, policy, one column per [sweep] path, the DbOptions overrides
    assert lines[0].split() == [
        "label",
        "policy",
        "workload.key_distribution",
        "policy.l0_compaction_threshold",
        "options",
    ]
    for (label, policy, dist), line in zip(KEY, lines[1:5], strict=True):
        assert line.split()[:4] == [label, policy, dist, "3"], line
    assert "periodic_compaction_interval=21600000" in lines[2]
    table = lines[lines.index("") + 1 :]
    assert table[0].split()[0] == "label" and [t.split()[0] for t in table[1:5]] == ["P1", "P2", "P3", "P4"]
    assert max(map(len, r.out.splitlines())) < 200  # no 75-character names in the rows
    assert table[-1].startswith("wrote summary.json, timeseries.csv, policies.csv, disk.png")
    rows = list(csv.DictReader((out / "policies.csv").open()))
    assert [(x["label"], x["policy"], x["workload.key_distribution"]) for x in rows] == KEY
    assert rows[3]["name"] == "periodic-6h workload.key_distribution=zipfian policy.l0_compaction_threshold=3"
    assert json.loads(rows[1]["options"])["periodic_compaction_interval"] == 21_600_000
    summary = json.loads((out / "summary.json").read_text())
    assert [p["label"] for p in summary["policies"]] == ["P1", "P2", "P3", "P4"]


def test_without_a_sweep_the_labels_are_the_policy_names(tmp_path) -> None:
    spec = simulate.load_spec(str(_sweep_spec(tmp_path)))
    del spec["sweep"]
    summary = simulate.run(spec, tmp_path / "o", plots=False)
    assert [p["label"] for p in summary["policies"]] == ["tiered", "periodic-6h"]
    assert output.key_table(summary["policies"]) is None  # nothing to explain
    rows = list(csv.DictReader((tmp_path / "o" / "policies.csv").open()))
    assert [(x["label"], x["name"]) for x in rows] == [("tiered", "tiered"), ("periodic-6h", "periodic-6h")]


def test_plot_legends_sit_outside_the_data_and_name_what_they_stack(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from tools.simulate import plots

    spec = simulate.load_spec(str(_sweep_spec(tmp_path)))
    base, cells = simulate.grid(spec)
    results = simulate.run_cells(cells)
    plt = plots._plt()
    with plt.rc_context(plots._RC):
        for fn in (plots._disk, plots._amplification, plots._purge_lag, plots._comparison):
            name, fig = fn(plt, results, base.compact_every_ms)
            fig.canvas.draw()
            axes = [a for a in fig.axes if a.get_visible()]
            assert all(a.get_legend() is None for a in axes), name  # no legend over the data
            (legend,) = fig.legends
            right = max(a.get_window_extent().x1 for a in axes)
            assert legend.get_window_extent().x0 >= right, name  # beside the panels
            texts = [t.get_text() for t in legend.get_texts()]
            titles = [a.title.get_window_extent() for a in axes]
            for i, t in enumerate(titles):  # no title runs into its neighbour's
                assert not any(t.overlaps(u) for u in titles[i + 1 :]), (name, [a.get_title() for a in axes])
            for a in axes:
                assert all(t.get_fontsize() >= 9 for t in a.get_xticklabels()), name
            if name == "disk.png":  # what the areas stack, top first
                assert texts == [plots.DESCRIBE[c] for c in reversed(plots.CLASSES)]
                assert "live + expired + tombstone + shadowed" in fig._suptitle.get_text()
                assert [a.get_title() for a in axes][:2] == [
                    "P1: tiered\nuniform, 3",
                    "P2: periodic-6h\nuniform, 3",
                ]
            else:
                assert texts == [
                    "P1: tiered, uniform, 3",
                    "P2: periodic-6h, uniform, 3",
                    "P3: tiered, zipfian, 3",
                    "P4: periodic-6h, zipfian, 3",
                ]
                assert (
                    legend.get_title().get_text()
                    == "label: policy, key_distribution, l0_compaction_threshold"
                )
            plt.close(fig)


class Recorder:
    def __init__(self) -> None:
        self.n = None
        self.seen: dict[str, list[int]] = {}

    def begin(self, n: int) -> None:
        self.n = n

    def __call__(self, cell):
        got = self.seen.setdefault(cell.label, [])
        return lambda sim_ms, ops: got.append(sim_ms)


def test_jobs_report_the_progress_of_every_simulation(tmp_path) -> None:
    spec = simulate.load_spec(str(_sweep_spec(tmp_path)))
    rec = Recorder()
    simulate.run(spec, tmp_path / "o", plots=False, jobs=2, progress_for=rec)
    assert rec.n == 4
    day_and_half = 36 * 3_600_000
    assert sorted(rec.seen) == ["P1", "P2", "P3", "P4"]
    for label, ms in rec.seen.items():  # every sample, in order, up to the end
        assert ms == sorted(ms) and ms[-1] == day_and_half and len(ms) == 18, (label, ms)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_cli_progress_on_a_terminal_never_in_json(tmp_path, jobs) -> None:
    quick = without_matplotlib(tmp_path)  # the progress is tested, not the plots: stderr says "no plots"
    spec = _sweep_spec(tmp_path)
    r = run_lsm_tty("simulate", spec, "--out", tmp_path / "o", "--json", "--jobs", jobs, env=quick)
    assert r.code == 0, r.err
    assert json.loads(r.out)["engine"] == "local"  # stdout is the JSON alone
    assert "simulations" in r.err and "/4" in r.err  # done / total
    for label in ("P1", "P2", "P3", "P4"):
        assert f"{label}:" in r.err and "day" in r.err  # each one's simulated days
    quiet = run_lsm_tty("simulate", spec, "--out", tmp_path / "q", "--jobs", jobs, "--no-progress", env=quick)
    assert quiet.code == 0 and "simulations" not in quiet.err and NO_PLOTS in quiet.err
    piped = run_lsm("simulate", spec, "--out", tmp_path / "p", "--jobs", jobs, env=quick)
    assert piped.code == 0 and piped.err == NO_PLOTS + "\n"  # not a terminal: no bars
