"""Spark on a real standalone cluster, without hand-work: a bulk load and a full compaction whose executors
see neither the driver's environment nor its working directory, the store and the log on an S3 server
that checks every signature, the executors' credentials only through the documented channel.

The cluster (tests/spark/_cluster.py) is a master and a worker started with ``spark-class``; the worker,
and so every executor, runs with a scrubbed environment in a directory of its own. The driver is a
process of its own too (tests/spark/_cluster_driver.py), in another directory, with the store's keys in
its environment and in the database's ``object_store_options``: those of the IAM user ``driver``, whose
policy denies the PUT of task outputs. The
executors get the keys of the user ``executor`` from an AWS credentials file (mode 0600) that
``spark.executorEnv.AWS_SHARED_CREDENTIALS_FILE`` names (docs/spark.md, "Credentials"). So the job can
only succeed if each task signed with the executors' own credentials: a task that got the driver's
environment (whose keys the chain prefers to the file), or the options' keys shipped in the task, would
be refused.
The result must equal the local engines' on the same log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

import lsm
import storage
from lsm.sources import PartitionedLog
from tests.lsm._bulk_util import T0, contents, open_db, write_log
from tests.spark._cluster import BUCKET
from tests.spark._cluster_driver import ROOT, steps
from tests.spark.test_object_store import assert_no_local_copy


def test_compaction_and_bulk_load_on_a_standalone_cluster(spark_cluster, tmp_path) -> None:
    s3, cluster = spark_cluster.s3, spark_cluster.cluster
    prefix = f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"
    db_url, log_url = f"{prefix}/db", f"{prefix}/log"
    storage.register(f"s3://{BUCKET}", s3.options("driver"))  # this process reaches the server as the driver
    write_log(log_url, seed=41, n=3000, partitions=3, segment_bytes=20_000)

    # the policy holds: the driver's key may not write what only tasks write
    with pytest.raises(OSError, match="403"):
        storage.storage_for(db_url).write_file(f"{db_url}/sst/probe-t0000-00000000-0000.sst", [b"x"])

    credentials = s3.credentials_file(os.path.join(cluster.worker_home, "aws-credentials"), "executor")
    driver_dir = tmp_path / "driver"
    driver_dir.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(driver_dir),
        "TMPDIR": str(driver_dir),
        "PYTHONPATH": ROOT,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "LSM_DRIVER_CANARY": "only the driver has this",
        **s3.env("driver"),
    }
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    p = subprocess.run(
        [sys.executable, "-m", "tests.spark._cluster_driver", cluster.url, db_url, log_url, credentials],
        cwd=driver_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    got = json.loads(p.stdout.splitlines()[-1])

    # the same steps with the local engines, in this process, into a local directory
    ref = open_db(str(tmp_path / "local"))
    try:
        steps(ref, PartitionedLog(log_url), "local", "local")
        want = contents(ref)
    finally:
        ref.close()
    db = open_db(db_url, object_store_options=s3.options("driver"), clock=lsm.ManualClock(T0 + 10))
    try:
        have = contents(db)
    finally:
        db.close()
    assert have == want and len(want["rows"]) > 100 and want["bindings"]
    assert (got["l0"], len(got["runs"]), got["task_marks"]) == (0, 1, [0, 1])  # 2 executor cores: 2 tasks

    # what the executors saw: the worker's directories, no AWS variable but the credentials file's path
    for cwd, names in got["probe"]:
        assert cwd.startswith(cluster.work_dir + os.sep), cwd
        assert names == ["AWS_SHARED_CREDENTIALS_FILE"], names
    assert got["pickled"] >= 3 and not got["secret_in_a_task"]
    assert_no_local_copy(db_url, [str(driver_dir), cluster.worker_home])
    secrets = [s3.keys[user][1] for user in ("driver", "executor")]
    logs = [cluster.master_log, cluster.worker_log]
    logs += [os.path.join(d, name) for d in cluster.app_dirs() for name in os.listdir(d)]
    assert len(logs) >= 4  # (each executor's stdout and stderr)
    for path in logs:
        with open(path, errors="replace") as f:
            text = f.read()
        assert not [s for s in secrets if s in text], path
