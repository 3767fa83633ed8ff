"""``lsm checkpoint create|list|delete`` and ``lsm clone``: durable states of a database and the stores
started from them (docs/checkpoints.md).

``create`` and ``delete`` open the database WRITABLE, as ``lsm put`` does: a process writing to PATH is
fenced. A program that writes takes its checkpoints through its own handle (``db.checkpoint()``).
``list`` opens it read-only and fences nobody.
"""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, Any

from tools import render
from tools.common import db_dir

if TYPE_CHECKING:
    from formats.manifest import Checkpoint

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)?$")
WRITABLE = "Opens PATH writable: a process writing to it is fenced (its next write fails with FencedError)."


def duration_arg(text: str) -> int:
    """A positive duration for argparse: ms, or a number with a unit (``90s``, ``6h``, ``30d``)."""
    m = _DURATION.match(text.strip())
    ms = int(m.group(1)) * _UNITS[m.group(2) or "ms"] if m else 0
    if ms <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive duration (ms, or like 90s, 6h, 30d), got {text!r}")
    return ms


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("checkpoint", help="durable states of a database: create, list, delete")
    s = p.add_subparsers(dest="checkpoint_cmd", metavar="{create,list,delete}", required=True)
    create = s.add_parser(
        "create", help="flush and record a checkpoint of the database's state",
        description="Flush the memtable and record a checkpoint in the manifest: compaction and gc keep its "
        "files until it is deleted or its lifetime has passed. Read it with "
        "DB.open(PATH, read_only=True, checkpoint=ID). Prints the checkpoint. " + WRITABLE,
    )
    create.add_argument("path", metavar="PATH")
    create.add_argument("--lifetime", type=duration_arg, metavar="D",
                        help="released once the store's clock passes now + D (ms, or 90s, 6h, 30d; default: kept until deleted)")
    create.add_argument("--name", metavar="N", help="a label shown by 'lsm checkpoint list'")
    create.add_argument("--json", action="store_true", help="print a JSON object")
    create.set_defaults(func=cmd_create)
    ls = s.add_parser("list", help="the live checkpoints of a database (read-only)")
    ls.add_argument("path", metavar="PATH")
    ls.add_argument("--json", action="store_true", help="print a JSON array")
    ls.set_defaults(func=cmd_list)
    delete = s.add_parser("delete", help="delete a checkpoint: the files only it kept are removed",
                          description="Drop checkpoint ID; the SSTs only it kept are deleted. " + WRITABLE)
    delete.add_argument("path", metavar="PATH")
    delete.add_argument("id", metavar="ID")
    delete.set_defaults(func=cmd_delete)

    c = sub.add_parser(
        "clone", help="a new writable database starting from another's state, without copying its SSTs",
        description="Create the database DST from SRC's state: its checkpoint ID, or one taken now for the "
        "clone (which opens SRC writable: a process writing to it is fenced). On an object store no SST is "
        "copied (DST's manifest references SRC's SSTs, kept there by the checkpoint); between two "
        "directories they are hard-linked. See docs/checkpoints.md.",
    )
    c.add_argument("src", metavar="SRC")
    c.add_argument("dst", metavar="DST")
    c.add_argument("--checkpoint", metavar="ID", help="clone the state of SRC's checkpoint ID")
    c.add_argument("--json", action="store_true", help="print a JSON object")
    c.set_defaults(func=cmd_clone)


def checkpoint_json(cp: Checkpoint) -> dict[str, Any]:
    """A checkpoint as ``lsm checkpoint`` prints it in JSON."""
    return {"id": cp.id, "name": cp.name, "seq": cp.seq, "ts": cp.ts, "ts_rfc3339": render.rfc3339(cp.ts),
            "expires_at": cp.expires_at, "expires_at_rfc3339": render.rfc3339(cp.expires_at),
            "manifest_id": cp.manifest_id}


def checkpoint_cells(cp: Checkpoint) -> tuple:
    """A checkpoint as a row of ``lsm checkpoint list``'s table."""
    expires = render.rfc3339(cp.expires_at) if cp.expires_at is not None else "never"
    return (cp.id, cp.name or "-", cp.seq, render.rfc3339(cp.ts), expires, cp.manifest_id)


HEADERS = ("id", "name", "seq", "taken", "expires", "manifest")


def _writable(path: str) -> Any:
    from lsm.db import DB
    from lsm.options import DbOptions

    db_dir(path)
    return DB.open(path, DbOptions(background_compaction=False))


def cmd_create(args: argparse.Namespace) -> int:
    with _writable(args.path) as db:
        cp = db.checkpoint(lifetime_ms=args.lifetime, name=args.name)
    if args.json:
        render.print_json(checkpoint_json(cp))
    else:
        render.print_text(render.properties(zip(HEADERS, checkpoint_cells(cp), strict=True)))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from lsm.db import DB
    from lsm.options import DbOptions

    db_dir(args.path)
    with DB.open(args.path, DbOptions(background_compaction=False), read_only=True) as db:
        cps = db.checkpoints()
    if args.json:
        render.print_json([checkpoint_json(cp) for cp in cps])
    elif cps:
        render.print_text(render.table(HEADERS, [checkpoint_cells(cp) for cp in cps]))
    else:
        render.print_text("no checkpoints")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from lsm.checkpoints import find
    from lsm.clock import SystemClock
    from tools.common import latest_manifest

    # an id the store does not hold is refused before the writable open, which would publish a version
    _mid, m = latest_manifest(args.path)
    find(m, args.id, max(SystemClock().now(), m.clock_watermark), args.path)
    with _writable(args.path) as db:
        db.delete_checkpoint(args.id)
    render.print_text(f"deleted checkpoint {args.id}")
    return 0


def cmd_clone(args: argparse.Namespace) -> int:
    from lsm.db import DB
    from lsm.options import DbOptions

    db_dir(args.src)
    with DB.clone(args.src, args.dst, args.checkpoint, DbOptions(background_compaction=False)) as db:
        m = db.manifest
        external = sum(len(x.names) for x in m.external)
        report = {"src": args.src, "dst": args.dst, "seq": db.seq, "ssts": len(m.all_ssts()),
                  "external_ssts": external, "held_by": [x.checkpoint_id for x in m.external]}
    if args.json:
        render.print_json(report)
    else:
        render.print_text(render.properties([
            ("clone", args.dst), ("of", args.src), ("seq", report["seq"]),
            ("ssts", f"{report['ssts']} ({external} read from the source)"),
            ("held by", ", ".join(report["held_by"]) or "-"),
        ]))
    return 0


__all__ = ["checkpoint_cells", "checkpoint_json", "duration_arg", "register"]
