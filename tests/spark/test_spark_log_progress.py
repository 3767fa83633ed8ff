"""The Spark work of the `lsm` commands: one JVM log file per run, named when a job fails and removed when
it succeeds, nothing of the JVM on the terminal; and the progress line drawn from the status tracker.

The two CLI runs start their own JVMs in subprocesses at once (no `spark` fixture: they run while the
shared session starts); the progress tests use the shared session."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import time

from lsm.sources import LogWriter
from tests.spark.test_cli import lsm_cli_popen
from tests.tools._cli import without_matplotlib
from tools.common import spark_session_for
from tools.spark_progress import SparkProgress, progress_text

SMALL_SPEC = """seed = 1
sample_every = "1h"
[workload]
keys = 100
value_bytes = 20
[[workload.phases]]
duration = "6h"
ops_per_sec = 0.02
mix = { put = 0.9, delete = 0.1 }
[[policy]]
name = "tiered"
memtable_bytes = 4096
[[policy]]
name = "periodic-1h"
memtable_bytes = 4096
periodic_compaction_interval = "1h"
"""


def _corrupt_payload(log: str) -> None:
    """Flip a byte in the middle of a partition file: planning reads only record headers, so the Spark
    tasks find the damage (a failing job), not the driver."""
    path = os.path.join(log, "1.log")
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))


def _finish(p: subprocess.Popen, timeout: float = 300) -> subprocess.CompletedProcess:
    out, err = p.communicate(timeout=timeout)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def test_a_failed_spark_job_names_its_log_and_a_good_run_leaves_none(tmp_path) -> None:
    log = str(tmp_path / "log")
    with LogWriter(log) as w:
        for i in range(200):
            w.append(i % 2, b"k%04d" % i, b"value-%d" % i * 5)
    _corrupt_payload(log)
    bad_tmp, good_tmp = tmp_path / "tmp-ingest", tmp_path / "tmp-simulate"
    bad_tmp.mkdir()
    good_tmp.mkdir()
    # the run's Spark log is what is tested: a small spec, and no plots (matplotlib hidden; stderr then
    # holds the no-plots note, a "lsm: note:" line)
    spec = tmp_path / "small.toml"
    spec.write_text(SMALL_SPEC)
    out = str(tmp_path / "sim")
    quick = without_matplotlib(tmp_path)
    procs = [  # both JVMs start at once
        lsm_cli_popen(
            "ingest",
            str(tmp_path / "db"),
            log,
            "--name",
            "ev",
            "--engine",
            "spark",
            "--master",
            "local[1]",
            TMPDIR=str(bad_tmp),
        ),
        lsm_cli_popen(
            "simulate",
            spec,
            "--out",
            out,
            "--engine",
            "spark",
            "--master",
            "local[2]",
            "--json",
            TMPDIR=str(good_tmp),
            **quick,
        ),
    ]
    bad, good = (_finish(p) for p in procs)

    assert bad.returncode == 2, bad.stderr[-3000:]
    (line,) = bad.stderr.splitlines()
    m = re.fullmatch(r"lsm: error: Spark bulk load failed: .*CorruptionError.*\(Spark log: (\S+)\)", line)
    assert m, line
    assert os.path.dirname(m.group(1)) == str(bad_tmp) and os.listdir(bad_tmp) == [
        os.path.basename(m.group(1))
    ]
    kept = open(m.group(1)).read()
    assert "checksum mismatch" in kept  # the failing task's own trace is in the log, not on the terminal

    assert good.returncode == 0, good.stderr[-3000:]
    assert [s for s in good.stderr.splitlines() if not s.startswith("lsm: note:")] == []  # no JVM warnings
    assert os.listdir(good_tmp) == []  # the log of a successful run is removed
    assert json.loads(good.stdout)["engine"] == "spark"


def test_progress_text() -> None:
    assert progress_text([]) == ""
    assert progress_text([(3, 5, 8)]) == "[stage 3] 5/8 tasks"
    assert progress_text([(3, 8, 8), (4, 0, 2)]) == "[stage 3] 8/8 tasks  [stage 4] 0/2 tasks"


def _slow(i: int) -> int:
    time.sleep(0.4)
    return i


def test_progress_line_follows_a_running_job(spark) -> None:
    sc = spark.sparkContext
    out = io.StringIO()
    with SparkProgress(sc, out, enabled=True, interval=0.05) as progress:
        assert sc.parallelize(range(6), 6).map(_slow).collect() == list(range(6))
        time.sleep(0.2)  # the poller sees the stage end and clears the line
    text = out.getvalue()
    frames = text.split("\r")[1:]
    shown = [f.rstrip() for f in frames if f.strip()]
    assert shown, text
    stage = re.fullmatch(r"\[stage (\d+)\] (\d)/6 tasks", shown[0])
    assert stage, shown
    done = [int(re.fullmatch(rf"\[stage {stage.group(1)}\] (\d)/6 tasks", s).group(1)) for s in shown]
    assert done == sorted(done) and done[-1] <= 6  # counts only go up
    assert text.endswith("\r") and frames[-2].strip() == ""  # the line is blanked at the end
    assert progress._thread is None


def test_progress_only_on_a_terminal_unless_forced(spark) -> None:
    out = io.StringIO()  # not a TTY: nothing drawn
    with SparkProgress(spark.sparkContext, out, interval=0.05):
        spark.sparkContext.parallelize(range(2), 2).map(_slow).collect()
    assert out.getvalue() == ""


def test_spark_session_for_a_given_session_starts_logs_and_stops_nothing(spark) -> None:
    with spark_session_for("local[1]", "test", session=spark) as run:
        assert run.session is spark and run.log is None and run.startup_seconds == 0.0
    assert not spark.sparkContext._jsc.sc().isStopped()
