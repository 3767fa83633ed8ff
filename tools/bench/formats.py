"""``lsm bench formats``: rates of the formats package, with no engine around it.

One line per figure, on ``--num`` rows with 16-byte keys and ``--value-size`` values: the row codec v1
encode and decode (with and without the TimeToLive feature), writing an SST (fsync included) and
scanning it back. Before each figure the prepared rows are frozen out of the garbage collector's view
(`settle_gc`): they belong to the harness, and collections scanning them would be charged to the figure.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import tempfile

from tools.bench.harness import (
    CHUNK,
    DEFAULT_SEED,
    Result,
    make_values,
    print_results,
    settle_gc,
    timed_call,
    timed_chunks,
    timed_scan,
)
from tools.render import int_arg


def parser() -> argparse.ArgumentParser:
    """The formats suite's options (``lsm bench formats --help``)."""
    p = argparse.ArgumentParser(
        prog="lsm bench formats",
        description="Rates of the formats package: row codec v1 encode/decode, SST write and full scan.",
    )
    p.add_argument("--num", type=int_arg(1), default=1_000_000, help="rows (default 1000000)")
    p.add_argument(
        "--value-size", type=int_arg(0), default=100, help="value bytes (default 100); keys are 16 bytes"
    )
    p.add_argument("--block-bytes", type=int_arg(1), default=4096, help="SST data block size (default 4096)")
    p.add_argument("--dir", default=None, help="where to write the SST (default: a temp dir, removed after)")
    p.add_argument("--seed", type=int_arg(None), default=DEFAULT_SEED)
    p.add_argument("--json", action="store_true", help="print a JSON list of results instead of lines")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (also off when not a TTY)")
    return p


def row_codec_figures(rows: list[tuple], progress: bool) -> list[Result]:
    """row_encode/row_decode, and the same with the TimeToLive feature (every row with an expire_ts)."""
    from formats.row import RowFeature, codec_for

    F = RowFeature
    ttl_rows = [(k, s, t, t + 3_600_000, v) for k, s, t, _e, v in rows]
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
    return results


def sst_figures(
    rows: list[tuple], directory: str, block_bytes: int, ts0: int, progress: bool
) -> list[Result]:
    """sst_write (write_sst with fsync) of `rows` into `directory`, then sst_scan of that file."""
    from formats.sst import SstReader, write_sst

    path = os.path.join(directory, "bench.sst")
    settle_gc()
    t, info = timed_call(lambda: write_sst(path, rows, block_bytes=block_bytes, creation_timestamp=ts0))
    note = f"write_sst, block {block_bytes} B, {info.num_blocks} blocks, {info.file_size} B file, fsync"
    results = [
        Result(
            "formats", "sst_write", len(rows), t.seconds, info.file_size, note=note, cpu_seconds=t.cpu_seconds
        )
    ]
    with SstReader(path) as r:
        settle_gc()
        t, n = timed_scan(progress, "sst_scan", info.num_rows, iter(r))
    note = "SstReader, no block cache"
    results.append(
        Result("formats", "sst_scan", n, t.seconds, info.file_size, note=note, cpu_seconds=t.cpu_seconds)
    )
    return results


def main(argv: list[str]) -> int:
    """Row codec encode/decode rates (v1; with and without TimeToLive), SST write MB/s, SST full scan."""
    a = parser().parse_args(argv)
    progress = not a.no_progress
    values = make_values(a.value_size, 0.5, a.seed)
    nvals = len(values)
    ts0 = 1_700_000_000_000
    rows = [(b"%016d" % i, i + 1, ts0 + i, None, values[i % nvals]) for i in range(a.num)]
    tmp = a.dir or tempfile.mkdtemp(prefix="lsm-bench-formats-")
    try:
        results = row_codec_figures(rows, progress)
        os.makedirs(tmp, exist_ok=True)
        results += sst_figures(rows, tmp, a.block_bytes, ts0, progress)
    finally:
        gc.unfreeze()
        if a.dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    print_results(results, a.json)
    return 0
