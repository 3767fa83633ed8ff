"""One full compaction in a fresh process, for ``lsm bench compact``: its peak RSS and its cost against a
full scan of the same database.

    python -m tools.bench.compact_rss scan PATH TICK       (prints one JSON object)
    python -m tools.bench.compact_rss compact PATH TICK
    python -m tools.bench.compact_rss job PATH TICK
    python -m tools.bench.compact_rss rocksdb PATH TICK

Fresh processes, because a process's peak RSS (``ru_maxrss``, ``VmHWM``) never goes down: measured in the
benchmark's own process it would include the database build and every earlier compaction, and a scan
before the compaction would leave its block cache behind. ``scan`` opens the database and reads it all
with ``db.scan()`` (the read path a user has): ``scan_seconds``, ``scan_cpu_seconds`` (CPU time of the
process: less skewed by a loaded machine than wall time), ``scan_rows``. ``compact``, run next on
the same copy, opens it, resets its peak RSS (Linux: ``/proc/self/clear_refs``), runs
``db.compact(full=True, executor="local")`` (the merge runs in this process) and reports
``compact_seconds``, ``compact_cpu_seconds`` and ``peak_rss_mib``: the peak RSS during the compaction (``VmHWM`` after the reset;
without it ``ru_maxrss``, since the start), with ``base_rss_mib``, the RSS just before it. That peak
includes the DB's own state (every open SST's block index and bloom filter, held by the read path, and the
outputs' readers opened by the commit), which grows with the data as RocksDB's unpartitioned index and
filter blocks do. ``job`` measures the merge alone, as the compaction worker process or a Spark task runs
it: it builds the full compaction's `CompactionJob` (``db.engine.compactor.make_job``), closes the
database and hands the job, pickled, to a fresh process that never opened the database (as a Spark
task gets it), which resets the peak and runs `compaction.merge.run_job` (``job_seconds``,
``job_peak_rss_mib``, ``job_base_rss_mib``, ``job_peak_anon_mib``, ``job_base_anon_mib``); its outputs are
left unreferenced in ``sst/`` (run it on a copy). ``compact`` and ``job`` also report the peak anonymous
memory (``RssAnon``: the heap and numpy's buffers, without the mapped SST files) sampled every 5 ms by a
separate process (`AnonPeak`). ``rocksdb`` times RocksDB's ``compact_range`` on a database built by
`compact_db.build_rocksdb`.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
from typing import Any


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            m = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
    except OSError:
        return None
    return int(m.group(1)) if m else None


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS to its current RSS (Linux 4.0+); False if that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def peak_rss_kib() -> int:
    """This process's peak RSS in KiB since start or since `reset_peak_rss`."""
    hwm = _status_kib("VmHWM")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


_SAMPLER = """
import sys, time
path = "/proc/%s/status" % sys.argv[1]
def anon():
    with open(path) as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0
peak = anon()
print("ready", flush=True)
import select
while not select.select([sys.stdin], [], [], 0.005)[0]:
    try:
        a = anon()
    except OSError:
        break
    if a > peak:
        peak = a
print(max(peak, anon()), flush=True)
"""


class AnonPeak:
    """The peak anonymous memory (``RssAnon``: the heap and numpy's buffers, not the mapped SST files)
    of this process while the block runs, sampled every 5 ms by a separate process (a thread here would
    wait for the GIL during long numpy calls, exactly when memory peaks): ``base_kib`` when it starts,
    ``peak_kib`` after. Both stay None where /proc has no RssAnon (not Linux)."""

    def __init__(self) -> None:
        self.base_kib: int | None = None
        self.peak_kib: int | None = None
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> AnonPeak:
        self.base_kib = _status_kib("RssAnon")
        if self.base_kib is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _SAMPLER, str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert self._proc.stdout is not None
            self._proc.stdout.readline()  # "ready": sampling from now on
        return self

    def __exit__(self, *exc: object) -> None:
        p = self._proc
        if p is None:
            return
        out, _ = p.communicate("stop\n", timeout=60)
        self.peak_kib = int(out.split()[-1]) if out.split() else None


def _anon(peak: AnonPeak, prefix: str = "") -> dict[str, Any]:
    """The figures of an `AnonPeak` in MiB (None where not measured): the peak, the base before it, and
    the growth between them (the measured work's own share of the peak)."""
    mib = None if peak.peak_kib is None else peak.peak_kib / 1024
    base = None if peak.base_kib is None else peak.base_kib / 1024
    growth = None if mib is None or base is None else mib - base
    return {f"{prefix}peak_anon_mib": mib, f"{prefix}base_anon_mib": base, f"{prefix}anon_growth_mib": growth}


def scan(path: str, tick: int) -> dict[str, Any]:
    """Read every key of the database at `path` (clock at `tick`) with ``db.scan()``; the figures."""
    from lsm import DB, DbOptions, ManualClock

    opts = DbOptions(clock=ManualClock(tick), background_compaction=False)
    with DB.open(path, opts) as db:
        t0, c0 = time.perf_counter(), time.process_time()
        rows = 0
        for _ in db.scan():
            rows += 1
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"scan_seconds": seconds, "scan_cpu_seconds": cpu, "scan_rows": rows}


def compact(path: str, tick: int) -> dict[str, Any]:
    """Fully compact the database at `path` (clock at `tick`) with the local executor; the figures."""
    from lsm import DB, DbOptions, ManualClock

    opts = DbOptions(clock=ManualClock(tick), background_compaction=False)
    with DB.open(path, opts) as db:
        base = _status_kib("VmRSS") or 0
        reset = reset_peak_rss()
        req0 = db.object_store_stats()
        with AnonPeak() as anon:
            t0, c0 = time.perf_counter(), time.process_time()
            stats = db.compact(full=True, executor="local")
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        peak = peak_rss_kib()
        requests = {k: v - req0[k] for k, v in db.object_store_stats().items()}
    return {
        "requests": requests,
        **_anon(anon),
        "compact_seconds": seconds,
        "compact_cpu_seconds": cpu,
        "rows_in": stats.rows_in,
        "rows_out": stats.rows_out,
        "read_seconds": stats.read_seconds,
        "write_seconds": stats.write_seconds,
        "peak_rss_mib": peak / 1024,
        "base_rss_mib": base / 1024,
        "peak_since_reset": reset,
    }


def job(path: str, tick: int) -> dict[str, Any]:
    """The full compaction's merge alone (`run_job`), as the worker process or a Spark task runs it: the
    job is built here (the DB open), pickled, and run by a fresh process that never opened the DB
    (`runjob`), so its memory is the merge's and not the leftovers of the DB's indexes and filters."""
    import pickle

    from compaction import scheduler
    from lsm import DB, DbOptions, ManualClock

    opts = DbOptions(clock=ManualClock(tick), background_compaction=False)
    with DB.open(path, opts) as db:
        m = db.manifest
        work = db.engine.compactor.make_job(scheduler.pick_full(m.l0, m.runs), m, tick)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = subprocess.run(
        [sys.executable, "-m", "tools.bench.compact_rss", "runjob", "-", "0"],
        input=pickle.dumps(work),
        check=True,
        capture_output=True,
        env=env,
    )
    return json.loads(out.stdout)


def runjob(_path: str, _tick: int) -> dict[str, Any]:
    """`job`'s fresh process: run the pickled `CompactionJob` read from stdin; its figures."""
    import pickle

    import numpy  # noqa: F401

    import compaction.merge  # noqa: F401  (what a worker imports before its first job)

    work = pickle.loads(sys.stdin.buffer.read())
    from compaction.merge import run_job

    base = _status_kib("VmRSS") or 0
    reset = reset_peak_rss()
    with AnonPeak() as anon:
        t0, c0 = time.perf_counter(), time.process_time()
        result = run_job(work)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        **_anon(anon, "job_"),
        "job_seconds": seconds,
        "job_cpu_seconds": cpu,
        "job_rows_out": result.stats.rows_out,
        "job_peak_rss_mib": peak_rss_kib() / 1024,
        "job_base_rss_mib": base / 1024,
        "job_peak_since_reset": reset,
    }


def rocksdb(path: str, tick: int) -> dict[str, Any]:
    """RocksDB's full compaction of the database at `path` (`compact_db.build_rocksdb`): the wall time
    of ``compact_range(None, None)`` through rocksdict, opened as it was built, with the same peak
    figures as `compact` (`tick` is unused: RocksDB keeps no per-row expiry)."""
    import rocksdict

    from tools.bench.compact_db import rocksdb_options

    db = rocksdict.Rdict(path, rocksdb_options())
    try:
        files = len(db.live_files())
        base = _status_kib("VmRSS") or 0
        reset = reset_peak_rss()
        with AnonPeak() as anon:
            t0, c0 = time.perf_counter(), time.process_time()
            db.compact_range(None, None)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        peak = peak_rss_kib()
        files_after = len(db.live_files())
    finally:
        db.close()
    return {
        **_anon(anon, "rocksdb_"),
        "rocksdb_seconds": seconds,
        "rocksdb_cpu_seconds": cpu,  # this process's CPU: RocksDB's compaction threads run in it
        "rocksdb_files_before": files,
        "rocksdb_files_after": files_after,
        "rocksdb_peak_rss_mib": peak / 1024,
        "rocksdb_base_rss_mib": base / 1024,
        "rocksdb_peak_since_reset": reset,
    }


MODES = {"scan": scan, "compact": compact, "job": job, "runjob": runjob, "rocksdb": rocksdb}


def main(argv: list[str] | None = None) -> int:
    """Run ``scan``, ``compact`` or ``job`` on ``PATH TICK`` and print its JSON."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[0] not in MODES:
        print("usage: python -m tools.bench.compact_rss scan|compact|job|rocksdb PATH TICK", file=sys.stderr)
        return 2
    fn = MODES[args[0]]
    print(json.dumps(fn(args[1], int(args[2]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
