"""``lsm put|delete``: write one key through the engine, as RocksDB's ``ldb put``/``ldb delete`` do.

Both open the database WRITABLE (`DB.open(path)`): like ``lsm compact``, ``lsm gc`` and ``time-seq
--reset``, the open fences any process writing to it (that writer's next write fails with FencedError),
replays and flushes its WAL, and the close flushes the new row to an L0 SST. A path that holds no database
is refused unless ``--create`` is given, so a typo'd path is an error rather than a new, empty database.

KEY and VALUE are UTF-8 text, or hex with ``--hex`` (an optional ``0x`` prefix), as every key argument of
``lsm`` (`tools.render.parse_key`). Whatever the engine would refuse (an empty or reserved key, a TTL whose
expiry does not fit, a store whose clock is ahead of this host's) is refused before the open
(`tools.preflight`): a refused write fences nobody.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from tools import render
from tools.common import db_dir

if TYPE_CHECKING:
    from lsm.db import DB

WRITABLE_NOTE = (
    "Opens the database WRITABLE: a process writing to PATH is fenced (its next write fails with "
    "FencedError), as with 'lsm compact' and 'lsm gc'. A PATH that holds no database is refused unless "
    "--create is given."
)


def register(sub: argparse._SubParsersAction) -> None:
    put = sub.add_parser(
        "put",
        help="write KEY = VALUE (opens the database writable: fences a running writer)",
        description="Write KEY = VALUE through the engine as one commit, with an optional TTL, and print "
        "the seq and times it got. KEY and VALUE are UTF-8 text, or hex with --hex. " + WRITABLE_NOTE,
    )
    put.add_argument("path", metavar="PATH")
    put.add_argument("key", metavar="KEY")
    put.add_argument("value", metavar="VALUE")
    put.add_argument(
        "--ttl",
        type=render.int_arg(0),
        metavar="MS",
        help="time to live in ms from the commit: the row expires at ts + MS (default: none)",
    )
    add_write_args(put)
    put.set_defaults(func=cmd_put)

    delete = sub.add_parser(
        "delete",
        help="delete KEY: write a tombstone (opens the database writable: fences a running writer)",
        description="Delete KEY through the engine: one commit writing a tombstone, whether or not KEY had "
        "a visible value (the output says which). KEY is UTF-8 text, or hex with --hex. " + WRITABLE_NOTE,
    )
    delete.add_argument("path", metavar="PATH")
    delete.add_argument("key", metavar="KEY")
    add_write_args(delete)
    delete.set_defaults(func=cmd_delete)


def add_write_args(p: argparse.ArgumentParser) -> None:
    """--create, and the output options, of every command that writes to a database."""
    p.add_argument(
        "--create",
        action="store_true",
        help="create the database if PATH does not hold one (an empty or missing directory)",
    )
    render.add_output_args(p)


def open_writable(path: str, create: bool) -> DB:
    """The database at `path`, opened writable (fencing any other writer); without `create` a path that
    holds no database is refused (NotADatabaseError) instead of becoming a new one."""
    from lsm.db import DB
    from lsm.errors import NotADatabaseError
    from lsm.options import DbOptions

    if not create:
        try:
            db_dir(path)
        except NotADatabaseError as e:
            raise NotADatabaseError(f"{e} (give --create to create a database there)") from None
    # with --create, DB.open still refuses a file, or a non-empty directory that holds no database
    return DB.open(path, DbOptions(block_cache_bytes=0, background_compaction=False))


def _report(args: argparse.Namespace, d: dict[str, Any], text: str) -> None:
    if args.json:
        render.print_json(d)
    else:
        render.print_text(text)


def cmd_put(args: argparse.Namespace) -> int:
    mode = args.bytes_mode
    key = render.parse_key(args.key, mode.key_in, "KEY")
    value = render.parse_key(args.value, mode.value_in, "VALUE")
    from lsm.options import ReadOptions
    from tools.preflight import check_put, commit_floor

    check_put(key, value, args.ttl, commit_floor(args.path))  # before the open: it fences the writer

    with open_writable(args.path, args.create) as db:
        seq = db.put(key, value, ttl=args.ttl)
        e = db.get_entry(key, ReadOptions(include_expired=True))
    assert e is not None and e.seq == seq, "the row just written must be the visible one"
    d: dict[str, Any] = {"op": "put"}
    render.put_bytes(d, "key", key, mode.key)
    render.put_bytes(d, "value", value, mode.value)
    d.update(seq=seq, ts=e.ts, expire_ts=e.expire_ts)
    expires = "" if e.expire_ts is None else f", expires {render.rfc3339(e.expire_ts)}"
    _report(
        args,
        d,
        f"put {render.bytes_for_table(key, mode.key)} at seq {seq} (ts {render.rfc3339(e.ts)}{expires})",
    )
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    mode = args.bytes_mode
    key = render.parse_key(args.key, mode.key_in, "KEY")
    from tools.preflight import check_delete, commit_floor

    check_delete(key)  # before the open: it fences the writer
    commit_floor(args.path)
    with open_writable(args.path, args.create) as db:
        had = db.get(key) is not None
        seq = db.delete(key)
    d: dict[str, Any] = {"op": "delete"}
    render.put_bytes(d, "key", key, mode.key)
    d.update(seq=seq, had_value=had)
    before = "it had a visible value" if had else "it had no visible value"
    _report(args, d, f"deleted {render.bytes_for_table(key, mode.key)} at seq {seq} ({before})")
    return 0


__all__ = ["WRITABLE_NOTE", "add_write_args", "open_writable", "register"]
