"""``lsm remap``: the ingested sources of a database, or the progress relation of one of them.

``lsm remap DB`` opens DB read-only and lists its ingested sources: name, binding count, frontier, since
and the newest binding's time. ``lsm remap DB NAME`` prints the progress relation of remap NAME: one row
per partition per binding, (time, seq, partition, next_offset: the next offset to read), oldest binding
first, after a header with the records and transactions pending in its TEMP collection (transactions not
complete yet); ``--limit N`` keeps the newest N bindings, newest first; ``--partition P`` keeps partition P's rows.
``--as-of TIME`` prints the binding in force at TIME, ``--offset P:O`` the binding in which record O of
partition P became visible; either exits 1 when there is none (``--json`` still prints the object, with
a null binding). Times are printed as RFC 3339 and epoch ms.

``--log SOURCE`` (``--source KIND``, default a partitioned log's directory) is the consumer-lag view, as
``kafka-consumer-groups --describe``: per partition the log's end, the frontier's next offset and their
difference, and a total. The remap records what was read, not where from, so the log is named here.
"""

from __future__ import annotations

import argparse
from typing import Any

from tools import render

EXIT_NONE = 1


def register(sub: argparse._SubParsersAction) -> None:
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
    rm.add_argument("--partition", type=_partition_arg, metavar="P", help="only partition P's rows")
    g = rm.add_mutually_exclusive_group()
    g.add_argument("--as-of", type=render.time_arg, metavar="TIME", help="the binding in force at TIME")
    g.add_argument(
        "--offset", type=_offset_arg, metavar="P:O", help="the binding that made record P:O visible"
    )
    add_lag_args(rm)
    render.add_output_args(rm, bytes_args=False)
    rm.set_defaults(func=cmd_remap)


def _partition_arg(text: str) -> int:
    """A partition id as `lsm log show --partition` takes it: 0..2**64-1, what a binding stores."""
    from lsm.sources.protocol import MAX_PARTITION

    return render.int_arg(0, MAX_PARTITION)(text)


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
    from lsm.sources.protocol import MAX_PARTITION

    if part > MAX_PARTITION:
        raise argparse.ArgumentTypeError(f"{text!r}: partition {part} is above {MAX_PARTITION}")
    return part, off


# -- the command --------------------------------------------------------------------------------------------
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
    from tools.read_options import open_read_only

    lookup = args.as_of is not None or args.offset is not None
    if args.name is None and (lookup or args.limit is not None or args.partition is not None):
        raise ValueError("--as-of, --offset, --limit and --partition need a source NAME")
    if args.log is None and args.source != DEFAULT_SOURCE:
        raise ValueError("--source says what --log is: give --log SOURCE with it")
    if args.log is not None and (args.name is None or lookup or args.limit is not None):
        raise ValueError("--log shows the lag of one source NAME (with --partition at most), not with --as-of, --offset or --limit")
    if lookup and (args.limit is not None or args.partition is not None):
        raise ValueError("--limit and --partition select rows of the relation, not with --as-of or --offset")
    with open_read_only(args.path) as db:
        if args.name is None:
            return _list_sources(args, [db.remap(n) for n in db.sources()])
        r = db.remap(args.name)
    if args.log is not None:
        return print_lag(args, r)
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
                f"record {p}:{o} is not in remap {args.name!r} yet (frontier {render.frontier_text(r.frontier)})"
            )
        if args.json:
            render.print_json({"name": args.name, **query, "since": r.since, "binding": _binding_json(b)})
        elif b is not None:
            render.print_text(
                render.properties(
                    [
                        ("time", render.time_detail(b.ts)),
                        ("seq", b.seq),
                        ("frontier", render.frontier_text(b.frontier)),
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
            ("frontier", render.frontier_text(r.frontier)),
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


# -- consumer lag -------------------------------------------------------------------------------------------
DEFAULT_SOURCE = "partitioned-log"


def add_lag_args(rm: argparse.ArgumentParser) -> None:
    """--log SOURCE and --source KIND: the consumer-lag view of ``lsm remap DB NAME``."""
    rm.add_argument(
        "--log",
        metavar="SOURCE",
        help="the source NAME is ingested from (a partitioned log's directory): print each partition's "
        "log end, the frontier's next offset and the lag between them (the remap does not record where "
        "it read from)",
    )
    rm.add_argument(
        "--source",
        default=DEFAULT_SOURCE,
        metavar="KIND",
        help="what --log is, as for lsm ingest: partitioned-log (default), database-log, or package.module:Factory",
    )


def lag_rows(source: Any, frontier: dict[int, int], partition: int | None) -> list[tuple[int, int, int, int]]:
    """(partition, log end, next offset, lag) for every partition of `source` or of `frontier` (only
    `partition` if given). A log that ends before the frontier is not the one read: ValueError."""
    parts = sorted(set(source.partitions()) | set(frontier))
    if partition is not None:
        parts = [partition]
    rows = []
    for p in parts:
        end, nxt = source.end(p), frontier.get(p, 0)
        if end < nxt:
            raise ValueError(
                f"{source.name}: partition {p} ends at offset {end}, before the remap's next offset {nxt}: "
                "not the source this remap read (or it lost records)"
            )
        rows.append((p, end, nxt, end - nxt))
    return rows


def print_lag(args: argparse.Namespace, r: Any) -> int:
    """``lsm remap DB NAME --log SOURCE``: the consumer lag of remap `r`, partition by partition."""
    from lsm.sources.registry import open_source

    rows = lag_rows(open_source(args.source, args.log), r.frontier, args.partition)
    total = tuple(sum(row[k] for row in rows) for k in (1, 2, 3))
    if args.json:
        render.print_json(
            {
                "name": args.name,
                "log": args.log,
                "source": args.source,
                "partitions": [
                    {"partition": p, "log_end": end, "next_offset": nxt, "lag": lag} for p, end, nxt, lag in rows
                ],
                "total": {"log_end": total[0], "next_offset": total[1], "lag": total[2]},
                "pending": {"records": r.pending.records, "transactions": r.pending.transactions},
            }
        )
        return 0
    head = render.properties(
        [
            ("name", args.name),
            ("log", args.log if args.source == DEFAULT_SOURCE else f"{args.log} ({args.source})"),
            ("frontier", render.frontier_text(r.frontier)),
            ("lag", f"{render.plural(total[2], 'record')} not read yet"),
            ("pending", _pending_text(r.pending)),
        ]
    )
    body = render.table(("partition", "log_end", "next_offset", "lag"), [*rows, ("total", *total)])
    render.print_text(head + "\n\n" + body)
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
                (r.name, len(r), render.frontier_text(r.frontier), render.time_cell(r.since), _latest_time(r))
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


__all__ = ["register", "cmd_remap"]
