"""``lsm bench compact``: full compaction with the local executor vs. Spark, on identical databases.

    lsm bench compact [--num 5000000] [--runs 4] [--master local[2]] [--tasks K] [--repeat 3] [--json]
    python -m tools.bench compact ...            (the same)

What it does:

1. Starts the SparkSession first and reports its start-up separately: it is never part of a figure.
2. Tiny job: a database of a handful of rows compacted on Spark, several times. The first run pays for
   starting the Python workers; the median of the others is the fixed cost of a Spark compaction
   (planning, one Spark job, the commit), split into plan / job / commit.
3. Builds the database once: ``--num`` rows (16-byte zero-padded decimal keys as db_bench's, values of
   ``--value-size`` bytes cut from db_bench's compressible random buffer) in ``--runs`` overlapping sorted
   runs of geometrically decreasing size (the newest run the smallest), each split into SSTs of
   ``target_sst_bytes``. Some rows carry a TTL (half of them expired at the compaction tick) and the newer
   runs hold tombstones, so versions, tombstones and expired rows are dropped as in a real full compaction.
   The SSTs are written directly with `formats.sst.SstWriter` from sorted chunks and registered with one
   manifest version through `lsm.manifest.ManifestStore` (compare-and-swap) while no DB is open (writing
   millions of rows through `DB.put` would take far longer than the compactions being measured, and
   would measure the write path instead).
4. For each repeat, copies the database twice and runs ``db.compact(full=True, executor=...)`` on one copy
   with the local executor and on the other with Spark (the order alternates between repeats). The
   figure is the wall time of that call: planning, the merge, writing and fsyncing the outputs, the
   manifest commit. It is split with public figures only: the returned `CompactionStats.seconds` (job
   set-up and the executor) against the rest (fsync of ``sst/``, the manifest commit, retiring the
   inputs); for Spark, `compaction.spark.observe_jobs` splits the executor into plan (driver reads the
   block indexes) and job (the Spark job, tasks included), and each task's time into read (decoding input
   blocks), merge (version resolution and filters; the rest) and write (encoding, writing, fsyncing).
5. Checks that both executors produced the same rows (counts and key ranges; every row with --verify).
6. With the local executor (unless ``--no-isolated``): ``--repeat`` more compactions of fresh copies, each
   in a fresh process (`tools.bench.compact_rss`) that first scans the whole database with ``db.scan()``:
   the compaction's cost against a full scan (the ratio), its peak RSS and its peak anonymous memory
   (RssAnon, sampled every 5 ms by a separate process: the heap, not the mapped SST files), which a
   fresh process measures without the build and the earlier runs; and the merge alone (`run_job` with
   the DB closed, the job pickled into a fresh process, as the worker process or a Spark task runs it)
   with its peak RSS and RssAnon.
7. With rocksdict installed (unless ``--no-rocksdb``): the same rows written into RocksDB, oldest run
   first, one flush per run (`compact_db.build_rocksdb`: raw mode, no compression, no automatic
   compaction), and in each repeat, right after lsm's compaction, ``compact_range(None, None)`` on a fresh
   copy in a fresh process: the wall-time (and CPU-time) ratio lsm / RocksDB per repeat, and its median.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from tools.bench.compact_db import T0, Spec, build_database, build_tiny
from tools.bench.compact_isolated import isolated_runs, s3_runs, say
from tools.bench.harness import DEFAULT_SEED, KEY_SIZE, cpu_meter, medians, split_list
from tools.common import conf_pair, spark_session_for
from tools.render import float_arg, int_arg, plural


# -- measuring -------------------------------------------------------------------------------------------
def _task_dicts(report: Any) -> list[dict[str, Any]]:
    """Each task of a `compaction.spark.SparkJobReport` with its read / merge / write split."""
    return [
        {
            "index": t.index,
            "seconds": t.stats.seconds,
            "read_seconds": t.stats.read_seconds,
            "write_seconds": t.stats.write_seconds,
            "merge_seconds": t.stats.seconds - t.stats.read_seconds - t.stats.write_seconds,
            "rows_in": t.stats.rows_in,
            "outputs": len(t.outputs),
        }
        for t in report.tasks
    ]


def timed_compaction(path: str, executor: str, tick: int, session: Any, tasks: int | None) -> dict[str, Any]:
    """Wall time of ``db.compact(full=True, executor=...)`` on the database at `path`, with its parts.

    `CompactionStats.seconds` (job set-up and the executor call) tells the executor from the commit that
    follows it; for Spark, the job's `SparkJobReport` splits the executor into plan and job."""
    from compaction.spark import observe_jobs
    from lsm import DB, DbOptions, ManualClock

    opts = DbOptions(
        clock=ManualClock(tick), background_compaction=False, spark_session=session, spark_tasks=tasks
    )
    with DB.open(path, opts) as db:
        gc.collect()
        with observe_jobs() as reports, cpu_meter(session if executor == "spark" else None) as cpu:
            t0 = time.perf_counter()
            stats = db.compact(full=True, executor=executor)
            wall = time.perf_counter() - t0
        outputs = [(e.name, e.info) for r in db.manifest.runs for e in r.ssts]
    out: dict[str, Any] = {
        "executor": executor,
        "seconds": wall,
        "executor_seconds": stats.seconds,
        "commit_seconds": wall - stats.seconds,  # fsync of sst/, the manifest commit, retiring the inputs
        "rows_in": stats.rows_in,
        "rows_out": stats.rows_out,
        "bytes_in": stats.bytes_in,
        "bytes_out": stats.bytes_out,
        "versions_dropped": stats.versions_dropped,
        "tombstones_dropped": stats.tombstones_dropped,
        "expired_dropped": stats.expired_dropped,
        "read_seconds": stats.read_seconds,
        "write_seconds": stats.write_seconds,
        "outputs": len(outputs),
        "cpu": cpu,
        "first_key": outputs[0][1].first_key.decode() if outputs else None,
        "last_key": outputs[-1][1].last_key.decode() if outputs else None,
    }
    if executor == "spark":
        plan = sum(r.plan_seconds for r in reports)
        out["plan_seconds"] = plan
        out["job_seconds"] = out["executor_seconds"] - plan
        out["tasks"] = [t for r in reports for t in _task_dicts(r)]
    else:
        out["merge_seconds"] = out["executor_seconds"] - stats.read_seconds - stats.write_seconds
    return out


def rows_of(path: str) -> Iterator[tuple]:
    """Every row of the sorted runs of the database at `path`, in run then key order (for --verify)."""
    from lsm.manifest import ManifestStore
    from storage.paths import DbPaths
    from storage.ssts import open_sst

    _, m = ManifestStore(path).latest()
    names = DbPaths(path)
    for run in m.runs:
        for e in run.ssts:
            with open_sst(names.sst(e.name)) as r:
                yield from r


def _warm(modules: tuple[str, ...]) -> int:
    import importlib

    for name in modules:  # what the job's tasks import first
        importlib.import_module(name)
    time.sleep(0.5)  # keep every task slot busy at once, so each starts its own Python worker
    return os.getpid()


def warm_workers(
    session: Any, tasks: int, modules: tuple[str, ...] = ("compaction.merge",)
) -> tuple[float, int]:
    """Start one Python worker per task slot, with `modules` imported (a one-time cost per session, like
    the JVM's): (seconds, distinct workers)."""
    t0 = time.perf_counter()
    rdd = session.sparkContext.parallelize([modules] * tasks, tasks)
    pids = rdd.map(_warm).collect()
    return time.perf_counter() - t0, len(set(pids))


# -- the command -----------------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    """The compact suite's options (``lsm bench compact --help``)."""
    p = argparse.ArgumentParser(
        prog="lsm bench compact",
        description="Full compaction with the local executor vs. Spark on identical copies of one database "
        "(wall time of db.compact(full=True), Spark session start-up excluded), plus the fixed cost of a tiny "
        "Spark compaction and each task's read/merge/write split.",
    )
    p.add_argument("--num", type=int_arg(1), default=5_000_000, help="rows (default 5000000)")
    p.add_argument(
        "--runs", type=int_arg(1), default=4, help="overlapping sorted runs holding them (default 4)"
    )
    p.add_argument(
        "--value-size", type=int_arg(0), default=100, help="value bytes (default 100); keys are 16 bytes"
    )
    p.add_argument(
        "--ttl-fraction",
        type=float_arg(0, 1),
        default=0.1,
        help="rows with a TTL, half expired (default 0.1)",
    )
    p.add_argument(
        "--delete-fraction",
        type=float_arg(0, 1),
        default=0.02,
        help="tombstones in the newer runs (default 0.02)",
    )
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    p.add_argument(
        "--tasks", type=int_arg(1), default=None, help="Spark tasks (default: the session's parallelism)"
    )
    p.add_argument(
        "--conf",
        action="append",
        type=conf_pair,
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration (repeatable)",
    )
    p.add_argument(
        "--repeat",
        type=int_arg(1),
        default=3,
        help="compactions per executor; the median is reported (default 3)",
    )
    p.add_argument("--tiny-repeat", type=int_arg(0), default=5, help="tiny Spark jobs (default 5)")
    p.add_argument("--executors", default="local,spark", help="which to run (default local,spark)")
    p.add_argument("--dir", default=None, help="work directory (default: a temp dir, removed after)")
    p.add_argument("--seed", type=int_arg(None), default=DEFAULT_SEED)
    p.add_argument("--verify", action="store_true", help="compare every output row of the two executors")
    p.add_argument(
        "--no-isolated",
        dest="isolated",
        action="store_false",
        help="skip the local compactions in a fresh process (scan ratio and peak RSS)",
    )
    p.add_argument(
        "--no-rocksdb",
        dest="rocksdb",
        action="store_false",
        help="skip RocksDB's compact_range of the same rows (run with the isolated compactions, if rocksdict "
        "is installed)",
    )
    p.add_argument(
        "--store",
        choices=("local", "s3"),
        default="local",
        help="s3: also run --repeat isolated full compactions of the same database on an S3 store (the "
        "environment's endpoint, else a local moto server), each right after one of a local copy: wall "
        "time, peak anonymous memory and requests, and the ratio s3/local (default local)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Parse and check the options (bad input exits 2 with a usage error)."""
    p = parser()
    a = p.parse_args(argv)
    a.executors = split_list(a.executors)
    if not a.executors or not set(a.executors) <= {"local", "spark"}:
        p.error("--executors: a comma list of local, spark")
    return a


def spark_fixed_cost(a: argparse.Namespace, root: str, session: Any, report: dict[str, Any]) -> None:
    """The tiny job: the fixed cost of planning, one Spark job and a commit (median of --tiny-repeat).

    Its first run starts a Python worker; then one worker per task slot is started, so the big jobs find
    them all warm. The same tiny database compacted locally is the comparison."""
    tick = T0 + 10_000
    tiny = []
    for i in range(a.tiny_repeat + 1):
        p = os.path.join(root, f"tiny{i}")
        build_tiny(p, tick)
        tiny.append(timed_compaction(p, "spark", tick, session, a.tasks))
        shutil.rmtree(p)
    warm, workers = warm_workers(session, report["tasks"])
    report["warm_workers_seconds"] = warm
    say(a, f"workers:    {workers} Python workers up ({warm:.2f} s, a one-time cost per session, excluded)")
    p = os.path.join(root, "tiny-local")
    build_tiny(p, tick)
    tiny_local = timed_compaction(p, "local", tick, None, None)
    shutil.rmtree(p)
    report["tiny"] = {"first": tiny[0], "warm": tiny[1:], "local": tiny_local}
    if len(tiny) > 1:
        med = medians(tiny[1:], ("seconds", "plan_seconds", "job_seconds", "commit_seconds"))
        report["tiny"]["median"] = med
        say(
            a,
            f"tiny job:   spark {med['seconds'] * 1000:.0f} ms (plan {med['plan_seconds'] * 1000:.1f} ms, "
            f"job {med['job_seconds'] * 1000:.0f} ms, commit {med['commit_seconds'] * 1000:.1f} ms; median of "
            f"{len(tiny) - 1}); first job with cold Python workers {tiny[0]['seconds']:.2f} s; "
            f"local {tiny_local['seconds'] * 1000:.1f} ms",
        )


def build_base(a: argparse.Namespace, root: str) -> tuple[str, dict[str, Any]]:
    """Build the database every compaction copies; return (its path, what was built)."""
    from lsm import DbOptions

    spec = Spec(
        num=a.num,
        runs=a.runs,
        value_size=a.value_size,
        seed=a.seed,
        ttl_fraction=a.ttl_fraction,
        delete_fraction=a.delete_fraction,
        target_sst_bytes=DbOptions().target_sst_bytes,
        block_bytes=DbOptions().block_bytes,
    )
    base = os.path.join(root, "base")
    t0 = time.perf_counter()
    built = build_database(base, spec, progress=not a.json)
    built["build_seconds"] = time.perf_counter() - t0
    gc.collect()
    say(
        a,
        f"Database:   {a.num} rows ({KEY_SIZE}-byte keys, {a.value_size}-byte values) in {a.runs} sorted runs "
        f"of {built['runs']} SSTs, {built['bytes'] / 1048576:.1f} MiB; built in {built['build_seconds']:.1f} s "
        "(SSTs written directly, one manifest commit)",
    )
    return base, built


def compare_executors(
    a: argparse.Namespace, root: str, base: str, tick: int, session: Any, report: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """--repeat compactions per executor, each on a fresh copy of `base`, the order alternating."""
    results: dict[str, list[dict[str, Any]]] = {x: [] for x in a.executors}
    for rep in range(a.repeat):
        order = a.executors if rep % 2 == 0 else a.executors[::-1]
        for x in order:
            work = os.path.join(root, f"work-{x}")
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(base, work)
            r = timed_compaction(work, x, tick, session, a.tasks)
            results[x].append(r)
            say(a, line(x, r))
            if a.verify and rep == 0 and x == order[-1] and len(order) == 2:
                other = os.path.join(root, f"work-{order[0]}")
                same = all(p == q for p, q in zip(rows_of(work), rows_of(other), strict=True))
                report["verified"] = same
                say(a, f"verify:     every output row {'identical' if same else 'DIFFERENT'}")
            if not (a.verify and rep == 0 and x == order[0] and len(order) == 2):
                shutil.rmtree(work, ignore_errors=True)
    for x in a.executors:
        shutil.rmtree(os.path.join(root, f"work-{x}"), ignore_errors=True)
    return results


def summarize(
    a: argparse.Namespace, results: dict[str, list[dict[str, Any]]], report: dict[str, Any]
) -> None:
    """Medians per executor; with both, whether their outputs agree and Spark's speed-up."""
    report["results"] = results
    report["load_average_end"] = os.getloadavg()
    summary = {x: statistics.median(r["seconds"] for r in rs) for x, rs in results.items()}
    report["median_seconds"] = summary
    if len(results) != 2:
        return
    lo, sp = results["local"][0], results["spark"][0]
    keys = (
        "rows_in",
        "rows_out",
        "versions_dropped",
        "tombstones_dropped",
        "expired_dropped",
        "first_key",
        "last_key",
    )
    report["same_output"] = all(lo[k] == sp[k] for k in keys)
    report["speedup"] = summary["local"] / summary["spark"]
    say(a, f"same output (counts, key range): {report['same_output']}")
    say(a, f"load:       average {os.getloadavg()[0]:.2f} at the end (other processes skew the figures)")
    say(
        a,
        f"median:     local {summary['local']:.2f} s, spark {summary['spark']:.2f} s "
        f"-> spark {report['speedup']:.2f}x faster (median of {a.repeat})",
    )


def main(argv: list[str] | None = None, session: Any = None) -> int:
    """Run the benchmark; `session` (optional) is an existing SparkSession to use (and leave running)."""
    a = parse_args(sys.argv[1:] if argv is None else argv)
    root = a.dir or tempfile.mkdtemp(prefix="lsm-bench-compact-")
    os.makedirs(root, exist_ok=True)
    report: dict[str, Any] = {
        "num": a.num,
        "master": a.master,
        "cpus": os.cpu_count(),
        "load_average_start": os.getloadavg(),
    }
    say(a, f"Machine:    {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    try:
        with contextlib.ExitStack() as stack:
            if "spark" in a.executors:
                # a session of our own logs its JVM's output to a file (named if a job fails) and stops at
                # the end; a given one is left as it is
                run = stack.enter_context(
                    spark_session_for(
                        a.master, "bench-compact", session=session, app="lsm-bench-compact", conf=a.conf
                    )
                )
                session, startup = run.session, run.startup_seconds
                report["spark_startup_seconds"] = startup
                report["tasks"] = a.tasks or session.sparkContext.defaultParallelism
                say(
                    a,
                    f"Spark:      {a.master}, {report['tasks']} tasks; session start-up {startup:.1f} s (excluded)",
                )
                spark_fixed_cost(a, root, session, report)
            base, built = build_base(a, root)
            report["database"] = built
            summarize(a, compare_executors(a, root, base, built["tick"], session, report), report)
            if a.isolated and "local" in a.executors:
                isolated_runs(a, root, base, built["tick"], report)
            if a.store == "s3":
                s3_runs(a, root, base, built["tick"], report)
    finally:
        if a.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    if a.json:
        print(json.dumps(report, indent=1, default=str))
    return 0


def line(executor: str, r: dict[str, Any]) -> str:
    """The lines of one measured compaction: wall time, rate, its parts, CPU, and (Spark) each task."""
    rate = r["rows_in"] / r["seconds"] / 1e3 if r["seconds"] else 0.0
    s = (
        f"compact {executor:<5}: {r['seconds']:8.2f} s  {rate:7.1f} k rows/s  "
        f"(rows {r['rows_in']} -> {r['rows_out']}, {plural(r['outputs'], 'SST')}"
    )
    if executor == "spark":
        s += f"; plan {r['plan_seconds']:.2f} s, job {r['job_seconds']:.2f} s, commit {r['commit_seconds']:.2f} s)"
        c = r["cpu"]
        s += (
            f"\n  cpu: {c['total']:.2f} s = Python workers {sum(c['workers']):.2f} "
            f"({' + '.join(f'{x:.2f}' for x in c['workers'])}), JVM {c['jvm']:.2f}, driver {c['driver']:.2f}; "
            f"workers waited for a CPU {' + '.join(f'{x:.2f}' for x in c['workers_waiting'])} s"
        )
        for t in r["tasks"]:
            s += (
                f"\n  task {t['index']}: {t['seconds']:7.2f} s = read {t['read_seconds']:.2f} + merge "
                f"{t['merge_seconds']:.2f} + write {t['write_seconds']:.2f}  ({t['rows_in']} rows in)"
            )
    else:
        s += (
            f"; read {r['read_seconds']:.2f} s, merge {r['merge_seconds']:.2f} s, write {r['write_seconds']:.2f} s, "
            f"commit {r['commit_seconds']:.2f} s)\n  cpu: {r['cpu']['driver']:.2f} s; waited for a CPU "
            f"{r['cpu']['driver_waiting']:.2f} s"
        )
    return s
