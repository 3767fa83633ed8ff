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
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

import lsm
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
SPARK_SESSIONS = frozenset({"spark", "spark_cluster", "spark_cli_run"})
FAST_KEEPS = ("tests/tools/test_cli_sst.py", "tests/tools/test_simulate_spec.py", "tests/tools/test_bench_simulate.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``spark`` and ``slow`` tests; under LSM_TEST_FAST=1 bound every property test's examples."""
    for item in items:
        nodeid = item.nodeid
        if nodeid.startswith("tests/spark/"):
            item.add_marker(pytest.mark.spark)
        if nodeid.startswith(SLOW) and not nodeid.startswith(FAST_KEEPS):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("s3") is not None:  # a quick run covers the object store by memory://
            item.add_marker(pytest.mark.slow)
        if SPARK_SESSIONS.intersection(getattr(item, "fixturenames", ())):
            # under pytest-xdist (make test), every test of the shared SparkSession and of the standalone
            # cluster runs in one worker, so the run starts one JVM session and one cluster, not one each
            item.add_marker(pytest.mark.xdist_group("spark"))
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


# -- a database on every backend -------------------------------------------------------------------------
# The engine tests run once per backend: a local directory, obstore's in-process memory store (the object
# store's code paths at memory speed) and moto's S3 server over HTTP. A test about one backend asks for
# `tmp_path` or `s3_url` instead. `s3` is a marker on the S3 variant (`-m "not s3"` leaves the HTTP runs
# out); `make test-fast` runs each on the directory and the memory store, `make test` on all three.
BACKENDS = ("local", "memory", "s3")
T0 = 1_700_000_000_000  # the ManualClock start of `db_options` (ms, a whole second)


def backend_root(kind: str, request: pytest.FixtureRequest, tmp_path: Path, name: str = "db") -> str:
    """A fresh database root on backend `kind` (one of `BACKENDS`); a memory store is dropped after the
    test."""
    if kind == "local":
        return str(tmp_path / name)
    if kind == "s3":
        return request.getfixturevalue("s3_server").new_url(name)
    from storage.objstore import drop_memory_store
    from storage.registry import detach

    store = f"t{uuid.uuid4().hex[:12]}"
    root = f"memory://{store}/{name}"

    def forget() -> None:
        detach(root)
        drop_memory_store(store)

    request.addfinalizer(forget)
    return root


@pytest.fixture(params=[pytest.param(b, marks=pytest.mark.s3) if b == "s3" else b for b in BACKENDS])
def backend(request: pytest.FixtureRequest) -> str:
    """The backend a test runs on: "local", "memory" or "s3" (one run each)."""
    return request.param


@pytest.fixture
def db_root(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a database lives, once per backend: a local directory, a memory store, an S3 prefix."""
    return backend_root(backend, request, tmp_path)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def shared_root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database root another process can open too (a killed writer's, a worker's): a local directory,
    then an S3 prefix; a memory store lives inside one process."""
    return backend_root(request.param, request, tmp_path)


@pytest.fixture
def new_root(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], str]:
    """Another fresh root on the test's backend, for a test that needs a second store: new_root("b")."""
    return lambda name: backend_root(backend, request, tmp_path, name)


@pytest.fixture
def db_defaults() -> dict[str, Any]:
    """The DbOptions a module's databases open with unless a call says otherwise (override it in a test
    module: ``@pytest.fixture def db_defaults(): return {"history_retention": FAR}``)."""
    return {}


@pytest.fixture
def db_options(db_defaults: dict[str, Any]) -> Callable[..., lsm.DbOptions]:
    """db_options(clock=None, **kw): DbOptions on a ManualClock at `T0` (or `clock`), with no background
    compaction, then the module's `db_defaults`, then `kw`."""

    def make(clock: lsm.Clock | None = None, **kw: Any) -> lsm.DbOptions:
        base: dict[str, Any] = {"background_compaction": False, **db_defaults, **kw}
        return lsm.DbOptions(clock=clock or lsm.ManualClock(T0), **base)

    return make


@pytest.fixture
def open_db(db_root: str, db_options: Callable[..., lsm.DbOptions]) -> Iterator[Callable[..., lsm.DB]]:
    """open_db(clock=None, *, path=db_root, read_only=False, **kw): `lsm.DB.open` with `db_options`; a
    database the test leaves open is closed after it."""
    opened: list[lsm.DB] = []

    def open_(clock: lsm.Clock | None = None, *, path: str | None = None, read_only: bool = False,
              **kw: Any) -> lsm.DB:
        db = lsm.DB.open(path or db_root, db_options(clock, **kw), read_only=read_only)
        opened.append(db)
        return db

    yield open_
    for db in opened:
        try:
            db.close()
        except Exception:  # a test that fenced or broke its database has asserted what it wanted
            pass
