"""``lsm bench ingest`` (or ``python -m tools.bench.ingest``): what reclocked ingest costs.

Two figures:

1. Throughput. ``--num`` records (16-byte keys, ``--value-size`` byte values, round-robin over
   ``--partitions`` partitions) are written to a `PartitionedLog` first (not timed). Then, each on a fresh
   database with the same options, in one run:

   * ``ingest``: ``db.ingest(PartitionedLog(dir), name=..., batch_records=B)``: reads and decodes the
     log, commits each batch with its binding (one WAL record, fsynced);
   * ``write``: the same records, already in memory, through ``db.write(WriteBatch, sync=True)`` in
     batches of B: the store's own batched write path, the target's yardstick;
   * ``read+write``: the same, reading the records from the log in the loop (``PartitionedLog.read``,
     one `SourceRecord` each). Ingest reads the same records as plain tuples (``read_runs``), so
     ``ingest / read+write`` below 1 is the remap's cost minus what skipping the objects saves.

   Each is run ``--runs`` times; medians of records/s (wall) and of CPU µs per record are reported,
   with ``ingest / write`` (the issue's target: at most 1.3x) and ``ingest / read+write``.
2. Resume cost against history. Databases holding H bindings (H in ``--histories``; built with
   one-record batches, flushed to SSTs) are reopened and one more record is ingested; the time of that
   ingest call (finding the durable frontier: one reverse seek, never a scan of the remap) is the
   median of ``--runs``, next to ``db.remap(name)`` (which does read every binding) for contrast. The
   frontier lookup alone (the reverse seek) is timed separately: the first ingest call also indexes the
   log file (`PartitionedLog` verifies every record once per instance), which grows with the log.
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
from typing import TYPE_CHECKING, Any

from tools import render

if TYPE_CHECKING:  # the engine is imported inside the functions: `lsm bench` imports every suite
    import lsm

YEAR = 365 * 86_400_000


def _value(i: int, size: int) -> bytes:
    head = b"%d:" % i
    return (head + b"v" * size)[:size]


def write_log(directory: str, num: int, parts: int, value_size: int) -> None:
    """Append `num` records round-robin over `parts` partitions of a new log in `directory`."""
    from lsm.sources import LogWriter

    with LogWriter(directory) as w:
        for i in range(num):
            w.append(i % parts, b"%016d" % ((i * 2654435761) % (num * 4)), _value(i, value_size))


def _fresh(path: str) -> lsm.DB:
    import lsm

    shutil.rmtree(path, ignore_errors=True)
    return lsm.DB.open(path, lsm.DbOptions(background_compaction=False))


def _timed(fn) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def run_throughput(base: str, num: int, parts: int, value_size: int, batch: int, runs: int) -> dict[str, Any]:
    """Figure 1: ingest, write and read+write of the same records, `runs` times each; medians."""
    import lsm
    from lsm.sources import PartitionedLog

    log_dir = os.path.join(base, "log")
    write_log(log_dir, num, parts, value_size)
    log = PartitionedLog(log_dir)
    records = [r for p in log.partitions() for r in log.read(p, 0)]
    sync = lsm.WriteOptions(sync=True)

    def write_batches(recs) -> None:
        b = lsm.WriteBatch()
        for r in recs:
            if r.value is None:
                b.delete(r.key)
            else:
                b.put(r.key, r.value)
            if len(b) >= batch:
                db.write(b, sync)
                b = lsm.WriteBatch()
        if len(b):
            db.write(b, sync)

    def ingest() -> None:
        stats = db.ingest(PartitionedLog(log_dir), name="bench", batch_records=batch)
        assert stats.records == num

    def write() -> None:
        write_batches(records)

    def read_write() -> None:
        src = PartitionedLog(log_dir)
        write_batches(r for p in src.partitions() for r in src.read(p, 0))

    out: dict[str, Any] = {}
    samples: dict[str, list[tuple[float, float]]] = {"ingest": [], "write": [], "read+write": []}
    for _ in range(runs):
        for name, fn in (("write", write), ("ingest", ingest), ("read+write", read_write)):
            db = _fresh(os.path.join(base, "db"))
            try:
                samples[name].append(_timed(fn))
            finally:
                db.close()
    for name, s in samples.items():
        wall = statistics.median(x[0] for x in s)
        cpu = statistics.median(x[1] for x in s)
        out[name] = {"records_per_s": num / wall, "wall_s": wall, "cpu_us_per_record": cpu * 1e6 / num}
    out["ingest_over_write"] = out["ingest"]["wall_s"] / out["write"]["wall_s"]
    out["ingest_over_read_write"] = out["ingest"]["wall_s"] / out["read+write"]["wall_s"]
    out["ingest_over_write_cpu"] = out["ingest"]["cpu_us_per_record"] / out["write"]["cpu_us_per_record"]
    return out


def run_resume(base: str, histories: list[int], runs: int) -> list[dict[str, Any]]:
    """Figure 2: the cost of resuming against remaps of each length in `histories`."""
    import lsm
    from lsm.ingest import durable_head
    from lsm.sources import LogWriter, PartitionedLog

    rows = []
    for h in histories:
        log_dir = os.path.join(base, f"log-{h}")
        path = os.path.join(base, f"db-{h}")
        with LogWriter(log_dir) as w:
            for i in range(h):
                w.append(0, b"%016d" % i, b"x" * 16)
        log = PartitionedLog(log_dir)
        # batches of one millisecond merge into one binding: a clock moved by each batch keeps h bindings
        clock = lsm.ManualClock(time.time_ns() // 1_000_000)
        opts = lsm.DbOptions(clock=clock, background_compaction=False, history_retention=YEAR)  # no remap compaction
        with lsm.DB.open(path, opts) as db:
            db.ingest(log, name="r", batch_records=1, sync=False, progress=lambda _s, c=clock: c.advance(1))  # h bindings
            db.flush()
        head, resume, remap = [], [], []
        for i in range(runs):
            with LogWriter(log_dir) as w:
                w.append(0, b"next%012d" % i, b"y")
            clock.advance(1)
            with lsm.DB.open(path, opts) as db:
                t0 = time.perf_counter()
                frontier = durable_head(db, "r").frontier
                t1 = time.perf_counter()
                stats = db.ingest(PartitionedLog(log_dir), name="r")
                t2 = time.perf_counter()
                head.append(t1 - t0)
                resume.append(t2 - t0)
                assert frontier == {0: h + i}
                assert stats.records == 1
                t0 = time.perf_counter()
                n = len(db.remap("r"))
                remap.append(time.perf_counter() - t0)
                assert n == h + i + 1
        rows.append(
            {
                "bindings": h,
                "frontier_ms_median": statistics.median(head) * 1000,
                "resume_ms_median": statistics.median(resume) * 1000,
                "remap_read_ms_median": statistics.median(remap) * 1000,
            }
        )
    return rows


def report(r: dict[str, Any]) -> str:
    t = r["throughput"]
    lines = [
        f"ingest: {r['num']} records, {r['partitions']} partitions, {r['value_size']} B values, batches of "
        f"{r['batch']}, fsync per batch; medians of {r['runs']} runs",
        f"  {'path':<12} {'records/s':>12} {'wall s':>9} {'CPU us/rec':>11}",
    ]
    for name in ("write", "read+write", "ingest"):
        x = t[name]
        lines.append(
            f"  {name:<12} {x['records_per_s']:>12,.0f} {x['wall_s']:>9.3f} {x['cpu_us_per_record']:>11.2f}"
        )
    verdict = "ok" if t["ingest_over_write"] <= 1.3 else "over target"
    lines += [
        f"  ingest / write       {t['ingest_over_write']:.2f}x wall, {t['ingest_over_write_cpu']:.2f}x CPU "
        f"(target <= 1.3x: {verdict})",
        f"  ingest / read+write  {t['ingest_over_read_write']:.2f}x (same log reading, but read() builds a "
        "SourceRecord per record)",
        "",
        "resume: reopen; find the durable frontier (one reverse seek); ingest one more record (the call also",
        "indexes the log file, O(log length), in PartitionedLog); db.remap() reads every binding, for contrast",
        f"  {'bindings':>9} {'frontier ms':>12} {'first ingest ms':>16} {'db.remap() ms':>14}",
    ]
    for row in r["resume"]:
        lines.append(
            f"  {row['bindings']:>9} {row['frontier_ms_median']:>12.3f} {row['resume_ms_median']:>16.2f} "
            f"{row['remap_read_ms_median']:>14.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="lsm bench ingest",
        description="Records/s of db.ingest from a PartitionedLog against db.write batches of the same records, "
        "and the cost of resuming against the length of the remap's history.",
    )
    p.add_argument("--num", type=render.int_arg(1), default=200_000, help="records (default 200000)")
    p.add_argument("--partitions", type=render.int_arg(1), default=4)
    p.add_argument("--value-size", type=render.int_arg(1), default=100)
    p.add_argument(
        "--batch-records", type=render.int_arg(1), default=10_000, help="records per batch (default 10000)"
    )
    p.add_argument(
        "--runs", type=render.int_arg(1), default=3, help="runs per figure; medians are reported (default 3)"
    )
    p.add_argument(
        "--histories",
        default="100,1000,10000",
        help="remap lengths for the resume figure (default 100,1000,10000)",
    )
    p.add_argument("--dir", help="work directory (default: a temp dir, removed after)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        histories = [int(x) for x in a.histories.split(",") if x]
    except ValueError:
        p.error("--histories is a comma list of integers")
    if not histories or min(histories) < 1:
        p.error("--histories needs integers >= 1")
    base = a.dir or tempfile.mkdtemp(prefix="lsm-bench-ingest-")
    os.makedirs(base, exist_ok=True)
    try:
        r = {
            "num": a.num,
            "partitions": a.partitions,
            "value_size": a.value_size,
            "batch": a.batch_records,
            "runs": a.runs,
            "throughput": run_throughput(base, a.num, a.partitions, a.value_size, a.batch_records, a.runs),
            "resume": run_resume(base, histories, a.runs),
        }
    finally:
        if not a.dir:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(r, indent=1) if a.json else report(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
