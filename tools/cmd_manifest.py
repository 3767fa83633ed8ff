"""``lsm manifest show|list``: the LSM shape recorded in a manifest version, and the versions kept on disk.

The `lsm` engine package is imported inside the functions that need it, here and in the other inspection
modules: importing it costs more than everything else the CLI loads (about 0.2 s per run), and the
file-level commands (``lsm sst ...``) never need it. Command modules should do the same.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import TYPE_CHECKING, Any

from formats import manifest as codec
from formats.errors import CorruptionError, FormatVersionError
from formats.manifest import Manifest, SstEntry
from storage import path_kind, storage_for
from tools import render
from tools.cmd_sst import info_json
from tools.common import db_dir, latest_manifest

if TYPE_CHECKING:
    from lsm.manifest import ManifestStore

BYTES_FIELDS = ("seq_tracker", "time_seq")  # shown by size; their decoders have commands of their own


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("manifest", help="inspect manifest versions: show, list")
    s = p.add_subparsers(dest="manifest_command", metavar="COMMAND", required=True)

    show = s.add_parser(
        "show",
        help="the LSM shape in a manifest version (the newest by default)",
        description="Print one manifest version: epochs, last seq, WAL replay point, clock watermark, and "
        "the LSM shape (L0 newest first, sorted runs newest first, each SST with its size, rows, key range "
        "and seq range). PATH is a database directory or one .manifest file.",
    )
    show.add_argument("path", metavar="PATH")
    show.add_argument("--id", type=render.int_arg(0), metavar="N", help="show version N instead of the newest")
    render.add_output_args(show)
    show.set_defaults(func=cmd_show)

    ls = s.add_parser(
        "list",
        help="the manifest versions kept on disk",
        description="One line per manifest version kept in PATH/manifest/, oldest first. A version that "
        "cannot be decoded is listed with its error, and the command then exits 1.",
    )
    ls.add_argument("path", metavar="PATH")
    render.add_output_args(ls, bytes_args=False)
    ls.set_defaults(func=cmd_list)


# -- helpers shared with the other commands ------------------------------------------------------------
def entry_json(e: SstEntry, mode: str) -> dict[str, Any]:
    return {"name": e.name, "info": info_json(e.info, mode)}


def manifest_json(mid: int | None, path: str, m: Manifest, mode: str) -> dict[str, Any]:
    d: dict[str, Any] = {"id": mid, "path": path}
    for f in dataclasses.fields(m):
        v = getattr(m, f.name)
        if f.name == "l0":
            d["l0"] = [entry_json(e, mode) for e in m.l0]
        elif f.name == "runs":
            d["runs"] = [{"id": r.id, "ssts": [entry_json(e, mode) for e in r.ssts]} for r in m.runs]
        elif f.name in BYTES_FIELDS:
            d[f.name + "_size"] = len(v)
        elif f.name in ("checkpoints", "external"):
            d[f.name] = [dataclasses.asdict(x) for x in v]
        else:
            d[f.name] = v
            if f.name == "clock_watermark":
                d["clock_watermark_rfc3339"] = render.rfc3339(v)
    return d


def duration_text(ms: int | None) -> str:
    """A lag for people: ms below 10 s, then s (below 10 min), min (below 10 h), h (below 10 d) or d."""
    if ms is None:
        return "-"
    if ms < 10_000:
        return f"{ms} ms"
    for unit, size, below in (("s", 1_000, 600_000), ("min", 60_000, 36_000_000), ("h", 3_600_000, 864_000_000)):
        if ms < below:
            return f"{ms / size:.1f} {unit}"
    return f"{ms / 86_400_000:.1f} d"


def purge_lag_text(d: dict[str, Any] | None) -> str:
    """The manifest's cumulative purge-lag histogram in one line (count, p50, p99, max)."""
    if not d or not d.get("count"):
        return "nothing purged yet"
    return (
        f"{render.plural(d['count'], 'row')} purged; p50 {duration_text(d['p50'])}, p99 {duration_text(d['p99'])}, "
        f"max {duration_text(d['max'])} after expiry or delete"
    )


def levels(m: Manifest) -> list[tuple[str, tuple[SstEntry, ...]]]:
    """("L0", ssts) then ("run <id>", ssts) for each sorted run, newest first (`lsm.inspect.levels`)."""
    from lsm.inspect import levels as read_order

    return read_order(m)


def _seq_range(ssts: tuple[SstEntry, ...]) -> str:
    if not ssts:
        return "-"
    return f"{min(e.info.min_seq for e in ssts)}-{max(e.info.max_seq for e in ssts)}"


# -- show ---------------------------------------------------------------------------------------------
def read_version(path: str, mid: int | None) -> tuple[int | None, str, Manifest]:
    from lsm.manifest import ManifestStore

    if path_kind(path) == "file":
        if mid is not None:
            raise ValueError("--id needs a database directory, not a manifest file")
        m = codec.decode(storage_for(path).read(path), path)
        stem = os.path.basename(path).split(".", 1)[0]
        return (int(stem) if stem.isdigit() else None), path, m
    store = ManifestStore(db_dir(path))
    if mid is None:
        mid, m = latest_manifest(path)
        return mid, store.path(mid), m
    p = store.path(mid)
    try:
        return mid, p, store.read(mid)
    except FileNotFoundError:
        kept = store.ids()
        span = f"{kept[0]}..{kept[-1]}" if kept else "none"
        raise ValueError(f"{path}: no manifest version {mid} (versions kept: {span})") from None


def cmd_show(args: argparse.Namespace) -> int:
    mode = args.bytes_mode.key  # a manifest shows keys only
    mid, mpath, m = read_version(args.path, args.id)
    if args.json:
        render.print_json(manifest_json(mid, mpath, m, mode))
        return 0
    key = lambda b: render.bytes_for_table(b, mode)  # noqa: E731
    render.print_text(
        render.properties(
            [
                ("manifest", f"{mpath} (id {mid})" if mid is not None else mpath),
                ("writer_epoch", m.writer_epoch),
                ("compactor_epoch", m.compactor_epoch),
                ("last_seq", m.last_seq),
                ("history_floor", m.history_floor),
                ("wal_replay_from", f"segment {m.wal_replay_from}"),
                ("clock_watermark", render.time_detail(m.clock_watermark)),
                ("next_sst_id", m.next_sst_id),
                ("next_run_id", m.next_run_id),
                ("seq_tracker", f"{len(m.seq_tracker)} B"),
                ("time_seq", f"{len(m.time_seq)} B"),
                ("purge_lag", purge_lag_text(m.purge_lag)),
            ]
        )
    )
    summary = []
    for name, ssts in levels(m):
        summary.append(
            (
                name,
                len(ssts),
                render.human_bytes(sum(e.size for e in ssts)),
                sum(e.info.num_rows for e in ssts),
                key(min(e.info.first_key for e in ssts)) if ssts else "-",
                key(max(e.info.last_key for e in ssts)) if ssts else "-",
                _seq_range(ssts),
            )
        )
    total = m.all_ssts()
    summary.append(
        (
            "total",
            len(total),
            render.human_bytes(sum(e.size for e in total)),
            sum(e.info.num_rows for e in total),
            "",
            "",
            "",
        )
    )
    render.print_text(
        "\n" + render.table(("level", "ssts", "size", "rows", "first_key", "last_key", "seq"), summary)
    )
    cells = [
        (
            name,
            e.name,
            e.size,
            e.info.num_rows,
            key(e.info.first_key),
            key(e.info.last_key),
            f"{e.info.min_seq}-{e.info.max_seq}",
            render.time_cell(e.info.max_ts),
        )
        for name, ssts in levels(m)
        for e in ssts
    ]
    if cells:
        render.print_text(
            "\n"
            + render.table(("level", "sst", "size", "rows", "first_key", "last_key", "seq", "max_ts"), cells)
        )
    _print_checkpoints(m)
    return 0


def _print_checkpoints(m: Manifest) -> None:
    """The version's checkpoint records (live or expired: a version is shown as stored) and, for a clone,
    the stores its external SSTs live in (docs/checkpoints.md)."""
    from tools.cmd_checkpoint import HEADERS, checkpoint_cells

    if m.checkpoints:
        rows = [checkpoint_cells(cp) for cp in m.checkpoints]
        render.print_text(f"\ncheckpoints: {len(rows)}\n" + render.table(HEADERS, rows))
    if m.external:
        rows = [(x.root, x.checkpoint_id, len(x.names)) for x in m.external]
        render.print_text("\nexternal SSTs (a clone's, read from its source)\n"
                          + render.table(("root", "held by checkpoint", "ssts"), rows))


# -- list ---------------------------------------------------------------------------------------------
def version_summary(
    store: ManifestStore, mid: int, listed: dict[str, tuple[int, int]] | None = None
) -> dict[str, Any] | None:
    """One line of the history; None when the version vanished (pruned) while we listed. `listed`: name
    -> (size, mtime in ms) of the manifest directory from one listing (an object store: no HEAD per
    version); None: the file's own stat."""
    p = store.path(mid)
    try:
        if listed is None:
            st = os.stat(p)
            size, mtime = st.st_size, st.st_mtime_ns // 1_000_000
        else:
            size, mtime = listed[os.path.basename(p)]
        m = store.read(mid)
    except (FileNotFoundError, KeyError):
        return None
    except (CorruptionError, FormatVersionError) as e:
        return {"id": mid, "path": p, "error": str(e)}
    ssts = m.all_ssts()
    return {
        "id": mid,
        "path": p,
        "file_size": size,
        "mtime": mtime,
        "writer_epoch": m.writer_epoch,
        "compactor_epoch": m.compactor_epoch,
        "last_seq": m.last_seq,
        "clock_watermark": m.clock_watermark,
        "wal_replay_from": m.wal_replay_from,
        "l0": len(m.l0),
        "runs": len(m.runs),
        "ssts": len(ssts),
        "sst_bytes": sum(e.size for e in ssts),
    }


def cmd_list(args: argparse.Namespace) -> int:
    from lsm.errors import NotADatabaseError
    from lsm.manifest import ManifestStore

    store = ManifestStore(db_dir(args.path))
    ids = store.ids()
    listed = None
    if store.storage.root is not None:  # an object store: one listing gives every version's size and time
        sizes, mtimes = store.storage.list_sizes(store.dir), store.storage.list_mtimes(store.dir)
        listed = {n: (size, int(mtimes[n] * 1000)) for n, size in sizes.items() if n in mtimes}
    versions = [v for v in (version_summary(store, i, listed) for i in ids) if v is not None]
    if not versions:
        raise NotADatabaseError(f"{args.path}: no manifest version in {store.dir}: not an lsm-sim database")
    if args.json:
        render.print_json_array(versions)
    else:
        cells = []
        for v in versions:
            if "error" in v:
                cells.append((v["id"], "CORRUPT", v["error"], "", "", "", "", "", ""))
                continue
            cells.append(
                (
                    v["id"],
                    render.time_cell(v["mtime"]),
                    v["writer_epoch"],
                    v["last_seq"],
                    render.time_cell(v["clock_watermark"]),
                    v["wal_replay_from"],
                    v["l0"],
                    v["runs"],
                    render.human_bytes(v["sst_bytes"]),
                )
            )
        render.print_text(
            render.table(
                (
                    "id",
                    "written",
                    "writer_epoch",
                    "last_seq",
                    "clock_watermark",
                    "wal_from",
                    "l0",
                    "runs",
                    "sst_bytes",
                ),
                cells,
            )
        )
    bad = [v for v in versions if "error" in v]
    if bad:
        render.error(bad[0]["error"])
        return 1
    return 0
