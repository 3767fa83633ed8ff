"""What `lsm` says when an object store cannot be used: one line naming the cause, exit 2, no traceback,
nothing created. Real `lsm` processes against moto's S3 server (`s3_server`).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.tools._cli import one_line_error, run_lsm, run_lsm_each


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
