"""`make demo`'s Spark step (tools.demo.quiet_spark_session): its JVM prints no start-up WARN lines, no
log4j banner and no incubator-module notice, and an error it logs still reaches the terminal. A real JVM,
in a subprocess whose stderr is what a user of the demo would see."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.spark.conftest import ROOT

SCRIPT = """
import sys, tempfile
from tools.demo import quiet_spark_session
s = quiet_spark_session("local[1]", tempfile.mkdtemp())
assert s.range(10).count() == 10
log = s.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger("demo.check")
log.warn("a warning the demo leaves out")
log.error("an error the demo shows")
print("python's own stderr still works", file=sys.stderr, flush=True)
s.stop()
"""


def test_the_demos_spark_session_is_quiet_but_shows_errors() -> None:
    env = {**os.environ, "PYTHONPATH": ROOT}
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
    )
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    assert any(line.endswith("ERROR check: an error the demo shows") for line in lines), p.stderr
    assert "python's own stderr still works" in lines
    noise = ("WARN", "WARNING: Using incubator modules", "log4j profile", "Setting default log level")
    assert not [line for line in lines if any(n in line for n in noise)], p.stderr
