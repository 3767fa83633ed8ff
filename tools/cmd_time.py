"""``lsm seq-to-ts|ts-to-seq|time-seq|changes|repair-clock``: the database's seq<->time maps, what changed
since, and the repair of a clock watermark in the future (``DB.repair_clock``).

Two maps live in the manifest (see lsm/timeline.py and docs/time.md): the seq tracker (a (seq, second)
pair at most every 30 s, downsampled when full; both directions, explicit rounding) and the decaying
time bins (60 bins of 3 hours and longer; the histogram and "changes since a time").

Every command but ``time-seq --reset`` and ``repair-clock`` opens the database read-only (``lsm.DB.open(path,
read_only=True)``): no writer is fenced, the WAL is replayed in memory only. ``time-seq --reset`` opens
it writable, which fences a running writer (its next write fails with FencedError), forgets the bins and
commits that to the manifest. ``repair-clock`` surveys the store read-only first (`DB.plan_clock_repair`)
and opens it writable only for a repair that will run: a refused time, or nothing to repair, fences
nobody.

Times on the command line are RFC 3339 (``2024-01-31T12:00:00Z``; no offset means UTC) or epoch
milliseconds. A lookup with no answer in the asked direction prints ``lsm: error: ...`` and exits 1
(``--json`` prints the object with a null field first).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tools import read_options, render

if TYPE_CHECKING:
    from lsm.db import DB

ROUNDS = ("up", "down")
LOSSY = (
    "The seq tracker records a (seq, time) pair at most every 30 s, in whole seconds, and halves its "
    "history when full, so the answer is approximate: the nearest recorded pair in the --round direction."
)


def register(sub: argparse._SubParsersAction) -> None:
    s2t = sub.add_parser(
        "seq-to-ts",
        help="the approximate commit time of a sequence number (seq tracker)",
        description="Print the time the seq tracker records for SEQ, as RFC 3339 and epoch ms. Without an "
        "exact entry, --round up (the default) takes the next recorded seq's time, an upper bound of SEQ's "
        "commit time to the second; --round down the previous one's, a lower bound. " + LOSSY + " Opens "
        "the database read-only. Exits 1 when no seq is recorded in that direction.",
    )
    s2t.add_argument("path", metavar="PATH")
    s2t.add_argument("seq", metavar="SEQ", type=render.int_arg(0))
    _round_arg(s2t, "up")
    render.add_output_args(s2t, bytes_args=False)
    s2t.set_defaults(func=cmd_seq_to_ts)

    t2s = sub.add_parser(
        "ts-to-seq",
        help="the sequence number recorded at a time (seq tracker)",
        description="Print the seq the seq tracker records at TIME (RFC 3339 or epoch ms), with the time "
        "recorded for it. Without an exact entry, --round down (the default) takes the last seq recorded "
        "at or before TIME (the state an as-of read at TIME sees), --round up the first one after. "
        + LOSSY
        + " Opens the database read-only. Exits 1 when no seq is recorded in that direction.",
    )
    t2s.add_argument("path", metavar="PATH")
    t2s.add_argument("time", metavar="TIME", type=render.time_arg)
    _round_arg(t2s, "down")
    render.add_output_args(t2s, bytes_args=False)
    t2s.set_defaults(func=cmd_ts_to_seq)

    ts = sub.add_parser(
        "time-seq",
        help="the decaying time bins as a histogram of updates; --reset forgets them (fences a writer)",
        description="Print the time bins (at most 60, 3 hours wide near the present and wider further "
        "back), oldest first: each bin's start and the number of updates made in it. A first "
        "1970-01-01T00:00:00Z bin counts the updates made before tracking began (before the first bin, or "
        "before a reset). Opens the database read-only, unless --reset is given.",
    )
    ts.add_argument("path", metavar="PATH")
    ts.add_argument(
        "--reset",
        action="store_true",
        help="forget every time bin (after a clock mishap, e.g. a jump to the far future) and commit that "
        "to the manifest. This opens the database WRITABLE: a process writing to PATH is fenced (its next "
        "write or flush fails with FencedError), and WAL records are flushed to an SST. Data is not "
        "touched; 'changes --since' then returns everything until new bins form.",
    )
    render.add_output_args(ts, bytes_args=False)
    ts.set_defaults(func=cmd_time_seq)

    rc = sub.add_parser(
        "repair-clock",
        help="move rows stamped in the future back to now and lower the clock watermark (fences a writer)",
        description="Mend a database whose clock watermark lies in the future (a far-future clock reading "
        "was once accepted, so every write fails with 'clock went back'): every row stamped after TIME "
        "(default: now) is restamped at TIME with its expiry moved back as much, remap times likewise, the "
        "seq tracker forgets the pairs after TIME and the time bins are reset; then the watermark becomes "
        "TIME. Keys, values, seqs and their order are unchanged. The rewrite is a full compaction. A TIME "
        "before a row committed within the skew guard (stamped at most DbOptions.max_clock_skew_ms, one "
        "day, ahead of the host's clock now) is refused, naming the rows it would move, unless --force; "
        "a TIME before 1970 always is. The store is checked read-only first: only a repair that will run "
        "opens it WRITABLE, which fences a process writing to PATH. Nothing after TIME: nothing changes.",
    )
    rc.add_argument("path", metavar="PATH")
    rc.add_argument(
        "--to",
        type=render.time_arg,
        metavar="TIME",
        help="the repair time (default: now, or the newest row committed within the skew guard if later)",
    )
    rc.add_argument(
        "--force",
        action="store_true",
        help="move rows committed within the skew guard too (their expiries move back with them: a row "
        "may expire at once)",
    )
    render.add_output_args(rc, bytes_args=False)
    rc.set_defaults(func=cmd_repair_clock)

    ch = sub.add_parser(
        "changes",
        help="keys changed since a time or a seq: the newest version of each, oldest change first",
        description="Print one line per key whose newest version is newer than the point: --seq N (seq > "
        "N), or --since TIME (RFC 3339 or epoch ms), which the decaying time bins map to a seq at or "
        "before TIME: it errs towards too many changes, never too few, and a TIME more than 3 hours after "
        "the newest bin gives nothing. Op 'put', 'delete', or 'expired': a put whose TTL has passed (its "
        "seq and ts are the put's, expire_ts says when it expired; its value only with --include-expired; "
        "--expiry-at judges expiry at another time). Deletes and expired rows that compaction has removed "
        "are not shown. Ordered by seq. SSTs holding nothing newer are "
        "not read. Opens the database read-only; its read options are those of get and scan.",
    )
    ch.add_argument("path", metavar="PATH")
    ch.add_argument("--limit", type=render.int_arg(0), metavar="N", help="stop after N changes")
    read_options.add_read_options(ch, "since")
    ch.set_defaults(func=cmd_changes)


def _round_arg(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--round",
        choices=ROUNDS,
        default=default,
        help=f"direction without an exact entry (default {default})",
    )


open_read_only = read_options.open_read_only


def _round(name: str) -> Any:
    from lsm.seq_tracker import Round

    return Round.UP if name == "up" else Round.DOWN


def _time_fields(d: dict[str, Any], field: str, ms: int | None) -> None:
    d[field] = ms
    d[field + "_rfc3339"] = render.rfc3339(ms)


def _tracker_span(db: DB) -> str:
    t = db.seq_tracker_entries()
    if not t:
        return "the seq tracker is empty"
    return (
        f"the seq tracker holds {render.plural(len(t), 'pair')}, seqs {t[0][0]}..{t[-1][0]}, "
        f"{render.rfc3339(t[0][1] * 1000)}..{render.rfc3339(t[-1][1] * 1000)}"
    )


# -- seq-to-ts / ts-to-seq ------------------------------------------------------------------------------
def cmd_seq_to_ts(args: argparse.Namespace) -> int:
    with open_read_only(args.path) as db:
        ms = db.timestamp_for_seq(args.seq, _round(args.round))
        span = _tracker_span(db)
    d: dict[str, Any] = {"seq": args.seq, "round": args.round}
    _time_fields(d, "ts", ms)
    if args.json:
        render.print_json(d)
    elif ms is not None:
        render.print_text(
            render.properties([("seq", args.seq), ("round", args.round), ("ts", render.time_detail(ms))])
        )
    if ms is None:
        where = "at or after" if args.round == "up" else "at or before"
        render.error(f"no seq recorded {where} seq {args.seq}: {span}")
        return 1
    return 0


def cmd_ts_to_seq(args: argparse.Namespace) -> int:
    from lsm.seq_tracker import Round

    with open_read_only(args.path) as db:
        seq = db.seq_for_timestamp(args.time, _round(args.round))
        at = None if seq is None else db.timestamp_for_seq(seq, Round.DOWN)
        span = _tracker_span(db)
    d: dict[str, Any] = {}
    _time_fields(d, "time", args.time)
    d["round"] = args.round
    d["seq"] = seq
    _time_fields(d, "seq_ts", at)
    if args.json:
        render.print_json(d)
    elif seq is not None:
        render.print_text(
            render.properties(
                [
                    ("time", render.time_detail(args.time)),
                    ("round", args.round),
                    ("seq", seq),
                    ("seq_ts", render.time_detail(at)),
                ]
            )
        )
    if seq is None:
        where = "at or after" if args.round == "up" else "at or before"
        render.error(f"no seq recorded {where} {render.rfc3339(args.time)} ({args.time}): {span}")
        return 1
    return 0


# -- time-seq ---------------------------------------------------------------------------------------------
def _bins_json(hist: list[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"start": start, "start_ms": render.parse_time(start), "updates": n} for start, n in hist]


def cmd_time_seq(args: argparse.Namespace) -> int:
    if args.reset:
        return _reset(args)
    with open_read_only(args.path) as db:
        hist = db.time_seq_histogram()
        seq = db.seq
    if args.json:
        render.print_json({"path": args.path, "seq": seq, "bins": _bins_json(hist)})
    elif not hist:
        render.print_text(
            f"no time bins (seq {seq}): nothing written since the bins were created or reset, or only at "
            "clock times before DbOptions.time_seq_min_time"
        )
    else:
        render.print_text(render.table(("bin_start", "updates"), hist))
    return 0


def _reset(args: argparse.Namespace) -> int:
    from lsm.db import DB
    from lsm.options import DbOptions
    from tools.common import db_dir

    with DB.open(db_dir(args.path), DbOptions(block_cache_bytes=0, background_compaction=False)) as db:
        before = len(db.time_seq_histogram())
        db.reset_time_seq()
        seq = db.seq
    if args.json:
        render.print_json({"path": args.path, "reset": True, "seq": seq, "bins_before": before})
    else:
        render.print_text(
            f"{args.path}: time bins reset ({before} histogram entries before, seq {seq}); any writer that "
            "had the database open is now fenced"
        )
    return 0


# -- repair-clock ----------------------------------------------------------------------------------------
def cmd_repair_clock(args: argparse.Namespace) -> int:
    from lsm.db import DB
    from lsm.errors import ClockRepairError
    from lsm.options import DbOptions
    from tools.common import db_dir

    path = db_dir(args.path)
    # what the repair would do, from a read-only handle: a refused or needless repair fences nobody
    with open_read_only(path) as db:
        plan = db.plan_clock_repair(args.to)
    why = plan.refusal()
    if plan.watermark > plan.to and why is not None and not args.force:
        raise ClockRepairError(f"{args.path}: {why} (--force)")
    if plan.watermark <= plan.to:
        r = None
    else:
        with DB.open(path, DbOptions(block_cache_bytes=0, background_compaction=False)) as db:
            r = db.repair_clock(plan.to, force=args.force)
    if r is None or not r.repaired:
        before = plan.watermark if r is None else r.watermark_before
        if args.json:
            render.print_json(
                {"path": args.path, "repaired": False, "watermark_before": before, "watermark_after": before,
                 "rows_moved": 0, "rows_forced": 0}
            )
        else:
            render.print_text(
                f"{args.path}: nothing stamped after the repair time {render.time_detail(plan.to)} (watermark "
                f"{render.time_detail(before)}): nothing to repair"
            )
        return 0
    if args.json:
        render.print_json(
            {
                "path": args.path,
                "repaired": r.repaired,
                "watermark_before": r.watermark_before,
                "watermark_after": r.watermark_after,
                "rows_moved": r.rows_moved,
                "rows_forced": r.rows_forced,
            }
        )
    else:
        forced = (
            f" ({r.rows_forced} of them committed within the skew guard, moved by --force)" if r.rows_forced else ""
        )
        render.print_text(
            f"{args.path}: clock watermark {render.time_detail(r.watermark_before)} -> "
            f"{render.time_detail(r.watermark_after)}; {r.rows_moved} rows moved back{forced}; any writer that had "
            "the database open is now fenced"
        )
    return 0


# -- changes ---------------------------------------------------------------------------------------------
CHANGE_HEADERS = ("seq", "ts", "op", "key", "expire_ts", "value")


def change_op(c: tuple, now: int) -> str:
    """What a change (seq, key, value, ts, expire_ts) was, as judged at `now`: "delete" (a tombstone),
    "expired" (a put whose TTL passed by `now`: the key went without a delete) or "put". A put with a
    TTL is a put until then; a tombstone carries no expire_ts."""
    _seq, _key, value, _ts, exp = c
    if exp is not None and now > exp:
        return "expired"
    return "delete" if value is None else "put"


def _change_json(c: tuple, op: str, mode: render.BytesMode) -> dict[str, Any]:
    seq, key, value, ts, exp = c
    d: dict[str, Any] = {"seq": seq, "ts": ts, "op": op}
    render.put_bytes(d, "key", key, mode.key)
    render.put_bytes(d, "value", value, mode.value)
    d["expire_ts"] = exp
    return d


def _change_cells(c: tuple, op: str, mode: render.BytesMode) -> tuple:
    seq, key, value, ts, exp = c
    return (
        seq,
        render.time_cell(ts),
        op,
        render.bytes_for_table(key, mode.key),
        render.time_cell(exp),
        "" if value is None else render.bytes_for_table(value, mode.value, render.MAX_VALUE_CHARS),
    )


def cmd_changes(args: argparse.Namespace) -> int:
    import dataclasses

    mode = args.bytes_mode
    with read_options.reading(args) as (db, options):
        # one judging time for the library's filter and for the ops printed
        now = options.now if options.now is not None else db.engine.now()
        options = dataclasses.replace(options, now=now)
        if args.since is not None:
            it: Iterator = db.changes(since=args.since, options=options, with_expire_ts=True)
        else:
            it = db.changes(seq=args.seq, options=options, with_expire_ts=True)
        rows = list(it)
    if args.limit is not None:
        rows = rows[: args.limit]
    ops = [change_op(c, now) for c in rows]
    if args.json:
        render.print_json_array(_change_json(c, op, mode) for c, op in zip(rows, ops, strict=True))
    else:
        cells = [_change_cells(c, op, mode) for c, op in zip(rows, ops, strict=True)]
        render.print_text(render.table(CHANGE_HEADERS, cells))
    return 0


__all__ = ["register"]
