"""``lsm s3 serve``: a local S3 server in one step (moto's), as a user runs it: real `lsm` processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.tools._cli import LSM_CMD, ROOT, lsm_env, one_line_error, run_lsm

EXPORTED = ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ALLOW_HTTP")
# the variables the tests' own S3 server set in this process: the runs below must not lean on them
NO_AWS = dict.fromkeys(EXPORTED)


def test_serve_prints_the_lines_to_export_and_stops_on_ctrl_c() -> None:
    p = subprocess.Popen([*LSM_CMD, "s3", "serve", "--port", "0", "--bucket", "orders", "--bucket", "logs"],
                         cwd=ROOT, env=lsm_env(NO_AWS), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [p.stdout.readline().rstrip("\n") for _ in EXPORTED]
        env = dict(line.removeprefix("export ").split("=", 1) for line in lines)
        assert all(line.startswith("export ") for line in lines) and tuple(env) == EXPORTED, lines
        assert env["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:") and env["AWS_ALLOW_HTTP"] == "true"
        # both buckets are there: a database is created in each, through the printed variables only
        for bucket in ("orders", "logs"):
            put = run_lsm("put", "--create", f"s3://{bucket}/db", "k", bucket, env=env)
            assert put.code == 0, put.err
            got = run_lsm("get", f"s3://{bucket}/db", "k", "--json", env=env)
            assert got.json()["value"] == bucket
        missing = run_lsm("check", "s3://not-served/db", env=env)
        assert "bucket 'not-served' does not exist" in one_line_error(missing, 2)
    finally:
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "Traceback" not in err and f"serving s3://orders, s3://logs at {env['AWS_ENDPOINT_URL']}" in err
    gone = run_lsm("check", "s3://orders/db", env=env)  # the server stopped with its process
    assert "connection refused" in one_line_error(gone, 2)


def test_serve_runs_a_command_against_it_and_passes_its_status_on(tmp_path: Path) -> None:
    script = "lsm put --create s3://lsm/db k v >/dev/null && lsm get s3://lsm/db k --json && exit 7"
    shim = tmp_path / "lsm"  # the `lsm` the command finds: the one under test
    shim.write_text(f'#!/bin/sh\nexec {" ".join(LSM_CMD)} "$@"\n')
    shim.chmod(0o755)
    env = NO_AWS | {"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    r = run_lsm("s3", "serve", "--port", "0", "--", "sh", "-c", script, env=env)
    assert r.code == 7, r.err
    assert '"value": "v"' in r.out


def test_a_taken_port_or_a_bad_bucket_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.monotonic()
        taken = run_lsm("s3", "serve", "--port", str(port), "--", "true", env=NO_AWS)
        assert time.monotonic() - t0 < 30  # moto's server would have waited for good on a port in use
    assert f"cannot listen on 127.0.0.1:{port}" in one_line_error(taken, 2) and "--port" in taken.err
    bad = run_lsm("s3", "serve", "--port", "0", "--bucket", "no such bucket", "--", "true", env=NO_AWS)
    assert "is not a bucket name" in one_line_error(bad, 2)


def test_without_moto_it_says_which_extra_to_install(tmp_path: Path) -> None:
    hide = tmp_path / "hide"
    (hide / "moto").mkdir(parents=True)
    (hide / "moto" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    r = run_lsm("s3", "serve", "--port", "0", env={"PYTHONPATH": os.pathsep.join([str(hide), str(ROOT)])})
    assert one_line_error(r, 2) == "lsm: error: lsm s3 serve needs moto's server: pip install 'lsm-sim[s3]'"
