"""SparkUnavailableError: the library says what to install when pyspark or a Java 17+ is missing.

The library runs in a subprocess whose PATH holds no ``java`` (or only a fake Java 11) and whose
JAVA_HOME is unset: every way it starts a SparkSession must raise lsm.SparkUnavailableError before
any JVM starts, not pyspark's ``[JAVA_GATEWAY_EXITED]`` PySparkRuntimeError."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from compaction.spark_runtime import parse_java_version
from tests._java import env_without_java

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# every place the library starts a session; each prints [where, exception type, message]
SCRIPT = r"""
import json, os, sys
BLOCK_PYSPARK = %r
if BLOCK_PYSPARK:
    sys.modules["pyspark"] = None  # what an installation without the spark extra looks like
import lsm
from compaction import spark
from lsm.sources import LogWriter
import tools.simulate

def attempt(where, fn):
    try:
        fn()
        print(json.dumps([where, None, None]))
    except Exception as e:
        print(json.dumps([where, type(e).__name__, str(e)]))

tmp = sys.argv[1]
attempt("get_session", lambda: spark.get_session("local[1]"))
attempt("session_builder", lambda: spark.session_builder("local[1]"))
db = lsm.DB.open(os.path.join(tmp, "db"), lsm.DbOptions(background_compaction=False))
db.put(b"k", b"v")
db.flush()
attempt("DB.compact", lambda: db.compact(full=True, executor="spark"))
w = LogWriter(os.path.join(tmp, "log"))
w.append(0, b"k2", b"v2")
w.close()
attempt("DB.ingest", lambda: db.ingest(lsm.sources.PartitionedLog(os.path.join(tmp, "log")), name="s", engine="spark"))
print(json.dumps(["still readable", None, db.get(b"k").decode()]))
db.close()
spec = tools.simulate.load_spec(%r)
attempt("simulate.run", lambda: tools.simulate.run(spec, os.path.join(tmp, "sim"), engine="spark", plots=False))
"""


def run_library(tmp, env_over: dict[str, str | None], block_pyspark: bool = False) -> dict[str, list]:
    env = {k: v for k, v in os.environ.items() if k not in env_over or env_over[k] is not None}
    env.update({k: v for k, v in env_over.items() if v is not None})
    env["PYTHONPATH"] = ROOT
    os.mkdir(tmp / "work")
    code = SCRIPT % (block_pyspark, os.path.join(ROOT, "examples", "demo.toml"))
    p = subprocess.run(
        [sys.executable, "-c", code, str(tmp / "work")], env=env, capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    return {where: [kind, msg] for where, kind, msg in rows}


STARTS = ("get_session", "session_builder", "DB.compact", "DB.ingest", "simulate.run")


def test_no_java_is_spark_unavailable_everywhere(tmp_path):
    got = run_library(tmp_path, env_without_java(tmp_path))
    for where in STARTS:
        kind, msg = got[where]
        assert kind == "SparkUnavailableError", (where, kind, msg)
        assert "no java on PATH" in msg and "openjdk-17-jre-headless" in msg and "JAVA_HOME" in msg, msg
    assert got["still readable"] == [None, "v"]  # nothing was lost: the store still reads
    assert os.listdir(tmp_path / "tmpdir") == []  # no JVM started, no log left behind


def test_too_old_java_is_spark_unavailable(tmp_path):
    got = run_library(tmp_path, env_without_java(tmp_path, fake_version="11.0.2"))
    for where in STARTS:
        kind, msg = got[where]
        assert kind == "SparkUnavailableError", (where, kind, msg)
        assert "Java 11" in msg and "Java 17 or newer" in msg and 'openjdk version "11.0.2"' in msg, msg


def test_java_home_without_java_is_spark_unavailable(tmp_path):
    env = env_without_java(tmp_path)
    env["JAVA_HOME"] = str(tmp_path)  # holds no bin/java
    kind, msg = run_library(tmp_path, env)["get_session"]
    assert kind == "SparkUnavailableError" and f"JAVA_HOME={tmp_path} has no bin/java" in msg


def test_missing_pyspark_is_spark_unavailable(tmp_path):
    got = run_library(tmp_path, {}, block_pyspark=True)
    for where in ("get_session", "session_builder", "DB.compact"):
        kind, msg = got[where]
        assert kind == "SparkUnavailableError", (where, kind, msg)
        assert "pip install 'lsm-sim[spark]'" in msg


@pytest.mark.parametrize(
    "text, major",
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', 17),
        ('openjdk version "11.0.2" 2019-01-15', 11),
        ('java version "1.8.0_292"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ('Picked up JAVA_TOOL_OPTIONS: -Xmx1g\nopenjdk version "22-ea" 2024-03-19', 22),
        ("no version here", None),
    ],
)
def test_parse_java_version(text, major):
    assert parse_java_version(text) == major
