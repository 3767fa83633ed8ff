"""`lsm bench merge`: the local merge against its Python limit, and write amplification.

1. Full compaction of N rows (16-byte keys, 100-byte values) held in 4 overlapping sorted SSTs into one
   run, through `compaction.merge.run_job` in this process, in rows/s; in the same run, the rate of only
   decoding the same rows and re-encoding them into one SST (no merge, no filters: the limit for a merge
   written in Python) and the ratio of the two.
2. Write amplification of fillrandom N with default options: lsm-sim's (bytes written to SSTs by
   flushes and compactions per byte of user keys and values) after the fill and after scheduled
   compactions settle, and RocksDB's (rocksdict, default options) from its compaction statistics.

    lsm bench merge --num 1000000 [--repeat 3] [--no-wa]      (or python -m tools.bench merge ...)
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import tempfile
import time

from compaction.filter import Reason
from compaction.merge import CompactionJob, OutputSpec, run_job
from formats.sst import SstReader, SstWriter, write_sst
from tools.bench.harness import DEFAULT_SEED
from tools.render import int_arg, plural


def build_inputs(directory: str, num: int, value_size: int, seed: int) -> list[str]:
    """Four SSTs holding every fourth of `num` random keys each (so they overlap), one version per key."""
    rng = random.Random(seed)
    keys = sorted(b"%016d" % k for k in rng.sample(range(10**15), num))
    value = bytes(rng.getrandbits(8) for _ in range(value_size))
    paths = []
    for j in range(4):
        p = os.path.join(directory, f"in{j}.sst")
        write_sst(p, [(k, 10 + j, 1_000, None, value) for k in keys[j::4]], creation_timestamp=1_000)
        paths.append(p)
    return paths


def merge_once(paths: list[str], out: str) -> tuple[float, int]:
    """(seconds, rows out) of one full compaction of `paths` into one run in `out`, in this process."""
    os.makedirs(out)
    infos = tuple(SstReader(p).info for p in paths)
    job = CompactionJob(tuple((p,) for p in paths), infos, True, 5_000, Reason.MANUAL, OutputSpec(out, "m"))
    t0 = time.perf_counter()
    result = run_job(job)
    return time.perf_counter() - t0, result.stats.rows_out


def decode_encode_once(paths: list[str], out: str) -> float:
    """Decode every input row and encode them all into one SST: the merge's floor in Python."""
    t0 = time.perf_counter()
    rows = []
    for p in paths:
        with SstReader(p) as r:
            rows += r
    rows.sort()  # C-speed; the merge's own ordering work is what this leaves out
    w = SstWriter(out)
    add = w.add
    for row in rows:
        add(row)
    w.finish()
    return time.perf_counter() - t0


def rocksdb_write_amp(stats: str, user_bytes: int) -> float | None:
    """(flush + compaction bytes written) / user bytes, from RocksDB's cumulative compaction stats
    (read from the open DB: they reset when it reopens)."""
    # flushes count as compaction writes into L0 in RocksDB's accounting; GB with 2 decimals
    m = re.search(r"Cumulative compaction: ([0-9.]+) GB write", stats)
    return None if m is None else float(m.group(1)) * 2**30 / user_bytes


def write_amp(num: int, value_size: int, seed: int, work: str) -> None:
    """Print lsm's write amplification after fillrandom `num` (and once compactions settle), and RocksDB's."""
    import lsm

    rng = random.Random(seed)
    keys = [b"%016d" % rng.randrange(10**15) for _ in range(num)]
    # incompressible values, so RocksDB's default block compression does not flatter its figure
    values = [rng.randbytes(value_size) for _ in range(1024)]
    user = num * (16 + value_size)
    path = os.path.join(work, "wa-lsm")
    db = lsm.DB.open(path, lsm.DbOptions())
    put = db.put
    for i, k in enumerate(keys):
        put(k, values[i & 1023])
    wa_fill = db.write_amplification()
    db.flush()
    db.compact()
    print(
        f"write-amp    : lsm {wa_fill:.2f} after fillrandom {num}, {db.write_amplification():.2f} once "
        f"flushed and scheduled compactions settled ({plural(len(db.manifest.l0), 'L0 SST')}, "
        f"{plural(len(db.manifest.runs), 'run')})"
    )
    db.close()
    try:
        from rocksdict import Rdict
    except ImportError:
        print("write-amp    : rocksdict not installed (pip install .[bench])")
        return
    rpath = os.path.join(work, "wa-rocksdb")
    rdb = Rdict(rpath)
    for i, k in enumerate(keys):
        rdb[k] = values[i & 1023]
    rdb.flush()
    stats = rdb.property_value("rocksdb.stats") or ""
    rdb.close()
    wa = rocksdb_write_amp(stats, user)
    shown = "n/a" if wa is None else f"{wa:.2f}"
    print(
        f"write-amp    : rocksdb {shown} after fillrandom {num} and a flush (default options, leveled; "
        "from its 'Cumulative compaction' statistic, 0.01 GB resolution)"
    )


def parser() -> argparse.ArgumentParser:
    """The merge suite's options (``lsm bench merge --help``)."""
    ap = argparse.ArgumentParser(prog="lsm bench merge", description=__doc__.split("\n\n")[0])
    ap.add_argument("--num", type=int_arg(1), default=1_000_000)
    ap.add_argument("--value-size", type=int_arg(0), default=100)
    ap.add_argument(
        "--repeat", type=int_arg(1), default=3, help="runs of each measurement; medians are printed"
    )
    ap.add_argument("--seed", type=int_arg(None), default=DEFAULT_SEED)
    ap.add_argument("--no-wa", action="store_true", help="skip the write-amplification part")
    return ap


def main(argv: list[str] | None = None) -> int:
    """``lsm bench merge ARGS``: print the merge rate, its Python limit and the write amplification."""
    ap = parser()
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="lsm-bench-merge-")
    try:
        paths = build_inputs(work, args.num, args.value_size, args.seed)
        merges, limits = [], []
        for i in range(args.repeat):
            secs, rows_out = merge_once(paths, os.path.join(work, f"out{i}"))
            merges.append(args.num / secs)
            limits.append(args.num / decode_encode_once(paths, os.path.join(work, f"limit{i}.sst")))
            shutil.rmtree(os.path.join(work, f"out{i}"))
            os.unlink(os.path.join(work, f"limit{i}.sst"))
            assert rows_out == args.num
        m, lim = statistics.median(merges), statistics.median(limits)
        print(
            f"merge        : {m:12,.0f} rows/s  (full compaction of {args.num} rows in 4 overlapping SSTs; "
            f"median of {args.repeat})"
        )
        print(f"decode+encode: {lim:12,.0f} rows/s  (the same rows decoded and re-encoded: the Python limit)")
        print(f"merge/limit  : {m / lim:.0%}  (target: at least 50%)")
        if not args.no_wa:
            write_amp(args.num, args.value_size, args.seed, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0
