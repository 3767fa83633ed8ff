"""Every `lsm` command that starts Spark, run where no usable Java is: one line saying what to install,
exit status 2, no traceback, no Spark log left behind, nothing written to the store."""

from __future__ import annotations

import os

import pytest

import lsm
from lsm.sources import LogWriter
from tests._java import env_without_java
from tests.tools._cli import ROOT, one_line_error, run_lsm_each


def _store_and_log(tmp_path) -> tuple[str, str]:
    db, log = str(tmp_path / "db"), str(tmp_path / "log")
    with lsm.DB.open(db, lsm.DbOptions(background_compaction=False)) as d:
        d.put(b"k", b"v")
        d.flush()
    with LogWriter(log) as w:
        w.append(0, b"k2", b"v2")
    return db, log


def _commands(db: str, log: str, out: str) -> list[tuple[str, ...]]:
    return [
        ("compact", db, "--engine", "spark"),
        ("ingest", db, log, "--name", "ev", "--engine", "spark"),
        ("simulate", os.path.join(ROOT, "examples", "demo.toml"), "--out", f"{out}-simulate", "--engine", "spark"),
        ("bench", "compact", "--num", "100", "--executors", "local,spark", "--dir", f"{out}-compact"),
        ("bench", "load", "--num", "10", "--engines", "spark", "--dir", f"{out}-load"),
    ]


@pytest.mark.parametrize("fake", [None, "11.0.2"], ids=["no-java", "java-11"])
def test_spark_commands_say_what_to_install(tmp_path, fake) -> None:
    env = env_without_java(tmp_path, fake_version=fake)
    db, log = _store_and_log(tmp_path)
    runs = _commands(db, log, str(tmp_path / "out"))
    for args, r in zip(runs, run_lsm_each(runs, env=env), strict=True):  # each refused on its own
        line = one_line_error(r, 2)
        assert "openjdk-17-jre-headless" in line and "JAVA_HOME" in line, (args, line)
        assert ("Java 11" if fake else "no java on PATH") in line, (args, line)
        assert "JAVA_GATEWAY_EXITED" not in line
    assert os.listdir(env["TMPDIR"]) == []  # no JVM started: no Spark log kept
    with lsm.DB.open(db, lsm.DbOptions(background_compaction=False)) as d:
        assert dict(d.scan()) == {b"k": b"v"}  # the failed compact and ingest changed nothing
        assert len(d.manifest.l0) == 1
