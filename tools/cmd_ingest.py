"""``lsm ingest``: load a partitioned log (or another source) into a database, exactly once.

``lsm ingest DB DIR --name N`` opens DB writable (fencing any other writer), reads the complete records of
the `lsm.sources.PartitionedLog` in DIR (or of the source ``--source KIND`` opens on its SOURCE argument:
``database-log`` or an adapter ``package.module:Factory``, lsm.sources.registry) beyond the durable
frontier of remap N and commits them in
batches, each one atomic with its binding (see lsm/ingest.py). Progress goes to stderr while it runs (at
most twice a second); the summary goes to stdout. ``--follow`` keeps tailing the log until interrupted:
Ctrl-C (SIGINT) or SIGTERM stops it between two batches, closes the database cleanly and exits 0.

``lsm remap`` (the progress an ingest recorded) is in tools/cmd_remap.py.
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
    from tools.common import add_conf_arg

    add_conf_arg(ing)
    render.add_output_args(ing, bytes_args=False)
    ing.set_defaults(func=cmd_ingest)


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
        frontier = render.frontier_text(frontier_d)
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

    from storage import is_url, path_kind

    fresh = path_kind(args.path) is None if is_url(args.path) else not os.path.lexists(args.path)
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

    from lsm.errors import LsmError
    from lsm.inspect import DB_ENTRIES, latest_manifest
    from storage.paths import open_store

    store = open_store(path)
    st = store.storage
    try:
        _mid, m = latest_manifest(path)
        if m.l0 or m.runs or set(st.list_entries(path)) - DB_ENTRIES:
            return
        if any(st.list_sizes(store.paths.wal_dir).values()):
            return
    except (OSError, LsmError):  # not (or no longer) a store this run made: leave it
        return
    st.remove_tree(path)


def _ingest(args: argparse.Namespace) -> int:
    import os

    import lsm
    from lsm.remap_store import check_name
    from lsm.sources import BatchSource
    from lsm.sources.protocol import ProgressSource
    from lsm.sources.registry import SOURCES, open_source
    from storage import is_url
    from tools.cmd_log import log_location

    # Everything that can be refused is refused before the store is opened: opening it writable fences a
    # running writer, and creates the database directory when there is none.
    check_name(args.name)
    from tools.common import check_conf_engine

    check_conf_engine(args.conf, args.engine)
    if args.source == "partitioned-log" and not is_url(log_location(args.log)) and not os.path.isdir(args.log):
        raise ValueError(f"{args.log}: no such log directory")  # (a URL without a log: SourceError below)
    if args.engine == "stream" and (args.master is not None or args.tasks is not None):
        raise ValueError("--master and --tasks apply to --engine local or spark only")
    if args.engine != "stream" and args.times != "store":
        raise ValueError("--times source applies to --engine stream only (a bulk load commits at one time)")
    if args.source not in SOURCES and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # an adapter of the project at hand, as `python -m` finds it
    log = open_source(args.source, args.log)
    if args.times == "source" and not isinstance(log, ProgressSource):
        raise ValueError(
            f"--times source needs a source that reports its progress (lsm.sources.ProgressSource); "
            f"{type(log).__name__} has none"
        )
    if args.times == "store":  # commits stamped by this host's clock: one it cannot stamp is refused here
        from tools.preflight import commit_floor

        commit_floor(args.path)
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
                    ("frontier", render.frontier_text(frontier)),
                    ("seq", seq),
                    ("seconds", f"{elapsed:.3f}"),
                    ("stopped by", "signal" if stop.is_set() else "end of log"),
                ]
            )
        )
    return 0


def _check_target(path: str) -> None:
    """NotADatabaseError for a path `lsm.DB.open` would refuse to create a store at (a file, a non-empty
    directory holding no database), without opening anything."""
    import os

    from lsm.errors import NotADatabaseError
    from storage import is_url
    from storage.paths import DbPaths

    if is_url(path) or not os.path.lexists(path):
        return
    if not os.path.isdir(path):
        raise NotADatabaseError(f"{path}: is a file, not a database directory")
    if os.listdir(path) and not os.path.isdir(DbPaths(path).manifest_dir):
        raise NotADatabaseError(f"{path}: directory is not empty and holds no lsm-sim database")


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
    _check_target(args.path)  # a bad path fails before a JVM is started...
    with contextlib.ExitStack() as stack:
        session = None
        if args.engine == "spark":  # ...and Spark starts before the open, which fences a running writer
            run = spark_session_for(args.master or "local[*]", "ingest", conf=args.conf, progress=not args.json)
            session = stack.enter_context(run).session  # the JVM and its workers log to a file
        with lsm.DB.open(args.path, lsm.DbOptions(history_retention=args.history_retention)) as db:
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
                    ("frontier", render.frontier_text(frontier)),
                    ("seq", seq),
                    ("seconds", f"{elapsed:.3f}"),
                ]
            )
        )
    return 0


__all__ = ["register", "cmd_ingest"]
