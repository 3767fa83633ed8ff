"""A standalone Spark master that cannot be reached: `lsm.SparkMasterUnreachableError` within seconds,
naming the master URL and the cause, from every way the library starts a session (Spark alone would
retry its registration for a minute and then raise a Py4J error whose cause is only in the JVM's log).

The library runs in a subprocess with a time limit, so a check that let the JVM start would fail the
test by its time, not hang the suite."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

import lsm
from compaction.spark_runtime import check_master, master_addresses

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = r"""
import json, os, sys, time
import lsm
from compaction import spark
from lsm.sources import LogWriter, PartitionedLog
import tools.simulate

master, tmp, spec_path = sys.argv[1:4]

def attempt(where, fn):
    t0 = time.monotonic()
    try:
        fn()
        print(json.dumps([where, None, None, time.monotonic() - t0]))
    except Exception as e:
        print(json.dumps([where, type(e).__name__, str(e), time.monotonic() - t0]))

attempt("get_session", lambda: spark.get_session(master))
db = lsm.DB.open(os.path.join(tmp, "db"), lsm.DbOptions(background_compaction=False, spark_master=master))
db.put(b"k", b"v")
db.flush()
attempt("DB.compact", lambda: db.compact(full=True, executor="spark"))
with LogWriter(os.path.join(tmp, "log")) as w:
    w.append(0, b"k2", b"v2")
attempt("DB.ingest", lambda: db.ingest(PartitionedLog(os.path.join(tmp, "log")), name="s", engine="spark", master=master))
print(json.dumps(["still", None, [db.get(b"k").decode(), len(db.manifest.l0), db.sources()], 0]))
db.close()
spec = tools.simulate.load_spec(spec_path)
attempt("simulate.run", lambda: tools.simulate.run(spec, os.path.join(tmp, "sim"), engine="spark", master=master, plots=False))
"""


def dead_port() -> int:
    """A port of 127.0.0.1 nothing listens on (bound once to pick it, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_library(tmp, master: str) -> dict[str, list]:
    env = dict(os.environ, PYTHONPATH=ROOT, TMPDIR=str(tmp))
    spec = os.path.join(ROOT, "examples", "demo.toml")
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT, master, str(tmp), spec], env=env, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    return {where: [kind, msg, took] for where, kind, msg, took in map(json.loads, p.stdout.splitlines())}


def test_a_dead_master_fails_fast_everywhere(tmp_path) -> None:
    master = f"spark://127.0.0.1:{dead_port()}"
    got = run_library(tmp_path, master)
    for where in ("get_session", "DB.compact", "DB.ingest", "simulate.run"):
        kind, msg, took = got[where]
        assert kind == "SparkMasterUnreachableError", (where, kind, msg)
        assert master in msg and "connection refused" in msg, msg
        assert took < 10, (where, took)
    assert got["still"][1] == ["v", 1, []]  # nothing committed, no source bound
    assert not [n for n in os.listdir(tmp_path) if n.startswith("lsm-")]  # no JVM started, no log


def test_the_error_is_spark_unavailable() -> None:
    assert issubclass(lsm.SparkMasterUnreachableError, lsm.SparkUnavailableError)
    assert issubclass(lsm.SparkMasterUnreachableError, lsm.LsmError)


def test_an_unknown_host_names_it() -> None:
    t0 = time.monotonic()
    with pytest.raises(lsm.SparkMasterUnreachableError) as e:
        check_master("spark://no-such-host.invalid:7077")  # RFC 6761: .invalid never resolves
    assert time.monotonic() - t0 < 12
    assert "spark://no-such-host.invalid:7077" in str(e.value) and "unknown host 'no-such-host.invalid'" in str(e.value)


def test_standby_masters_one_alive_is_enough() -> None:
    with socket.socket() as live:
        live.bind(("127.0.0.1", 0))
        live.listen()
        port = live.getsockname()[1]
        check_master(f"spark://127.0.0.1:{dead_port()},127.0.0.1:{port}")  # no error: one answers
    dead = [dead_port(), dead_port()]
    with pytest.raises(lsm.SparkMasterUnreachableError) as e:
        check_master(f"spark://127.0.0.1:{dead[0]},127.0.0.1:{dead[1]}")
    assert f"127.0.0.1:{dead[0]}: connection refused" in str(e.value)
    assert f"127.0.0.1:{dead[1]}: connection refused" in str(e.value)


@pytest.mark.parametrize("master", ["spark://host", "spark://host:0", "spark://host:99999", "spark://:7077", "spark://"])
def test_a_malformed_master_url_is_refused(master) -> None:
    with pytest.raises(lsm.SparkMasterUnreachableError, match="invalid Spark master URL"):
        check_master(master)


def test_only_standalone_urls_are_probed() -> None:
    assert master_addresses("local[2]") == [] and master_addresses("yarn") == []
    assert master_addresses("spark://[::1]:7077,h:7078") == [("::1", 7077), ("h", 7078)]
