"""What `lsm` says when an object store cannot be used: one line naming the cause, exit 2, promptly, no
traceback, no credential, nothing created; `--verbose` adds the chain behind the line.

Real `lsm` processes against moto's S3 server (`s3_server`), one that checks credentials
(`s3_auth_server`), and a port nothing listens on.
"""

from __future__ import annotations

import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.tools._cli import one_line_error, run_lsm, run_lsm_each

SECRET = "do-not-print-this-secret-value"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_malformed_urls_are_one_line_and_create_nothing(s3_server, tmp_path) -> None:
    runs = [
        ("put", "--create", "s3://", "k", "v"),
        ("put", "--create", "memory://", "k", "v"),
        ("get", "s3:///x", "k"),
        ("put", "--create", "s3:/bucket/db", "k", "v"),
        ("put", "--create", "s3://lsm-test", "k", "v"),
        ("check", "s3://lsm-test//db"),
        ("scan", "memory:/name/db"),
        ("sst", "show", "gs://bucket/db/sst/x.sst"),
        ("sst", "verify", "s3://lsm-test/ok", "s3:/lsm-test/db"),
        ("dump", "s3://lsm-test/x", "--out", "s3:/lsm-test/dump.txt"),
        ("load", "--create", "s3:lsm-test/db", "dump.txt"),
        ("ingest", "s3:/lsm-test/db", "log", "--name", "n"),
        ("log", "write", "s3:/lsm-test/log"),
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:  # in an empty directory: a local path would appear there
        res = list(pool.map(lambda args: run_lsm(*args, cwd=tmp_path, env=s3_server.env), runs))
    for args, r in zip(runs, res, strict=True):
        line = one_line_error(r, 2)
        assert "not enough values" not in line, (args, line)
    lines = [one_line_error(r, 2) for r in res]
    assert "'s3://' names no bucket" in lines[0] and "'memory://' names no store" in lines[1]
    assert "'s3:///x' names no bucket" in lines[2]
    assert "write s3://bucket/db for an object store" in lines[3]
    assert "names no database inside s3://lsm-test" in lines[4] and "empty segment" in lines[5]
    assert "write memory://name/db" in lines[6] and "unsupported object store URL 'gs://" in lines[7]
    assert all("reads like a URL" in line for line in lines[8:])
    assert os.listdir(tmp_path) == [], "a URL was taken for a local path and created there"


@pytest.mark.parametrize(
    "endpoint, says",
    [
        ("localhost:9000", "endpoint 'localhost:9000' has no scheme: write http://localhost:9000"),
        ("http://[::1", "endpoint 'http://[::1' is not a valid URL"),
        ("http://127.0.0.1:99999", "is not a valid URL (Port out of range"),
        ("http://:9000", "has no host"),
    ],
)
def test_a_malformed_endpoint_is_one_line_not_a_rust_panic(s3_server, endpoint: str, says: str) -> None:
    env = s3_server.env | {"AWS_ENDPOINT_URL": endpoint}
    check, put = run_lsm_each([("check", "s3://b/x"), ("put", "--create", "s3://b/x", "k", "v")], env=env)
    for r in (check, put):
        assert says in one_line_error(r, 2)
        assert "panicked" not in r.err and "PanicException" not in r.err


def _timed(*args: str, env: dict[str, str | None]) -> tuple[str, float]:
    t0 = time.monotonic()
    r = run_lsm(*args, env=env)
    took = time.monotonic() - t0
    line = one_line_error(r, 2)
    assert SECRET not in r.err + r.out
    return line, took


def test_a_missing_bucket_names_it_and_how_to_create_it(s3_server) -> None:
    env = s3_server.env | {"AWS_SECRET_ACCESS_KEY": SECRET}
    for args in (("put", "--create", "s3://no-such-bucket-c1/db", "k", "v"), ("check", "s3://no-such-bucket-c1/db")):
        line, took = _timed(*args, env=env)
        assert "s3://no-such-bucket-c1/db/manifest: LIST failed: bucket 'no-such-bucket-c1' does not exist " in line
        assert f"(NoSuchBucket, HTTP 404 from {s3_server.endpoint})" in line
        assert f"aws s3 mb s3://no-such-bucket-c1 --endpoint-url {s3_server.endpoint}" in line
        assert took < 10


@pytest.mark.parametrize("which", ["wrong-secret", "unknown-key"])
def test_refused_credentials_name_the_s3_code_and_never_the_credentials(s3_auth_server, which: str) -> None:
    srv = s3_auth_server
    key_id = srv.key_id if which == "wrong-secret" else "AKIAUNKNOWNKEY000000"
    line, took = _timed("put", "--create", "s3://lsm-test/db", "k", "v", env=srv.env(key_id, SECRET))
    code, hint = (("SignatureDoesNotMatch", "check AWS_SECRET_ACCESS_KEY") if which == "wrong-secret"
                  else ("InvalidAccessKeyId", "check AWS_ACCESS_KEY_ID"))
    assert "LIST failed: " in line and f"({code}, HTTP 403 from {srv.endpoint})" in line and hint in line
    assert key_id not in line and took < 10


def test_an_http_endpoint_without_allow_http_says_to_set_it(s3_server) -> None:
    env = s3_server.env | {"AWS_ALLOW_HTTP": None}
    line, took = _timed("check", "s3://lsm-test/db", env=env)
    assert f"endpoint '{s3_server.endpoint}' is plain HTTP" in line and "set AWS_ALLOW_HTTP=true" in line
    assert took < 10


def test_a_dead_endpoint_says_connection_refused_promptly(s3_server) -> None:
    endpoint = f"http://127.0.0.1:{_free_port()}"
    env = s3_server.env | {"AWS_ENDPOINT_URL": endpoint, "AWS_SECRET_ACCESS_KEY": SECRET}
    for args in (("put", "--create", "s3://lsm-test/db", "k", "v"), ("get", "s3://lsm-test/db", "k")):
        line, took = _timed(*args, env=env)
        assert f"failed: cannot connect to {endpoint}: connection refused; is the server running?" in line
        assert took < 10, took


def test_verbose_adds_the_chain_behind_the_line(s3_server) -> None:
    env = s3_server.env | {"AWS_SECRET_ACCESS_KEY": SECRET}
    after, before, plain = run_lsm_each(
        [("check", "s3://no-such-bucket-c2/db", "--verbose"), ("--verbose", "check", "s3://no-such-bucket-c2/db"),
         ("check", "s3://no-such-bucket-c2/db")], env=env)
    for r in (after, before):
        assert r.code == 2 and SECRET not in r.err
        first, *rest = r.err.splitlines()
        assert first == plain.err.strip() and first.startswith("lsm: error: ")
        assert rest[0].startswith("caused by: GenericError: ") and "<Code>NoSuchBucket</Code>" in r.err
        assert "Debug source:" in r.err  # obstore's whole error, continuation lines indented
    assert one_line_error(plain, 2)
