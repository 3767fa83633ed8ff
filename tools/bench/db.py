"""``lsm bench [db] ...``: RocksDB db_bench's workloads on lsm, and side by side on RocksDB and LevelDB.

As in db_bench: 16-byte zero-padded decimal keys, values cut from a buffer of compressible random bytes
(``--compression-ratio``, 0.5 as in db_bench), the benchmarks run in the order given on one DB per
engine, ``fill*`` benchmarks start from a fresh (empty) DB and the others use whatever the earlier
benchmarks left. Engines run one after another (the whole benchmark list on one engine, then it is
closed, then the next), so one engine's background flushes and compactions never run during another
engine's measurement; the lines are then printed grouped by benchmark, with the ratio of lsm's
micros/op to each other engine's::

    fillrandom   :      12.345 micros/op 81004 ops/sec;    9.4 MB/s [lsm] (cpu 20.100 micros/op)
    readrandom   :       8.910 micros/op 112233 ops/sec;   10.3 MB/s [lsm] (632 of 1000 found; cpu ...)

Keys and the order of operations are generated before the clock starts, from ``--seed``, identically
for every engine; what is timed is the loop of engine calls (chunked so a progress bar can be updated
between chunks). Values come from a pool of distinct byte strings that the loop cycles through.

Write benchmarks also give their **write amplification** (SST bytes the engine wrote by flushes and
compactions during the benchmark / user bytes, keys and values as given; ``write_amp`` in ``--json``, a
``write-amp`` line after the results), read the same way for every engine that tells: lsm from its own
counters, RocksDB from its statistics tickers ``rocksdb.flush.write.bytes`` +
``rocksdb.compact.write.bytes`` (exact bytes). Rows still in a memtable and compactions still running
when the benchmark ends are not counted, for either, unless ``--settle``: then each engine flushes and
waits until no compaction is due or running after the loop (not timed), and the figure counts that too.

Like for like: ``--compaction-policy`` picks lsm's policy, and the ``rocksdict`` engine is RocksDB
configured as that lsm is (the same memtable size, L0 trigger and block compression, the matching
compaction style: tiered - universal, leveled - level, fifo - FIFO; `engines.rocksdb_like_lsm`);
``rocksdict-defaults`` is RocksDB with its own defaults, for a second line.

``--profile [N]`` runs lsm's benchmarks under cProfile and prints, after the results, the top N functions
by own time for each benchmark (the calling thread: puts, gets, scans, and key generation) and for the
engine's background threads over the whole run (flushes, the compaction thread's planning and commits;
jobs run in the compaction worker process are not in it). The profiler inflates the timings printed.

Adding a workload: write ``def mybench(ctx: RunContext, eng: Engine, step: int) -> Result`` decorated
with ``@workload("mybench")`` (``fresh_db=True`` if it starts from an empty DB).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence

from tools.bench.engines import DEFAULT_POLICY, ENGINES, ROCKSDB_STYLE, Engine, bench_policies
from tools.bench.harness import (
    DEFAULT_SEED,
    KEY_SIZE,
    Profiler,
    Result,
    add_value_options,
    make_values,
    profile_table,
    ratio_line,
    split_list,
    timed_chunks,
    timed_scan,
)
from tools.render import int_arg

DEFAULT_BENCHMARKS = "fillseq,fillrandom,overwrite,readrandom,readseq"


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
    policy: str = DEFAULT_POLICY  # lsm's compaction policy; the rocksdict engine matches it
    settle: bool = (
        False  # after a write benchmark's loop: flush, wait for compactions (write amp counts them)
    )

    def rng(self, step: int, name: str) -> random.Random:
        """The same generator for every engine at benchmark number `step`."""
        return random.Random(f"{self.seed}:{step}:{name}")

    def keys(self, numbers: Sequence[int] | range) -> list[bytes]:
        """db_bench's keys for `numbers`: 16-byte zero-padded decimal."""
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


def write_keys(ctx: RunContext, eng: Engine, name: str, keys: list[bytes]) -> Result:
    """Time writing `keys` (values cycled from the pool), one put or one batch of --batch-size at a time."""
    values = itertools.cycle(ctx.values)
    if ctx.batch_size <= 1:
        put_many = eng.put_many

        def body(a: int, b: int) -> int:
            put_many(zip(keys[a:b], values))  # noqa: B905 - values is endless
            return 0

    else:
        bs = ctx.batch_size
        write_batch = eng.write_batch

        def body(a: int, b: int) -> int:
            for i in range(a, b, bs):
                write_batch(list(zip(keys[i : min(i + bs, b)], values)))  # noqa: B905
            return 0

    before, flushed_before = eng.sst_bytes_written(), eng.flush_bytes_written()
    req_before = requests_of(eng)
    t, done, _ = timed_chunks(ctx.progress, f"{eng.name} {name}", len(keys), body)
    req_note = requests_note(eng, req_before, t.seconds)
    settled = eng.settle() if ctx.settle else ""  # not timed
    after, flushed_after = eng.sst_bytes_written(), eng.flush_bytes_written()
    notes = [f"batch {ctx.batch_size}" if ctx.batch_size > 1 else "", "sync" if ctx.sync else "", settled, req_note]
    note = "; ".join(n for n in notes if n)
    nbytes = done * (KEY_SIZE + ctx.value_size)
    wa = None if before is None or after is None or not nbytes else (after - before) / nbytes
    fa = (
        None
        if flushed_before is None or flushed_after is None or not nbytes
        else (flushed_after - flushed_before) / nbytes
    )
    return Result(
        eng.name,
        name,
        done,
        t.seconds,
        nbytes,
        note=note,
        cpu_seconds=t.cpu_seconds,
        write_amp=wa,
        flush_amp=fa,
    )


def requests_of(eng: Engine) -> dict[str, int] | None:
    """The engine's object-store request counters now (None for an engine on local files)."""
    get = getattr(eng, "requests", None)
    return get() if get is not None else None


def requests_note(eng: Engine, before: dict[str, int] | None, seconds: float) -> str:
    """The requests a benchmark made: PUTs (WAL objects per second among them) and GETs."""
    if before is None:
        return ""
    now = requests_of(eng) or {}
    d = {k: now.get(k, 0) - before.get(k, 0) for k in now}
    rate = d["put_wal"] / seconds if seconds > 0 else 0.0
    return f"requests: {d['put']} PUT ({d['put_wal']} WAL, {rate:.1f}/s), {d['get']} GET, {d['list']} LIST"


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
    count_found = eng.count_found
    req_before = requests_of(eng)

    def body(a: int, b: int) -> int:
        return count_found(keys[a:b])

    t, done, found = timed_chunks(ctx.progress, f"{eng.name} readrandom", len(keys), body)
    note = "; ".join(n for n in (note, requests_note(eng, req_before, t.seconds)) if n)
    nbytes = found * (KEY_SIZE + ctx.value_size)
    return Result(eng.name, "readrandom", done, t.seconds, nbytes, found, note, t.cpu_seconds)


@workload("readseq")
def readseq(ctx: RunContext, eng: Engine, step: int) -> Result:
    """A forward scan from the first key, of at most --reads rows."""
    t, rows = timed_scan(ctx.progress, f"{eng.name} readseq", ctx.reads, eng.scan())
    nbytes = rows * (KEY_SIZE + ctx.value_size)
    return Result(eng.name, "readseq", rows, t.seconds, nbytes, cpu_seconds=t.cpu_seconds)


# -- the suite ---------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    """The db suite's options (``lsm bench --help``)."""
    from tools.bench import SUITES  # the registry (loaded by now): named in the help as the other suites

    p = argparse.ArgumentParser(
        prog="lsm bench",
        usage=f"lsm bench [SUITE] [options]  (SUITE: {', '.join(SUITES)}; default db)",
        description="db_bench-style benchmarks of lsm-sim, optionally side by side with RocksDB/LevelDB. "
        f"Other suites: {', '.join(sorted(n for n in SUITES if n != 'db'))} (lsm bench SUITE --help).",
    )
    p.add_argument(
        "--benchmarks",
        default=DEFAULT_BENCHMARKS,
        help=f"comma list, run in order on one DB per engine (default {DEFAULT_BENCHMARKS}; "
        f"known: {', '.join(WORKLOADS)})",
    )
    p.add_argument(
        "--num", type=int_arg(1), default=1_000_000, help="number of key-value pairs (default 1000000)"
    )
    p.add_argument(
        "--store",
        choices=("local", "s3"),
        default="local",
        help="s3: also run lsm on an S3 store (engine lsm-s3; AWS_ENDPOINT_URL's, else a local moto "
        "server started for the run) beside lsm in a local directory, and report lsm-s3/lsm and its "
        "object-store requests; with --compare slatedb, SlateDB on the same endpoint too (slatedb-s3) "
        "(default local)",
    )
    p.add_argument(
        "--reads", type=int_arg(0), default=None, help="reads for readrandom/readseq (default --num)"
    )
    add_value_options(p)
    p.add_argument(
        "--batch-size", type=int_arg(1), default=1, help="writes per WriteBatch (default 1: plain puts)"
    )
    p.add_argument("--sync", action="store_true", help="fsync every write (WriteOptions(sync=True))")
    p.add_argument(
        "--db",
        default=None,
        help="directory; each engine uses PATH/<engine> (default: a temp dir, removed after)",
    )
    p.add_argument(
        "--seed", type=int_arg(None), default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})"
    )
    p.add_argument(
        "--compare",
        default="",
        help="other engines to run the same workload on: rocksdict (RocksDB configured like lsm: same "
        "memtable size, L0 trigger, compression, and the compaction style matching --compaction-policy), "
        "rocksdict-defaults (RocksDB's default options), plyvel (LevelDB), slatedb (SlateDB; with --store "
        "s3 also on the same S3 endpoint, as slatedb-s3)",
    )
    p.add_argument(
        "--settle",
        action="store_true",
        help="after each write benchmark's loop, flush and wait until no compaction is due or running (not "
        "timed), so its write amplification counts every flush and compaction the writes caused",
    )
    p.add_argument(
        "--compaction-policy",
        default=DEFAULT_POLICY,
        choices=bench_policies(),
        help=f"lsm's DbOptions.compaction_policy (default {DEFAULT_POLICY}); rocksdict runs the matching "
        f"RocksDB compaction style ({', '.join(f'{k}: {v}' for k, v in ROCKSDB_STYLE.items())})",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list of results instead of lines")
    p.add_argument(
        "--profile",
        type=int_arg(1),
        nargs="?",
        const=25,
        default=None,
        metavar="N",
        help="cProfile the lsm engine: after the results, the top N functions (default 25) by own time for "
        "each benchmark (the calling thread), then for the engine's flush and compaction threads over the "
        "whole run; the timings themselves are inflated by the profiler",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar (also off when not a TTY)")
    return p


class EngineUnavailable(Exception):
    """A ``--compare`` engine whose binding is not installed (the message names the package)."""


def _engine_names(p: argparse.ArgumentParser, compare: str, store: str) -> list[str]:
    """lsm, then each ``--compare`` engine; with ``--store s3`` each engine that has an S3 twin is followed
    by it (lsm-s3, slatedb-s3). An engine whose binding does not import raises `EngineUnavailable`: a
    comparison that was asked for is not silently left out."""
    local = [n for n, e in ENGINES.items() if n != "lsm" and not e.on_s3]
    engines = ["lsm"]
    for e in split_list(compare):
        if e not in local:
            p.error(f"--compare: unknown engine {e!r}; known: {', '.join(local)}")
        why = ENGINES[e].available()
        if why:
            raise EngineUnavailable(f"--compare {e}: {why}")
        if e not in engines:
            engines.append(e)
    if store == "s3":
        engines = [x for e in engines for x in (e, f"{e}-s3") if x in ENGINES]
    return engines


def run_engine(
    ctx: RunContext,
    name: str,
    path: str,
    names: list[str],
    emit: Callable[[Result], None],
    profile_top: int | None = None,
) -> tuple[str, list[Result], list[str]]:
    """Every benchmark of `names`, in order, on engine `name` in `path`; return (its version, results,
    profile tables: one per benchmark, then the background threads', when `profile_top` is set)."""
    eng = ENGINES[name](path, ctx.sync, ctx.policy)
    results = []
    tables: list[str] = []
    prof = Profiler() if profile_top is not None else None
    per_bench: list[Profiler] = []
    if prof is not None:
        prof.start_threads()  # before the engine opens: its flush and compaction threads start there
    try:
        eng.open(fresh=True)
        version = eng.version()
        for step, bench in enumerate(names):
            if bench in FRESH_DB and step > 0:
                eng.open(fresh=True)
            if prof is None:
                r = WORKLOADS[bench](ctx, eng, step)
            else:
                per_bench.append(Profiler(threads=False))
                with per_bench[-1].calling_thread():
                    r = WORKLOADS[bench](ctx, eng, step)
            results.append(r)
            emit(r)
    finally:
        eng.close()
        if prof is not None:
            prof.stop_threads()
    if prof is not None:
        for bench, bp in zip(names, per_bench, strict=False):
            tables.append(profile_table([bp.main], profile_top, f"{name} {bench}, the calling thread"))
        tables.append(
            profile_table(
                prof.threads,
                profile_top,
                f"{name} background threads (flush, compaction, ...) over all benchmarks; compaction jobs "
                "run in a worker process are not in it",
            )
        )
    return version, results, [t for t in tables if t]


def print_grouped(names: list[str], versions: list[str], results: list[Result]) -> None:
    """The engines' versions, then each benchmark's lines, one per engine, and lsm's ratio to the others."""
    for v in versions:
        print(f"# {v}")
    by_engine: dict[str, list[Result]] = {}
    for r in results:
        by_engine.setdefault(r.engine, []).append(r)
    for step, bench in enumerate(names):  # by position: a benchmark may be run twice (a cold, a warm read)
        group = [rs[step] for rs in by_engine.values() if step < len(rs)]
        for r in group:
            print(r.line())
        ratio = ratio_line(bench, [r for r in group if not ENGINES[r.engine].on_s3])
        if ratio:
            print(ratio)
        # lsm on S3 against itself in a directory, then against the other engines on S3
        s3 = [r for r in group if r.engine == "lsm" or ENGINES[r.engine].on_s3]
        ratio = ratio_line(bench, s3, base="lsm-s3") if len(s3) >= 2 else None
        if ratio:
            print(ratio)


def main(argv: list[str]) -> int:
    """``lsm bench [db] ARGS``: run the benchmarks on lsm and the ``--compare`` engines; print the figures."""
    p = parser()
    a = p.parse_args(argv)
    names = split_list(a.benchmarks)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(WORKLOADS)}")
    try:
        engines = _engine_names(p, a.compare, a.store)
    except EngineUnavailable as e:  # not a usage mistake: one line naming the package, no usage text
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    if a.store == "s3":
        from tools.bench import s3

        why = s3.unavailable()
        if why:
            p.error(f"--store s3: {why}")
    ctx = RunContext(
        num=a.num,
        reads=a.num if a.reads is None else a.reads,
        value_size=a.value_size,
        batch_size=a.batch_size,
        sync=a.sync,
        seed=a.seed,
        progress=not a.no_progress,
        values=make_values(a.value_size, a.compression_ratio, a.seed),
        policy=a.compaction_policy,
        settle=a.settle,
    )
    stream = len(engines) == 1 and not a.json  # one engine: print each line as soon as it is measured

    def emit(r: Result) -> None:
        if stream:
            print(r.line(), flush=True)
        elif not a.json and ctx.progress and sys.stderr.isatty():
            print(f"# done: {r.line()}", file=sys.stderr, flush=True)

    root = a.db or tempfile.mkdtemp(prefix="lsm-bench-")
    stack = contextlib.ExitStack()
    results: list[Result] = []
    versions: list[str] = []
    profiles: list[str] = []
    try:
        os.makedirs(root, exist_ok=True)
        if not a.json:
            _print_header(ctx, a, names, engines, root)
        s3_bucket = stack.enter_context(_s3_endpoint()) if a.store == "s3" else ""
        for name in engines:
            top = a.profile if name == "lsm" else None
            where = s3_bucket if ENGINES[name].on_s3 else os.path.join(root, name)
            version, got, tables = run_engine(ctx, name, where, names, emit, top)
            versions.append(version)
            results += got
            profiles += tables
    finally:
        stack.close()
        if a.db is None:
            shutil.rmtree(root, ignore_errors=True)
    if a.json:
        print(json.dumps([r.to_dict() for r in results], indent=1))
    elif not stream:
        print_grouped(names, versions, results)
    if not a.json:
        for bench in dict.fromkeys(names):
            line = write_amp_line(bench, results, a.settle)
            if line:
                print(line)
    for t in profiles:  # with --json on stderr, so stdout stays one JSON document
        print(t, file=sys.stderr if a.json else sys.stdout)
    return 0


def _s3_endpoint() -> contextlib.AbstractContextManager[str]:
    from tools.bench import s3

    return s3.endpoint()


def write_amp_line(benchmark: str, results: Sequence[Result], settled: bool = False) -> str | None:
    """``fillrandom   : write-amp lsm 2.05 rocksdict 1.11 (...)`` for a write benchmark, then (when the
    engines tell their flushes' bytes) a second line per flushed byte, RocksDB's W-Amp; else None.
    `settled`: the figures include the flush and compactions after the loop (``--settle``)."""
    mine = [r for r in results if r.benchmark == benchmark and r.write_amp is not None]
    if not mine:
        return None
    when = (
        "the benchmark and the flush and compactions after it (--settle)"
        if settled
        else "the benchmark; memtables not flushed yet not counted"
    )
    parts = " ".join(f"{r.engine} {r.write_amp:.2f}" for r in mine)
    line = f"{benchmark:<12} : write-amp {parts} (SST bytes written by flushes and compactions / user bytes, during {when})"
    flushed = " ".join(f"{r.engine} {r.write_amp_flushed:.2f}" for r in mine if r.write_amp_flushed is not None)
    if flushed:
        line += (
            f"\n{benchmark:<12} : write-amp {flushed} (the same bytes / bytes the flushes wrote: RocksDB's W-Amp,"
            " the policy's rewrites without the row format's size)"
        )
    return line


def _print_header(
    ctx: RunContext, a: argparse.Namespace, names: list[str], engines: list[str], root: str
) -> None:
    print(f"Engines:    {', '.join(engines)}")
    for name in engines:
        print(f"  {name + ':':<19} {ENGINES[name]('', ctx.sync, ctx.policy).describe()}")
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
