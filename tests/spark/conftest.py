"""One SparkSession for every test under tests/spark/ (starting a JVM costs seconds; do it once).

Test modules hand the session to the engine with ``DbOptions(spark_session=spark)`` or
``SparkExecutor(spark)``, so the engine never starts a session of its own during the tests.

Two JVMs start in the background when the first test of this directory starts, and the tests that need
no Spark run first, so the start-up overlaps them: the shared session (when a selected test uses the
``spark`` fixture; the fixture waits for it) and the ``lsm compact --engine spark`` subprocess of
tests/spark/test_cli.py (its test, run last, waits for it through the ``spark_cli_run`` fixture). When
tests/spark/test_cluster.py is selected, a standalone cluster (a master and a worker, tests/spark/
_cluster.py) and an S3 server that checks credentials start in the background too, once per session
(``spark_cluster``), and its test runs last.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# "local[N,F]" runs N task threads and lets a task fail F times before the job fails; plain "local[2]"
# means spark.task.maxFailures = 1 (a failed task is never retried), so the retry test needs the ",4".
MASTER = "local[2,4]"
CLI_TEST = "test_compact_engine_spark_subprocess"
CLUSTER_TEST = "test_compaction_and_bulk_load_on_a_standalone_cluster"


def put_root_on_pythonpath() -> None:
    """Spark's Python workers must import the test modules: filters defined in a test module are pickled
    by reference (module + name). The JVM, and the workers it forks, inherit os.environ when it starts."""
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if ROOT not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, *parts])


class _Starter:
    """Builds the shared SparkSession in a thread; `get()` waits for it (or raises what it raised)."""

    def __init__(self) -> None:
        self.session: Any = None
        self.error: BaseException | None = None
        self.warehouse = tempfile.mkdtemp(prefix="lsm-spark-warehouse-")
        put_root_on_pythonpath()
        self.thread = threading.Thread(target=self._run, name="spark-session-start", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            from compaction.spark import session_builder

            session = (
                session_builder(MASTER, app="lsm-sim-tests")
                .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.sql.warehouse.dir", self.warehouse)
                .getOrCreate()
            )
            session.sparkContext.setLogLevel("ERROR")
            self.session = session
        except BaseException as e:  # noqa: BLE001 - handed to the fixture
            self.error = e

    def get(self) -> Any:
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.session

    def stop(self) -> None:
        self.thread.join()
        if self.session is not None:
            self.session.stop()
        shutil.rmtree(self.warehouse, ignore_errors=True)


class _CliRun:
    """`lsm compact DB --engine spark --master local[2] --conf spark.default.parallelism=3 --json` on a fresh
    database, started now."""

    def __init__(self) -> None:
        from tests.spark.test_cli import lsm_cli_popen, make_db

        self.dir = tempfile.mkdtemp(prefix="lsm-cli-spark-")
        self.path = os.path.join(self.dir, "db")
        self.expect = make_db(self.path)
        self.tmp = os.path.join(self.dir, "tmp")  # the run's TMPDIR: where its Spark log goes
        os.mkdir(self.tmp)
        self.proc = lsm_cli_popen(
            "compact",
            self.path,
            "--engine",
            "spark",
            "--master",
            "local[2]",
            "--conf",  # the task count defaults to the session's parallelism: 3 only if the --conf took
            "spark.default.parallelism=3",
            "--json",
            TMPDIR=self.tmp,
        )

    def wait(self, timeout: float = 300) -> subprocess.CompletedProcess:
        out, err = self.proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        shutil.rmtree(self.dir, ignore_errors=True)


_starter: _Starter | None = None
_cli_run: _CliRun | None = None
_cluster: Any = None  # tests.spark._cluster.ClusterSetup
_started = False
HERE = os.path.dirname(os.path.abspath(__file__))


def _mine(item: pytest.Item) -> bool:
    return str(item.path).startswith(HERE + os.sep)


def _uses_spark(item: pytest.Item) -> bool:
    return "spark" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Within the block of tests/spark items: the tests that need no Spark first (they run while the JVMs
    start), then those on the shared session, the CLI subprocess test last. Other items keep their places."""
    at = [i for i, it in enumerate(items) if _mine(it)]

    def rank(it: pytest.Item) -> int:
        return 2 if it.name in (CLI_TEST, CLUSTER_TEST) else 1 if _uses_spark(it) else 0

    for i, it in zip(at, sorted((items[i] for i in at), key=rank), strict=True):
        items[i] = it


def pytest_runtest_setup(item: pytest.Item) -> None:
    """When the first test of tests/spark starts (not earlier: the JVMs' start-up should not load the
    machine while other directories' tests run), start what the selected tests will need."""
    global _started, _starter, _cli_run, _cluster
    if _started or not _mine(item):
        return
    _started = True
    selected = [it for it in item.session.items if _mine(it)]
    if _cli_run is None and any(it.name == CLI_TEST for it in selected):
        _cli_run = _CliRun()
    if _cluster is None and any(it.name == CLUSTER_TEST for it in selected):
        from tests.spark._cluster import ClusterSetup

        _cluster = ClusterSetup()
    if _starter is None and any(_uses_spark(it) for it in selected):
        _starter = _Starter()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _starter, _cli_run, _cluster
    if _cli_run is not None:
        _cli_run.stop()
        _cli_run = None
    if _cluster is not None:
        _cluster.stop()
        _cluster = None
    if _starter is not None:
        _starter.stop()
        _starter = None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The session-wide SparkSession: 2 threads, up to 4 attempts per task, UI off, fast JVM options."""
    global _starter
    if _starter is None:  # collected without the hook: start it now
        _starter = _Starter()
    try:
        yield _starter.get()
    finally:
        _starter.stop()
        _starter = None


@pytest.fixture(scope="session")
def spark_cli_run() -> Any:
    """The background `lsm compact --engine spark` run (see `_CliRun`)."""
    global _cli_run
    if _cli_run is None:
        _cli_run = _CliRun()
    return _cli_run


@pytest.fixture(scope="session")
def spark_cluster() -> Any:
    """The standalone cluster and the S3 server of tests/spark/_cluster.py (started once, stopped at the end)."""
    global _cluster
    if _cluster is None:
        from tests.spark._cluster import ClusterSetup

        _cluster = ClusterSetup()
    return _cluster.get()
