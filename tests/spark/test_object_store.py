"""Spark on an object-store database (s3:// on the moto server): no path is shared with the executors.

The executors get the store's URL and the driver's settings for it from the task closure, and on this
local master the driver's credentials from a file it hands them (`compaction.spark_stores`): their own
environment points at a dead endpoint with wrong keys during these jobs, so a task that took its store
from the environment instead of the database's options could not read or write anything. A local copy
of the store would show as a path derived from its URL under the driver's or an executor's working or
temporary directory: none may exist. The options' secret never appears in a serialized task (every
Python command the driver pickles for Spark is recorded), a Spark job or stage description, nor in the
error of a failed job. tests/spark/test_cluster.py runs the same jobs on a standalone cluster."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import lsm
from compaction.spark import SparkJobError
from lsm.sources import PartitionedLog
from storage import key_of, storage_for
from tests.lsm._bulk_util import contents, open_db, write_log
from tests.spark._util import RewriteFactory, build_db, manifest_files, stored_runs, task_marks, visible
from tests.spark.test_cli import make_db, read_back
from tools import spark_compact

# what the executors' environment says while the jobs run: nothing there reaches the test server
DEAD_ENV = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    "AWS_ACCESS_KEY_ID": "not-the-key",
    "AWS_SECRET_ACCESS_KEY": "not-the-secret",
    "AWS_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
}


def secret_options(s3_server: Any) -> tuple[dict[str, Any], str]:
    """The server's obstore options with a secret key of their own (moto takes any key)."""
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    return dict(s3_server.options(), secret_access_key=secret, max_retries=2, retry_timeout_ms=3000), secret


@contextlib.contextmanager
def executor_env(sc: Any, env: dict[str, str]) -> Iterator[None]:
    """`env` in the environment of the Python workers of the jobs started in the block: what
    ``spark.executorEnv.*`` sets (pyspark hands `sc.environment` to every job's workers)."""
    old = dict(sc.environment)
    sc.environment.update(env)
    try:
        yield
    finally:
        sc.environment.clear()
        sc.environment.update(old)


@pytest.fixture
def pickled_tasks(monkeypatch) -> list[bytes]:
    """Every Python command (function, closure and all) the driver serializes for Spark meanwhile: what
    travels in the tasks, in plain text over Spark's RPC unless its encryption is on."""
    import pyspark.core.rdd as rdd

    got: list[bytes] = []
    prepare = rdd._prepare_for_python_RDD

    def recording(sc: Any, command: Any) -> Any:
        out = prepare(sc, command)
        got.append(bytes(out[0]))
        return out

    monkeypatch.setattr(rdd, "_prepare_for_python_RDD", recording)
    return got


def executor_dirs(sc: Any) -> list[str]:
    """The working and temporary directories of the executors' Python workers."""
    got = sc.parallelize(range(2), 2).map(lambda _: (os.getcwd(), tempfile.gettempdir())).collect()
    return sorted({d for pair in got for d in pair})


def assert_no_local_copy(url: str, dirs: list[str]) -> None:
    """No path derived from `url` exists under `dirs`, and no entry there is named after its prefix."""
    unique = key_of(url).split("/")[0]  # the test's own random prefix
    for d in dirs:
        # the URL as a relative path ("s3:/bucket/..." once normalised), and its key within the bucket
        for p in (url, os.path.normpath(url), key_of(url)):
            assert not os.path.exists(os.path.join(d, p)), f"{os.path.join(d, p)} exists"
        assert not [n for n in os.listdir(d) if unique in n], d


def spark_texts(sc: Any) -> str:
    """Every job's name and description and every stage's name this Spark application recorded."""
    jobs = sc._jsc.sc().statusStore().jobsList(None)
    out = []
    for i in range(jobs.size()):
        job = jobs.apply(i)
        out.append(str(job.name()))
        if job.description().isDefined():
            out.append(str(job.description().get()))
    tracker = sc.statusTracker()
    for job_id in tracker.getJobIdsForGroup():
        info = tracker.getJobInfo(job_id)
        for stage_id in info.stageIds if info is not None else ():
            stage = tracker.getStageInfo(stage_id)
            out.append(stage.name if stage is not None else "")
    assert any(text.startswith("lsm ") for text in out), out  # the lsm jobs' descriptions are there
    return "\n".join(out)


def test_a_memory_database_cannot_use_spark(tmp_path) -> None:
    url = f"memory://spark-{uuid.uuid4().hex[:8]}/db"
    db = open_db(url)
    try:
        db.put(b"k", b"v")
        db.flush()
        with pytest.raises(lsm.SparkStoreError, match=r"memory:// store \(a database, a log\) lives in this process only"):
            db.compact(full=True, executor="spark")
        log = str(tmp_path / "log")
        write_log(log, seed=5, n=50, partitions=2, tx=False)
        with pytest.raises(lsm.SparkStoreError, match="Spark's executors are other processes"):
            db.ingest(PartitionedLog(log), name="events", engine="spark", tasks=2)
        assert db.get(b"k") == b"v" and db.manifest.seq_reservations == ()
    finally:
        db.close()


def test_spark_compaction_of_an_s3_store_equals_local(spark, s3_server, tmp_path, monkeypatch, pickled_tasks) -> None:
    options, secret = secret_options(s3_server)
    url = s3_server.new_url()
    monkeypatch.chdir(tmp_path)  # the driver's working directory: nothing of the store may land here
    opts = dict(compaction_filters=[RewriteFactory()], history_retention=60)
    local, _, local_snaps = build_db(tmp_path / "local", 4, **opts)
    remote, _, remote_snaps = build_db(
        url, 4, spark_session=spark, spark_tasks=3, object_store_options=options, **opts
    )
    sc = spark.sparkContext
    try:
        assert stored_runs(local) == stored_runs(remote) and len(remote.manifest.l0) >= 1
        local.compact(full=True, executor="local")
        with executor_env(sc, DEAD_ENV):
            remote.compact(full=True, executor="spark")
            dirs = executor_dirs(sc)
        assert stored_runs(remote) == stored_runs(local)  # every version, byte for byte
        assert len(stored_runs(remote)) == 1
        assert visible(remote, remote_snaps) == visible(local, local_snaps)
        assert task_marks(e.name for e in remote.manifest.runs[0].ssts) == {0, 1, 2}
        names = storage_for(url).list_names(os.path.join(url, "sst"))
        assert {e.name for e in remote.manifest.runs[0].ssts} <= set(names)
    finally:
        for s in local_snaps + remote_snaps:
            s.close()
        local.close()
        remote.close()
    assert sorted(os.listdir(tmp_path)) == ["local"]
    assert_no_local_copy(url, [str(tmp_path), *dirs])
    assert secret not in spark_texts(sc)
    assert pickled_tasks and not [t for t in pickled_tasks if secret.encode() in t]


def test_spark_bulk_load_into_an_s3_store_equals_local(spark, s3_server, tmp_path, monkeypatch, pickled_tasks) -> None:
    options, secret = secret_options(s3_server)
    url = s3_server.new_url()
    log = str(tmp_path / "log")
    write_log(log, seed=31, n=3000, partitions=4)
    monkeypatch.chdir(tmp_path)
    want_db = open_db(str(tmp_path / "local"))
    try:
        want_db.ingest(PartitionedLog(log), name="events", engine="local", tasks=4, ttl_base="event")
        want = contents(want_db)
    finally:
        want_db.close()
    db = open_db(url, object_store_options=options)
    sc = spark.sparkContext
    try:
        with executor_env(sc, DEAD_ENV):
            db.ingest(PartitionedLog(log), name="events", engine="spark", spark=spark, tasks=4, ttl_base="event")
            dirs = executor_dirs(sc)
        assert contents(db) == want and len(want["rows"]) > 100
        assert len(db.manifest.l0) >= 5  # four tasks' SSTs and the binding's
        names = set(storage_for(url).list_names(os.path.join(url, "sst")))
        assert {e.name for e in db.manifest.all_ssts()} == {n for n in names if n.endswith(".sst")}
    finally:
        db.close()
    reopened = open_db(url, object_store_options=options)
    try:
        assert contents(reopened) == want
    finally:
        reopened.close()
    assert sorted(os.listdir(tmp_path)) == ["local", "log"]
    assert_no_local_copy(url, [str(tmp_path), *dirs])
    assert secret not in spark_texts(sc)
    assert pickled_tasks and not [t for t in pickled_tasks if secret.encode() in t]


def test_spark_bulk_load_of_a_log_on_s3(spark, s3_server, tmp_path, monkeypatch, pickled_tasks) -> None:
    """The log on the object store too (segment objects, lsm.sources.object_log): the tasks read their
    slices by URL, so the driver's directory holds nothing of it either."""
    options, secret = secret_options(s3_server)
    url, log_url = s3_server.new_url(), s3_server.new_url("log")
    local_log = str(tmp_path / "log")
    for where, kw in ((local_log, {}), (log_url, {"segment_bytes": 20_000})):
        write_log(where, seed=32, n=2000, partitions=3, **kw)
    monkeypatch.chdir(tmp_path)
    want_db = open_db(str(tmp_path / "local"))
    try:
        want_db.ingest(PartitionedLog(local_log), name="events", engine="local", tasks=4)
        want = contents(want_db)
    finally:
        want_db.close()
    db = open_db(url, object_store_options=options)
    sc = spark.sparkContext
    try:
        with executor_env(sc, DEAD_ENV):
            db.ingest(PartitionedLog(log_url), name="events", engine="spark", spark=spark, tasks=5)
        assert contents(db) == want and len(want["rows"]) > 100
    finally:
        db.close()
    assert sorted(os.listdir(tmp_path)) == ["local", "log"]
    assert pickled_tasks and not [t for t in pickled_tasks if secret.encode() in t]
    assert [t for t in pickled_tasks if log_url.encode() in t]  # the slices name the segments by URL


def test_a_store_from_the_environment(spark, s3_server, tmp_path) -> None:
    """Without object_store_options: the driver's store comes from the standard AWS variables, and the
    executors reach the same server (its endpoint travels in the task; on this local master the keys in
    the handed file, on a cluster from their own side: tests/spark/test_cluster.py)."""
    url = s3_server.new_url()
    local, _, local_snaps = build_db(tmp_path / "local", 6)
    remote, _, remote_snaps = build_db(url, 6, spark_session=spark, spark_tasks=2)  # the driver: os.environ
    for s in local_snaps + remote_snaps:
        s.close()
    try:
        local.compact(full=True, executor="local")
        with executor_env(spark.sparkContext, DEAD_ENV):
            remote.compact(full=True, executor="spark")
        assert stored_runs(remote) == stored_runs(local)
    finally:
        local.close()
        remote.close()


def test_a_failed_job_names_no_secret(spark, s3_server, monkeypatch) -> None:
    options, secret = secret_options(s3_server)
    url = s3_server.new_url()
    db, _, snaps = build_db(url, 7, spark_session=spark, spark_tasks=2, object_store_options=options)
    for s in snaps:
        s.close()
    import compaction.spark as spark_mod

    plan = spark_mod.plan_ranges

    def plan_then_lose_an_input(job: Any, k: int) -> list:
        ranges = plan(job, k)  # the driver read the inputs' indexes; now one input object is gone
        victim = job.sources[0][0]
        storage_for(victim).delete(victim)
        return ranges

    monkeypatch.setattr(spark_mod, "plan_ranges", plan_then_lose_an_input)
    try:
        with executor_env(spark.sparkContext, DEAD_ENV), pytest.raises(SparkJobError) as err:
            db.compact(full=True, executor="spark")
    finally:
        db.close()
    text = f"{err.value}\n{err.value!r}\n{err.value.__cause__}"
    assert "Spark compaction job failed" in str(err.value)
    assert secret not in text
    assert secret not in spark_texts(spark.sparkContext)


def test_spark_submit_script_takes_a_url(spark, s3_server, capsys) -> None:
    """tools/spark_compact.py on ``s3://...``: the driver finds the server in its own environment, as under
    spark-submit; the executors get its endpoint from the tasks."""
    url = s3_server.new_url()
    expect = make_db(url)
    with executor_env(spark.sparkContext, s3_server.env):
        assert spark_compact.main([url, "--tasks", "2", "--json"], session=spark) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["path"], r["engine"], r["tasks"], r["jobs"]) == (url, "spark", 2, 1)
    got, db = read_back(url)
    try:
        assert got == expect
        assert task_marks(manifest_files(db)) == {0, 1}
    finally:
        db.close()
