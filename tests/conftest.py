"""Fixtures every test package shares: the S3 server and the two storage backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.s3proxy import FaultProxy
from tests.s3server import AuthS3Server, S3Server, environment


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server, started once per test run, with the AWS variables pointing at it."""
    server = S3Server()
    try:
        with environment(server.env):
            yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_auth_server() -> Iterator[AuthS3Server]:
    """moto's S3 server checking credentials as S3 does (tests/s3server.py), in a process of its own."""
    server = AuthS3Server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_url(s3_server: S3Server) -> str:
    """A fresh database URL on the S3 server."""
    return s3_server.new_url()


@pytest.fixture
def s3_proxy(s3_server: S3Server) -> Iterator[FaultProxy]:
    """A fault-injecting proxy in front of the S3 server (tests/s3proxy.py), no rules set yet."""
    proxy = FaultProxy(s3_server.endpoint)
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture(params=["local", "s3"])
def db_root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a database lives, once per backend: a local directory, then a fresh S3 prefix."""
    if request.param == "local":
        return str(tmp_path / "db")
    return request.getfixturevalue("s3_server").new_url()
