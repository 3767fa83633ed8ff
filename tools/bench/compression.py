"""``lsm bench compression``: each SST block codec's size and speed on the bench data.

    lsm bench compression [--num 1000000] [--codecs none,zlib,zstd,lz4] [--repeat 3] [--reads N] [--json]

The same ``--num`` rows go into one SST per codec: 16-byte zero-padded decimal keys in order, as
db_bench's, and ``--value-size`` values from db_bench's compressible generator (`make_values`,
``--compression-ratio`` 0.5), picked from its pool at random (seeded), so that neighbouring rows hold
values as unrelated as a fillrandom store's SSTs do: taking them in pool order would put overlapping cuts
of one buffer side by side, which compress far better than a real store's values. The SST is written
through the column path the flushes and compactions use (`SstWriter.extend_columns`), 4 KiB blocks,
bloom filter, fsync included.

Figures, per codec, each the median of ``--repeat`` runs (the codecs take turns within a run, so a burst
of load on a shared machine hits them alike):

- ``file_bytes``: the SST's size; ``vs_none``: that size over the uncompressed SST's (1.0 for none).
- ``write_mb_s``: keys and values (MiB) over the wall time of building and writing the SST.
- ``scan_mb_s``: keys and values (MiB) over the wall time of iterating the whole SST (every block read,
  checked, decompressed and decoded; no block cache).
- ``get_us``: wall microseconds per point read of a random stored key (``--reads`` of them), with no
  block cache: each read decompresses its block, as a read that misses the cache does, and that is
  where an object store's reads spend the codec.
- ``write_cpu_mb_s``, ``scan_cpu_mb_s``, ``get_cpu_us``: the same over CPU time (this process and its
  children), the steadier figure on a shared machine (the table's ``cpu`` columns).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import statistics
import tempfile
from typing import Any

from tools.bench.harness import (
    DEFAULT_SEED,
    KEY_SIZE,
    add_value_options,
    make_values,
    settle_gc,
    split_list,
    timed_call,
)
from tools.render import int_arg, print_text, table

CODECS = ("none", "zlib", "zstd", "lz4")
T0 = 1_700_000_000_000
# the table's columns; "cpu" columns divide by CPU seconds instead of wall seconds
HEADERS = ("codec", "file_bytes", "vs_none", "write_MB/s", "cpu", "scan_MB/s", "cpu", "get_us", "cpu_us")
FIGURES = (
    "file_bytes",
    "vs_none",
    "write_mb_s",
    "scan_mb_s",
    "get_us",
    "write_cpu_mb_s",
    "scan_cpu_mb_s",
    "get_cpu_us",
)


def parser() -> argparse.ArgumentParser:
    """The compression suite's options (``lsm bench compression --help``)."""
    p = argparse.ArgumentParser(
        prog="lsm bench compression",
        description="Each SST block codec's file size, write and full-scan MB/s and point-read time on the "
        "same rows (medians of --repeat runs).",
    )
    p.add_argument("--num", type=int_arg(1), default=1_000_000, help="rows (default 1000000)")
    add_value_options(p)
    p.add_argument(
        "--codecs",
        type=codec_list,
        default=list(CODECS),
        help=f"comma-separated codecs, from {', '.join(CODECS)} (default all; none is always measured, "
        "since vs_none needs it)",
    )
    p.add_argument(
        "--reads", type=int_arg(1), default=None, help="point reads per run (default min(--num, 100000))"
    )
    p.add_argument(
        "--repeat", type=int_arg(1), default=3, help="runs; each figure is their median (default 3)"
    )
    p.add_argument("--block-bytes", type=int_arg(64), default=4096, help="SST data block size (default 4096)")
    p.add_argument(
        "--dir",
        default=None,
        help="where to write the SSTs, <codec>.sst, kept after the last run (default: a temp dir, removed after)",
    )
    p.add_argument("--seed", type=int_arg(None), default=DEFAULT_SEED)
    p.add_argument("--json", action="store_true", help="print a JSON list, one object per codec")
    return p


def codec_list(text: str) -> list[str]:
    """``--codecs``: known names, none first (every ratio is against it), each once."""
    names = split_list(text)
    unknown = [n for n in names if n not in CODECS]
    if unknown or not names:
        given = ", ".join(unknown) or "(none given)"
        raise argparse.ArgumentTypeError(f"unknown codec {given}; known: {', '.join(CODECS)}")
    return ["none"] + [c for c in CODECS[1:] if c in names]


def bench_rows(a: argparse.Namespace) -> tuple[list[bytes], list[int], list[int], list[bytes], int]:
    """(keys, seqs, tss, values, key and value bytes) of the rows every codec writes."""
    pool = make_values(a.value_size, a.compression_ratio, a.seed)
    rng = random.Random(a.seed)
    keys = [b"%016d" % i for i in range(a.num)]
    values = [pool[rng.randrange(len(pool))] for _ in range(a.num)]
    seqs = list(range(1, a.num + 1))
    tss = [T0 + i for i in range(a.num)]
    return keys, seqs, tss, values, (KEY_SIZE + a.value_size) * a.num


def one_run(path: str, codec: str, rows: tuple, probes: list[bytes], block_bytes: int) -> dict[str, float]:
    """Write the SST with `codec`, scan it, read `probes` from it: the run's raw figures, each by wall
    time and by CPU time (the steadier one on a shared machine: it does not count waiting for a core)."""
    from formats.sst import SstReader, SstWriter

    keys, seqs, tss, values, user_bytes = rows
    mib = user_bytes / 1048576

    def write() -> Any:
        w = SstWriter(path, block_bytes=block_bytes, compression=codec, creation_timestamp=T0)
        w.extend_columns(keys, seqs, tss, None, values)
        return w.finish()

    settle_gc()
    wt, info = timed_call(write)
    with SstReader(path) as r:  # no block cache: every block read is decompressed again
        st, n = timed_call(lambda: sum(1 for _ in r))
        get = r.get
        gt, found = timed_call(lambda: sum(get(k) is not None for k in probes))
    if n != len(keys) or found != len(probes):
        raise RuntimeError(f"{codec}: read back {n} rows and found {found} of {len(probes)} keys")
    return {
        "file_bytes": info.file_size,
        "write_mb_s": mib / wt.seconds,
        "scan_mb_s": mib / st.seconds,
        "get_us": gt.seconds * 1e6 / len(probes),
        "write_cpu_mb_s": mib / max(wt.cpu_seconds, 1e-9),
        "scan_cpu_mb_s": mib / max(st.cpu_seconds, 1e-9),
        "get_cpu_us": gt.cpu_seconds * 1e6 / len(probes),
    }


def main(argv: list[str]) -> int:
    """Every codec's figures, medians of --repeat runs, as a table or (``--json``) a list."""
    a = parser().parse_args(argv)
    rows = bench_rows(a)
    reads = a.reads if a.reads is not None else min(a.num, 100_000)
    rng = random.Random(a.seed + 1)
    probes = [rows[0][rng.randrange(a.num)] for _ in range(reads)]
    tmp = a.dir or tempfile.mkdtemp(prefix="lsm-bench-compression-")
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in a.codecs}
    try:
        os.makedirs(tmp, exist_ok=True)
        for rep in range(a.repeat):
            for codec in a.codecs:
                path = os.path.join(tmp, f"{codec}.sst")
                runs[codec].append(one_run(path, codec, rows, probes, a.block_bytes))
                if rep < a.repeat - 1:  # every run creates its file afresh; --dir keeps the last ones
                    os.unlink(path)
    finally:
        gc.unfreeze()  # settle_gc froze the rows for the timed spans
        if a.dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    none_bytes = statistics.median(r["file_bytes"] for r in runs["none"])
    report: list[dict[str, Any]] = []
    for codec in a.codecs:
        med = {k: statistics.median(r[k] for r in runs[codec]) for k in FIGURES if k != "vs_none"}
        med["file_bytes"] = int(med["file_bytes"])
        med["vs_none"] = med["file_bytes"] / none_bytes
        report.append({"codec": codec, **med, "runs": runs[codec]})
    if a.json:
        print(json.dumps(report, indent=1))
        return 0
    print_text(
        table(
            HEADERS,
            [
                (
                    r["codec"],
                    r["file_bytes"],
                    f"{r['vs_none']:.3f}",
                    f"{r['write_mb_s']:.1f}",
                    f"{r['write_cpu_mb_s']:.1f}",
                    f"{r['scan_mb_s']:.1f}",
                    f"{r['scan_cpu_mb_s']:.1f}",
                    f"{r['get_us']:.2f}",
                    f"{r['get_cpu_us']:.2f}",
                )
                for r in report
            ],
        )
    )
    print_text(
        f"{a.num} rows (16-byte keys, {a.value_size}-byte values, compression ratio {a.compression_ratio}), "
        f"{a.block_bytes}-byte blocks, {reads} point reads without a block cache; medians of {a.repeat} "
        f"run{'s' if a.repeat != 1 else ''}; MB/s are MiB of keys and values per second of wall time, "
        "cpu the same per second of CPU time"
    )
    return 0
