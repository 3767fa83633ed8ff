"""``lsm bench compact``: full compaction with the local executor vs. Spark, on identical databases.

    lsm bench compact [--num 5000000] [--runs 4] [--master local[2]] [--tasks K] [--repeat 3] [--json]
    python -m tools.bench_compact ...            (the same)

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
   The SSTs are written directly with `formats.sst.write_sst` from sorted chunks and registered with one
   manifest commit through the DB (writing millions of rows through `DB.put` would take far longer than
   the compactions being measured, and would measure the write path instead).
4. For each repeat, copies the database twice and runs ``db.compact(full=True, executor=...)`` on one copy
   with the local executor and on the other with Spark (the order alternates between repeats). The
   figure is the wall time of that call: planning, the merge, writing and fsyncing the outputs, the
   manifest commit. For Spark it is also split into plan (driver reads the block indexes), job (the Spark
   job, tasks included) and commit, and each task's time into read (decoding input blocks), merge
   (version resolution and filters; the rest) and write (encoding, writing, fsyncing).
5. Checks that both executors produced the same rows (counts and key ranges; every row with --verify).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

KEY_SIZE = 16
T0 = 1_700_000_000_000
TTL = 3_600_000


@dataclasses.dataclass
class Spec:
    num: int
    runs: int
    value_size: int
    seed: int
    ttl_fraction: float
    delete_fraction: float
    target_sst_bytes: int
    block_bytes: int


# -- building the database -------------------------------------------------------------------------------
def run_sizes(num: int, runs: int) -> list[int]:
    """Rows per run, newest first, each twice the size of the one above it."""
    weights = [2**i for i in range(runs)]
    sizes = [num * w // sum(weights) for w in weights]
    sizes[-1] += num - sum(sizes)
    return sizes


def build_database(path: str, spec: Spec, progress: bool = False) -> dict[str, Any]:
    """Write `spec.num` rows as `spec.runs` sorted runs of SSTs and commit them as the database at `path`."""
    from formats.manifest import SortedRun, SstEntry
    from formats.sst import SstWriter
    from lsm import DB, DbOptions, ManualClock
    from tools.bench import make_values

    values = make_values(spec.value_size, 0.5, spec.seed)
    nvals = len(values)
    sst_dir = os.path.join(path, "sst")
    tick = T0 + spec.num + 2 * TTL  # the compaction clock: after every write
    DB.open(
        path, DbOptions(clock=ManualClock(tick), background_compaction=False)
    ).close()  # an empty database
    sizes = run_sizes(spec.num, spec.runs)
    rng = random.Random(spec.seed)
    seq = spec.num  # the newest run holds the highest seqs; each row its own seq
    file_no = 0
    runs: list[tuple[SstEntry, ...]] = []
    per_sst = max(1, spec.target_sst_bytes // (KEY_SIZE + spec.value_size + 33))
    for r, n in enumerate(sizes):
        keys = rng.sample(range(spec.num), n)
        keys.sort()
        deletes = spec.delete_fraction if r < spec.runs - 1 else 0.0  # tombstones above the oldest run
        rand = rng.random
        entries = []
        for lo in range(0, n, per_sst):
            chunk = keys[lo : lo + per_sst]
            file_no += 1
            name = f"{file_no:020d}-bench-{r}.sst"
            w = SstWriter(
                os.path.join(sst_dir, name), creation_timestamp=T0, block_bytes=spec.block_bytes, sync=False
            )
            for k in chunk:
                s = seq
                seq -= 1
                ts = T0 + s
                x = rand()
                if x < deletes:
                    w.add((b"%016d" % k, s, ts, None, None))
                elif x < deletes + spec.ttl_fraction:
                    # half expire before the tick, half after
                    exp = tick - 1 if x < deletes + spec.ttl_fraction / 2 else tick + TTL
                    w.add((b"%016d" % k, s, ts, exp, values[s % nvals]))
                else:
                    w.add((b"%016d" % k, s, ts, None, values[s % nvals]))
            entries.append(SstEntry(name, w.finish()))
        runs.append(tuple(entries))
        if progress:
            print(
                f"# built run {r + 1}/{spec.runs}: {n} rows in {len(entries)} SSTs",
                file=sys.stderr,
                flush=True,
            )
        del keys
    runs.reverse()  # newest (smallest, highest seqs) first
    # the manifest: one commit through the DB (its epochs, its compare-and-swap)
    with DB.open(path, DbOptions(clock=ManualClock(tick), background_compaction=False)) as db:
        records = tuple(SortedRun(i + 1, ssts) for i, ssts in enumerate(runs))
        db._commit(
            lambda m: m.replace(
                runs=records,
                next_run_id=len(records) + 1,
                last_seq=max(m.last_seq, spec.num),
                clock_watermark=tick - 1,
            ),
            db._install,
        )
    nbytes = sum(e.info.file_size for ssts in runs for e in ssts)
    return {"rows": spec.num, "runs": [len(s) for s in runs], "ssts": file_no, "bytes": nbytes, "tick": tick}


def build_tiny(path: str, tick: int) -> None:
    """A handful of rows in two L0 SSTs."""
    from lsm import DB, DbOptions, ManualClock

    clock = ManualClock(tick - 100)
    with DB.open(path, DbOptions(clock=clock, background_compaction=False)) as db:
        for i in range(8):
            db.put(b"tiny%02d" % (i % 5), b"v%d" % i, ttl=10 if i == 3 else None)
            if i == 4:
                db.flush()
        db.delete(b"tiny00")


# -- measuring -------------------------------------------------------------------------------------------
@contextlib.contextmanager
def spark_spy() -> Iterator[dict[str, Any]]:
    """Driver-side timings of SparkExecutor: plan_ranges time and every task's result (its stats)."""
    import compaction.spark as cs

    seen: dict[str, Any] = {}
    plan, check = cs.plan_ranges, cs.check_outputs

    def timed_plan(job, k):
        t0 = time.perf_counter()
        try:
            return plan(job, k)
        finally:
            seen["plan_seconds"] = time.perf_counter() - t0

    def capture(ranges, results):
        seen["tasks"] = sorted(results, key=lambda r: r["index"])
        return check(ranges, results)

    cs.plan_ranges, cs.check_outputs = timed_plan, capture
    try:
        yield seen
    finally:
        cs.plan_ranges, cs.check_outputs = plan, check


def _proc_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) a process has used, from /proc (Linux); None elsewhere or if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _runqueue_wait(pid: int | str) -> float:
    """Seconds the (main thread of the) process spent runnable but waiting for a CPU (Linux schedstat)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _python_workers() -> dict[int, tuple[float, float]]:
    """(CPU seconds, run-queue wait seconds) of every PySpark daemon and worker process (workers are forks
    of ``pyspark.daemon``)."""
    out = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return out
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"pyspark.daemon" not in f.read():
                    continue
        except OSError:
            continue
        cpu = _proc_cpu(pid)
        if cpu is not None:
            out[pid] = (cpu, _runqueue_wait(pid))
    return out


@contextlib.contextmanager
def cpu_meter(session: Any) -> Iterator[dict[str, Any]]:
    """CPU seconds used meanwhile by this process, the Spark JVM and the Python workers (Linux).

    CPU time does not depend on what else the machine runs, so it tells how much work each executor did
    even when wall times are skewed by other processes."""
    jvm = None
    if session is not None:
        proc = getattr(session.sparkContext._gateway, "proc", None)
        jvm = getattr(proc, "pid", None)
    out: dict[str, Any] = {}
    t0 = time.process_time()
    q0 = _runqueue_wait("self")
    j0 = _proc_cpu(jvm) if jvm else None
    w0 = _python_workers()
    try:
        yield out
    finally:
        out["driver"] = time.process_time() - t0
        out["driver_waiting"] = _runqueue_wait("self") - q0
        j1 = _proc_cpu(jvm) if jvm else None
        out["jvm"] = j1 - j0 if j0 is not None and j1 is not None else 0.0
        w1 = _python_workers()
        per = [(c - w0.get(p, (0.0, 0.0))[0], q - w0.get(p, (0.0, 0.0))[1]) for p, (c, q) in w1.items()]
        busy = sorted((x for x in per if x[0] >= 0.05), reverse=True)
        out["workers"] = [round(c, 3) for c, _ in busy]
        out["workers_waiting"] = [round(q, 3) for _, q in busy]
        out["total"] = out["driver"] + out["jvm"] + sum(c for c, _ in per)


def timed_compaction(path: str, executor: str, tick: int, session: Any, tasks: int | None) -> dict[str, Any]:
    """Wall time of ``db.compact(full=True, executor=...)`` on the database at `path`, with its parts."""
    from lsm import DB, DbOptions, ManualClock

    opts = DbOptions(
        clock=ManualClock(tick), background_compaction=False, spark_session=session, spark_tasks=tasks
    )
    with DB.open(path, opts) as db:
        c = db._compactor
        make = c._executor
        parts: dict[str, float] = {}

        def executor_timed(job, *args, **kwargs):  # the executor call alone, to tell it from the commit
            ex = make(job, *args, **kwargs)

            def run(j):
                t = time.perf_counter()
                try:
                    return ex(j)
                finally:
                    parts["executor"] = time.perf_counter() - t

            return run

        c._executor = executor_timed
        gc.collect()
        spy = spark_spy() if executor == "spark" else contextlib.nullcontext({})
        with spy as seen, cpu_meter(session if executor == "spark" else None) as cpu:
            t0 = time.perf_counter()
            stats = db.compact(full=True, executor=executor)
            wall = time.perf_counter() - t0
        outputs = [(e.name, e.info) for r in db.manifest.runs for e in r.ssts]
    out: dict[str, Any] = {
        "executor": executor,
        "seconds": wall,
        "executor_seconds": parts.get("executor", 0.0),
        "commit_seconds": wall - parts.get("executor", 0.0),  # make_job, fsync of sst/, commit, retire
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
        out["plan_seconds"] = seen.get("plan_seconds", 0.0)
        out["job_seconds"] = out["executor_seconds"] - out["plan_seconds"]
        out["tasks"] = [
            {
                "index": t["index"],
                "seconds": t["stats"]["seconds"],
                "read_seconds": t["stats"]["read_seconds"],
                "write_seconds": t["stats"]["write_seconds"],
                "merge_seconds": t["stats"]["seconds"]
                - t["stats"]["read_seconds"]
                - t["stats"]["write_seconds"],
                "rows_in": t["stats"]["rows_in"],
                "outputs": len(t["outputs"]),
            }
            for t in seen.get("tasks", [])
        ]
    else:
        out["merge_seconds"] = out["executor_seconds"] - stats.read_seconds - stats.write_seconds
    return out


def rows_of(path: str) -> Iterator[tuple]:
    from formats.manifest import SortedRun  # noqa: F401 - documents what is read
    from formats.sst import SstReader
    from lsm.manifest import ManifestStore

    _, m = ManifestStore(path).latest()
    for run in m.runs:
        for e in run.ssts:
            with SstReader(os.path.join(path, "sst", e.name)) as r:
                yield from r


def start_session(master: str, conf: list[tuple[str, str]]) -> tuple[Any, float]:
    from compaction.spark import session_builder

    t0 = time.perf_counter()
    b = session_builder(master, app="lsm-bench-compact")
    for k, v in conf:
        b = b.config(k, v)
    s = b.getOrCreate()
    s.sparkContext.setLogLevel("ERROR")
    return s, time.perf_counter() - t0


def _warm(_: int) -> int:
    import compaction.merge  # noqa: F401 - what every compaction task imports first

    time.sleep(0.5)  # keep every task slot busy at once, so each starts its own Python worker
    return os.getpid()


def warm_workers(session: Any, tasks: int) -> tuple[float, int]:
    """Start one Python worker per task slot (a one-time cost per session, like the JVM's)."""
    t0 = time.perf_counter()
    pids = session.sparkContext.parallelize(range(tasks), tasks).map(_warm).collect()
    return time.perf_counter() - t0, len(set(pids))


# -- the command -----------------------------------------------------------------------------------------
def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="lsm bench compact",
        description="Full compaction with the local executor vs. Spark on identical copies of one database "
        "(wall time of db.compact(full=True), Spark session start-up excluded), plus the fixed cost of a tiny "
        "Spark compaction and each task's read/merge/write split.",
    )
    p.add_argument("--num", type=int, default=5_000_000, help="rows (default 5000000)")
    p.add_argument("--runs", type=int, default=4, help="overlapping sorted runs holding them (default 4)")
    p.add_argument("--value-size", type=int, default=100, help="value bytes (default 100); keys are 16 bytes")
    p.add_argument(
        "--ttl-fraction", type=float, default=0.1, help="rows with a TTL, half expired (default 0.1)"
    )
    p.add_argument(
        "--delete-fraction", type=float, default=0.02, help="tombstones in the newer runs (default 0.02)"
    )
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    p.add_argument("--tasks", type=int, default=None, help="Spark tasks (default: the session's parallelism)")
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration (repeatable)",
    )
    p.add_argument(
        "--repeat", type=int, default=3, help="compactions per executor; the median is reported (default 3)"
    )
    p.add_argument("--tiny-repeat", type=int, default=5, help="tiny Spark jobs (default 5)")
    p.add_argument("--executors", default="local,spark", help="which to run (default local,spark)")
    p.add_argument("--dir", default=None, help="work directory (default: a temp dir, removed after)")
    p.add_argument("--seed", type=int, default=301)
    p.add_argument("--verify", action="store_true", help="compare every output row of the two executors")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    a = p.parse_args(argv)
    if a.num < 1 or a.runs < 1 or a.repeat < 1 or a.tiny_repeat < 0 or (a.tasks is not None and a.tasks < 1):
        p.error("--num, --runs, --repeat and --tasks must be >= 1, --tiny-repeat >= 0")
    try:
        a.conf = [tuple(kv.split("=", 1)) for kv in a.conf]
        assert all(len(kv) == 2 for kv in a.conf)
    except AssertionError:
        p.error("--conf takes KEY=VALUE")
    a.executors = [x.strip() for x in a.executors.split(",") if x.strip()]
    if not a.executors or not set(a.executors) <= {"local", "spark"}:
        p.error("--executors: a comma list of local, spark")
    return a


def _say(a: argparse.Namespace, text: str) -> None:
    if not a.json:
        print(text, flush=True)


def main(argv: list[str] | None = None, session: Any = None) -> int:
    """Run the benchmark; `session` (optional) is an existing SparkSession to use (and leave running)."""
    from lsm import DbOptions

    a = parse_args(sys.argv[1:] if argv is None else argv)
    root = a.dir or tempfile.mkdtemp(prefix="lsm-bench-compact-")
    os.makedirs(root, exist_ok=True)
    report: dict[str, Any] = {
        "num": a.num,
        "master": a.master,
        "cpus": os.cpu_count(),
        "load_average_start": os.getloadavg(),
    }
    _say(a, f"Machine:    {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    own = session is None
    try:
        if "spark" in a.executors:
            if own:
                session, startup = start_session(a.master, a.conf)
            else:
                startup = 0.0
            report["spark_startup_seconds"] = startup
            report["tasks"] = a.tasks or session.sparkContext.defaultParallelism
            _say(
                a,
                f"Spark:      {a.master}, {report['tasks']} tasks; session start-up {startup:.1f} s (excluded)",
            )
            # the tiny job: the fixed cost of planning, one Spark job and a commit; its first run starts a
            # Python worker, then one per task slot is started so the big jobs find them all warm
            tiny = []
            for i in range(a.tiny_repeat + 1):
                p = os.path.join(root, f"tiny{i}")
                build_tiny(p, T0 + 10_000)
                tiny.append(timed_compaction(p, "spark", T0 + 10_000, session, a.tasks))
                shutil.rmtree(p)
            warm, workers = warm_workers(session, report["tasks"])
            report["warm_workers_seconds"] = warm
            _say(
                a,
                f"workers:    {workers} Python workers up ({warm:.2f} s, a one-time cost per session, excluded)",
            )
            p = os.path.join(root, "tiny-local")
            build_tiny(p, T0 + 10_000)
            tiny_local = timed_compaction(p, "local", T0 + 10_000, None, None)
            shutil.rmtree(p)
            report["tiny"] = {"first": tiny[0], "warm": tiny[1:], "local": tiny_local}
            if len(tiny) > 1:
                med = {
                    k: statistics.median(t[k] for t in tiny[1:])
                    for k in ("seconds", "plan_seconds", "job_seconds", "commit_seconds")
                }
                report["tiny"]["median"] = med
                _say(
                    a,
                    f"tiny job:   spark {med['seconds'] * 1000:.0f} ms (plan {med['plan_seconds'] * 1000:.1f} ms, "
                    f"job {med['job_seconds'] * 1000:.0f} ms, commit {med['commit_seconds'] * 1000:.1f} ms; median of "
                    f"{len(tiny) - 1}); first job with cold Python workers {tiny[0]['seconds']:.2f} s; "
                    f"local {tiny_local['seconds'] * 1000:.1f} ms",
                )
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
        report["database"] = built
        gc.collect()
        _say(
            a,
            f"Database:   {a.num} rows ({KEY_SIZE}-byte keys, {a.value_size}-byte values) in {a.runs} sorted runs "
            f"of {built['runs']} SSTs, {built['bytes'] / 1048576:.1f} MiB; built in {built['build_seconds']:.1f} s "
            "(SSTs written directly, one manifest commit)",
        )
        results: dict[str, list[dict[str, Any]]] = {x: [] for x in a.executors}
        for rep in range(a.repeat):
            order = a.executors if rep % 2 == 0 else a.executors[::-1]
            for x in order:
                work = os.path.join(root, f"work-{x}")
                shutil.rmtree(work, ignore_errors=True)
                shutil.copytree(base, work)
                r = timed_compaction(work, x, built["tick"], session, a.tasks)
                results[x].append(r)
                _say(a, line(x, r))
                if a.verify and rep == 0 and x == order[-1] and len(order) == 2:
                    other = os.path.join(root, f"work-{order[0]}")
                    same = all(p == q for p, q in zip(rows_of(work), rows_of(other), strict=True))
                    report["verified"] = same
                    _say(a, f"verify:     every output row {'identical' if same else 'DIFFERENT'}")
                if not (a.verify and rep == 0 and x == order[0] and len(order) == 2):
                    shutil.rmtree(work, ignore_errors=True)
        for x in a.executors:
            shutil.rmtree(os.path.join(root, f"work-{x}"), ignore_errors=True)
        report["results"] = results
        report["load_average_end"] = os.getloadavg()
        summary = {x: statistics.median(r["seconds"] for r in rs) for x, rs in results.items()}
        report["median_seconds"] = summary
        if len(results) == 2:
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
            _say(a, f"same output (counts, key range): {report['same_output']}")
            _say(
                a,
                f"load:       average {os.getloadavg()[0]:.2f} at the end (other processes skew the figures)",
            )
            _say(
                a,
                f"median:     local {summary['local']:.2f} s, spark {summary['spark']:.2f} s "
                f"-> spark {report['speedup']:.2f}x faster (median of {a.repeat})",
            )
    finally:
        if own and session is not None:
            session.stop()
        if a.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    if a.json:
        print(json.dumps(report, indent=1, default=str))
    return 0


def line(executor: str, r: dict[str, Any]) -> str:
    rate = r["rows_in"] / r["seconds"] / 1e3 if r["seconds"] else 0.0
    s = (
        f"compact {executor:<5}: {r['seconds']:8.2f} s  {rate:7.1f} k rows/s  "
        f"(rows {r['rows_in']} -> {r['rows_out']}, {r['outputs']} SSTs"
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


if __name__ == "__main__":
    sys.exit(main())
