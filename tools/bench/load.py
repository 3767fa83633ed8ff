"""``lsm bench load``: loading a partitioned log into a store — Spark bulk load vs. the local bulk engine vs.
streaming ingest, and RocksDB's own bulk path (rocksdict) on the same records, in one run.

    lsm bench load [--num 5000000] [--partitions 8] [--value-size 100] [--master local[2]] [--tasks K]
                   [--repeat 1] [--engines spark,local,stream,rocksdb] [--dir DIR] [--json]

What it does:

1. Writes the log once with `lsm.sources.LogWriter`: ``--num`` records, record i in partition
   ``i % partitions``, keys of 16 bytes drawn at random from ``num`` distinct keys (so about a third of
   the keys are written twice or more, in different partitions), values of ``--value-size`` bytes from
   db_bench's generator. No TTLs, deletes or transactions: every engine does the same work.
2. Starts the SparkSession and its Python workers first, each worker importing what a bulk task imports
   (reported, never part of a figure).
3. For each repeat and each engine (the order rotates between repeats), a fresh database and one call:
   - ``spark``:  ``db.ingest(log, engine="spark", spark=session, tasks=K)``;
   - ``local``:  ``db.ingest(log, engine="local", tasks=K)`` (threads of this process);
   - ``stream``: ``db.ingest(log)`` (batches of 10,000 records, each one fsynced commit);
   - ``rocksdb``: RocksDB's bulk path through rocksdict, from the same log files: read the records
     (`PartitionedLog.read`, in this process), keep the last value per key in partition-then-offset
     order (the order every lsm-sim engine resolves in), sort, write one SST with ``SstFileWriter``,
     then ``Rdict.ingest_external_file``. The figure is split into read+resolve+sort and write+ingest.
   The figure is the wall time of that call, the driver's planning and the commit included; the data is
   durable when it returns (SSTs fsynced for the bulk paths, the WAL fsynced for streaming).
   Before each run, ``os.sync()``: the log (written just before, as a producer would have) and the
   previous run's files reach the disk first, so no run's figure includes another's writeback.
4. Checks that every lsm-sim engine produced the same visible state (the number of keys and a digest of
   every key and value) and that RocksDB holds the same number of keys.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from typing import Any

from tools.common import spark_session_for

ENGINES = ("spark", "local", "stream", "rocksdb")
T0 = 1_700_000_000_000


def parse_args(argv: list[str]) -> argparse.Namespace:
    from tools.common import add_conf_arg
    from tools.render import int_arg

    p = argparse.ArgumentParser(prog="lsm bench load", description=__doc__.split("\n\n")[0])
    p.add_argument("--num", type=int_arg(1), default=5_000_000, help="records (5000000)")
    p.add_argument("--partitions", type=int_arg(1), default=8, help="log partitions (8)")
    p.add_argument("--value-size", type=int_arg(0), default=100, help="value bytes (100)")
    p.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    add_conf_arg(p)
    p.add_argument("--tasks", type=int_arg(1), help="bulk-load slices (default: Spark's parallelism)")
    p.add_argument("--repeat", type=int_arg(1), default=1, help="runs per engine; medians are reported (1)")
    p.add_argument(
        "--engines", default=",".join(ENGINES), help="comma-separated subset of " + ",".join(ENGINES)
    )
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--dir", help="work directory (default: a temporary one, removed)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    a = p.parse_args(argv)
    a.engines = [e for e in a.engines.split(",") if e]
    bad = set(a.engines) - set(ENGINES)
    if bad:
        p.error(f"unknown engines {sorted(bad)}: use {','.join(ENGINES)}")
    return a


def write_log(log_dir: str, num: int, partitions: int, value_size: int, seed: int) -> float:
    from lsm.sources import LogWriter
    from tools.bench.harness import make_values

    values = make_values(value_size, 0.5, seed)
    rng = random.Random(seed)
    t0 = time.perf_counter()
    with LogWriter(log_dir) as w:
        append = w.append
        nv = len(values)
        for i in range(num):
            append(i % partitions, b"%016d" % rng.randrange(num), values[i % nv])
    return time.perf_counter() - t0


def _digest(pairs: Iterable[tuple[bytes, bytes]]) -> tuple[int, str]:
    """(count, blake2b digest) of (key, value) pairs in order: what each engine's load must agree on."""
    h = hashlib.blake2b(digest_size=16)
    n = 0
    for k, v in pairs:
        h.update(k)
        h.update(v)
        n += 1
    return n, h.hexdigest()


def run_lsm(engine: str, path: str, log_dir: str, session: Any, tasks: int) -> dict[str, Any]:
    import lsm
    from lsm.sources import PartitionedLog

    db = lsm.DB.open(path, lsm.DbOptions(clock=lsm.ManualClock(T0), background_compaction=False))
    try:
        log = PartitionedLog(log_dir)
        t0 = time.perf_counter()
        if engine == "stream":
            stats = db.ingest(log, name="bench")
        elif engine == "local":
            stats = db.ingest(log, name="bench", engine="local", tasks=tasks)
        else:
            stats = db.ingest(log, name="bench", engine="spark", spark=session, tasks=tasks)
        seconds = time.perf_counter() - t0
        keys, digest = _digest(db.scan())
        return {
            "seconds": seconds,
            "records": stats.records,
            "batches": stats.batches,
            "keys": keys,
            "digest": digest,
        }
    finally:
        db.close()


def run_rocksdb(path: str, log_dir: str) -> dict[str, Any]:
    import rocksdict

    from lsm.sources import PartitionedLog

    os.makedirs(path)
    t0 = time.perf_counter()
    log = PartitionedLog(log_dir)
    last: dict[bytes, bytes | None] = {}
    n = 0
    for p in log.partitions():  # partition by partition, offsets ascending: later ones win
        for rec in log.read(p, 0):
            last[rec.key] = rec.value
            n += 1
    keys = sorted(last)
    t1 = time.perf_counter()
    opts = rocksdict.Options(raw_mode=True)
    w = rocksdict.SstFileWriter(options=opts)
    sst = os.path.join(path, "load.sst")
    w.open(sst)
    for k in keys:
        v = last[k]
        if v is not None:
            w[k] = v
    w.finish()
    db = rocksdict.Rdict(os.path.join(path, "db"), options=opts)
    try:
        db.ingest_external_file([sst])
        t2 = time.perf_counter()
        count, digest = _digest(db.items())
    finally:
        db.close()
    return {
        "seconds": t2 - t0,
        "read_resolve_sort_seconds": t1 - t0,
        "write_ingest_seconds": t2 - t1,
        "records": n,
        "keys": count,
        "digest": digest,
    }


def main(argv: list[str] | None = None, session: Any = None) -> int:
    """Run the benchmark; `session` (optional) is an existing SparkSession to use (and leave running)."""
    a = parse_args(sys.argv[1:] if argv is None else argv)
    root = a.dir or tempfile.mkdtemp(prefix="lsm-bench-load-")
    os.makedirs(root, exist_ok=True)
    say = (lambda s: print(s, file=sys.stderr, flush=True)) if a.json else (lambda s: print(s, flush=True))
    report: dict[str, Any] = {
        "num": a.num,
        "partitions": a.partitions,
        "value_size": a.value_size,
        "master": a.master,
        "cpus": os.cpu_count(),
        "load_average_start": os.getloadavg(),
    }
    say(f"Machine:   {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    log_dir = os.path.join(root, "log")
    with contextlib.ExitStack() as stack:
        # runs last, after a session of our own is stopped (spark_session_for below)
        stack.callback(shutil.rmtree, log_dir if a.dir else root, ignore_errors=True)
        report["log_write_seconds"] = write_log(log_dir, a.num, a.partitions, a.value_size, a.seed)
        say(
            f"Log:       {a.num} records in {a.partitions} partitions, written in {report['log_write_seconds']:.1f} s"
        )
        tasks = a.tasks
        if "spark" in a.engines:
            from tools.bench.compact import warm_workers

            # a session of our own logs its JVM's output to a file (named if a job fails) and stops at the
            # end; a given one is left as it is
            run = stack.enter_context(
                spark_session_for(a.master, "bench-load", session=session, app="lsm-bench-load", conf=a.conf)
            )
            if session is None:
                report["spark_startup_seconds"] = run.startup_seconds
            session = run.session
            tasks = tasks or session.sparkContext.defaultParallelism
            # one Python worker per task slot, with what every bulk task imports first (numpy among it)
            report["spark_warmup_seconds"], _ = warm_workers(session, tasks, ("lsm.bulk_task",))
            say(f"Spark:     {a.master}, start-up and worker warm-up excluded")
        tasks = tasks or 2
        report["tasks"] = tasks
        results: dict[str, list[dict[str, Any]]] = {e: [] for e in a.engines}
        for r in range(a.repeat):
            order = a.engines[r % len(a.engines) :] + a.engines[: r % len(a.engines)]
            for engine in order:
                path = os.path.join(root, f"{engine}-{r}")
                # the log and the previous run's files on disk first: no run pays for another's writeback
                os.sync()
                if engine == "rocksdb":
                    res = run_rocksdb(path, log_dir)
                else:
                    res = run_lsm(engine, path, log_dir, session, tasks)
                shutil.rmtree(path, ignore_errors=True)
                res["load_average"] = os.getloadavg()[0]
                results[engine].append(res)
                say(
                    f"  run {r + 1} {engine:8s} {res['seconds']:8.2f} s  {a.num / res['seconds']:>12,.0f} rec/s"
                )
        report["results"] = results
        med = {e: statistics.median(x["seconds"] for x in rs) for e, rs in results.items()}
        report["median_seconds"] = med
        # the bulk paths resolve every key like ONE streaming batch; streaming in batches of 10,000 takes
        # the partitions in rotating order per batch, so a key written in two partitions may resolve to
        # the other write: streaming must hold the same keys, the others the same keys and values
        bulk = [x for e in ("spark", "local", "rocksdb") for x in results.get(e, [])]
        every = bulk + results.get("stream", [])
        report["same_state"] = len({x["digest"] for x in bulk}) <= 1 and len({x["keys"] for x in every}) <= 1
        ratios = {}
        for num, den in (
            ("spark", "local"),
            ("local", "stream"),
            ("spark", "stream"),
            ("spark", "rocksdb"),
            ("local", "rocksdb"),
        ):
            if num in med and den in med:
                ratios[f"{num}_vs_{den}"] = med[den] / med[num]  # > 1: `num` is faster
        report["speedups"] = ratios
        report["load_average_end"] = os.getloadavg()
        if a.json:
            print(json.dumps(report, indent=2))
        else:
            say("Medians:   " + "  ".join(f"{e} {s:.2f} s" for e, s in med.items()))
            say("Speedups:  " + "  ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
            say(f"Same state: {report['same_state']}")
        return 0 if report["same_state"] else 1


if __name__ == "__main__":
    sys.exit(main())
