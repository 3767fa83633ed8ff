"""Fixtures every test package shares: the S3 server and the two storage backends; and the markers of
`make test-fast`.

Markers (pyproject.toml registers them): ``spark`` on every test under tests/spark/ (a JVM), ``slow`` on
the tests a contributor's quick run leaves out, set here by node id (`SLOW`) or by ``@pytest.mark.slow``
on the test itself. ``make test-fast`` runs ``pytest -m "not spark and not slow"`` with
``LSM_TEST_FAST=1``, which also bounds every property test to `FAST_MAX_EXAMPLES` examples (the
``fast`` Hypothesis profile, and a cap on the examples a test's own ``@settings`` asks for). ``make
test`` runs everything, with every example.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.s3proxy import FaultProxy
from tests.s3server import AuthS3Server, S3Server, environment

FAST = os.environ.get("LSM_TEST_FAST") == "1"
FAST_MAX_EXAMPLES = 10
settings.register_profile("fast", max_examples=FAST_MAX_EXAMPLES)
if FAST:
    settings.load_profile("fast")

# What `make test-fast` leaves out, by node id prefix (what was measured to take seconds each; a new slow
# test may instead carry @pytest.mark.slow). The command-line tests run `lsm` as a process, about 0.4 s
# a run, a dozen runs a test: test_cli_sst stays as their smoke test (the goldens, every output mode).
SLOW = (
    "tests/test_docs.py::test_doc_runs",  # every docs block and command
    "tests/tools/test_cli_",
    "tests/tools/test_bench",
    "tests/tools/test_simulate",
    "tests/tools/test_demo.py",
    "tests/lsm/test_crash.py",  # processes killed mid-write
    "tests/lsm/test_ingest_crash.py",
    "tests/lsm/test_object_wal_crash.py",
    "tests/lsm/test_fault_injection.py::test_fault_sweep",  # a fault at every call of each operation
    "tests/lsm/test_fencing.py::test_racing_open",
    "tests/lsm/test_point_read_paths.py::test_get_equals_the_general_path",
    "tests/lsm/test_ingest.py::test_the_remap_compaction_cadence_survives_restarts",
    "tests/compaction/test_leveled.py::test_leveled_db_builds_levels",
    "tests/compaction/test_leveled.py::test_a_store_opens_under_every_other_policy",
    "tests/compaction/test_worker.py",  # worker processes, one killed
    "tests/compaction/test_spark_runtime.py",  # Java probed in subprocesses
    "tests/compaction/test_merge_columnar.py::test_write_stream_writes_the_files_write_writes",
)
FAST_KEEPS = ("tests/tools/test_cli_sst.py", "tests/tools/test_simulate_spec.py", "tests/tools/test_bench_simulate.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``spark`` and ``slow`` tests; under LSM_TEST_FAST=1 bound every property test's examples."""
    for item in items:
        nodeid = item.nodeid
        if nodeid.startswith("tests/spark/"):
            item.add_marker(pytest.mark.spark)
        if nodeid.startswith(SLOW) and not nodeid.startswith(FAST_KEEPS):
            item.add_marker(pytest.mark.slow)
        if FAST:
            _bound_examples(item)


def _bound_examples(item: pytest.Item) -> None:
    """At most `FAST_MAX_EXAMPLES` for a property test whose own settings ask for more (a test's
    ``@settings`` outranks the profile); a stateful test's settings live on its TestCase class."""
    owner = getattr(item, "cls", None)
    if owner is not None and isinstance(getattr(owner, "settings", None), settings):
        target, attr = owner, "settings"
    else:
        fn = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
        if not isinstance(getattr(fn, "_hypothesis_internal_use_settings", None), settings):
            return
        target, attr = fn, "_hypothesis_internal_use_settings"
    current = getattr(target, attr)
    if current.max_examples > FAST_MAX_EXAMPLES:
        setattr(target, attr, settings(current, max_examples=FAST_MAX_EXAMPLES))


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
