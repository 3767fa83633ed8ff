"""`lsm bench`: db_bench-style micro-benchmarks of the engine, side by side with RocksDB and LevelDB.

Suites, chosen by the first argument (a registry, `SUITES`, maps the name to its entry function)::

    lsm bench [--benchmarks fillseq,fillrandom,...] [--num N] [--compare rocksdict,plyvel] ...
    lsm bench formats [--num N]
    lsm bench time ... / lsm bench compact ...      (tools/bench_time.py, tools/bench_compact.py)

The default suite (``db``) follows RocksDB's db_bench: 16-byte zero-padded decimal keys, values cut from
a buffer of compressible random bytes (``--compression-ratio``, 0.5 as in db_bench), the benchmarks run
in the order given on one DB per engine, and every result is one line::

    fillrandom   :      12.345 micros/op 81004 ops/sec;    9.4 MB/s [lsm] (cpu 20.100 micros/op)
    readrandom   :       8.910 micros/op 112233 ops/sec;   10.3 MB/s [lsm] (632 of 1000 found; cpu ...)

micros/op and ops/sec are wall-clock; ``cpu`` is the CPU time of this process and its child processes
(background threads and lsm's compaction worker) over the same span, per op: the steadier figure on a
shared machine.

As in db_bench, ``fill*`` benchmarks start from a fresh (empty) DB; the others use whatever the earlier
benchmarks left. Engines run one after another (the whole benchmark list on one engine, then it is
closed, then the next), so one engine's background flushes and compactions never run during another
engine's measurement; the lines are then printed grouped by benchmark, with the ratio of lsm's micros/op
to each other engine's.

Keys and the order of operations are generated before the clock starts, from ``--seed``, identically
for every engine; what is timed is the loop of engine calls (chunked so a progress bar can be updated
between chunks). Values come from a pool of distinct byte strings that the loop cycles through.

Adding a workload: write ``def mybench(ctx: RunContext, eng: Engine, step: int) -> Result`` decorated
with ``@workload("mybench")`` (``fresh_db=True`` if it starts from an empty DB). Adding a suite: write
``def run(argv) -> int`` decorated with ``@suite("name")``, or register it in `SUITES`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import importlib.metadata
import importlib.util
import itertools
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

KEY_SIZE = 16  # db_bench's default key size; keys are zero-padded decimal numbers
DEFAULT_BENCHMARKS = "fillseq,fillrandom,overwrite,readrandom,readseq"
DEFAULT_SEED = 301  # LevelDB db_bench's seed
VALUE_POOL = 4096  # distinct value strings cycled through by the write loops
CHUNK = 10_000  # operations between two progress updates

Suite = Callable[[list[str]], int]
SUITES: dict[str, Suite] = {}


def suite(name: str) -> Callable[[Suite], Suite]:
    """Register `fn(argv) -> exit code` as ``lsm bench <name> ...``."""

    def register(fn: Suite) -> Suite:
        SUITES[name] = fn
        return fn

    return register


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

    @property
    def cpu_micros_per_op(self) -> float | None:
        if self.cpu_seconds is None:
            return None
        return self.cpu_seconds * 1e6 / self.ops if self.ops else 0.0

    @property
    def micros_per_op(self) -> float:
        return self.seconds * 1e6 / self.ops if self.ops else 0.0

    @property
    def ops_per_sec(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
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
        }


def ratio_line(benchmark: str, results: Sequence[Result], base: str = "lsm") -> str | None:
    """``name : ratio lsm/rocksdict 4.12x ...``: micros/op of `base` over each other engine's."""
    mine = next((r for r in results if r.engine == base), None)
    others = [r for r in results if r.engine != base and r.micros_per_op > 0]
    if mine is None or not others:
        return None
    parts = [f"{base}/{r.engine} {mine.micros_per_op / r.micros_per_op:.2f}x" for r in others]
    return f"{benchmark:<12} : ratio {' '.join(parts)} (micros/op; above 1 = {base} slower)"


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(enabled: bool, total: int | None, desc: str) -> Any:
    """A tqdm bar on stderr when enabled, stderr is a terminal and tqdm is installed; else a no-op."""
    if not enabled or not sys.stderr.isatty():
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc=desc, unit="op", unit_scale=True, file=sys.stderr, leave=False)


def process_tree_cpu() -> float:
    """CPU seconds used so far by this process (every thread) and its child processes.

    Children count because an engine may work in them (lsm's compaction worker process); live children
    are read from /proc (Linux; elsewhere only exited children count), exited ones from os.times().
    """
    t = os.times()
    total = time.process_time() + t.children_user + t.children_system
    me = os.getpid()
    try:
        tick = os.sysconf("SC_CLK_TCK")
        pids = [d for d in os.listdir("/proc") if d.isdigit()]
    except (OSError, ValueError, AttributeError):
        return total
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2 :].split()  # state, ppid, ..., utime (11), stime (12)
            if int(fields[1]) == me:
                total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, ValueError, IndexError):
            continue
    return total


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


# -- engines ---------------------------------------------------------------------------------------


class Engine:
    """What a workload needs from a store. Each engine lives in its own directory."""

    name = "?"

    def __init__(self, path: str, sync: bool) -> None:
        self.path = path
        self.sync = sync
        self.db: Any = None

    module: str | None = None  # the binding this engine needs (importable when usable)

    @classmethod
    def available(cls) -> str | None:
        """None when usable, else why not."""
        if cls.module is not None and importlib.util.find_spec(cls.module) is None:
            return "not installed (pip install 'lsm-sim[bench]')"
        return None

    def version(self) -> str:
        return ""

    def open(self, fresh: bool) -> None:
        """(Re)open; ``fresh`` deletes this engine's directory first (db_bench's fresh_db)."""
        self.close()
        if fresh and os.path.exists(self.path):
            shutil.rmtree(self.path)
        self._open()

    def _open(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None

    def put_fn(self) -> Callable[[bytes, bytes], Any]:
        raise NotImplementedError

    def write_batch(self, pairs: Sequence[tuple[bytes, bytes]]) -> None:
        """One atomic batch through the engine's WriteBatch class (`_batch`) and write options (`_wo`)."""
        b = self._batch()
        put = b.put
        for k, v in pairs:
            put(k, v)
        self.db.write(b, self._wo)

    def get_fn(self) -> Callable[[bytes], bytes | None]:
        return self.db.get

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        raise NotImplementedError

    def prepare_reads(self) -> str:
        """Bring the DB to the state readrandom is defined on; return what was done (for the output)."""
        return ""


class LsmEngine(Engine):
    name = "lsm"

    def version(self) -> str:
        try:
            return f"lsm-sim {importlib.metadata.version('lsm-sim')}"
        except importlib.metadata.PackageNotFoundError:
            return "lsm-sim"

    def _open(self) -> None:
        import lsm

        self.db = lsm.DB.open(self.path, lsm.DbOptions())
        self._wo = lsm.WriteOptions(sync=True) if self.sync else None
        self._batch = lsm.WriteBatch

    def put_fn(self) -> Callable[[bytes, bytes], Any]:
        return functools.partial(self.db.put, options=self._wo) if self._wo else self.db.put

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        return self.db.scan()

    def prepare_reads(self) -> str:
        self.db.flush()
        if hasattr(self.db, "compact"):
            self.db.compact()
            note = "after flush() + compact()"
        else:
            note = "after flush(); no compact() in this build"
        if hasattr(self.db, "lsm_shape"):
            shape = self.db.lsm_shape()
            runs = shape.get("runs", [])
            note += f": {len(shape.get('l0', []))} L0 SSTs, {len(runs)} runs of {sum(map(len, runs))} SSTs"
        return note


class RocksdictEngine(Engine):
    """RocksDB through rocksdict, default Options (so not raw mode: keys and values get a type byte)."""

    name = "rocksdict"

    module = "rocksdict"

    def version(self) -> str:
        v = f"rocksdict {importlib.metadata.version('rocksdict')}"
        try:  # RocksDB writes its version into the OPTIONS file of every DB
            for n in sorted(os.listdir(self.path)):
                if n.startswith("OPTIONS-"):
                    with open(os.path.join(self.path, n)) as f:
                        for line in f:
                            if line.strip().startswith("rocksdb_version="):
                                return f"{v} (RocksDB {line.split('=', 1)[1].strip()})"
        except OSError:
            pass
        return v

    def _open(self) -> None:
        import rocksdict

        self.db = rocksdict.Rdict(self.path)
        self._wo = None
        if self.sync:
            self._wo = rocksdict.WriteOptions()
            self._wo.sync = True
        self._batch = rocksdict.WriteBatch

    def put_fn(self) -> Callable[[bytes, bytes], Any]:
        return functools.partial(self.db.put, write_opt=self._wo) if self._wo else self.db.put

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self.db.items())

    def prepare_reads(self) -> str:
        self.db.flush(wait=True)
        return "after flush(); no compact_range()"


class PlyvelEngine(Engine):
    """LevelDB through plyvel, ``plyvel.DB(path, create_if_missing=True)``, defaults otherwise."""

    name = "plyvel"

    module = "plyvel"

    def version(self) -> str:
        import plyvel

        return f"plyvel {plyvel.__version__} (LevelDB {plyvel.__leveldb_version__})"

    def _open(self) -> None:
        import plyvel

        self.db = plyvel.DB(self.path, create_if_missing=True)

    def put_fn(self) -> Callable[[bytes, bytes], Any]:
        return functools.partial(self.db.put, sync=True) if self.sync else self.db.put

    def write_batch(self, pairs: Sequence[tuple[bytes, bytes]]) -> None:
        with self.db.write_batch(sync=self.sync) as b:
            put = b.put
            for k, v in pairs:
                put(k, v)

    def get_fn(self) -> Callable[[bytes], bytes | None]:
        return self.db.get

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self.db.iterator())

    def prepare_reads(self) -> str:
        # LevelDB has no flush call (compact_range would also compact everything): reads see up to one
        # 4 MiB memtable that is not flushed yet.
        return "no flush API; memtable left as is"


ENGINES: dict[str, type[Engine]] = {e.name: e for e in (LsmEngine, RocksdictEngine, PlyvelEngine)}


# -- workloads (the db suite) ----------------------------------------------------------------------


@dataclasses.dataclass
class RunContext:
    """The options of one `lsm bench` run, shared by every workload and engine."""

    num: int
    reads: int
    value_size: int
    batch_size: int
    sync: bool
    seed: int
    progress: bool
    values: list[bytes]

    def rng(self, step: int, name: str) -> random.Random:
        """The same generator for every engine at benchmark number `step`."""
        return random.Random(f"{self.seed}:{step}:{name}")

    def keys(self, numbers: Sequence[int] | range) -> list[bytes]:
        return [b"%016d" % k for k in numbers]

    def random_keys(self, step: int, name: str, count: int) -> list[bytes]:
        """`count` keys drawn uniformly, with repetition, from [0, num) (db_bench's random keys)."""
        rand = self.rng(step, name).randrange
        n = self.num
        return [b"%016d" % rand(n) for _ in range(count)]


Workload = Callable[[RunContext, Engine, int], Result]
WORKLOADS: dict[str, Workload] = {}
FRESH_DB: set[str] = set()  # workloads that start from an empty DB, as db_bench's fill* do


def workload(name: str, fresh_db: bool = False) -> Callable[[Workload], Workload]:
    """Register `fn(ctx, engine, step) -> Result` as a benchmark of the db suite."""

    def register(fn: Workload) -> Workload:
        WORKLOADS[name] = fn
        if fresh_db:
            FRESH_DB.add(name)
        return fn

    return register


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


def write_keys(ctx: RunContext, eng: Engine, name: str, keys: list[bytes]) -> Result:
    """Time writing `keys` (values cycled from the pool), one put or one batch of --batch-size at a time."""
    values = itertools.cycle(ctx.values)
    if ctx.batch_size <= 1:
        put = eng.put_fn()

        def body(a: int, b: int) -> int:
            for k, v in zip(keys[a:b], values):  # noqa: B905 - values is endless
                put(k, v)
            return 0

    else:
        bs = ctx.batch_size
        write_batch = eng.write_batch

        def body(a: int, b: int) -> int:
            for i in range(a, b, bs):
                write_batch(list(zip(keys[i : min(i + bs, b)], values)))  # noqa: B905
            return 0

    t, done, _ = timed_chunks(ctx.progress, f"{eng.name} {name}", len(keys), body)
    note = f"batch {ctx.batch_size}" if ctx.batch_size > 1 else ""
    if ctx.sync:
        note = f"{note}; sync" if note else "sync"
    nbytes = done * (KEY_SIZE + ctx.value_size)
    return Result(eng.name, name, done, t.seconds, nbytes, note=note, cpu_seconds=t.cpu_seconds)


@workload("fillseq", fresh_db=True)
def fillseq(ctx: RunContext, eng: Engine, step: int) -> Result:
    """num writes of keys 0..num-1 in order into an empty DB."""
    return write_keys(ctx, eng, "fillseq", ctx.keys(range(ctx.num)))


@workload("fillrandom", fresh_db=True)
def fillrandom(ctx: RunContext, eng: Engine, step: int) -> Result:
    """num writes of random keys (with repetition) into an empty DB."""
    return write_keys(ctx, eng, "fillrandom", ctx.random_keys(step, "fillrandom", ctx.num))


@workload("overwrite")
def overwrite(ctx: RunContext, eng: Engine, step: int) -> Result:
    """num writes of random keys into the DB as the previous benchmarks left it."""
    return write_keys(ctx, eng, "overwrite", ctx.random_keys(step, "overwrite", ctx.num))


@workload("readrandom")
def readrandom(ctx: RunContext, eng: Engine, step: int) -> Result:
    """--reads gets of random keys in [0, num), after the engine's flush (see Engine.prepare_reads)."""
    note = eng.prepare_reads()
    keys = ctx.random_keys(step, "readrandom", ctx.reads)
    get = eng.get_fn()

    def body(a: int, b: int) -> int:
        found = 0
        for k in keys[a:b]:
            if get(k) is not None:
                found += 1
        return found

    t, done, found = timed_chunks(ctx.progress, f"{eng.name} readrandom", len(keys), body)
    nbytes = found * (KEY_SIZE + ctx.value_size)
    return Result(eng.name, "readrandom", done, t.seconds, nbytes, found, note, t.cpu_seconds)


@workload("readseq")
def readseq(ctx: RunContext, eng: Engine, step: int) -> Result:
    """A forward scan from the first key, of at most --reads rows."""
    t, rows = timed_scan(ctx.progress, f"{eng.name} readseq", ctx.reads, eng.scan())
    nbytes = rows * (KEY_SIZE + ctx.value_size)
    return Result(eng.name, "readseq", rows, t.seconds, nbytes, cpu_seconds=t.cpu_seconds)


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


# -- the db suite ----------------------------------------------------------------------------------


def _db_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lsm bench",
        description="db_bench-style benchmarks of lsm-sim, optionally side by side with RocksDB/LevelDB. "
        f"Other suites: {', '.join(sorted(n for n in SUITES if n != 'db'))} (lsm bench SUITE --help).",
    )
    p.add_argument(
        "--benchmarks",
        default=DEFAULT_BENCHMARKS,
        help=f"comma list, run in order on one DB per engine (default {DEFAULT_BENCHMARKS}; "
        f"known: {', '.join(WORKLOADS)})",
    )
    p.add_argument("--num", type=int, default=1_000_000, help="number of key-value pairs (default 1000000)")
    p.add_argument("--reads", type=int, default=None, help="reads for readrandom/readseq (default --num)")
    p.add_argument("--value-size", type=int, default=100, help="value bytes (default 100); keys are 16 bytes")
    p.add_argument("--compression-ratio", type=float, default=0.5, help="value compressibility (default 0.5)")
    p.add_argument("--batch-size", type=int, default=1, help="writes per WriteBatch (default 1: plain puts)")
    p.add_argument("--sync", action="store_true", help="fsync every write (WriteOptions(sync=True))")
    p.add_argument(
        "--db",
        default=None,
        help="directory; each engine uses PATH/<engine> (default: a temp dir, removed after)",
    )
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})")
    p.add_argument(
        "--compare", default="", help="other engines to run the same workload on: rocksdict,plyvel"
    )
    p.add_argument("--json", action="store_true", help="print a JSON list of results instead of lines")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (also off when not a TTY)")
    return p


def _split(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


@suite("db")
def run_db(argv: list[str]) -> int:
    p = _db_parser()
    a = p.parse_args(argv)
    names = _split(a.benchmarks)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(WORKLOADS)}")
    if a.num < 1 or a.value_size < 0 or a.batch_size < 1 or (a.reads is not None and a.reads < 0):
        p.error("--num and --batch-size must be >= 1, --value-size and --reads >= 0")
    if not 0 < a.compression_ratio <= 1:
        p.error("--compression-ratio must be in (0, 1]")
    engines = ["lsm"]
    for e in _split(a.compare):
        if e not in ENGINES or e == "lsm":
            p.error(f"--compare: unknown engine {e!r}; known: {', '.join(n for n in ENGINES if n != 'lsm')}")
        why = ENGINES[e].available()
        if why:
            print(f"# {e}: {why}; skipped", file=sys.stderr)
        elif e not in engines:
            engines.append(e)
    ctx = RunContext(
        num=a.num,
        reads=a.num if a.reads is None else a.reads,
        value_size=a.value_size,
        batch_size=a.batch_size,
        sync=a.sync,
        seed=a.seed,
        progress=not a.no_progress,
        values=make_values(a.value_size, a.compression_ratio, a.seed),
    )
    root = a.db or tempfile.mkdtemp(prefix="lsm-bench-")
    stream = len(engines) == 1 and not a.json  # one engine: print each line as soon as it is measured
    results: list[Result] = []
    versions: dict[str, str] = {}
    try:
        os.makedirs(root, exist_ok=True)
        if not a.json:
            _print_header(ctx, a, names, engines, root)
        for name in engines:
            eng = ENGINES[name](os.path.join(root, name), a.sync)
            try:
                eng.open(fresh=True)
                versions[name] = eng.version()
                for step, bench in enumerate(names):
                    if bench in FRESH_DB and step > 0:
                        eng.open(fresh=True)
                    r = WORKLOADS[bench](ctx, eng, step)
                    results.append(r)
                    if stream:
                        print(r.line(), flush=True)
                    elif not a.json and ctx.progress and sys.stderr.isatty():
                        print(f"# done: {r.line()}", file=sys.stderr, flush=True)
            finally:
                eng.close()
    finally:
        if a.db is None:
            shutil.rmtree(root, ignore_errors=True)
    if a.json:
        print(json.dumps([r.to_dict() for r in results], indent=1))
        return 0
    if not stream:
        for v in versions.values():
            print(f"# {v}")
        for bench in names:
            group = [r for r in results if r.benchmark == bench]
            for r in group:
                print(r.line())
            ratio = ratio_line(bench, group)
            if ratio:
                print(ratio)
    return 0


def _print_header(
    ctx: RunContext, a: argparse.Namespace, names: list[str], engines: list[str], root: str
) -> None:
    print(f"Engines:    {', '.join(engines)} (each with its default options)")
    print(f"Keys:       {KEY_SIZE} bytes each")
    print(f"Values:     {ctx.value_size} bytes each (compression ratio {a.compression_ratio})")
    print(f"Entries:    {ctx.num}")
    print(f"Reads:      {ctx.reads}")
    print(f"WriteBatch: {ctx.batch_size} ops")
    print(f"Sync:       {'true' if ctx.sync else 'false'}")
    print(f"Seed:       {ctx.seed}")
    print(f"DB:         {root}{'' if a.db else ' (temporary, removed after)'}")
    print(f"Benchmarks: {','.join(names)}")
    print("-" * 48, flush=True)


# -- the formats suite -----------------------------------------------------------------------------


def settle_gc() -> None:
    """Collect, then freeze what exists: the suite's million prepared rows are the harness's, and the
    collector scanning them again and again would be charged to whatever figure is being timed."""
    gc.collect()
    gc.freeze()


@suite("formats")
def run_formats(argv: list[str]) -> int:
    """Row codec encode/decode rates (v1; with and without TimeToLive), SST write MB/s, SST full scan."""
    from formats.row import RowFeature, codec_for
    from formats.sst import SstReader, write_sst

    p = argparse.ArgumentParser(
        prog="lsm bench formats",
        description="Rates of the formats package: row codec v1 encode/decode, SST write and full scan.",
    )
    p.add_argument("--num", type=int, default=1_000_000, help="rows (default 1000000)")
    p.add_argument("--value-size", type=int, default=100, help="value bytes (default 100); keys are 16 bytes")
    p.add_argument("--block-bytes", type=int, default=4096, help="SST data block size (default 4096)")
    p.add_argument("--dir", default=None, help="where to write the SST (default: a temp dir, removed after)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--json", action="store_true", help="print a JSON list of results instead of lines")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (also off when not a TTY)")
    a = p.parse_args(argv)
    if a.num < 1 or a.value_size < 0:
        p.error("--num must be >= 1 and --value-size >= 0")
    progress = not a.no_progress
    values = make_values(a.value_size, 0.5, a.seed)
    nvals = len(values)
    ts0 = 1_700_000_000_000
    rows = [(b"%016d" % i, i + 1, ts0 + i, None, values[i % nvals]) for i in range(a.num)]
    ttl_rows = [(k, s, t, t + 3_600_000, v) for k, s, t, _e, v in rows]
    F = RowFeature
    results: list[Result] = []
    variants = [
        ("row_encode", "row_decode", rows, (F.RowFlags, F.Timestamp, F.Seq)),
        ("row_encode_ttl", "row_decode_ttl", ttl_rows, (F.RowFlags, F.Timestamp, F.TimeToLive, F.Seq)),
    ]
    for enc_name, dec_name, rs, features in variants:
        codec = codec_for(1, features)
        label = "v1 " + "+".join(f.name for f in features)
        bufs: list[bytes] = []

        def encode(start: int, stop: int, rs=rs, codec=codec, bufs=bufs) -> int:
            enc = codec.encode_parts
            parts: list = []
            for row in rs[start:stop]:
                enc(row, parts)
            bufs.append(b"".join(parts))
            return 0

        settle_gc()
        t, done, _ = timed_chunks(progress, enc_name, len(rs), encode)
        nbytes = sum(map(len, bufs))
        note = f"{label}, encode_parts"
        results.append(
            Result("formats", enc_name, done, t.seconds, nbytes, note=note, cpu_seconds=t.cpu_seconds)
        )

        def decode(start: int, stop: int, codec=codec, bufs=bufs) -> int:
            dec = codec.decode_from
            buf = bufs[start // CHUNK]  # encode() left one buffer per chunk of timed_chunks
            pos, end = 0, len(buf)
            while pos < end:
                _row, pos = dec(buf, pos)
            return 0

        settle_gc()
        t, done, _ = timed_chunks(progress, dec_name, len(rs), decode)
        note = f"{label}, decode_from"
        results.append(
            Result("formats", dec_name, done, t.seconds, nbytes, note=note, cpu_seconds=t.cpu_seconds)
        )
        del bufs
    del ttl_rows
    tmp = a.dir or tempfile.mkdtemp(prefix="lsm-bench-formats-")
    try:
        os.makedirs(tmp, exist_ok=True)
        path = os.path.join(tmp, "bench.sst")
        settle_gc()
        c0 = process_tree_cpu()
        t0 = time.perf_counter()
        info = write_sst(path, rows, block_bytes=a.block_bytes, creation_timestamp=ts0)
        seconds = time.perf_counter() - t0
        cpu = process_tree_cpu() - c0
        results.append(
            Result(
                "formats",
                "sst_write",
                len(rows),
                seconds,
                info.file_size,
                note=f"write_sst, block {a.block_bytes} B, {info.num_blocks} blocks, {info.file_size} B file, fsync",
                cpu_seconds=cpu,
            )
        )
        del rows
        with SstReader(path) as r:
            settle_gc()
            t, n = timed_scan(progress, "sst_scan", info.num_rows, iter(r))
        note = "SstReader, no block cache"
        results.append(
            Result("formats", "sst_scan", n, t.seconds, info.file_size, note=note, cpu_seconds=t.cpu_seconds)
        )
    finally:
        if a.dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    gc.unfreeze()
    if a.json:
        print(json.dumps([r.to_dict() for r in results], indent=1))
    else:
        for r in results:
            print(r.line())
    return 0


SUITES["time"] = lambda argv: __import__("tools.bench_time", fromlist=["main"]).main(argv)  # bench_time.py
SUITES["merge"] = lambda argv: __import__("tools.bench_merge", fromlist=["main"]).main(argv)  # bench_merge.py
SUITES["compact"] = lambda argv: __import__("tools.bench_compact", fromlist=["main"]).main(argv)  # bench_compact.py
SUITES["simulate"] = lambda argv: __import__("tools.bench_simulate", fromlist=["main"]).main(argv)  # bench_simulate.py


# -- entry point -----------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    """``lsm bench [SUITE] ARGS``: SUITE is one of `SUITES` (default ``db``)."""
    if argv and argv[0] in SUITES:
        return SUITES[argv[0]](argv[1:])
    return SUITES["db"](argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
