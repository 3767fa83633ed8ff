"""``lsm compact PATH [--engine local|spark] [--from A --to B]`` and ``lsm gc PATH``: maintenance of a
closed database.

``lsm compact`` opens the database at PATH (writable: it fences any earlier handle, so run it on a
database no writer holds open), merges everything into one sorted run (or, with --from/--to, the SSTs
overlapping that key range, `DB.compact(start=, end=)`) with the local executor or as a Spark batch,
commits one manifest edit and prints what the job did. ``lsm gc`` deletes SST files the
manifest does not reference (leftovers of failed jobs, killed Spark tasks or crashes).

`compact_database` is shared with ``tools/spark_compact.py``, the same job for ``spark-submit``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from lsm.db import DB
from lsm.options import DbOptions
from tools import render
from tools.common import (
    add_conf_arg,
    check_conf_engine,
    db_dir,
    latest_manifest,
    spark_session_for,
    start_spark,
)

ENGINES = ("local", "spark")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compact",
        help="merge the whole database into one sorted run, locally or as a Spark batch",
        description="Open the database at PATH (it must not be open in another process: opening fences the "
        "other handle), run a full compaction with the chosen engine, commit it and print its statistics. "
        "With --engine spark the driver plans key ranges from the SSTs' block indexes and each Spark task "
        "merges one range into new SSTs (see docs/spark.md).",
    )
    p.add_argument("path", metavar="PATH", help="database directory")
    p.add_argument("--engine", choices=ENGINES, default="local", help="executor (default local)")
    p.add_argument(
        "--master",
        default="local[*]",
        metavar="URL",
        help="Spark master for --engine spark (default local[*]); e.g. local[2], spark://host:7077",
    )
    p.add_argument(
        "--tasks",
        type=render.int_arg(1),
        default=None,
        metavar="K",
        help="Spark tasks (key ranges); default: the session's default parallelism",
    )
    add_conf_arg(p)
    p.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    p.add_argument(
        "--from",
        dest="start",
        metavar="KEY",
        help="compact only the SSTs overlapping [KEY, --to), as RocksDB's CompactRange (inclusive)",
    )
    p.add_argument("--to", dest="end", metavar="KEY", help="end of the key range (exclusive)")
    render.add_key_input_args(p)
    p.set_defaults(func=cmd_compact)

    g = sub.add_parser(
        "gc",
        help="delete SST files the manifest does not reference",
        description="Delete SST files in PATH/sst/ that the current manifest does not reference and whose "
        "modification time is older than the grace period: leftovers of failed compactions, killed Spark "
        "tasks or crashes. The grace period protects files a running job has just written; use it only on "
        "a database no writer holds open. Prints the removed files.",
    )
    g.add_argument("path", metavar="PATH", help="database directory")
    g.add_argument(
        "--grace-ms",
        type=render.int_arg(0),
        default=None,
        metavar="N",
        help=f"only files older than N ms (default DbOptions.gc_grace_ms, {DbOptions().gc_grace_ms})",
    )
    g.add_argument("--json", action="store_true", help="print a JSON object instead of lines")
    g.set_defaults(func=cmd_gc)


# -- the job --------------------------------------------------------------------------------------------
def compact_database(
    path: str,
    engine: str = "local",
    *,
    session: Any = None,
    master: str = "local[*]",
    tasks: int | None = None,
    start: bytes | None = None,
    end: bytes | None = None,
) -> dict[str, Any]:
    """Full compaction of the database at `path` with `engine` (or, with `start`/`end`, of the SSTs
    overlapping [start, end)); returns the report `lsm compact` prints.

    With engine "spark" the job runs on `session` (started for `master` when None)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}: use {' or '.join(ENGINES)}")
    db_dir(path)
    startup = None
    if engine == "spark" and session is None:
        t0 = time.perf_counter()
        session = start_spark(master)
        startup = time.perf_counter() - t0
    opts = DbOptions(
        background_compaction=False,
        spark_session=session,
        spark_master=master,
        spark_tasks=tasks,
        **output_format(path),
    )
    with DB.open(path, opts) as db:
        before = db.manifest
        if start is None and end is None:
            stats = db.compact(full=True, executor=engine)
        else:
            stats = db.compact(executor=engine, start=start, end=end)
        after = db.manifest
    report: dict[str, Any] = {"path": path, "engine": engine}
    if start is not None or end is not None:
        report.update(range_report(before, after, start, end))
    if engine == "spark":
        sc = session.sparkContext
        report["master"] = sc.master
        report["tasks"] = tasks if tasks is not None else sc.defaultParallelism
        report["spark_startup_seconds"] = startup
    report["ssts_before"] = len(before.all_ssts())
    report["sources_before"] = len(before.runs) + len(before.l0)
    report["ssts_after"] = len(after.all_ssts())
    report.update(stats.to_dict())
    return report


def range_report(before: Any, after: Any, start: bytes | None, end: bytes | None) -> dict[str, Any]:
    """What a range compaction changed: the range, and the SSTs it merged and wrote (the names that left
    and joined the manifest), out of how many."""
    old = {e.name for e in before.all_ssts()}
    new = {e.name for e in after.all_ssts()}
    bound = lambda b: None if b is None else render.printable_text(b) or "0x" + b.hex()  # noqa: E731
    return {
        "range": {"from": bound(start), "to": bound(end)},
        "ssts_compacted": len(old - new),
        "ssts_written": len(new - old),
    }


def output_format(path: str) -> dict[str, Any]:
    """The SST format version and compression of the database's newest SST: the outputs keep them (the
    DB's options are not stored with it, and a maintenance command should not change its format)."""
    _, m = latest_manifest(path)
    newest = m.l0[:1] or (m.runs[0].ssts[:1] if m.runs else ())
    if not newest:
        return {}
    info = newest[0].info
    return {"sst_format_version": info.format_version, "compression": info.compression}


def print_report(r: dict[str, Any]) -> None:
    hb = render.human_bytes
    engine = r["engine"]
    if engine == "spark":
        engine = f"spark (master {r['master']}, {render.plural(r['tasks'], 'task')})"
    if "range" in r:  # a range compaction: the SSTs it merged, out of the whole
        rng = r["range"]
        where = f"[{rng['from'] or '-'}, {rng['to'] or '-'})"
        shape = [
            ("range", where),
            ("inputs", f"{r['ssts_compacted']} of {render.plural(r['ssts_before'], 'SST')} (those overlapping the range)"),
            ("outputs", f"{render.plural(r['ssts_written'], 'SST')} in the oldest run ({r['ssts_after']} SSTs in all)"),
        ]
    else:
        shape = [
            (
                "inputs",
                f"{render.plural(r['ssts_before'], 'SST')} in {render.plural(r['sources_before'], 'sorted source')}",
            ),
            ("outputs", render.plural(r["ssts_after"], "SST")),
        ]
    pairs: list[tuple[str, Any]] = [
        ("path", r["path"]),
        ("engine", engine),
        ("jobs", r["jobs"]),
        *shape,
        ("rows in", r["rows_in"]),
        ("rows out", r["rows_out"]),
        ("bytes in", f"{r['bytes_in']} ({hb(r['bytes_in'])})"),
        ("bytes out", f"{r['bytes_out']} ({hb(r['bytes_out'])})"),
        ("versions dropped", r["versions_dropped"]),
        ("tombstones dropped", r["tombstones_dropped"]),
        ("expired dropped", r["expired_dropped"]),
        ("seconds", f"{r['seconds']:.3f}"),
        ("read seconds", f"{r['read_seconds']:.3f}"),
        ("write seconds", f"{r['write_seconds']:.3f}"),
    ]
    if r["engine"] == "spark":
        if r.get("spark_startup_seconds") is not None:
            pairs.append(("spark start seconds", f"{r['spark_startup_seconds']:.3f}"))
        pairs.append(("", "(read and write seconds are summed over the tasks)"))
    render.print_text(render.properties(pairs))
    if r["filters"]:
        render.print_text("\n")
        rows = [(name, c["changed"], c["removed"], c["dropped"]) for name, c in r["filters"].items()]
        render.print_text(render.table(("filter", "changed", "removed", "dropped"), rows))


def cmd_compact(args: argparse.Namespace) -> int:
    check_conf_engine(args.conf, args.engine)
    start, end = render.key_range(args)
    if args.engine != "spark":
        report = compact_database(args.path, args.engine, tasks=args.tasks, start=start, end=end)
    else:
        db_dir(args.path)  # a bad path fails before a JVM is started
        # The JVM (and the Python workers, whose output it relays) log to a file, not to our stderr: a
        # failing job is one line here, pointing at the log, instead of pages of Java and Python traces.
        with spark_session_for(args.master, "compact", conf=args.conf, progress=not args.json) as run:
            report = compact_database(
                args.path, "spark", session=run.session, master=args.master, tasks=args.tasks, start=start, end=end
            )
        report["spark_startup_seconds"] = run.startup_seconds
    if args.json:
        render.print_json(report)
    else:
        print_report(report)
    return 0


# -- gc -------------------------------------------------------------------------------------------------
def gc_database(path: str, grace_ms: int | None = None) -> list[str]:
    """Delete the unreferenced SSTs of the database at `path`; return their names."""
    db_dir(path)
    with DB.open(path, DbOptions(background_compaction=False)) as db:
        return db.gc(grace_ms)


def cmd_gc(args: argparse.Namespace) -> int:
    removed = gc_database(args.path, args.grace_ms)
    if args.json:
        render.print_json({"path": args.path, "removed": removed})
    else:
        for name in removed:
            render.print_text(name)
        render.print_text(f"removed {render.plural(len(removed), 'file')}")
    return 0


__all__ = ["compact_database", "gc_database", "output_format", "print_report", "register"]
