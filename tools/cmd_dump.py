"""``lsm dump DB [--out FILE]`` and ``lsm load DB FILE``: a whole database as a portable text file, and back.

The file format is `tools.dumpfile` (docs/format.md, "Dump files"). ``dump`` reads the files of one
consistent manifest version and the WAL after it (`lsm.inspect.view_versions`), read-only: a running
writer is not fenced. It writes the newest stored version of every key (a tombstone too, and a row whose
TTL has passed, with its absolute expire_ts), so a load reproduces what every read sees, at any time.

``load`` reads and verifies the WHOLE file first (header, every record, the trailer's count and SHA-256):
a file cut short, edited or of another format is one error line and nothing is written. It then opens the
database writable (fencing a running writer; ``--create`` for a new one) and commits every record as ONE
atomic commit, each row with exactly the expire_ts the dump gives (`lsm.db.Engine.commit_rows` builds the
rows once the commit's ts is known), so a crash mid-load leaves all of it or none.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Any

from storage import path_kind, storage_for
from tools import render
from tools.cmd_write import WRITABLE_NOTE, open_writable
from tools.common import db_dir
from tools.dumpfile import Dump, DumpFileError, newest_versions, parse_dump, write_dump

WAL_RECORD_MAX = (1 << 32) - 1  # a WAL record's payload length is a u32: one commit cannot hold more
_ROW_OVERHEAD = 15  # a WAL row's fixed bytes: u16 key length, flags, i64 expire_ts, u32 value length


def register(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser(
        "dump",
        help="write the whole database as a portable text file (read-only)",
        description="Write the newest stored version of every key (values, tombstones, expired rows and "
        "their absolute expire_ts) as an lsm-dump file: ASCII JSON lines, a header, one record per key in "
        "key order and a trailer with the record count and a SHA-256 (docs/format.md). Reads the files "
        "read-only: a running writer is not fenced. The remaps of ingested sources are not dumped.",
    )
    d.add_argument("path", metavar="PATH")
    d.add_argument(
        "--out",
        metavar="FILE",
        help="write to FILE (through a temporary file renamed at the end, so FILE is whole or untouched) "
        "and print a summary; default: standard output",
    )
    d.add_argument("--json", action="store_true", help="print the --out summary as JSON")
    add_range_args(d)
    d.set_defaults(func=cmd_dump)

    ld = sub.add_parser(
        "load",
        help="apply an lsm dump file as one atomic commit (opens the database writable: fences a writer)",
        description="Verify the whole dump FILE (header, records, trailer count and SHA-256) and then commit "
        "all of its records as ONE atomic commit: puts with the expire_ts the dump gives, deletes for its "
        "tombstones. A truncated, edited or foreign file is refused before anything is written. Into an "
        "empty database the result reads exactly as the dumped one; into a non-empty one the records "
        "overwrite and delete their keys and leave the others. " + WRITABLE_NOTE,
    )
    ld.add_argument("path", metavar="PATH")
    ld.add_argument("file", metavar="FILE", help="the dump file ('-': standard input)")
    ld.add_argument(
        "--create",
        action="store_true",
        help="create the database if PATH does not hold one (an empty or missing directory)",
    )
    ld.add_argument("--json", action="store_true", help="print the summary as JSON")
    ld.set_defaults(func=cmd_load)


# -- dump -------------------------------------------------------------------------------------------------
def add_range_args(d: argparse.ArgumentParser) -> None:
    """--from/--to/--limit of ``lsm dump``: a part of the key space, as ``ldb dump --from --to --max_keys``.
    The file is an ordinary dump of the keys it holds (`lsm load` reads it like any other)."""
    d.add_argument("--from", dest="start", metavar="KEY", help="first key dumped (inclusive)")
    d.add_argument("--to", dest="end", metavar="KEY", help="dump keys before KEY (exclusive)")
    d.add_argument("--limit", type=render.int_arg(0), metavar="N", help="dump at most N keys (records)")
    render.add_key_input_args(d)


def _range_text(summary: dict[str, Any]) -> str:
    """`` (keys [a, m), the first 10)`` for a summary of a partial dump, "" for a whole one."""
    r = summary.get("range")
    if r is None:
        return ""
    bounds = f"[{'-' if r['from'] is None else r['from']}, {'-' if r['to'] is None else r['to']})"
    limit = "" if r["limit"] is None else f", at most {r['limit']}"
    return f" (keys {bounds}{limit})"


def dump_database(
    path: str,
    out: Any,
    source: str | None = None,
    *,
    start: bytes | None = None,
    end: bytes | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    """Write the dump of the database at `path` to the binary stream `out`; return its summary. `start`
    (inclusive), `end` (exclusive) and `limit` (records) dump a part of it: the newest version of each
    key in [start, end), the first `limit` of them."""
    from lsm.clock import SystemClock
    from lsm.history import open_view
    from lsm.inspect import view_versions

    db_dir(path)
    counts = {"tombstones": 0, "with_ttl": 0}

    def counted(records):
        for r in records:
            if r.value is None:
                counts["tombstones"] += 1
            elif r.expire_ts is not None:
                counts["with_ttl"] += 1
            yield r

    with open_view(path) as view:  # one consistent state: its last durable seq goes in the header
        seq = view.last_seq
        records = newest_versions(view_versions(view, start, end))
        if limit is not None:
            records = itertools.islice(records, limit)
        n = write_dump(out, counted(records), source or path, seq, SystemClock().now())
    return {"path": path, "records": n, **counts, "seq": seq}


def cmd_dump(args: argparse.Namespace) -> int:
    start, end = render.key_range(args)
    part = {"start": start, "end": end, "limit": args.limit}
    if args.out is None:
        dump_database(args.path, sys.stdout.buffer, **part)
        sys.stdout.buffer.flush()
        return 0
    # whole or not at all: a temporary file renamed over a file, one PUT of an object
    with storage_for(args.out).replacing(args.out) as out:
        summary = dump_database(args.path, out, **part)
    summary["out"] = args.out
    if start is not None or end is not None or args.limit is not None:
        summary["range"] = {"from": args.start, "to": args.end, "limit": args.limit}
    if args.json:
        render.print_json(summary)
    else:
        render.print_text(
            f"dumped {render.plural(summary['records'], 'record')} "
            f"({render.plural(summary['tombstones'], 'tombstone')}, {summary['with_ttl']} with a TTL) of {args.path}{_range_text(summary)} at seq {summary['seq']} to {args.out}"
        )
    return 0


# -- load -------------------------------------------------------------------------------------------------
def read_dump_file(file: str) -> Dump:
    """The verified dump in `file` ('-': standard input; a URL: an object); DumpFileError before anything
    is written."""
    if file == "-":
        return parse_dump(sys.stdin.buffer.read(), "<stdin>")
    if path_kind(file) == "dir":
        raise DumpFileError(f"{file}: is a directory, not a dump file")
    return parse_dump(storage_for(file).read(file), file)


def load_dump(path: str, dump: Dump, create: bool = False) -> dict[str, Any]:
    """Commit every record of `dump` into the database at `path` as one atomic commit; return a summary."""
    from formats.row import check_value
    from lsm.syskeys import check_user_key

    for r in dump.records:  # the engine's own checks, before the database is even opened
        check_user_key(r.key)
        if r.value is not None:
            check_value(r.value)
    size = 16 + sum(_ROW_OVERHEAD + len(r.key) + len(r.value or b"") for r in dump.records)
    if size > WAL_RECORD_MAX:
        raise DumpFileError(
            f"the dump's {len(dump.records)} records ({size} bytes) exceed one commit's 4 GiB"
        )
    from lsm.errors import NotADatabaseError
    from tools.preflight import commit_floor

    if not dump.records:  # nothing to commit: open (to create) only a store that is not there yet
        try:
            db_dir(path)
        except NotADatabaseError:
            with open_writable(path, create):
                pass
        return {"path": path, "records": 0, "seq": None, "ts": None}
    commit_floor(path)  # a commit this host's clock cannot stamp: refused before the open fences anyone
    with open_writable(path, create) as db:
        rows = [(r.key, r.expire_ts, r.value) for r in dump.records]
        nbytes = sum(len(r.key) + len(r.value or b"") for r in dump.records)

        def rows_at(ts: int, seq: int) -> tuple[list[tuple], int]:
            return rows, nbytes

        seq, ts = db.engine.commit_rows(rows_at, sync=True)
    return {"path": path, "records": len(rows), "seq": seq, "ts": ts}


def cmd_load(args: argparse.Namespace) -> int:
    dump = read_dump_file(args.file)
    summary = load_dump(args.path, dump, args.create)
    tombstones = sum(1 for r in dump.records if r.value is None)
    summary.update(tombstones=tombstones, source=dump.header["source"], source_seq=dump.header["seq"])
    if args.json:
        render.print_json(summary)
    elif summary["seq"] is None:
        render.print_text(f"loaded 0 records into {args.path}: the dump is empty, nothing was written")
    else:
        render.print_text(
            f"loaded {render.plural(summary['records'], 'record')} ({render.plural(tombstones, 'tombstone')}) into {args.path} as one commit, "
            f"seq {summary['seq']} (dump of {render.escaped(dump.header['source'])} at seq {dump.header['seq']})"
        )
    return 0


__all__ = ["dump_database", "load_dump", "read_dump_file", "register"]
