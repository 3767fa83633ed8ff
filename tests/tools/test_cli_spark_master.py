"""Every `lsm` command that starts Spark, pointed at a standalone master nobody listens for: one line
naming the master URL and "connection refused", exit status 2, within seconds (Spark alone waits a
minute and then prints a Py4J message), no Spark log kept, nothing written to the store."""

from __future__ import annotations

import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import lsm
from tests.tools._cli import ROOT, one_line_error, run_lsm
from tests.tools.test_cli_spark_unavailable import _store_and_log


def _dead_master() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"spark://127.0.0.1:{s.getsockname()[1]}"


def test_a_dead_master_is_one_line_within_seconds(tmp_path) -> None:
    master = _dead_master()
    db, log = _store_and_log(tmp_path)
    out = str(tmp_path / "out")
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    runs = [
        ("compact", db, "--engine", "spark", "--master", master),
        ("ingest", db, log, "--name", "ev", "--engine", "spark", "--master", master),
        ("simulate", os.path.join(ROOT, "examples", "demo.toml"), "--out", f"{out}-sim", "--engine", "spark",
         "--master", master),
        ("bench", "compact", "--num", "100", "--executors", "spark", "--master", master, "--no-isolated",
         "--dir", f"{out}-compact"),
        ("bench", "load", "--num", "10", "--engines", "spark", "--master", master, "--dir", f"{out}-load"),
    ]

    def timed(args: tuple[str, ...]) -> tuple[float, object]:
        t0 = time.monotonic()
        r = run_lsm(*args, env={"TMPDIR": str(tmpdir)})
        return time.monotonic() - t0, r

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(timed, runs))
    for args, (took, r) in zip(runs, results, strict=True):
        line = one_line_error(r, 2)
        assert f"cannot reach the Spark master {master}: connection refused" in line, (args, line)
        assert "Py4J" not in line and "Traceback" not in r.err
        assert took < 10, (args, took)  # a whole process: start-up, the store or the bench data, the probe
    assert os.listdir(tmpdir) == []  # no JVM was started: no Spark log kept
    with lsm.DB.open(db, lsm.DbOptions(background_compaction=False)) as d:
        assert dict(d.scan()) == {b"k": b"v"} and len(d.manifest.l0) == 1 and d.sources() == []
