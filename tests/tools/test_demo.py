"""`python -m tools.demo`: its sections are numbered 1..N once each, and it cleans up after itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.tools._cli import ROOT


def _demo(tmp_path, *args: str) -> tuple[str, list[str]]:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmpdir)}
    p = subprocess.run(
        [sys.executable, "-m", "tools.demo", "--no-spark", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout, sorted(os.listdir(tmpdir))


def test_demo_numbers_its_sections_and_removes_its_directory(tmp_path):
    out, left = _demo(tmp_path)
    numbers = [int(n) for n in re.findall(r"^== (\d+)\. ", out, re.M)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 9, numbers
    assert left == [], f"the demo left {left} in its temp directory"


def test_demo_keep_leaves_the_directory_and_names_it(tmp_path):
    out, left = _demo(tmp_path, "--keep")
    assert len(left) == 1 and left[0].startswith("lsm-demo-"), left
    kept = tmp_path / "tmp" / left[0]
    assert f"kept the demo's files in {kept}" in out
    assert (kept / "ingest-db").is_dir()
