"""What every benchmark suite shares: results and their lines, timing, CPU accounting, medians, values.

- `Result` is one figure (db_bench's line: micros/op, ops/sec, MB/s, the engine in brackets, details in
  parentheses); `print_results` prints a list of them as lines or as JSON.
- `timed_chunks` / `timed_scan` time a loop in chunks (so a progress bar can move between them) and
  measure wall time and CPU time over the same span (`Timing`).
- CPU time is read from one place: `proc_cpu` reads ``/proc/<pid>/stat`` (Linux); `process_tree_cpu` adds
  this process and its children; `cpu_meter` watches the Spark JVM and the PySpark workers as well.
- `median_ms` repeats a call and reports medians; `medians` takes the median of each field of a list of
  per-run dicts.
- `make_values` is db_bench's compressible value generator, shared so every suite writes the same bytes;
  `add_value_options` gives a suite its two options (`--value-size`, `--compression-ratio`).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import gc
import io
import itertools
import json
import os
import pstats
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from tools.render import float_arg, int_arg

KEY_SIZE = 16  # db_bench's default key size; keys are zero-padded decimal numbers
DEFAULT_SEED = 301  # LevelDB db_bench's seed
VALUE_POOL = 4096  # distinct value strings cycled through by the write loops
CHUNK = 10_000  # operations between two progress updates


# -- results ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class Result:
    """One measured figure. `bytes` feeds MB/s (MiB per second, as db_bench computes it)."""

    engine: str
    benchmark: str
    ops: int
    seconds: float
    bytes: int
    found: int | None = None  # readrandom: how many reads found a value
    note: str = ""
    cpu_seconds: float | None = None  # CPU time of this process and its children over the same span
    # write benchmarks: SST bytes written by flushes and compactions during the benchmark / `bytes`
    write_amp: float | None = None
    flush_amp: float | None = None  # the flushes' share of write_amp: SST bytes they wrote / `bytes`

    @property
    def write_amp_flushed(self) -> float | None:
        """RocksDB's own W-Amp (its compaction stats' Sum line): SST bytes written by flushes and
        compactions / bytes the flushes wrote. Per flushed byte, so it measures the compaction policy
        alone; `write_amp` (per user byte) also carries the size of a flushed row in each format."""
        if self.write_amp is None or not self.flush_amp:
            return None
        return self.write_amp / self.flush_amp

    @property
    def cpu_micros_per_op(self) -> float | None:
        """CPU microseconds per operation (None when CPU time was not measured)."""
        if self.cpu_seconds is None:
            return None
        return self.cpu_seconds * 1e6 / self.ops if self.ops else 0.0

    @property
    def micros_per_op(self) -> float:
        """Wall-clock microseconds per operation."""
        return self.seconds * 1e6 / self.ops if self.ops else 0.0

    @property
    def ops_per_sec(self) -> float:
        """Operations per wall-clock second."""
        return self.ops / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        """MiB of keys and values per wall-clock second."""
        return self.bytes / 1048576 / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        """db_bench's result line, the engine in brackets, then the details in parentheses."""
        s = (
            f"{self.benchmark:<12} : {self.micros_per_op:11.3f} micros/op {int(self.ops_per_sec)} ops/sec;"
            f" {self.mb_per_s:6.1f} MB/s [{self.engine}]"
        )
        details = []
        if self.found is not None:
            details.append(f"{self.found} of {self.ops} found")
        if self.cpu_seconds is not None:
            details.append(f"cpu {self.cpu_micros_per_op:.3f} micros/op")
        if self.note:
            details.append(self.note)
        if details:
            s += f" ({'; '.join(details)})"
        return s

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (the fields docs/benchmarks.md lists for ``--json``)."""
        return {
            "engine": self.engine,
            "benchmark": self.benchmark,
            "micros_per_op": self.micros_per_op,
            "ops_per_sec": self.ops_per_sec,
            "mb_per_s": self.mb_per_s,
            "ops": self.ops,
            "seconds": self.seconds,
            "cpu_micros_per_op": self.cpu_micros_per_op,
            "cpu_seconds": self.cpu_seconds,
            "found": self.found,
            "note": self.note,
            "write_amp": self.write_amp,
            "flush_amp": self.flush_amp,
            "write_amp_flushed": self.write_amp_flushed,
        }


def ratio_line(benchmark: str, results: Sequence[Result], base: str = "lsm") -> str | None:
    """``name : ratio lsm/rocksdict 4.12x ...``: micros/op of `base` over each other engine's."""
    mine = next((r for r in results if r.engine == base), None)
    others = [r for r in results if r.engine != base and r.micros_per_op > 0]
    if mine is None or not others:
        return None
    parts = [f"{base}/{r.engine} {mine.micros_per_op / r.micros_per_op:.2f}x" for r in others]
    return f"{benchmark:<12} : ratio {' '.join(parts)} (micros/op; above 1 = {base} slower)"


def print_results(results: Iterable[Result], as_json: bool) -> None:
    """One line per result, or (``--json``) one JSON list of `Result.to_dict`."""
    if as_json:
        print(json.dumps([r.to_dict() for r in results], indent=1))
    else:
        for r in results:
            print(r.line())


# -- profiles --------------------------------------------------------------------------------------
class Profiler:
    """cProfile of the calling thread, and (``threads=True``) of every thread that starts while it runs,
    each with its own profile (cProfile profiles one thread per ``enable``). Start it before the code
    under test starts its threads (a DB's flush and compaction threads start at open)."""

    def __init__(self, threads: bool = True) -> None:
        self.main = cProfile.Profile()
        self.threads: list[cProfile.Profile] = []
        self._threads = threads
        self._lock = threading.Lock()

    def _hook(self, frame: Any, event: str, arg: Any) -> None:
        # the first event in a new thread: give it its own profiler (which replaces this hook there)
        prof = cProfile.Profile()
        with self._lock:
            self.threads.append(prof)
        prof.enable()

    def start_threads(self) -> None:
        """Profile the threads started from now on."""
        if self._threads:
            threading.setprofile(self._hook)

    def stop_threads(self) -> None:
        """No more new threads are profiled (those already profiled keep going until they end)."""
        threading.setprofile(None)

    @contextlib.contextmanager
    def calling_thread(self) -> Iterator[None]:
        """Profile the calling thread inside the block (adds to `main`)."""
        self.main.enable()
        try:
            yield
        finally:
            self.main.disable()


def profile_table(profiles: Sequence[cProfile.Profile], top: int, title: str) -> str:
    """The `top` functions by own time (tottime) of the merged `profiles`, as pstats prints them, under
    a ``# profile: title`` line; empty when nothing was recorded."""
    profiles = [p for p in profiles if p.getstats()]
    if not profiles:
        return ""
    out = io.StringIO()
    st = pstats.Stats(*profiles, stream=out)
    st.strip_dirs().sort_stats("tottime").print_stats(top)
    body = out.getvalue().strip("\n")
    return f"# profile: {title}\n{body}\n"


# -- progress --------------------------------------------------------------------------------------
class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(enabled: bool, total: int | None, desc: str, unit: str = "op") -> Any:
    """A tqdm bar on stderr when enabled, stderr is a terminal and tqdm is installed; else a no-op
    (`_NoBar`). `total` None: a counter with a rate, no bar."""
    if not enabled or not sys.stderr.isatty():
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    # a counter without a total counts whole units: "126 rec", not "126.0rec"
    scale = total is not None
    return tqdm(
        total=total,
        desc=desc,
        unit=unit if scale else f" {unit}",
        unit_scale=scale,
        file=sys.stderr,
        leave=False,
    )


# -- CPU time from /proc ---------------------------------------------------------------------------
def _proc_stat(pid: int | str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds user + system) of a process from ``/proc/<pid>/stat``; None if unreadable
    (not Linux, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2 :].split()  # state, ppid, ..., utime (11), stime (12)
        return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def proc_cpu(pid: int | str) -> float | None:
    """CPU seconds (user + system) process `pid` has used, from /proc (Linux); None elsewhere or if gone."""
    st = _proc_stat(pid)
    return None if st is None else st[1]


def proc_pids() -> list[int]:
    """Every process id in /proc (empty where there is no /proc)."""
    try:
        return [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return []


def runqueue_wait(pid: int | str) -> float:
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
    for pid in proc_pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"pyspark.daemon" not in f.read():
                    continue
        except OSError:
            continue
        cpu = proc_cpu(pid)
        if cpu is not None:
            out[pid] = (cpu, runqueue_wait(pid))
    return out


def process_tree_cpu() -> float:
    """CPU seconds used so far by this process (every thread) and its child processes.

    Children count because an engine may work in them (lsm's compaction worker process); live children
    are read from /proc (Linux; elsewhere only exited children count), exited ones from os.times().
    """
    t = os.times()
    total = time.process_time() + t.children_user + t.children_system
    me = os.getpid()
    for pid in proc_pids():
        st = _proc_stat(pid)
        if st is not None and st[0] == me:
            total += st[1]
    return total


@contextlib.contextmanager
def cpu_meter(session: Any) -> Iterator[dict[str, Any]]:
    """CPU seconds used meanwhile by this process, the Spark JVM of `session` (if any) and the PySpark
    Python workers (Linux), with how long they waited for a CPU.

    CPU time does not depend on what else the machine runs, so it tells how much work each part did even
    when wall times are skewed by other processes."""
    jvm = None
    if session is not None:
        proc = getattr(session.sparkContext._gateway, "proc", None)
        jvm = getattr(proc, "pid", None)
    out: dict[str, Any] = {}
    t0 = time.process_time()
    q0 = runqueue_wait("self")
    j0 = proc_cpu(jvm) if jvm else None
    w0 = _python_workers()
    try:
        yield out
    finally:
        out["driver"] = time.process_time() - t0
        out["driver_waiting"] = runqueue_wait("self") - q0
        j1 = proc_cpu(jvm) if jvm else None
        out["jvm"] = j1 - j0 if j0 is not None and j1 is not None else 0.0
        w1 = _python_workers()
        per = [(c - w0.get(p, (0.0, 0.0))[0], q - w0.get(p, (0.0, 0.0))[1]) for p, (c, q) in w1.items()]
        busy = sorted((x for x in per if x[0] >= 0.05), reverse=True)
        out["workers"] = [round(c, 3) for c, _ in busy]
        out["workers_waiting"] = [round(q, 3) for _, q in busy]
        out["total"] = out["driver"] + out["jvm"] + sum(c for c, _ in per)


# -- timing ----------------------------------------------------------------------------------------
@dataclasses.dataclass
class Timing:
    """Wall-clock seconds, and CPU seconds of the process and its children (every thread: background
    flushes and compactions count, in a worker process too) over the same span. On a shared machine the
    CPU time is the steadier figure."""

    seconds: float
    cpu_seconds: float


def timed_chunks(
    progress: bool, desc: str, total: int, body: Callable[[int, int], int]
) -> tuple[Timing, int, int]:
    """Run ``body(start, stop)`` over [0, total) in chunks; return (timing, ops done, sum of results).

    `body` returns a count (found rows, or rows scanned); a readseq-style body that returns fewer than
    ``stop - start`` ops signals the end of the data (its return value is then the ops it did).
    """
    bar = progress_bar(progress, total, desc)
    done = acc = 0
    try:
        c0 = process_tree_cpu()
        t0 = time.perf_counter()
        for start in range(0, total, CHUNK):
            stop = min(start + CHUNK, total)
            got = body(start, stop)
            acc += got
            done = stop
            bar.update(stop - start)
        timing = Timing(time.perf_counter() - t0, process_tree_cpu() - c0)
    finally:
        bar.close()
    return timing, done, acc


def timed_scan(progress: bool, desc: str, limit: int, it: Iterator[Any]) -> tuple[Timing, int]:
    """Time consuming at most `limit` items of `it`; return (timing, items)."""
    ended = False

    def body(a: int, b: int) -> int:
        nonlocal ended
        if ended:
            return 0
        n = 0
        for _ in itertools.islice(it, b - a):
            n += 1
        ended = n < b - a
        return n

    timing, _done, rows = timed_chunks(progress, desc, limit, body)
    return timing, rows


def timed_call(fn: Callable[[], Any]) -> tuple[Timing, Any]:
    """Time one call (wall and process-tree CPU); return (timing, its result)."""
    c0 = process_tree_cpu()
    t0 = time.perf_counter()
    out = fn()
    return Timing(time.perf_counter() - t0, process_tree_cpu() - c0), out


def settle_gc() -> None:
    """Collect, then freeze what exists: a suite's prepared rows are the harness's, and the collector
    scanning them again and again would be charged to whatever figure is being timed."""
    gc.collect()
    gc.freeze()


# -- medians ---------------------------------------------------------------------------------------
def median_ms(fn: Callable[[], Any], runs: int) -> tuple[float, float, list[float]]:
    """(median wall ms, median CPU ms of this process, every wall time) of `runs` calls after one warm-up.

    CPU time is the steadier figure on a shared machine: it does not count waiting for a core."""
    fn()  # warm-up
    wall, cpu = [], []
    for _ in range(runs):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return statistics.median(wall), statistics.median(cpu), wall


def medians(runs: Sequence[dict[str, Any]], keys: Iterable[str]) -> dict[str, float]:
    """The median of each of `keys` over per-run result dicts."""
    return {k: statistics.median(r[k] for r in runs) for k in keys}


# -- values ----------------------------------------------------------------------------------------
def make_values(value_size: int, compression_ratio: float, seed: int) -> list[bytes]:
    """db_bench's value generator: pieces of ``value_size * ratio`` random bytes repeated to fill.

    Returns `VALUE_POOL` distinct values cut from one buffer.
    """
    rng = random.Random(seed)
    unique = max(1, int(value_size * compression_ratio))
    buf = bytearray()
    while len(buf) < VALUE_POOL + value_size:
        piece = bytes(rng.randrange(32, 127) for _ in range(unique))  # printable, as db_bench's
        buf += (piece * (value_size // unique + 1))[:value_size]
    return [bytes(buf[i : i + value_size]) for i in range(VALUE_POOL)]


def add_value_options(p: argparse.ArgumentParser) -> None:
    """``--value-size`` and ``--compression-ratio``: the arguments of `make_values`, for suites that
    let them be chosen."""
    p.add_argument(
        "--value-size", type=int_arg(0), default=100, help="value bytes (default 100); keys are 16 bytes"
    )
    p.add_argument(
        "--compression-ratio",
        type=float_arg(0, 1, above_minimum=True),
        default=0.5,
        help="value compressibility, in (0, 1] (default 0.5)",
    )


def split_list(s: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]`` (comma-separated options)."""
    return [x.strip() for x in s.split(",") if x.strip()]
