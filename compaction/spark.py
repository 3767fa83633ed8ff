"""The Spark executor: one compaction job as a Spark batch, with no row data through the driver.

Driver:
  1. `plan_ranges` reads only the block indexes of the input SSTs (metadata) and cuts the key space into
     K contiguous ranges ``[None, b1), [b1, b2), ..., [bK-1, None)`` balanced by block bytes. A block
     boundary is always a key boundary (all versions of a key sit in one block), so every version of a
     key falls in exactly one range.
  2. ``sc.parallelize(range(K), K).map(task)`` runs one task per range. The job (with its filter
     factories) travels in the task closure, pickled by cloudpickle; user filters must be picklable
     (define them at module level), checked up front with a clear error.
  3. Each task opens the input SSTs by path or URL, reads only its range, runs the same
     `compaction.merge.run_job` with the same filters, writes its outputs into the database's ``sst/``
     (a directory or an object-store prefix) under names unique to the attempt (``<job prefix>-t<task>-<random>-<n>.sst``), and
     returns their SsTableInfo (metadata only).
  4. The driver checks every output lies in its task's range and that together they are sorted and
     non-overlapping, and returns them; the DB then commits one manifest edit under its epochs.

Where the files are: a local database must be the same directory on the driver and on every executor
(a shared mount). An object-store database (``s3://bucket/prefix``) needs nothing shared: the tasks read
their inputs and write their outputs by URL through `storage`, only metadata comes back, and the
driver commits the manifest. The task closure carries the database's store as its URL and the driver's
settings for it without any credential (`compaction.spark_stores`): the executor registers it before
the task touches a URL and takes the credentials from a file the driver hands it on a local master, else
from its own environment, the AWS shared credentials file or the instance's role. No secret is in a
task, a job description, a log line or an error message. A ``memory://`` database lives in the driver's
process only: `SparkStoreError` before any Spark work.

Failures: a failed attempt removes what it wrote; if it could not (a killed executor), its files carry
a name nobody references and `gc` removes them later. A retried attempt writes new names, so a
zombie attempt can never overwrite a committed file. A job that fails raises before any commit.

The task count defaults to the session's default parallelism, at most one task per input block.

Observing jobs: `observe_jobs()` (or `add_job_listener`) receives a `SparkJobReport` after every Spark
compaction job this driver runs: the ranges, the plan and job seconds, and each task's outputs and
stats. Benchmarks and tools use it to split a compaction's time without reaching into the executor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import storage
from compaction.merge import CompactionJob, CompactionStats, MergeResult, run_job
from compaction.spark_runtime import check_master, require_spark
from compaction.spark_stores import ExecutorStore, executor_stores, handed_off, on_executor
from formats.errors import LsmError
from formats.sst import SsTableInfo
from storage.ssts import open_sst

_session_lock = threading.Lock()
_sessions: dict[str, Any] = {}


class SparkJobError(LsmError):
    """The Spark job failed; nothing was committed."""


@dataclasses.dataclass
class TaskReport:
    """What one Spark task returned: its index (= its key range), its output SSTs and its merge stats."""

    index: int
    outputs: list[tuple[str, SsTableInfo]]
    stats: CompactionStats


@dataclasses.dataclass
class SparkJobReport:
    """One Spark compaction job as the driver saw it (passed to job listeners once it succeeded).

    `plan_seconds` is `plan_ranges` (the driver reading block indexes), `job_seconds` the Spark job with
    its tasks and the output check, `seconds` the whole executor call; the DB's commit comes after."""

    ranges: list[tuple[bytes | None, bytes | None]]
    plan_seconds: float
    job_seconds: float
    seconds: float
    tasks: list[TaskReport]


JobListener = Callable[[SparkJobReport], None]
_listeners_lock = threading.Lock()
_listeners: list[JobListener] = []


def add_job_listener(fn: JobListener) -> None:
    """Call `fn(report)` after every successful Spark compaction job run from this process (any DB)."""
    with _listeners_lock:
        _listeners.append(fn)


def remove_job_listener(fn: JobListener) -> None:
    """Stop calling `fn` (ValueError if it was not added)."""
    with _listeners_lock:
        _listeners.remove(fn)


@contextlib.contextmanager
def observe_jobs() -> Iterator[list[SparkJobReport]]:
    """``with observe_jobs() as reports:`` collects the `SparkJobReport` of every job run in the block."""
    reports: list[SparkJobReport] = []
    add_job_listener(reports.append)
    try:
        yield reports
    finally:
        remove_job_listener(reports.append)


def _notify(report: SparkJobReport) -> None:
    with _listeners_lock:
        listeners = list(_listeners)
    for fn in listeners:
        fn(report)


def session_builder(master: str = "local[*]", app: str = "lsm-compact") -> Any:
    """A SparkSession builder for lsm-sim jobs: UI off, few shuffle partitions, fast-starting JVM, and
    executors running this interpreter (so they import the same lsm-sim and its dependencies).

    SparkUnavailableError (before any JVM starts) when pyspark or a Java 17+ is missing, and its subclass
    SparkMasterUnreachableError when `master` is a ``spark://`` URL that no master answers at
    (`compaction.spark_runtime.check_master`: within seconds, not after Spark's minute of retries)."""
    require_spark()
    check_master(master)
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no hostname-resolution warning on laptops
    return (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
    )


def get_session(master: str = "local[*]") -> Any:
    """A SparkSession for `master`, created on first use (SparkUnavailableError: see `session_builder`)."""
    with _session_lock:
        s = _sessions.get(master)
        if s is None or s.sparkContext._jsc is None:
            s = session_builder(master).getOrCreate()
            s.sparkContext.setLogLevel("ERROR")
            _sessions[master] = s
        return s


def plan_ranges(job: CompactionJob, k: int) -> list[tuple[bytes | None, bytes | None]]:
    """Split the job's key space into at most `k` ranges of about equal block bytes (driver side).

    Reads the footers, metadata and indexes of the inputs, never a data block."""
    blocks: list[tuple[bytes, int]] = []
    for paths in job.sources:
        for p in paths:
            with open_sst(p) as r:
                blocks += [(b.first_key, b.size) for b in r.blocks]
    if k <= 1 or len(blocks) <= 1:
        return [(None, None)]
    blocks.sort()
    total = sum(size for _, size in blocks)
    cuts: list[bytes] = []
    acc = 0
    step = total / k
    for first_key, size in blocks:
        if acc >= step * (len(cuts) + 1) and (not cuts or first_key > cuts[-1]) and first_key > blocks[0][0]:
            cuts.append(first_key)
            if len(cuts) == k - 1:
                break
        acc += size
    bounds: list[bytes | None] = [None, *cuts, None]
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


def _run_task(
    job: CompactionJob, index: int, start: bytes | None, end: bytes | None, stores: list[ExecutorStore]
) -> dict:
    """Executor side: merge one key range into uniquely named SSTs; return metadata only."""
    on_executor(stores)
    prefix = f"{job.output.prefix}-t{index:04d}-{uuid.uuid4().hex[:8]}"
    task_job = dataclasses.replace(job, start=start, end=end, output=dataclasses.replace(job.output, prefix=prefix))
    result = run_job(task_job)
    return {
        "index": index,
        "outputs": [(name, info.to_dict()) for name, info in result.outputs],
        "stats": result.stats.to_dict(),
    }


def check_outputs(
    ranges: list[tuple[bytes | None, bytes | None]], results: list[dict]
) -> list[tuple[str, SsTableInfo]]:
    """Every output inside its task's range; all outputs sorted and non-overlapping."""
    outputs: list[tuple[str, SsTableInfo]] = []
    for res in sorted(results, key=lambda r: r["index"]):
        start, end = ranges[res["index"]]
        for name, d in res["outputs"]:
            info = SsTableInfo.from_dict(d)
            if (start is not None and info.first_key < start) or (end is not None and info.last_key >= end):
                raise SparkJobError(f"task {res['index']} wrote {name} outside its key range")
            outputs.append((name, info))
    for (a, ia), (b, ib) in zip(outputs, outputs[1:], strict=False):
        if ia.last_key >= ib.first_key:
            raise SparkJobError(f"outputs {a} and {b} overlap")
    return outputs


def _stats_from(d: dict) -> CompactionStats:
    return CompactionStats.from_dict(d)  # the purge-lag histograms of all tasks merge in stats.add


def ensure_picklable(job: CompactionJob) -> None:
    """SparkJobError, before any Spark work, if a filter factory of `job` cannot be pickled."""
    from pyspark import cloudpickle

    for f in job.filters:
        try:
            cloudpickle.dumps(f)
        except Exception as e:
            raise SparkJobError(
                f"compaction filter factory {f!r} cannot be shipped to Spark executors: it must be "
                f"picklable (define it at module level, without locks, files or sockets): {e}"
            ) from None


class SparkExecutor:
    """Runs a CompactionJob on Spark; `SparkExecutor(session)(job) -> MergeResult`."""

    def __init__(self, session: Any = None, *, master: str = "local[*]", tasks: int | None = None) -> None:
        self.session = session
        self.master = master
        self.tasks = tasks
        self.last_ranges: list[tuple[bytes | None, bytes | None]] = []

    def __call__(self, job: CompactionJob) -> MergeResult:
        """Plan, run the Spark job, check its outputs; return them with the summed stats (no commit)."""
        t0 = time.perf_counter()
        # a memory:// store: say so before anything else (Spark could not help even once it started)
        stores = executor_stores([job.output.directory, *(p for paths in job.sources for p in paths)])
        if self.session is None:
            require_spark()  # no pyspark or no Java: say what to install before the other checks
        ensure_picklable(job)
        session = self.session if self.session is not None else get_session(self.master)
        sc = session.sparkContext
        k = self.tasks or sc.defaultParallelism
        t_plan = time.perf_counter()
        ranges = plan_ranges(job, k)
        t_job = time.perf_counter()
        self.last_ranges = ranges
        storage.storage_for(job.output.directory).makedirs(job.output.directory)

        sc.setJobDescription(f"lsm compaction: {len(job.inputs)} SSTs, {len(ranges)} ranges")
        with handed_off(stores, sc.master) as shipped:  # no credential in the task (compaction.spark_stores)

            def task(i: int) -> dict:
                start, end = ranges[i]
                return _run_task(job, i, start, end, shipped)

            try:
                results = sc.parallelize(range(len(ranges)), len(ranges)).map(task).collect()
            except Exception as e:
                raise SparkJobError(f"Spark compaction job failed: {_short(e)}") from e
        try:
            outputs = check_outputs(ranges, results)
        except SparkJobError as e:
            # the files its tasks wrote are named by no manifest: the caller deletes them (the version
            # set's deletion rule decides who may)
            e.outputs = [os.path.join(job.output.directory, name) for res in results for name, _ in res["outputs"]]
            raise
        stats = CompactionStats()
        tasks = []
        for res in sorted(results, key=lambda r: r["index"]):
            task_stats = _stats_from(res["stats"])
            stats.add(task_stats)
            names = [(name, SsTableInfo.from_dict(d)) for name, d in res["outputs"]]
            tasks.append(TaskReport(res["index"], names, task_stats))
        stats.jobs = 1
        stats.bytes_in = job.input_bytes
        t_end = time.perf_counter()
        stats.seconds = t_end - t0
        if _listeners:
            _notify(SparkJobReport(ranges, t_job - t_plan, t_end - t_job, t_end - t0, tasks))
        return MergeResult(outputs, stats)


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    # a task's Python error: the first unindented line after "Traceback (most recent call last):" is
    # "module.ErrorType: message" (the lines before it quote source code, which may contain "Error")
    in_traceback = False
    for line in text:
        if line.rstrip().endswith("Traceback (most recent call last):"):
            in_traceback = True
        elif in_traceback and line.strip() and not line[0].isspace():
            return line.strip()[:300]
    for line in text:
        if "Error" in line and not line.startswith("\tat"):
            return line.strip()[:300]
    return (text[0] if text else type(e).__name__)[:300]


__all__ = [
    "SparkExecutor",
    "SparkJobError",
    "SparkJobReport",
    "TaskReport",
    "add_job_listener",
    "check_outputs",
    "executor_stores",
    "get_session",
    "observe_jobs",
    "on_executor",
    "plan_ranges",
    "remove_job_listener",
]
