"""``--conf KEY=VALUE`` of the commands that start Spark, where it is refused before any JVM starts: a key
that names a secret (its value would be on two command lines any user can read), a key that is no Spark
setting, a command that starts no Spark. That a --conf reaches the session is checked where a session
starts: tests/spark/test_cli.py (spark.default.parallelism) and tests/spark/test_cluster.py (the
executors' credentials file)."""

from __future__ import annotations

import os

import pytest

import lsm
from tests.tools._cli import ROOT, one_line_error, run_lsm_each
from tests.tools.test_cli_spark_master import _dead_master
from tests.tools.test_cli_spark_unavailable import _store_and_log

SECRET_KEYS = (
    "spark.executorEnv.AWS_SECRET_ACCESS_KEY",
    "spark.executorEnv.AWS_SESSION_TOKEN",
    "spark.hadoop.fs.s3a.secret.key",
    "spark.authenticate.secret",
)


def _commands(db: str, log: str, out: str, conf: str, engine: str = "spark") -> list[tuple[str, ...]]:
    return [
        ("compact", db, "--engine", engine, "--conf", conf),
        ("ingest", db, log, "--name", "ev", "--engine", engine, "--conf", conf),
        ("simulate", os.path.join(ROOT, "examples", "demo.toml"), "--out", out, "--engine", engine, "--conf", conf),
    ]


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_a_secret_in_conf_is_refused(tmp_path, key) -> None:
    db, log = _store_and_log(tmp_path)
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    runs = _commands(db, log, str(tmp_path / "out"), f"{key}=s3cr3t")
    for args, r in zip(runs, run_lsm_each(runs, env={"TMPDIR": str(tmpdir)}), strict=True):
        line = one_line_error(r, 2)
        assert f"{key} names a secret" in line and "(ps)" in line and "docs/spark.md" in line, (args, line)
        assert "s3cr3t" not in line
    assert os.listdir(tmpdir) == []  # no JVM started
    with lsm.DB.open(db, lsm.DbOptions(background_compaction=False)) as d:
        assert dict(d.scan()) == {b"k": b"v"} and d.sources() == []


def test_conf_needs_a_spark_setting_and_the_spark_engine(tmp_path) -> None:
    db, log = _store_and_log(tmp_path)
    out = str(tmp_path / "out")
    cases = [
        (_commands(db, log, out, "executor.memory=1g"), "'executor.memory' is not a Spark setting"),
        (_commands(db, log, out, "spark.executor.memory"), "'spark.executor.memory' is not KEY=VALUE"),
        (_commands(db, log, out, "spark.executor.memory=1g", engine="local"), "--conf applies to --engine spark only"),
    ]
    runs = [args for group, _ in cases for args in group]
    want = [text for group, text in cases for _ in group]
    for args, text, r in zip(runs, want, run_lsm_each(runs), strict=True):
        assert text in one_line_error(r, 2), (args, r.err)


def test_a_file_path_setting_is_no_secret(tmp_path) -> None:
    """A setting that names a file holding a secret passes (here it meets the dead master next)."""
    db, log = _store_and_log(tmp_path)
    master = _dead_master()
    runs = [
        ("compact", db, "--engine", "spark", "--master", master, "--conf",
         "spark.executorEnv.AWS_SHARED_CREDENTIALS_FILE=/etc/lsm/aws-credentials"),
        ("compact", db, "--engine", "spark", "--master", master, "--conf",
         "spark.authenticate.secret.file=/etc/spark/secret"),
    ]
    for r in run_lsm_each(runs):
        assert "cannot reach the Spark master" in one_line_error(r, 2)
