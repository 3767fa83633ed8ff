"""`make test-fast`'s selection (tests/conftest.py): every SLOW entry still names tests (a renamed test
would otherwise slip back into the quick run, or out of nothing), the kept smoke tests are not slow, and
LSM_TEST_FAST=1 bounds a property test whose own settings ask for more examples, stateful ones too."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import FAST_KEEPS, FAST_MAX_EXAMPLES, SLOW
from tests.tools._cli import ROOT


def _pytest(*args: str, fast: bool = False) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("LSM_TEST_FAST", None)
    if fast:
        env["LSM_TEST_FAST"] = "1"
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


@pytest.mark.slow
def test_every_slow_entry_names_collected_tests() -> None:
    slow = [line for line in _pytest("--co", "-m", "slow").splitlines() if "::" in line]
    for prefix in SLOW:
        assert any(node.startswith(prefix) for node in slow), f"{prefix!r} matches no test: renamed or gone?"
    assert not [node for node in slow if node.startswith(FAST_KEEPS)]
    spark = [line for line in _pytest("--co", "-m", "spark").splitlines() if "::" in line]
    assert spark and all(node.startswith("tests/spark/") for node in spark)


@pytest.mark.slow  # a pytest run of its own
def test_fast_bounds_the_examples_of_property_tests() -> None:
    tests = (
        "tests/compaction/test_scheduler.py::test_plans_take_oldest_l0_and_adjacent_runs",  # @settings(300)
        "tests/lsm/test_db_model.py::test_db_model",  # a state machine: 40 on its TestCase
    )
    out = _pytest("--hypothesis-show-statistics", *tests, fast=True)
    assert out.count(f"- {FAST_MAX_EXAMPLES} passing, 0 failing") == len(tests), out
