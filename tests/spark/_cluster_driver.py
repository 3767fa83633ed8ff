"""The driver of tests/spark/test_cluster.py, run as its own process: ``python -m tests.spark._cluster_driver
MASTER DB_URL LOG_URL CREDENTIALS_FILE``, in a working directory of its own, its store's keys in its
environment (the standard AWS variables) and in the database's ``object_store_options``.

One Spark application on the standalone cluster (a session built as the engine builds it, plus the two
settings of docs/spark.md's recipe: the executors' credentials file and where their Python finds this
tree): a bulk load of the log on S3, a few writes, a full compaction, then a probe of what the executors
see (their working directory and the AWS names in their environment). Every Python command pyspark
serializes is recorded, to check that no secret travels in a task. Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import lsm
from compaction.spark import session_builder
from lsm.sources import PartitionedLog
from tests.lsm._bulk_util import T0
from tests.spark._util import task_marks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def steps(db: lsm.DB, log: Any, engine: str, executor: str) -> None:
    """What both the cluster and the local reference do to a fresh store (the same rows either way)."""
    db.ingest(log, name="events", engine=engine, tasks=3)
    for i in range(40):  # overwrites, deletes and short TTLs over the loaded keys, then a flush
        k = b"k%04d" % (i * 5)
        if i % 4 == 0:
            db.delete(k)
        else:
            db.put(k, b"late-%d" % i, ttl=1 if i % 7 == 0 else None)
    db.flush()
    db.options.clock.advance(10)  # type: ignore[attr-defined]
    db.compact(full=True, executor=executor)


def _probe(_: int) -> tuple[str, list[str]]:
    return os.getcwd(), sorted(k for k in os.environ if k.startswith(("AWS_", "LSM_")))


def main(master: str, db_url: str, log_url: str, credentials: str) -> dict[str, Any]:
    import pyspark.core.rdd as rdd

    pickled: list[bytes] = []
    prepare = rdd._prepare_for_python_RDD

    def recording(sc: Any, command: Any) -> Any:
        out = prepare(sc, command)
        pickled.append(bytes(out[0]))
        return out

    rdd._prepare_for_python_RDD = recording
    session = (
        session_builder(master, app="lsm-cluster-test")
        .config("spark.executorEnv.AWS_SHARED_CREDENTIALS_FILE", credentials)
        .config("spark.executorEnv.PYTHONPATH", ROOT)  # (an installed wheel needs no such setting)
        .config("spark.executor.memory", "512m")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        env = os.environ  # the driver's keys, given to the store as options too: they must stay here
        store = {"endpoint": env["AWS_ENDPOINT_URL"], "region": env["AWS_REGION"], "allow_http": True,
                 "access_key_id": env["AWS_ACCESS_KEY_ID"], "secret_access_key": env["AWS_SECRET_ACCESS_KEY"]}
        opts = lsm.DbOptions(clock=lsm.ManualClock(T0), background_compaction=False, spark_session=session,
                             object_store_options=store)
        with lsm.DB.open(db_url, opts) as db:
            steps(db, PartitionedLog(log_url), "spark", "spark")
            runs = [[e.name for e in run.ssts] for run in db.manifest.runs]
            l0 = len(db.manifest.l0)
        probe = session.sparkContext.parallelize(range(2), 2).map(_probe).collect()
    finally:
        session.stop()
    secrets = [os.environ["AWS_SECRET_ACCESS_KEY"].encode()]
    with open(credentials) as f:  # (the test process may read it: the same user)
        secrets += [line.split("=", 1)[1].strip().encode() for line in f if "secret" in line]
    return {
        "runs": runs,
        "l0": l0,
        "task_marks": sorted(task_marks(name for run in runs for name in run)),
        "probe": probe,
        "pickled": len(pickled),
        "secret_in_a_task": any(s in p for s in secrets for p in pickled),
    }


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:5])))
