"""``lsm ingest`` (load a partitioned log into a database, exactly once) and ``lsm remap`` (its progress).

``lsm ingest DB DIR --name N`` opens DB writable (fencing any other writer), reads the complete records of
the `lsm.sources.PartitionedLog` in DIR (or of the source ``--source KIND`` opens on its SOURCE argument:
``database-log`` or an adapter ``package.module:Factory``, lsm.sources.registry) beyond the durable
frontier of remap N and commits them in
batches, each one atomic with its binding (see lsm/ingest.py). Progress goes to stderr while it runs (at
most twice a second); the summary goes to stdout. ``--follow`` keeps tailing the log until interrupted:
Ctrl-C (SIGINT) or SIGTERM stops it between two batches, closes the database cleanly and exits 0.

``lsm remap DB`` opens DB read-only and lists its ingested sources: name, binding count, frontier, since
and the newest binding's time. ``lsm remap DB NAME`` prints the progress relation of remap NAME: one row
per partition per binding, (time, seq, partition, next_offset: the next offset to read), oldest binding
first, after a header with the records and transactions pending in its TEMP collection (transactions not
complete yet); ``--limit N`` keeps the newest N bindings, newest first; ``--partition P`` keeps partition P's rows.
``--as-of TIME`` prints the binding in force at TIME, ``--offset P:O`` the binding in which record O of
partition P became visible; either exits 1 when there is none (``--json`` still prints the object, with
a null binding). Times are printed as RFC 3339 and epoch ms.
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
        "from the durable frontier. A transaction, even one across partitions, becomes visible whole in one "
        "batch once complete; until then its records wait in the store (lsm remap shows them). Opens DB writable: a process writing to it is fenced. Progress goes to stderr, "
        "the summary to stdout.",
    )
    ing.add_argument("path", metavar="DB")
    ing.add_argument(
        "log",
        metavar="SOURCE",
        help="what the source reads: the log's directory (partitioned-log, the default), the upstream "
        "database (database-log), or the argument of a --source factory",
    )
    ing.add_argument(
        "--source",
        default="partitioned-log",
        metavar="KIND",
        help="partitioned-log (default), database-log, or package.module:Factory, an adapter called with "
        "SOURCE that returns a lsm.sources.Source (imported with the current directory on the path)",
    )
    ing.add_argument("--name", required=True, help="the remap name (one per source)")
    ing.add_argument("--follow", action="store_true", help="keep tailing the log until Ctrl-C")
    render.add_interval_arg(ing)
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
        "--tx-order",
        choices=("arrival", "commit"),
        default="arrival",
        help="a transaction becomes visible once complete (arrival, default) or once it and every "
        "transaction whose end marker came earlier are (commit)",
    )
    ing.add_argument(
        "--times",
        choices=("store", "source"),
        default="store",
        help="commit times from the store's clock (default) or from the log's own progress markers "
        "(LogWriter.advance): records below the least progress of all partitions commit at it - 1 "
        "(stream engine only)",
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
        help="the ingested sources of a database, or the progress of one: bindings of store time to offsets",
        description="Without NAME: list the ingested sources of DB (name, bindings, frontier, since, the "
        "newest binding's time). With NAME: print the progress relation of remap NAME, oldest binding "
        "first: time (RFC 3339 and epoch ms), seq, partition and next_offset (the next offset to read), one "
        "row per partition per binding. The store at a binding's seq holds exactly the records below its "
        "offsets. Bindings older than the history retention window are consolidated into the first one "
        "(its time is 'since'); lookups before since fail. Opens the database read-only.",
    )
    rm.add_argument("path", metavar="DB")
    rm.add_argument("name", metavar="NAME", nargs="?", help="a source (omit it to list the sources)")
    rm.add_argument(
        "--limit", type=render.int_arg(1), metavar="N", help="only the newest N bindings, newest first"
    )
    rm.add_argument("--partition", type=render.int_arg(0), metavar="P", help="only partition P's rows")
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
                f"{render.plural(batches, 'batch', 'batches')}, frontier {frontier}", refresh=False
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
                f"ingest {self.name}: {render.plural(records, 'record')}, {render.plural(batches, 'batch', 'batches')}, "
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

    fresh = not os.path.lexists(args.path)
    try:
        return _ingest(args)
    except BaseException:
        if fresh:  # a run that fails before it commits anything leaves no database of its own behind
            _remove_unused_store(args.path)
        raise


def _remove_unused_store(path: str) -> None:
    """Remove the store at `path`, which this run created, if it still holds nothing: no SST, every WAL
    segment empty (so no commit: each lives in one or the other), nothing but the store's own
    directories. Its manifest's last_seq may be above 0 without a commit: a bulk load that failed gave
    its reserved seqs up. Anything else (a store some other process wrote to meanwhile) is left alone."""
    import os
    import shutil

    from lsm.errors import LsmError
    from lsm.inspect import DB_ENTRIES, latest_manifest

    try:
        _mid, m = latest_manifest(path)
        wal = os.path.join(path, "wal")
        if m.l0 or m.runs or set(os.listdir(path)) - DB_ENTRIES:
            return
        if any(os.path.getsize(os.path.join(wal, n)) for n in os.listdir(wal)):
            return
    except (OSError, LsmError):  # not (or no longer) a store this run made: leave it
        return
    shutil.rmtree(path, ignore_errors=True)


def _ingest(args: argparse.Namespace) -> int:
    import os

    import lsm
    from lsm.remap_store import check_name
    from lsm.sources import BatchSource
    from lsm.sources.registry import SOURCES, open_source

    # Everything that can be refused is refused before the store is opened: opening it writable fences a
    # running writer, and creates the database directory when there is none.
    check_name(args.name)
    if args.source == "partitioned-log" and not os.path.isdir(args.log):
        raise ValueError(f"{args.log}: no such log directory")
    if args.engine == "stream" and (args.master is not None or args.tasks is not None):
        raise ValueError("--master and --tasks apply to --engine local or spark only")
    if args.engine != "stream" and args.times != "store":
        raise ValueError("--times source applies to --engine stream only (a bulk load commits at one time)")
    if args.source not in SOURCES and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # an adapter of the project at hand, as `python -m` finds it
    log = open_source(args.source, args.log)
    # index every partition now (what the ingest does first anyway, on this same instance, so it costs
    # nothing twice): a partition that cannot be read (not a regular file, damaged, unreadable) fails here
    end_of = log.plan_end if args.engine != "stream" and isinstance(log, BatchSource) else log.end
    for p in log.partitions():
        end_of(p)
    if args.engine != "stream":
        return _bulk(args, log)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)} if args.follow else {}
    progress = _Progress(args.name, args.json)
    t0 = time.monotonic()
    try:
        with lsm.DB.open(args.path, lsm.DbOptions(history_retention=args.history_retention)) as db:
            left = args.max_records
            while True:
                stats = db.ingest(
                    log,
                    name=args.name,
                    max_records=left,
                    batch_records=args.batch_records,
                    ttl_base=args.ttl_base,
                    tx_order=args.tx_order,
                    progress=progress,
                    should_stop=stop.is_set,
                    times=args.times,
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


def _bulk(args: argparse.Namespace, log_source: Any) -> int:
    """``--engine local|spark``: one bulk load (lsm.bulk) of `log_source` (the checked PartitionedLog),
    then the same summary as a streaming ingest."""
    import contextlib

    import lsm
    from tools.common import spark_session_for

    if args.follow or args.max_records is not None:
        raise ValueError("--follow and --max-records apply to --engine stream only (a bulk load takes all)")
    if args.master is not None and args.engine != "spark":
        raise ValueError("--master applies to --engine spark only")
    t0 = time.monotonic()
    # the database first: a bad path fails before a JVM is started
    with lsm.DB.open(args.path, lsm.DbOptions(history_retention=args.history_retention)) as db:
        with contextlib.ExitStack() as stack:
            session = None
            if args.engine == "spark":  # the JVM and its workers log to a file, not on our stderr
                run = spark_session_for(args.master or "local[*]", "ingest", progress=not args.json)
                session = stack.enter_context(run).session
            stats = db.ingest(
                log_source,
                name=args.name,
                ttl_base=args.ttl_base,
                tx_order=args.tx_order,
                engine=args.engine,
                spark=session,
                tasks=args.tasks,
            )
        seq = db.seq
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

    lookup = args.as_of is not None or args.offset is not None
    if args.name is None and (lookup or args.limit is not None or args.partition is not None):
        raise ValueError("--as-of, --offset, --limit and --partition need a source NAME")
    if lookup and (args.limit is not None or args.partition is not None):
        raise ValueError("--limit and --partition select rows of the relation, not with --as-of or --offset")
    with open_read_only(args.path) as db:
        if args.name is None:
            return _list_sources(args, [db.remap(n) for n in db.sources()])
        r = db.remap(args.name)
    if lookup:
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
    bindings = r.bindings()
    if args.partition is not None:  # (a partition, once in a frontier, is in every later one)
        bindings = [b for b in bindings if args.partition in b.frontier]
    if args.limit is not None:
        bindings = bindings[::-1][: args.limit]
    rows = [
        (b.ts, b.seq, p, off)
        for b in bindings
        for p, off in sorted(b.frontier.items())
        if args.partition is None or p == args.partition
    ]
    if args.json:
        render.print_json(
            {
                "name": args.name,
                "since": r.since,
                "since_rfc3339": render.rfc3339(r.since),
                "frontier": {str(p): o for p, o in sorted(r.frontier.items())},
                "pending": {"records": r.pending.records, "transactions": r.pending.transactions},
                "bindings": len(r),
                "limit": args.limit,
                "partition": args.partition,
                "rows": [
                    {"ts": ts, "ts_rfc3339": render.rfc3339(ts), "seq": seq, "partition": p, "next_offset": off}
                    for ts, seq, p, off in rows
                ],
            }
        )
        return 0
    notes = []
    if args.limit is not None:
        notes.append("the newest, newest first")
    if args.partition is not None:
        notes.append(f"those with partition {args.partition}")
    shown = f" ({len(bindings)} shown: {'; '.join(notes)})" if notes else ""
    head = render.properties(
        [
            ("name", args.name),
            ("bindings", f"{len(r)}{shown}"),
            ("frontier", _frontier_text(r.frontier)),
            ("since", render.time_detail(r.since)),
            ("pending", _pending_text(r.pending)),
        ]
    )
    body = render.table(
        ("time", "ts_ms", "seq", "partition", "next_offset"),
        [(render.rfc3339(ts), ts, s, p, o) for ts, s, p, o in rows],
    )
    render.print_text(head + ("\n\n" + body if rows else ""))
    return 0


def _list_sources(args: argparse.Namespace, remaps: list[Any]) -> int:
    """``lsm remap DB``: one line per ingested source (its remap), by name."""
    if args.json:
        render.print_json(
            {
                "sources": [
                    {
                        "name": r.name,
                        "bindings": len(r),
                        "frontier": {str(p): o for p, o in sorted(r.frontier.items())},
                        "since": r.since,
                        "since_rfc3339": render.rfc3339(r.since),
                        "latest": _binding_json(r.latest),
                    }
                    for r in remaps
                ]
            }
        )
        return 0
    if not remaps:
        render.print_text(f"no ingested sources in {args.path}")
        return 0
    render.print_text(
        render.table(
            ("name", "bindings", "frontier", "since", "latest"),
            [
                (r.name, len(r), _frontier_text(r.frontier), render.time_cell(r.since), _latest_time(r))
                for r in remaps
            ],
        )
    )
    return 0


def _latest_time(r: Any) -> str:
    return render.time_cell(None if r.latest is None else r.latest.ts)


def _pending_text(pending: Any) -> str:
    """What waits in a source's TEMP collection: records of transactions not visible yet."""
    return (
        f"{render.plural(pending.records, 'record')} in "
        f"{render.plural(pending.transactions, 'transaction')}"
        if pending.records
        else "none"
    )


def _frontier_text(frontier: dict[int, int]) -> str:
    return " ".join(f"{p}:{o}" for p, o in sorted(frontier.items())) or "-"


__all__ = ["register", "cmd_ingest", "cmd_remap"]
