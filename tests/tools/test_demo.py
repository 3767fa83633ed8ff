"""`python -m tools.demo`: its sections are numbered 1..N once each, and it cleans up after itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tools._cli import ROOT


class _Demo:
    """One `python -m tools.demo --no-spark ARGS` run with its own TMPDIR, started at once."""

    def __init__(self, base: Path, *args: str) -> None:
        self.tmpdir = base / "tmp"
        self.tmpdir.mkdir(parents=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(self.tmpdir)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tools.demo", "--no-spark", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def result(self) -> tuple[str, list[str]]:
        """The run's stdout and what it left in its TMPDIR (sorted), once it exited 0."""
        out, err = self.proc.communicate(timeout=120)
        assert self.proc.returncode == 0, out + err
        return out, sorted(os.listdir(self.tmpdir))


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, _Demo]]:
    """Both runs of this module, started together: each is one process, so on two cores the pair takes
    about the time of one."""
    runs = {"plain": _Demo(tmp_path_factory.mktemp("plain")), "keep": _Demo(tmp_path_factory.mktemp("keep"), "--keep")}
    yield runs
    for d in runs.values():
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.communicate()


def test_demo_numbers_its_sections_and_removes_its_directory(demos):
    out, left = demos["plain"].result()
    numbers = [int(n) for n in re.findall(r"^== (\d+)\. ", out, re.M)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 9, numbers
    assert left == [], f"the demo left {left} in its temp directory"


def test_demo_keep_leaves_the_directory_and_names_it(demos):
    d = demos["keep"]
    out, left = d.result()
    assert len(left) == 1 and left[0].startswith("lsm-demo-"), left
    kept = d.tmpdir / left[0]
    assert f"kept the demo's files in {kept}" in out
    assert (kept / "ingest-db").is_dir()
