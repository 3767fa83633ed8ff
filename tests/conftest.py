"""Fixtures every test package shares: the S3 server and the two storage backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.s3server import S3Server, environment


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server, started once per test run, with the AWS variables pointing at it."""
    server = S3Server()
    try:
        with environment(server.env):
            yield server
    finally:
        server.stop()


@pytest.fixture
def s3_url(s3_server: S3Server) -> str:
    """A fresh database URL on the S3 server."""
    return s3_server.new_url()


@pytest.fixture(params=["local", "s3"])
def db_root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a database lives, once per backend: a local directory, then a fresh S3 prefix."""
    if request.param == "local":
        return str(tmp_path / "db")
    return request.getfixturevalue("s3_server").new_url()
