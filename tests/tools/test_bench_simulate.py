"""`lsm bench simulate` reports issue 15's targets against what it measured."""

from __future__ import annotations

import os

from tools.bench.simulate import DEFAULT_SPEC, DEFAULT_SWEEP, targets


def _policy(name, same_run, cpu, wall):
    return {"name": name, "overhead_same_run": same_run, "overhead_cpu": cpu, "overhead": wall}


def test_targets_compare_each_measured_figure_with_its_bound() -> None:
    report = {
        "study": {"total_s": 119.9, "policies": [_policy("a", 0.12, 0.31, 0.2), _policy("b", 0.25, 0.2499, 0.26)]},
        "sweep": {"master": "local[2]", "speedup": 1.59},
    }
    got = {t["target"]: (t["measured"], t["met"]) for t in targets(report)}
    assert got == {
        "study wall time < 120 s": ("119.9 s", True),
        "a simulation overhead < 25% (wall time of separate runs)": ("+20.0%", True),
        "a simulation overhead < 25% (CPU of separate runs)": ("+31.0%", False),
        "a simulation overhead < 25% (same-run CPU split)": ("+12.0%", True),
        "b simulation overhead < 25% (wall time of separate runs)": ("+26.0%", False),
        "b simulation overhead < 25% (CPU of separate runs)": ("+25.0%", True),
        "b simulation overhead < 25% (same-run CPU split)": ("+25.0%", False),
        "Spark sweep speedup >= 1.6x on local[2]": ("1.59x", False),
    }


def test_only_the_parts_that_ran_are_judged() -> None:
    assert targets({}) == []
    (t,) = targets({"sweep": {"master": "local[2]", "speedup": 1.6}})
    assert t["met"] is True
    assert [t["target"] for t in targets({"study": {"total_s": 121.0, "policies": []}})] == [
        "study wall time < 120 s"
    ]


def test_the_default_specs_are_the_repositorys_examples() -> None:
    # tools/bench/simulate.py moved one level down once and its defaults pointed at tools/examples/
    for path in (DEFAULT_SPEC, DEFAULT_SWEEP):
        assert os.path.isfile(path), path
