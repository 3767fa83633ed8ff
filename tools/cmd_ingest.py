"""``lsm ingest`` (load a partitioned log into a database, exactly once) and ``lsm remap`` (its progress).

``lsm ingest DB DIR --name N`` opens DB writable (fencing any other writer), reads the complete records of
the `lsm.sources.PartitionedLog` in DIR beyond the durable frontier of remap N and commits them in
batches, each one atomic with its binding (see lsm/ingest.py). Progress goes to stderr while it runs (at
most twice a second); the summary goes to stdout. ``--follow`` keeps tailing the log until interrupted:
Ctrl-C (SIGINT) or SIGTERM stops it between two batches, closes the database cleanly and exits 0.

``lsm remap DB NAME`` opens DB read-only and prints the progress relation of remap NAME: one row per
partition per binding, (time, seq, partition, next offset). ``--as-of TIME`` prints the binding in force
at TIME, ``--offset P:O`` the binding in which record O of partition P became visible; either exits 1
when there is none (``--json`` still prints the object, with a null binding). Times are printed as RFC
3339 and epoch ms.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from typing import Any

from tools import render

EXIT_NONE = 1


def register(sub: argparse._SubParsersAction) -> None:
    ing = sub.add_parser(
        "ingest",
        help="load a partitioned log (lsm log write) into a database, exactly once; --follow tails it",
        description="Apply the records of the partitioned log in DIR that remap NAME has not applied yet, "
        "in batches, each one atomic commit of its rows and its binding (time, seq, {partition: next "
        "offset}): a crash at any point loses nothing and applies nothing twice, and the next run resumes "
        "from the durable frontier. Records of one transaction land in one batch; an unfinished trailing "
        "transaction waits. Opens DB writable: a process writing to it is fenced. Progress goes to stderr, "
        "the summary to stdout.",
    )
    ing.add_argument("path", metavar="DB")
    ing.add_argument("log", metavar="DIR", help="the directory of the partitioned log")
    ing.add_argument("--name", required=True, help="the remap name (one per source)")
    ing.add_argument("--follow", action="store_true", help="keep tailing the log until Ctrl-C")
    ing.add_argument(
        "--interval", type=render.int_arg(1), default=200, metavar="MS", help="--follow polls every MS (200)"
    )
    ing.add_argument(
        "--batch-records",
        type=render.int_arg(1),
        default=10_000,
        metavar="N",
        help="records per batch (10000)",
    )
    ing.add_argument("--max-records", type=render.int_arg(0), metavar="N", help="stop after about N records")
    ing.add_argument(
        "--ttl-base",
        choices=("commit", "event"),
        default="commit",
        help="record TTLs count from the commit time (default) or from the record's event_ts",
    )
    ing.add_argument(
        "--history-retention",
        type=render.int_arg(0),
        default=0,
        metavar="MS",
        help="DbOptions.history_retention: old versions and remap bindings younger than MS stay queryable",
    )
    ing.add_argument(
        "--engine",
        choices=("stream", "local", "spark"),
        default="stream",
        help="stream (default): batches through the write path; local or spark: a bulk load, every new "
        "record in one commit, written to SSTs by parallel tasks (threads here, or Spark tasks)",
    )
    ing.add_argument(
        "--master", metavar="URL", help="Spark master for --engine spark (default local[*]), e.g. local[2]"
    )
    ing.add_argument(
        "--tasks",
        type=render.int_arg(1),
        metavar="K",
        help="bulk load slices (tasks); default: the CPUs (local) or Spark's default parallelism",
    )
    render.add_output_args(ing, bytes_args=False)
    ing.set_defaults(func=cmd_ingest)

    rm = sub.add_parser(
        "remap",
        help="the progress of an ingested source: bindings of store time to source offsets",
        description="Print the progress relation of remap NAME, oldest binding first: time (RFC 3339 and "
        "epoch ms), seq, partition and next offset to read, one row per partition per binding. The store "
        "at a binding's seq holds exactly the records below its offsets. Bindings older than the history "
        "retention window are consolidated into the first one (its time is 'since'); lookups before since "
        "fail. Opens the database read-only.",
    )
    rm.add_argument("path", metavar="DB")
    rm.add_argument("name", metavar="NAME")
    g = rm.add_mutually_exclusive_group()
    g.add_argument("--as-of", type=render.time_arg, metavar="TIME", help="the binding in force at TIME")
    g.add_argument(
        "--offset", type=_offset_arg, metavar="P:O", help="the binding that made record P:O visible"
    )
    render.add_output_args(rm, bytes_args=False)
    rm.set_defaults(func=cmd_remap)


def _offset_arg(text: str) -> tuple[int, int]:
    p, sep, o = text.partition(":")
    try:
        if not sep:
            raise ValueError
        part, off = int(p), int(o)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not PARTITION:OFFSET (e.g. 0:42)") from None
    if part < 0 or off < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: partition and offset must be >= 0")
    return part, off


# -- ingest -------------------------------------------------------------------------------------------
def _plural(n: int, word: str, plural: str | None = None) -> str:
    """``1 batch``, ``3 batches``."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


class _Progress:
    """Progress of an ingest on stderr after every batch: records, batches, records per second and the
    frontier. On a terminal one line redrawn in place (a tqdm counter, `tools.bench.harness.progress_bar`),
    cleared by `close`; otherwise (a pipe, a log, or JSON lines with --json) a line at most every `every`
    seconds and one after the last batch of every pass, so the end is always shown."""

    def __init__(self, name: str, as_json: bool, every: float = 0.5) -> None:
        self.name, self.as_json, self.every = name, as_json, every
        self.base_records = self.base_batches = 0
        self.last = 0.0
        self.shown = (0, 0)  # the totals of the last line: the end of a pass is not shown twice
        self.t0 = time.monotonic()
        self.bar: Any = None
        if not as_json and sys.stderr.isatty():
            from tools.bench.harness import _NoBar, progress_bar

            bar = progress_bar(True, None, f"ingest {name}", unit="rec")
            self.bar = None if isinstance(bar, _NoBar) else bar  # no tqdm: lines

    def __call__(self, stats: Any) -> None:
        """db.ingest's callback after each batch, with the totals of its pass so far."""
        self._show(self.base_records + stats.records, self.base_batches + stats.batches, stats.frontier)

    def _show(self, records: int, batches: int, frontier_d: dict[int, int], force: bool = False) -> None:
        frontier = " ".join(f"{p}:{o}" for p, o in sorted(frontier_d.items())) or "-"
        if self.bar is not None:  # every batch: tqdm redraws at most every 0.1 s itself
            self.bar.set_postfix_str(
                f"{_plural(batches, 'batch', 'batches')}, frontier {frontier}", refresh=False
            )
            self.bar.update(records - self.bar.n)
            return
        now = time.monotonic()
        if (not force and now - self.last < self.every) or (records, batches) == self.shown:
            return
        self.last, self.shown = now, (records, batches)
        if self.as_json:
            line = json.dumps(
                {
                    "progress": self.name,
                    "records": records,
                    "batches": batches,
                    "frontier": {str(p): o for p, o in frontier_d.items()},
                }
            )
        else:
            rate = records / max(now - self.t0, 1e-9)
            line = (
                f"ingest {self.name}: {_plural(records, 'record')}, {_plural(batches, 'batch', 'batches')}, "
                f"{rate:,.0f} rec/s, frontier {frontier}"
            )
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def add(self, stats: Any) -> None:
        """One pass of db.ingest ended with `stats`: count it, and show where it ended (when it applied
        anything: an idle poll of --follow stays quiet)."""
        self.base_records += stats.records
        self.base_batches += stats.batches
        if stats.records:
            self._show(self.base_records, self.base_batches, stats.frontier, force=True)

    def close(self) -> None:
        """Clear the terminal's progress line (the summary follows)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def cmd_ingest(args: argparse.Namespace) -> int:
    import os

    import lsm
    from lsm.sources import PartitionedLog

    if not os.path.isdir(args.log):
        raise ValueError(f"{args.log}: no such log directory")
    if args.engine != "stream":
        return _bulk(args)
    if args.master is not None or args.tasks is not None:
        raise ValueError("--master and --tasks apply to --engine local or spark only")
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)} if args.follow else {}
    progress = _Progress(args.name, args.json)
    t0 = time.monotonic()
    try:
        with lsm.DB.open(args.path, lsm.DbOptions(history_retention=args.history_retention)) as db:
            log = PartitionedLog(args.log)
            left = args.max_records
            while True:
                stats = db.ingest(
                    log,
                    name=args.name,
                    max_records=left,
                    batch_records=args.batch_records,
                    ttl_base=args.ttl_base,
                    progress=progress,
                    should_stop=stop.is_set,
                )
                progress.add(stats)
                if left is not None:
                    left -= stats.records
                if not args.follow or stop.is_set() or left == 0:
                    break
                if not stats.records:
                    stop.wait(args.interval / 1000)
                if stop.is_set():
                    break
            frontier = stats.frontier
            seq = db.seq
    finally:
        progress.close()
        for s, h in old.items():
            signal.signal(s, h)
    elapsed = time.monotonic() - t0
    summary = {
        "name": args.name,
        "records": progress.base_records,
        "batches": progress.base_batches,
        "frontier": {str(p): o for p, o in sorted(frontier.items())},
        "seq": seq,
        "seconds": round(elapsed, 3),
        "interrupted": stop.is_set(),
    }
    if args.json:
        render.print_json(summary)
    else:
        render.print_text(
            render.properties(
                [
                    ("name", args.name),
                    ("records", summary["records"]),
                    ("batches", summary["batches"]),
                    ("frontier", " ".join(f"{p}:{o}" for p, o in sorted(frontier.items())) or "-"),
                    ("seq", seq),
                    ("seconds", f"{elapsed:.3f}"),
                    ("stopped by", "signal" if stop.is_set() else "end of log"),
                ]
            )
        )
    return 0


def _bulk(args: argparse.Namespace) -> int:
    """``--engine local|spark``: one bulk load (lsm.bulk), then the same summary as a streaming ingest."""
    import os
    import tempfile

    import lsm
    from lsm.sources import PartitionedLog
    from tools.common import SparkCompactionError, SparkStartError, start_spark, stderr_to

    if args.follow or args.max_records is not None:
        raise ValueError("--follow and --max-records apply to --engine stream only (a bulk load takes all)")
    if args.master is not None and args.engine != "spark":
        raise ValueError("--master applies to --engine spark only")
    session = None
    log = None
    t0 = time.monotonic()
    try:
        # the database first: a bad path fails before a JVM is started
        with lsm.DB.open(args.path, lsm.DbOptions(history_retention=args.history_retention)) as db:
            if args.engine == "spark":
                fd, log = tempfile.mkstemp(prefix="lsm-ingest-spark-", suffix=".log")
                try:
                    with stderr_to(fd):  # the JVM and its workers log there, not on our stderr
                        session = start_spark(args.master or "local[*]")
                except SparkStartError as e:
                    raise SparkStartError(f"{e} (Spark log: {log})") from None
                finally:
                    os.close(fd)
            stats = db.ingest(
                PartitionedLog(args.log),
                name=args.name,
                ttl_base=args.ttl_base,
                engine=args.engine,
                spark=session,
                tasks=args.tasks,
            )
            seq = db.seq
    except SparkStartError:
        raise
    except lsm.LsmError as e:
        if log is None:
            raise
        raise SparkCompactionError(f"{e} (Spark log: {log})") from e
    finally:
        if session is not None:
            session.stop()
    if log is not None:
        os.unlink(log)
    elapsed = time.monotonic() - t0
    frontier = stats.frontier
    summary = {
        "name": args.name,
        "engine": args.engine,
        "records": stats.records,
        "batches": stats.batches,
        "frontier": {str(p): o for p, o in sorted(frontier.items())},
        "seq": seq,
        "seconds": round(elapsed, 3),
        "interrupted": False,
    }
    if args.json:
        render.print_json(summary)
    else:
        render.print_text(
            render.properties(
                [
                    ("name", args.name),
                    ("engine", args.engine),
                    ("records", stats.records),
                    ("batches", stats.batches),
                    ("frontier", _frontier_text(frontier)),
                    ("seq", seq),
                    ("seconds", f"{elapsed:.3f}"),
                ]
            )
        )
    return 0


# -- remap --------------------------------------------------------------------------------------------
def _binding_json(b: Any) -> dict[str, Any] | None:
    if b is None:
        return None
    return {
        "ts": b.ts,
        "ts_rfc3339": render.rfc3339(b.ts),
        "seq": b.seq,
        "frontier": {str(p): o for p, o in sorted(b.frontier.items())},
    }


def cmd_remap(args: argparse.Namespace) -> int:
    from tools.cmd_time import open_read_only

    with open_read_only(args.path) as db:
        r = db.remap(args.name)
    if args.as_of is not None or args.offset is not None:
        if args.as_of is not None:
            b = r.as_of(args.as_of)
            query: dict[str, Any] = {"as_of": args.as_of, "as_of_rfc3339": render.rfc3339(args.as_of)}
            missing = f"remap {args.name!r} has no binding at or before {render.rfc3339(args.as_of)}"
        else:
            p, o = args.offset
            b = r.binding_for(p, o)
            query = {"partition": p, "offset": o}
            missing = (
                f"record {p}:{o} is not in remap {args.name!r} yet (frontier {_frontier_text(r.frontier)})"
            )
        if args.json:
            render.print_json({"name": args.name, **query, "since": r.since, "binding": _binding_json(b)})
        elif b is not None:
            render.print_text(
                render.properties(
                    [
                        ("time", render.time_detail(b.ts)),
                        ("seq", b.seq),
                        ("frontier", _frontier_text(b.frontier)),
                    ]
                )
            )
        if b is None:
            if not args.json:
                render.error(missing)
            return EXIT_NONE
        return 0
    rows = [(b.ts, b.seq, p, off) for b in r.bindings() for p, off in sorted(b.frontier.items())]
    if args.json:
        render.print_json(
            {
                "name": args.name,
                "since": r.since,
                "since_rfc3339": render.rfc3339(r.since),
                "frontier": {str(p): o for p, o in sorted(r.frontier.items())},
                "bindings": len(r),
                "rows": [
                    {"ts": ts, "ts_rfc3339": render.rfc3339(ts), "seq": seq, "partition": p, "offset": off}
                    for ts, seq, p, off in rows
                ],
            }
        )
        return 0
    head = render.properties(
        [
            ("name", args.name),
            ("bindings", len(r)),
            ("frontier", _frontier_text(r.frontier)),
            ("since", render.time_detail(r.since)),
        ]
    )
    body = render.table(
        ("time", "ts_ms", "seq", "partition", "offset"),
        [(render.rfc3339(ts), ts, s, p, o) for ts, s, p, o in rows],
    )
    render.print_text(head + "\n\n" + body)
    return 0


def _frontier_text(frontier: dict[int, int]) -> str:
    return " ".join(f"{p}:{o}" for p, o in sorted(frontier.items())) or "-"


__all__ = ["register", "cmd_ingest", "cmd_remap"]
