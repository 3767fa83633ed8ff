"""``lsm bench simulate`` (or ``python -m tools.bench.simulate``): what `lsm simulate` costs.

Two figures (docs/benchmarks.md records them with the command):

1. **The study**: the spec's simulations (default examples/quiet_ttl.toml: 30 simulated days, 1M
   operations, 2 policies) exactly as `lsm simulate` runs them (`tools.simulate.run`; the plots only
   with ``--out DIR``, which keeps the outputs): the total wall time, each simulation's wall and CPU
   time, engine operations per wall second, and the **overhead** of the simulation over the same
   operations run bare on the engine. "Bare" is the runner's own drive of the
   engine — the same DbOptions (synchronous flush, no background compaction), the clock set before each
   operation, ``db.compact()`` after each flush and every ``compact_every`` — with no sampling and no
   accounting (`bare_run`), run as many at a time as the simulations (``--jobs``). Overhead =
   (simulation - bare) / bare, per policy.
2. **The sweep**: the grid of a sweep spec (default examples/sweep.toml: 8 simulations) run serially in
   this process, then as one Spark batch (one task per simulation; ``--master``, default local[2]); the
   speedup is serial / Spark wall time, Spark session start-up (the JVM, and one Python worker per task
   slot with the simulator imported) excluded and reported. The two must give
   identical summaries (checked).

``--runs N`` repeats each timing and reports the median. Times are wall-clock, with this process's CPU
time next to them for the study (steadier on a shared machine); the load average is printed at the start
and end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

# the repository root (this file is tools/bench/simulate.py): the default specs live in its examples/
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_SPEC = os.path.join(ROOT, "examples", "quiet_ttl.toml")
DEFAULT_SWEEP = os.path.join(ROOT, "examples", "sweep.toml")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The suite's options."""
    from tools.common import add_conf_arg

    ap = argparse.ArgumentParser(prog="lsm bench simulate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default=DEFAULT_SPEC, help="the study spec (default examples/quiet_ttl.toml)")
    ap.add_argument("--sweep", default=DEFAULT_SWEEP, help="the sweep spec (default examples/sweep.toml)")
    ap.add_argument("--runs", type=int, default=1, help="repeat each timing, report the median (default 1)")
    ap.add_argument("--master", default="local[2]", help="Spark master for the sweep (default local[2])")
    add_conf_arg(ap)
    ap.add_argument(
        "--jobs",
        type=int,
        default=2,
        help="the study's simulations at a time, as `lsm simulate --jobs` (default 2: this machine's cores)",
    )
    ap.add_argument("--skip-study", action="store_true", help="only the sweep")
    ap.add_argument("--skip-sweep", action="store_true", help="only the study")
    ap.add_argument(
        "--out", metavar="DIR", help="keep the study's outputs (summary.json, timeseries.csv, plots) in DIR"
    )
    ap.add_argument("--json", action="store_true", help="print the report as JSON at the end")
    return ap.parse_args(argv)


def bare_run(spec: Any, policy: Any, ops: Any, directory: str) -> tuple[float, float, float]:
    """The same operations on the engine as `Simulation.run` drives them, minus sampling and accounting.

    Returns (wall seconds, CPU seconds of this process, the engine's write amplification): the last is
    the simulation's own figure when the drive is the same, which the tests check."""
    from lsm import DB, DbOptions, ManualClock
    from lsm.options import NO_TTL
    from tools.simulate.runner import Observer
    from tools.simulate.workload import DELETE, GET, PUT, iter_ops, key_bytes
    from tools.simulate.workload import NO_TTL as NO_TTL_OP

    t0, c0 = time.perf_counter(), time.process_time()
    clock = ManualClock(spec.start_ms)
    observer = Observer()
    overrides = dict(policy.options)
    default_ttl = overrides.get("default_ttl")
    db = DB.open(
        directory,
        DbOptions(
            clock=clock,
            background_compaction=False,
            background_flush=False,
            compaction_process=False,
            event_listeners=(observer,),
            **overrides,
        ),
    )
    step = spec.compact_every_ms
    next_compact = spec.start_ms + step
    put, delete, get, value = db.put, db.delete, db.get, ops.value
    for i, (t, op, k, vlen, ttl) in enumerate(iter_ops(ops)):
        while next_compact <= t:
            clock.set(next_compact)
            db.compact()
            next_compact += step
        clock.set(t)
        key = key_bytes(k)
        if op == PUT:
            if ttl == NO_TTL_OP:
                ttl = default_ttl
            put(key, value(i, vlen), NO_TTL if ttl is None else ttl)
        elif op == DELETE:
            delete(key)
        elif op == GET:
            get(key)
        else:
            for _ in zip(range(spec.scan_rows), db.scan(start=key), strict=False):
                pass
        if observer.flushed:
            observer.flushed = False
            db.compact()
    while next_compact <= ops.end_ms:
        clock.set(next_compact)
        db.compact()
        next_compact += step
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    wa = db.write_amplification()
    db.close()
    return wall, cpu, wa


def _bare_timed(spec: Any, policy: Any, ops: Any) -> tuple[float, float]:
    """`bare_run` of `policy` over `ops` in a directory of its own: (wall, CPU seconds)."""
    d = tempfile.mkdtemp(prefix="lsm-bench-sim-")
    try:
        wall, cpu, _wa = bare_run(spec, policy, ops, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return wall, cpu


def _spec_and_ops(path: str) -> tuple[Any, Any]:
    from tools.simulate import load_spec, parse_spec
    from tools.simulate.workload import generate

    spec = parse_spec(load_spec(path))
    return spec, generate(spec)


def _bare_one(item: tuple[str, int]) -> tuple[float, float]:
    """`_bare_timed` of policy number `i` of the spec file `path` (in a worker process of its own)."""
    path, i = item
    spec, ops = _spec_and_ops(path)
    return _bare_timed(spec, spec.policies[i], ops)


def _bare_all(path: str, n: int, jobs: int) -> list[tuple[float, float]]:
    """The bare run of each of the spec's `n` policies, `jobs` at a time in worker processes (as
    `lsm simulate --jobs` runs the simulations), or in this process with jobs 1 (the operations
    generated once for all of them)."""
    if jobs <= 1 or n <= 1:
        spec, ops = _spec_and_ops(path)
        return [_bare_timed(spec, p, ops) for p in spec.policies]
    import concurrent.futures
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=min(jobs, n), mp_context=ctx) as pool:
        return list(pool.map(_bare_one, [(path, i) for i in range(n)]))


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def study(a: argparse.Namespace) -> dict[str, Any]:
    """Figure 1: the study spec as `lsm simulate` runs it, and the same operations bare (medians)."""
    from tools import simulate
    from tools.simulate import load_spec, parse_spec

    raw = load_spec(a.spec)
    spec = parse_spec(raw)
    per_policy: dict[str, dict[str, Any]] = {
        p.name: {
            "sim": [],
            "bare": [],
            "sim_cpu": [],
            "bare_cpu": [],
            "sample_cpu": [],
            "ops": 0,
        }
        for p in spec.policies
    }
    totals: list[float] = []
    for run in range(a.runs):
        # the simulation exactly as `lsm simulate SPEC --out DIR` runs it (plots only with --out)
        out = a.out if a.out and run == a.runs - 1 else tempfile.mkdtemp(prefix="lsm-bench-sim-out-")
        t0 = time.perf_counter()
        summary = simulate.run(raw, out, plots=bool(a.out), jobs=a.jobs)
        totals.append(time.perf_counter() - t0)
        if out != a.out:
            shutil.rmtree(out, ignore_errors=True)
        for p in summary["policies"]:
            r = per_policy[p["name"]]
            r["sim"].append(p["wall_s"])
            r["sim_cpu"].append(p["cpu_s"])
            r["sample_cpu"].append(p["sample_cpu_s"])
            r["ops"] = p["ops"]
            print(
                f"# run {run + 1}: {p['name']:<16} sim  {p['wall_s']:8.1f} s wall {p['cpu_s']:8.1f} s cpu",
                file=sys.stderr,
            )
        # the same operations bare, as many at a time as the simulations ran (like for like: two
        # processes on two cores slow each other down a little, shared caches and memory bandwidth)
        for name, (wall, cpu) in zip(
            [p.name for p in spec.policies], _bare_all(a.spec, len(spec.policies), a.jobs), strict=True
        ):
            per_policy[name]["bare"].append(wall)
            per_policy[name]["bare_cpu"].append(cpu)
            print(
                f"# run {run + 1}: {name:<16} bare {wall:8.1f} s wall {cpu:8.1f} s cpu",
                file=sys.stderr,
                flush=True,
            )
    out_report: dict[str, Any] = {
        "spec": a.spec,
        "total_s": round(_median(totals), 2),
        "policies": [],
    }
    for name, r in per_policy.items():
        sim_s, bare_s = _median(r["sim"]), _median(r["bare"])
        sim_c, bare_c = _median(r["sim_cpu"]), _median(r["bare_cpu"])
        # the same run's own split, immune to the load changing between the two runs: the accounting's
        # CPU (samples, the writes, flushes and compactions followed: the summary's sample_cpu_s)
        # against the rest of the simulation's CPU
        acct = _median(r["sample_cpu"])
        out_report["policies"].append(
            {
                "name": name,
                "ops": r["ops"],
                "sim_s": round(sim_s, 2),
                "bare_s": round(bare_s, 2),
                "overhead": round((sim_s - bare_s) / bare_s, 4),
                "sim_cpu_s": round(sim_c, 2),
                "bare_cpu_s": round(bare_c, 2),
                "overhead_cpu": round((sim_c - bare_c) / bare_c, 4),
                "accounting_cpu_s": round(acct, 2),
                "overhead_same_run": round(acct / (sim_c - acct), 4),
                "sim_ops_per_s": round(r["ops"] / sim_s),
                "bare_ops_per_s": round(r["ops"] / bare_s),
            }
        )
    return out_report


def sweep(a: argparse.Namespace) -> dict[str, Any]:
    """Figure 2: the sweep grid serially and as one Spark batch (medians; results must be identical)."""
    from tools.bench.compact import warm_workers
    from tools.common import spark_session_for
    from tools.simulate import load_spec
    from tools.simulate.sweep import grid, run_cells, run_cells_spark

    _spec, cells = grid(load_spec(a.sweep))
    t0 = time.perf_counter()
    os.environ.setdefault("PYTHONPATH", ROOT)
    # the JVM's output goes to a log file, named if a job fails; the session stops at the end
    with spark_session_for(a.master, "bench-simulate", app="lsm-bench-simulate", conf=a.conf) as spark:
        session = spark.session
        # one Python worker per task slot, the simulator imported: a one-time cost per session, as the JVM's
        warm_s, workers = warm_workers(
            session, session.sparkContext.defaultParallelism, ("tools.simulate.runner",)
        )
        startup = time.perf_counter() - t0
        serial_t, spark_t = [], []
        for run in range(a.runs):
            t1 = time.perf_counter()
            serial = run_cells(cells)
            serial_t.append(time.perf_counter() - t1)
            t1 = time.perf_counter()
            on_spark = run_cells_spark(cells, session=session)
            spark_t.append(time.perf_counter() - t1)
            same = _strip(serial) == _strip(on_spark)
            print(
                f"# run {run + 1}: sweep of {len(cells)}: serial {serial_t[-1]:.1f} s, spark {spark_t[-1]:.1f} s, "
                f"identical results: {same}",
                file=sys.stderr,
                flush=True,
            )
            if not same:
                raise SystemExit("bench simulate: the Spark sweep differs from the serial one")
    s, p = _median(serial_t), _median(spark_t)
    return {
        "spec": a.sweep,
        "simulations": len(cells),
        "master": a.master,
        "spark_startup_s": round(startup, 1),
        "spark_workers_warm_s": round(warm_s, 1),  # of which starting the Python workers
        "spark_workers": workers,
        "serial_s": round(s, 2),
        "spark_s": round(p, 2),
        "speedup": round(s / p, 2),
    }


def _strip(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**r["summary"], "wall_s": None, "cpu_s": None, "sample_cpu_s": None} | {"samples": r["samples"]}
        for r in results
    ]


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 15's benchmark targets against what this run measured (those of the parts that ran): the
    study's wall time, each policy's overhead (from the separate runs' wall and CPU times, and the same
    run's own split) and the sweep's Spark speedup."""
    out: list[dict[str, Any]] = []
    study_r = report.get("study")
    if study_r is not None:
        out.append(
            {
                "target": "study wall time < 120 s",
                "measured": f"{study_r['total_s']:.1f} s",
                "met": study_r["total_s"] < 120,
            }
        )
        for p in study_r["policies"]:
            for key, how in (
                ("overhead", "wall time of separate runs"),
                ("overhead_cpu", "CPU of separate runs"),
                ("overhead_same_run", "same-run CPU split"),
            ):
                out.append(
                    {
                        "target": f"{p['name']} simulation overhead < 25% ({how})",
                        "measured": f"{p[key]:+.1%}",
                        "met": p[key] < 0.25,
                    }
                )
    sweep_r = report.get("sweep")
    if sweep_r is not None:
        out.append(
            {
                "target": f"Spark sweep speedup >= 1.6x on {sweep_r['master']}",
                "measured": f"{sweep_r['speedup']:.2f}x",
                "met": sweep_r["speedup"] >= 1.6,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the suite; print the figures (and the JSON report with --json). Returns the exit code."""
    a = parse_args(sys.argv[1:] if argv is None else argv)
    report: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "load_average_start": os.getloadavg()[0],
        "runs": a.runs,
    }
    print(f"Machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start", flush=True)
    if not a.skip_study:
        r = report["study"] = study(a)
        print(
            f"Study {os.path.relpath(r['spec'], ROOT)}: lsm simulate's run (generation, simulations, outputs)"
        )
        for p in r["policies"]:
            print(
                f"  {p['name']:<16} {p['ops']:>9,} ops  simulation {p['sim_s']:7.1f} s ({p['sim_ops_per_s']:,} ops/s)"
                f"  bare engine {p['bare_s']:7.1f} s ({p['bare_ops_per_s']:,} ops/s)  overhead {p['overhead']:+.1%}"
                f"  (CPU: {p['sim_cpu_s']:.1f} s vs {p['bare_cpu_s']:.1f} s, overhead {p['overhead_cpu']:+.1%};"
                f" in the same run, samples and accounting {p['accounting_cpu_s']:.1f} s CPU ="
                f" {p['overhead_same_run']:+.1%} of the rest)"
            )
        print(f"  total: {r['total_s']:.1f} s wall{' (with plots)' if a.out else ' (no plots)'}", flush=True)
    if not a.skip_sweep:
        r = report["sweep"] = sweep(a)
        print(
            f"Sweep {os.path.relpath(r['spec'], ROOT)}: {r['simulations']} simulations: serial {r['serial_s']:.1f} s, "
            f"Spark {r['master']} {r['spark_s']:.1f} s (session start-up {r['spark_startup_s']:.1f} s excluded, of "
            f"which {r['spark_workers']} Python workers {r['spark_workers_warm_s']:.1f} s): "
            f"speedup {r['speedup']:.2f}x"
        )
    report["targets"] = targets(report)
    for t in report["targets"]:
        print(f"Target {t['target']}: {t['measured']} -> {'met' if t['met'] else 'MISSED'}")
    report["load_average_end"] = os.getloadavg()[0]
    print(f"Load average at end: {report['load_average_end']:.2f}")
    if a.json:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
