"""``lsm get|scan|check|du``: a whole database, read-only.

get and scan read through the engine (`DB.open(path, read_only=True)`): the same version resolution,
tombstones and expiry as an application sees, without fencing a running writer (a read-only open does
not bump the writer epoch; it replays the WAL into memory only). Their read options (as-of reads, expiry)
are those of tools.read_options, shared with ``lsm changes``. check and du read the files directly,
through `lsm.inspect.check_database` and `lsm.inspect.space_usage`; this module only renders them.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tools import read_options, render
from tools.cmd_manifest import purge_lag_text
from tools.common import db_dir, latest_manifest

if TYPE_CHECKING:  # the engine is imported where it is used (see tools.cmd_manifest)
    from lsm.db import Entry


def register(sub: argparse._SubParsersAction) -> None:
    get = sub.add_parser(
        "get",
        help="the visible value of one or more keys, read-only",
        description="Read KEY through the engine, read-only (a running writer is not fenced): the latest "
        "state, or with --as-of/--seq the state as of a time or a commit. Several KEYs are read from the "
        "same state and printed one row per key, in the order given, a key without a visible value as "
        "'(not found)' (JSON: a list, with \"found\": false). Exits 1 when a key is absent, deleted or "
        "expired.",
    )
    get.add_argument("path", metavar="PATH")
    get.add_argument("keys", metavar="KEY", nargs="+")
    read_options.add_read_options(get, "as-of")
    get.set_defaults(func=cmd_get)

    scan = sub.add_parser(
        "scan",
        help="the visible rows of a key range, read-only",
        description="Scan the database through the engine, read-only (a running writer is not fenced): the "
        "newest visible version of each key (of the latest state, or with --as-of/--seq of the state as of a "
        "time or a commit), without tombstones or (unless --include-expired) expired rows.",
    )
    scan.add_argument("path", metavar="PATH")
    scan.add_argument("--from", dest="start", metavar="KEY", help="first key (inclusive)")
    scan.add_argument("--to", dest="end", metavar="KEY", help="last key (exclusive)")
    scan.add_argument("--prefix", metavar="KEY", help="only keys starting with this prefix")
    scan.add_argument("--limit", type=render.int_arg(0), metavar="N", help="stop after N rows")
    scan.add_argument("--reverse", action="store_true", help="descending key order")
    scan.add_argument(
        "--all-versions",
        action="store_true",
        help="every version stored (WAL, L0, runs), tombstones and expired rows included, newest first "
        "per key, with its flags and level, as RocksDB's 'ldb idump'; takes no read options",
    )
    read_options.add_read_options(scan, "as-of")
    scan.set_defaults(func=cmd_scan)

    check = sub.add_parser(
        "check",
        help="check the whole database (exit 1 naming the first problem)",
        description="Check the database at PATH: every manifest version kept decodes; every SST the newest "
        "manifest references exists, verifies (checksums, key order, filter, metadata) and has the "
        "SsTableInfo the manifest records; sorted runs are sorted and do not overlap; newer L0 SSTs and runs "
        "hold newer seqs than older ones they overlap; last_seq, the clock watermark and next_sst_id cover "
        "every SST; the WAL segments from the replay point decode. Unreferenced SSTs and torn WAL tails are "
        "reported as notes, files that are not the store's (anything beside manifest/, sst/ and wal/) as "
        "warnings; neither is a problem. Exits 1 naming the first problem.",
    )
    check.add_argument("path", metavar="PATH")
    render.add_output_args(check, bytes_args=False)
    check.set_defaults(func=cmd_check)

    du = sub.add_parser(
        "du",
        help="space by level: live, expired, tombstone and shadowed bytes",
        description="Space used by the WAL (unflushed rows), L0 and each sorted run, split by what the read "
        "path makes of each stored row: live (the newest version of its key, visible), expired (the newest "
        "version, past its expire_ts), tombstone (the newest version, a delete) and shadowed (an older "
        "version no reader without a snapshot sees). Row bytes are the encoded, uncompressed row sizes; "
        "size is the files' bytes on disk.",
    )
    du.add_argument("path", metavar="PATH")
    read_options.add_expiry_options(du)
    render.add_output_args(du, bytes_args=False)
    du.set_defaults(func=cmd_du)

    ap = sub.add_parser(
        "approx-size",
        help="estimated bytes of a key range, from the SSTs' block indexes (read-only)",
        description="Estimate the bytes the keys in [--from, --to) take, as RocksDB's GetApproximateSizes: "
        "the stored size of the SST data blocks that can hold keys of the range, found in each SST's block "
        "index (no data block is read; whole blocks, so up to one block too many at each end of each SST; "
        "every stored version counts: shadowed ones, tombstones and expired rows too), plus the rows of "
        "the range not flushed yet (the WAL, replayed into memory). Opens the database read-only.",
    )
    ap.add_argument("path", metavar="PATH")
    ap.add_argument("--from", dest="start", metavar="KEY", help="first key (inclusive)")
    ap.add_argument("--to", dest="end", metavar="KEY", help="last key (exclusive)")
    ap.add_argument("--no-memtable", action="store_true", help="the SSTs only, not the unflushed rows")
    ap.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    render.add_key_input_args(ap)
    ap.set_defaults(func=cmd_approx_size)


def entry_json(e: Entry, mode: render.BytesMode) -> dict[str, Any]:
    d: dict[str, Any] = {}
    render.put_bytes(d, "key", e.key, mode.key)
    render.put_bytes(d, "value", e.value, mode.value)
    d["seq"] = e.seq
    d["ts"] = e.ts
    d["expire_ts"] = e.expire_ts
    return d


def entry_cells(e: Entry, mode: render.BytesMode) -> tuple:
    return (
        render.bytes_for_table(e.key, mode.key),
        e.seq,
        render.time_cell(e.ts),
        render.time_cell(e.expire_ts),
        render.bytes_for_table(e.value, mode.value, render.MAX_VALUE_CHARS),
    )


ENTRY_HEADERS = ("key", "seq", "ts", "expire_ts", "value")


# -- get / scan -----------------------------------------------------------------------------------------
def cmd_get(args: argparse.Namespace) -> int:
    mode = args.bytes_mode
    keys = [render.parse_key(k, mode.key_in, "KEY") for k in args.keys]
    with read_options.reading(args) as (db, options):
        entries = [db.get_entry(key, options) for key in keys]  # one state: a read-only handle's own
    if len(keys) > 1:
        return _print_many(args, keys, entries)
    key, e = keys[0], entries[0]
    if e is None:
        if args.json:
            render.print_json(None)
        render.error(f"key {render.bytes_for_table(key, mode.key)} not found (absent, deleted or expired)")
        return 1
    if args.json:
        render.print_json(entry_json(e, mode))
    else:
        render.print_text(
            render.properties(
                [
                    ("key", render.bytes_for_table(e.key, mode.key)),
                    ("value", render.bytes_for_table(e.value, mode.value)),
                    ("seq", e.seq),
                    ("ts", render.time_detail(e.ts)),
                    ("expire_ts", render.time_detail(e.expire_ts)),
                ]
            )
        )
    return 0


NOT_FOUND = "(not found)"


def _print_many(args: argparse.Namespace, keys: list[bytes], entries: list[Entry | None]) -> int:
    """``lsm get DB K1 K2 ...``: one row (JSON: one object) per key in the order given; exit 1 naming
    how many keys had no visible value, as ``get`` of one key does."""
    mode = args.bytes_mode
    if args.json:
        out = []
        for key, e in zip(keys, entries, strict=True):
            d: dict[str, Any] = {}
            render.put_bytes(d, "key", key, mode.key)
            d["found"] = e is not None
            if e is None:
                d.update(value=None, seq=None, ts=None, expire_ts=None)
            else:
                d.update({k: v for k, v in entry_json(e, mode).items() if not k.startswith("key")})
            out.append(d)
        render.print_json_array(out)
    else:
        cells = [
            entry_cells(e, mode) if e is not None else (render.bytes_for_table(key, mode.key), "-", "-", "-", NOT_FOUND)
            for key, e in zip(keys, entries, strict=True)
        ]
        render.print_text(render.table(ENTRY_HEADERS, cells))
    missing = sum(e is None for e in entries)
    if missing:
        render.error(f"{missing} of {render.plural(len(keys), 'key')} not found (absent, deleted or expired)")
        return 1
    return 0


def cmd_scan(args: argparse.Namespace) -> int:
    mode = args.bytes_mode
    start, end = render.key_range(args)
    prefix = None if args.prefix is None else render.parse_key(args.prefix, mode.key_in, "--prefix")
    if args.all_versions:
        return _scan_all_versions(args, start, end, prefix)
    with read_options.reading(args) as (db, options):
        rows = db.scan_entries(start, end, args.reverse, prefix=prefix, options=options)
        try:
            limited: Iterator[Entry] = itertools.islice(rows, args.limit) if args.limit is not None else rows
            if args.json:
                render.print_json_array(entry_json(e, mode) for e in limited)
            else:
                render.print_text(render.table(ENTRY_HEADERS, [entry_cells(e, mode) for e in limited]))
        finally:
            rows.close()
    return 0


NOT_WITH_ALL_VERSIONS = ("reverse", "as_of", "seq", "include_expired", "expiry_at")


def _scan_all_versions(args: argparse.Namespace, start: bytes | None, end: bytes | None, prefix: bytes | None) -> int:
    """``scan --all-versions``: `lsm.inspect.stored_versions`, rendered as ``lsm sst scan`` renders rows."""
    given = [
        f"--{a.replace('_', '-')}" for a in NOT_WITH_ALL_VERSIONS if getattr(args, a) is not None and getattr(args, a) is not False
    ]
    if given:
        raise ValueError(f"--all-versions shows every stored version as it is; it takes no {', '.join(given)}")
    from lsm.inspect import stored_versions
    from lsm.readpath import clip_to_prefix
    from tools.cmd_sst import ROW_HEADERS, row_cells, row_json

    mode = args.bytes_mode
    start, end = clip_to_prefix(start, end, prefix)
    rows = stored_versions(db_dir(args.path), start, end)
    try:
        limited = itertools.islice(rows, args.limit) if args.limit is not None else rows
        if args.json:
            render.print_json_array({**row_json(row, mode), "level": row[5]} for row in limited)
            return 0
        cells = [(row[5], *row_cells(row, mode)) for row in limited]
        render.print_text(render.table(("level", *ROW_HEADERS), cells))
    finally:
        rows.close()
    return 0


# -- check ------------------------------------------------------------------------------------------------
def cmd_check(args: argparse.Namespace) -> int:
    from lsm.inspect import CheckError, check_database

    try:
        rep = check_database(db_dir(args.path))
    except CheckError as problem:
        if args.json:
            render.print_json({"ok": False, "problem": str(problem)})
        render.error(str(problem))
        return 1
    if args.json:
        render.print_json({"ok": True, **rep.to_dict()})
        return 0
    rows = [
        (
            "manifest",
            f"version {rep.manifest_id} ok ({render.plural(rep.manifest_versions, 'version')} kept, all decode)",
        ),
        (
            "ssts",
            f"{rep.ssts} verified ({render.plural(rep.rows, 'row')}, {render.human_bytes(rep.sst_bytes)}) in L0 ({rep.l0}) "
            f"and {render.plural(rep.runs, 'run')}",
        ),
        (
            "shape",
            "runs sorted and non-overlapping; seqs ordered across overlapping sources; watermarks cover the SSTs",
        ),
        (
            "wal",
            f"{render.plural(rep.wal_segments, 'segment')} read, {render.plural(rep.wal_records, 'record')} to replay",
        ),
    ]
    rows += [("note", n) for n in rep.notes]
    rows += [("warning", w) for w in rep.warnings]
    render.print_text(render.properties(rows))
    n = len(rep.warnings)
    render.print_text(f"OK, with {n} warning{'s' if n != 1 else ''}" if n else "OK")
    return 0


# -- du ---------------------------------------------------------------------------------------------------
def cmd_du(args: argparse.Namespace) -> int:
    from lsm.checkpoints import checkpoint_usage
    from lsm.inspect import CATEGORIES, space_usage, stored_files
    from storage.paths import open_store

    read_options.warn_deprecated(args)
    # the database's store, resolved once: on an object store its own client, so the request counters
    # hold exactly what du asked (a directory counts none)
    db = open_store(args.path)
    store = db.storage
    rep = space_usage(db_dir(args.path), args.expiry_at)
    levels = [x.to_dict() for x in [*rep.levels, rep.total]]
    kept = checkpoint_usage(db, latest_manifest(args.path)[1], rep.at)
    objects: dict[str, dict[str, int]] = {}
    if store.root is not None:  # what an object store bills: its objects by kind
        objects = {k: {"objects": n, "bytes": b} for k, (n, b) in stored_files(args.path).items()}
    if args.json:
        out: dict[str, Any] = {
            "at": rep.at,
            "at_rfc3339": render.rfc3339(rep.at),
            "levels": levels[:-1],
            "total": levels[-1],
            "purge_lag": rep.purge_lag,
            "checkpoints": kept,
        }
        if store.root is not None:
            out.update(objects=objects, requests=store.stats())
        render.print_json(out)
        return 0
    hb = render.human_bytes
    cells = [
        (
            x["level"],
            x["files"],
            hb(x["size"]),
            *(f"{hb(x[c + '_bytes'])} ({x[c + '_rows']})" for c in CATEGORIES),
        )
        for x in levels
    ]
    render.print_text(f"expiry judged at {render.rfc3339(rep.at)} ({rep.at})")
    render.print_text(render.table(("level", "files", "size", *(f"{c} (rows)" for c in CATEGORIES)), cells))
    render.print_text(f"purge lag: {purge_lag_text(rep.purge_lag)}")
    if kept["checkpoints"]:
        render.print_text(f"kept only by {render.plural(kept['checkpoints'], 'checkpoint')}: "
                          f"{render.plural(kept['files'], 'file')}, {hb(kept['bytes'])}")
    if store.root is not None:
        _print_objects(objects, store.stats())
    return 0


# -- approx-size ------------------------------------------------------------------------------------------
def cmd_approx_size(args: argparse.Namespace) -> int:
    start, end = render.key_range(args)
    with read_options.open_read_only(args.path) as db:
        est = db.approximate_size(start, end, include_memtables=not args.no_memtable)
    if args.json:
        render.print_json({"path": args.path, "from": args.start, "to": args.end, **est.to_dict()})
        return 0
    hb = lambda n: render.human_bytes(n) if n < 1024 else f"{render.human_bytes(n)} ({n} B)"  # noqa: E731
    mem = "not counted (--no-memtable)" if args.no_memtable else (
        f"{hb(est.memtable_bytes)} in {render.plural(est.memtable_rows, 'row')}"
    )
    render.print_text(
        render.properties(
            [
                ("range", f"[{args.start or '-'}, {args.end or '-'})"),
                (
                    "ssts",
                    f"{hb(est.sst_bytes)} in {render.plural(est.sst_files, 'SST')}, "
                    f"about {render.plural(est.sst_rows, 'row')} (whole blocks, every stored version)",
                ),
                ("memtable", mem),
                ("total", hb(est.total_bytes)),
            ]
        )
    )
    return 0


REQUEST_KINDS = ("get", "list", "head", "put", "delete")


def _print_objects(objects: dict[str, dict[str, int]], requests: dict[str, int]) -> None:
    """What an object-store database holds per kind of object, and the requests du made to find out."""
    hb = render.human_bytes
    cells = [(kind, x["objects"], hb(x["bytes"])) for kind, x in objects.items()]
    cells.append(
        ("total", sum(x["objects"] for x in objects.values()), hb(sum(x["bytes"] for x in objects.values())))
    )
    render.print_text("\n" + render.table(("objects", "count", "bytes"), cells))
    made = [
        f"{requests.get(k, 0)} {k.upper()}" + (f" ({hb(requests[k + '_bytes'])})" if requests.get(k + "_bytes") else "")
        for k in REQUEST_KINDS
    ]
    render.print_text(f"requests made by du: {', '.join(made)}")
