"""Full compaction of an lsm-sim database as a Spark application, for ``spark-submit``.

    spark-submit --master local[2] tools/spark_compact.py PATH [--tasks K] [--json]
    spark-submit --master spark://host:7077 --conf spark.pyspark.python=/opt/lsm/bin/python \\
        tools/spark_compact.py s3://bucket/db

It does what ``lsm compact PATH --engine spark`` does, on the SparkSession that spark-submit configured
(master, executors, memory): the driver plans key ranges from the SSTs' block indexes, each task merges
one range into new SSTs in PATH/sst/, and the driver commits one manifest edit. PATH is an object-store
URL (``s3://bucket/prefix``: nothing is shared between the driver and the executors; the driver finds
the store in the standard AWS variables of its environment, the executors get its endpoint and region
from the tasks and their credentials from their own side, a role or a credentials file: docs/spark.md,
"Credentials") or a directory that is the same on the driver and every executor
(a shared mount). lsm-sim and its dependencies must be installed on the executors (the wheel, in the
Python ``spark.pyspark.python`` names), and the database must not be open in another process. See
docs/spark.md, "Submitting the job to a cluster".
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

try:
    import tools.cmd_compact  # noqa: F401 - lsm-sim installed, or shipped with --py-files
except ImportError:  # run from a source tree: spark-submit puts tools/ itself on sys.path, not its parent
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line (bad input exits 2 with a usage error)."""
    from tools import render

    p = argparse.ArgumentParser(
        prog="spark-submit [spark options] tools/spark_compact.py",
        description="Full compaction of the lsm-sim database at PATH as a Spark batch (one task per key "
        "range). The master and resources come from spark-submit.",
    )
    p.add_argument(
        "path",
        metavar="PATH",
        help="database URL (s3://bucket/prefix), or a directory at the same path on every executor",
    )
    p.add_argument(
        "--tasks",
        type=render.int_arg(1),
        default=None,
        metavar="K",
        help="tasks (key ranges); default: the session's default parallelism",
    )
    p.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    return p.parse_args(argv)


def main(argv: list[str] | None = None, session: Any = None) -> int:
    """Run the job; `session` defaults to the one spark-submit provides (``getOrCreate``)."""
    from tools import render
    from tools.cmd_compact import compact_database, print_report
    from tools.commands import describe

    a = parse_args(sys.argv[1:] if argv is None else argv)
    own = session is None
    if own:
        from pyspark.sql import SparkSession

        session = SparkSession.builder.appName("lsm-compact").getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
    try:
        report = compact_database(a.path, "spark", session=session, tasks=a.tasks)
    except Exception as e:  # noqa: BLE001 - one line on stderr and a non-zero status, as `lsm compact`
        render.error(describe(e))
        return 2
    finally:
        if own:
            session.stop()
    if a.json:
        render.print_json(report)
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
