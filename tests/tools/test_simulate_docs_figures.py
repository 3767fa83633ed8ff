"""`python -m tools.simulate.docs_figures`: docs/simulate.md's figures, regenerated between markers."""

from __future__ import annotations

import pytest

from tools import simulate
from tools.simulate import docs_figures
from tools.simulate.docs_figures import STUDIES, figures, read_samples, replace_figure


def test_every_figure_of_every_study_has_its_markers_in_the_doc() -> None:
    text = open(docs_figures.DOC).read()
    for study in STUDIES:
        names = [f"{study.name}.run", *(f"{study.name}.{t}" for t in study.tables)]
        for name in names:
            assert text.count(f"<!-- figures: {name} -->") == 1, name
            assert text.count(f"<!-- /figures: {name} -->") == 1, name
        # the command the doc shows runs the study's spec
        _, changed = replace_figure(text, f"{study.name}.run", "x")
        assert changed


def test_replace_figure_replaces_only_between_its_markers() -> None:
    text = (
        "a\n<!-- figures: s.t -->\nold\nlines\n<!-- /figures: s.t -->\n"
        "b\n<!-- figures: s.u -->\nu\n<!-- /figures: s.u -->\n"
    )
    new, changed = replace_figure(text, "s.t", "| x |")
    assert changed and new == text.replace("old\nlines\n", "| x |\n")
    assert replace_figure(new, "s.t", "| x |") == (new, False)
    with pytest.raises(ValueError, match="s.v: expected one pair of markers"):
        replace_figure(text, "s.v", "x")


def test_a_studys_figures_come_from_its_run(tmp_path) -> None:
    # study (b)'s table on a small run of the same shape: three periodic intervals, writes then quiet
    spec = {
        "seed": 3,
        "workload": {
            "keys": 300,
            "phases": [
                {
                    "duration": "10d",
                    "ops_per_sec": 0.004,
                    "ttl": [{"fraction": 0.6, "ttl": "1d"}, {"fraction": 0.4, "ttl": "none"}],
                },
                {"duration": "5d", "ops_per_sec": 0},
            ],
        },
        "policy": [
            {"name": f"periodic-{p}", "memtable_bytes": 8192, "periodic_compaction_interval": p}
            for p in ("6h", "1d", "3d")
        ],
    }
    summary = simulate.run(spec, tmp_path, plots=False)
    samples = read_samples(str(tmp_path / "timeseries.csv"))
    study = next(s for s in STUDIES if s.name == "periodic_intervals")
    got = figures(study, "the table\n", summary, samples)
    assert got["periodic_intervals.run"].splitlines() == [
        f"<!-- docs-test: skip ({study.skip}) -->",
        "```console",
        "$ lsm simulate examples/periodic_intervals.toml --out sim-intervals",
        "the table",
        "```",
    ]
    rows = got["periodic_intervals.table"].splitlines()
    assert len(rows) == 2 + 3 and [r.split(" | ")[0] for r in rows[2:]] == ["| 6 h", "| 1 d", "| 3 d"]
    for row, p in zip(rows[2:], summary["policies"], strict=True):
        assert f"**{p['write_amplification']:.2f}**" in row
        assert f"{p['purge_lag_ms']['max'] / 3_600_000:.2f} h" in row
