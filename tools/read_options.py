"""The read options ``lsm get``, ``lsm scan`` and ``lsm changes`` share, and their library meaning.

`add_read_options(parser, point)` adds them; `reading(args)` opens the database read-only and turns them
into the library's read arguments: a `ReadOptions` (``include_expired``, ``now``, and for an as-of read
the `snapshot` from `DB.snapshot_at` / `DB.snapshot_at_seq`), released when the block ends.

- The point in history. get and scan (``point="as-of"``): ``--as-of TIME`` reads the state as of a
  commit time, ``--seq N`` the state right after commit N; neither reads the latest state. changes
  (``point="since"``): ``--since TIME`` or ``--seq N`` is where the changes start (one is required).
- Expiry. ``--expiry-at TIME`` judges TTL expiry at TIME instead of the database clock (an as-of read
  judges it at its TIME unless this is given); ``--include-expired`` also shows rows whose TTL has passed.
  ``--at`` is the old name of ``--expiry-at``: still accepted, with a warning, because it never moved
  the read to TIME (the data read was the latest), which its name suggested.
- ``--history-retention MS``: the library refuses an as-of read older than DbOptions.history_retention
  (compaction may have dropped the versions it needs), and a read-only open cannot know the writer's
  setting: it is not stored in the database. By default, 0 (only the latest state), unless the database
  never dropped or rewrote a version (its history floor is 0): then every past state is still on disk.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from tools import render
from tools.common import db_dir

if TYPE_CHECKING:
    from lsm.db import DB
    from lsm.options import ReadOptions

POINTS = ("as-of", "since")
AT_DEPRECATED = (
    "lsm: warning: --at is deprecated: it only sets the time TTL expiry is judged at, and still reads the "
    "latest data; use --expiry-at TIME for that, or --as-of TIME to read the database as of TIME"
)
ALL_HISTORY = 1 << 62  # ms: a retention no database reaches back beyond (the history floor is 0)


class _DeprecatedAt(argparse.Action):
    """``--at TIME``: stores --expiry-at and remembers the old name was used (warned about once parsed)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # type: ignore[override]
        namespace.expiry_at = values
        namespace.deprecated_at = True


def add_expiry_options(p: argparse.ArgumentParser) -> None:
    """--expiry-at TIME and its deprecated alias --at (``lsm du`` takes these alone)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--expiry-at",
        type=render.time_arg,
        metavar="TIME",
        help="judge TTL expiry at TIME (RFC 3339 or epoch ms) instead of the database clock; the data read "
        "does not change (for that, --as-of)",
    )
    g.add_argument(
        "--at",
        dest="expiry_at",
        type=render.time_arg,
        action=_DeprecatedAt,
        metavar="TIME",
        help="deprecated: the old name of --expiry-at (it never read the database as of TIME)",
    )
    p.set_defaults(deprecated_at=False)


def add_read_options(p: argparse.ArgumentParser, point: str) -> None:
    """The read options of get and scan (`point` "as-of") or changes ("since"), and --json/--hex/--utf8."""
    if point not in POINTS:
        raise ValueError(f"point must be one of {POINTS}, not {point!r}")
    g = p.add_mutually_exclusive_group(required=point == "since")
    if point == "as-of":
        g.add_argument(
            "--as-of",
            type=render.time_arg,
            metavar="TIME",
            help="read the state as of TIME (RFC 3339 or epoch ms): DB.snapshot_at(TIME); expiry is "
            "judged at TIME unless --expiry-at is given",
        )
        g.add_argument(
            "--seq",
            type=render.int_arg(0),
            metavar="N",
            help="read the state right after commit N: DB.snapshot_at_seq(N)",
        )
        p.add_argument(
            "--history-retention",
            type=render.int_arg(0),
            metavar="MS",
            help="the writer's DbOptions.history_retention: as-of reads older than MS before now are "
            "refused (default 0, the latest state only; unlimited when the database never dropped a version)",
        )
    else:
        g.add_argument(
            "--since",
            type=render.time_arg,
            metavar="TIME",
            help="changes since TIME (RFC 3339 or epoch ms)",
        )
        g.add_argument("--seq", type=render.int_arg(0), metavar="N", help="changes with a seq greater than N")
        p.set_defaults(as_of=None, history_retention=None)
    p.add_argument("--include-expired", action="store_true", help="also rows whose TTL has passed")
    add_expiry_options(p)
    render.add_output_args(p)
    p.set_defaults(read_point=point)


def warn_deprecated(args: argparse.Namespace) -> None:
    """The one-line warning for --at (on stderr; the command goes on)."""
    if getattr(args, "deprecated_at", False):
        sys.stdout.flush()
        sys.stderr.write(AT_DEPRECATED + "\n")


def open_read_only(path: str, history_retention: int = 0) -> DB:
    """The database at `path`, read-only: no fencing, WAL replayed in memory, no background threads."""
    from lsm.db import DB
    from lsm.options import DbOptions

    return DB.open(
        db_dir(path),
        DbOptions(block_cache_bytes=0, background_compaction=False, history_retention=history_retention),
        read_only=True,
    )


def _retention(path: str, given: int | None) -> int:
    """--history-retention, or its default: everything when nothing was ever dropped, else 0."""
    if given is not None:
        return given
    from lsm.history import history_floor
    from tools.common import latest_manifest

    return ALL_HISTORY if history_floor(latest_manifest(path)[1]) == 0 else 0


@contextlib.contextmanager
def reading(args: argparse.Namespace) -> Iterator[tuple[DB, ReadOptions]]:
    """(the database at args.path opened read-only, the `ReadOptions` the read options ask for); an
    as-of snapshot is released at the end. Out of retention: RetentionError, one line naming what to do."""
    from lsm.errors import RetentionError
    from lsm.history import history_floor
    from lsm.options import ReadOptions

    warn_deprecated(args)
    as_of = args.as_of
    seq = args.seq if args.read_point == "as-of" else None
    keep = _retention(args.path, args.history_retention) if (as_of is not None or seq is not None) else 0
    db = open_read_only(args.path, keep)
    if keep == ALL_HISTORY and history_floor(db.manifest) != 0:  # a compaction committed meanwhile
        db.close()
        db = open_read_only(args.path, 0)
    with db:
        snap = None
        try:
            if as_of is not None:
                snap = db.snapshot_at(as_of)
            elif seq is not None:
                snap = db.snapshot_at_seq(seq)
        except RetentionError as e:
            raise RetentionError(_out_of_retention(args, db, keep, e)) from None
        try:
            yield db, ReadOptions(include_expired=args.include_expired, now=args.expiry_at, snapshot=snap)
        finally:
            if snap is not None:
                snap.close()


def _out_of_retention(args: argparse.Namespace, db: DB, keep: int, e: Exception) -> str:
    from lsm.history import history_floor

    what = f"as of {render.rfc3339(args.as_of)}" if args.as_of is not None else f"as of seq {args.seq}"
    if keep == ALL_HISTORY:  # every version is there: the seq tracker cannot place the point
        t = db.seq_tracker_entries()
        oldest = f"seq {t[0][0]} at {render.rfc3339(t[0][1] * 1000)}" if t else "none"
        why = f"the seq tracker records no commit that far back (its oldest entry: {oldest})"
    elif args.history_retention is None:
        why = (
            "compaction has dropped old versions of this database (history floor "
            f"seq {history_floor(db.manifest)}), and a read-only open cannot know how much history the writer "
            "keeps: give --history-retention MS (the writer's DbOptions.history_retention) to read within it"
        )
    else:
        why = f"--history-retention {args.history_retention} ms does not reach back that far ({e})"
    return f"{args.path}: cannot read {what} (the latest state is seq {db.seq}): {why}"


__all__ = [
    "AT_DEPRECATED",
    "POINTS",
    "add_expiry_options",
    "add_read_options",
    "open_read_only",
    "reading",
    "warn_deprecated",
]
