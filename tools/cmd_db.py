"""``lsm get|scan|check|du``: a whole database, read-only.

get and scan read through the engine (`DB.open(path, read_only=True)`): the same version resolution,
tombstones and expiry as an application sees, without fencing a running writer (a read-only open does
not bump the writer epoch; it replays the WAL into memory only). check and du read the files directly.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from compaction.merge import merge_sources
from formats.errors import CorruptionError
from formats.manifest import Manifest, SstEntry
from formats.sst import SstReader
from formats.wal import ROW_CODEC as WAL_ROW_CODEC
from tools import render
from tools.cmd_manifest import db_dir, latest_manifest, levels, purge_lag_text
from tools.cmd_sst import verify_sst

if TYPE_CHECKING:  # the engine is imported where it is used (see tools.cmd_manifest)
    from lsm.db import DB, Entry


def register(sub: argparse._SubParsersAction) -> None:
    get = sub.add_parser(
        "get",
        help="the visible value of a key, read-only",
        description="Read KEY through the engine, read-only (a running writer is not fenced). Exits 1 when "
        "the key is absent, deleted or expired.",
    )
    get.add_argument("path", metavar="PATH")
    get.add_argument("key", metavar="KEY")
    _read_args(get)
    get.set_defaults(func=cmd_get)

    scan = sub.add_parser(
        "scan",
        help="the visible rows of a key range, read-only",
        description="Scan the database through the engine, read-only (a running writer is not fenced): the "
        "newest visible version of each key, without tombstones or (unless --include-expired) expired rows.",
    )
    scan.add_argument("path", metavar="PATH")
    scan.add_argument("--from", dest="start", metavar="KEY", help="first key (inclusive)")
    scan.add_argument("--to", dest="end", metavar="KEY", help="last key (exclusive)")
    scan.add_argument("--prefix", metavar="KEY", help="only keys starting with this prefix")
    scan.add_argument("--limit", type=int, metavar="N", help="stop after N rows")
    scan.add_argument("--reverse", action="store_true", help="descending key order")
    _read_args(scan)
    scan.set_defaults(func=cmd_scan)

    check = sub.add_parser(
        "check",
        help="check the whole database (exit 1 naming the first problem)",
        description="Check the database at PATH: every manifest version kept decodes; every SST the newest "
        "manifest references exists, verifies (checksums, key order, filter, metadata) and has the "
        "SsTableInfo the manifest records; sorted runs are sorted and do not overlap; newer L0 SSTs and runs "
        "hold newer seqs than older ones they overlap; last_seq, the clock watermark and next_sst_id cover "
        "every SST; the WAL segments from the replay point decode. Unreferenced SSTs and torn WAL tails are "
        "reported as notes. Exits 1 naming the first problem.",
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
    du.add_argument(
        "--at",
        type=render.time_arg,
        metavar="TIME",
        help="judge expiry at TIME (RFC 3339 or epoch ms) instead of the database clock (system time)",
    )
    render.add_output_args(du, bytes_args=False)
    du.set_defaults(func=cmd_du)


def _read_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--include-expired", action="store_true", help="also rows whose TTL has passed")
    p.add_argument(
        "--at",
        type=render.time_arg,
        metavar="TIME",
        help="judge expiry at TIME (RFC 3339 or epoch ms) instead of the database clock",
    )
    render.add_output_args(p)


def open_db(path: str) -> DB:
    """The database at `path`, read-only (no fencing, WAL replayed in memory, no background threads)."""
    from lsm.db import DB
    from lsm.options import DbOptions

    return DB.open(db_dir(path), DbOptions(block_cache_bytes=0), read_only=True)


def entry_json(e: Entry, mode: str) -> dict[str, Any]:
    d: dict[str, Any] = {}
    render.put_bytes(d, "key", e.key, mode)
    render.put_bytes(d, "value", e.value, mode)
    d["seq"] = e.seq
    d["ts"] = e.ts
    d["expire_ts"] = e.expire_ts
    return d


def entry_cells(e: Entry, mode: str) -> tuple:
    return (
        render.bytes_for_table(e.key, mode),
        e.seq,
        render.time_cell(e.ts),
        render.time_cell(e.expire_ts),
        render.bytes_for_table(e.value, mode, render.MAX_VALUE_CHARS),
    )


ENTRY_HEADERS = ("key", "seq", "ts", "expire_ts", "value")


# -- get / scan -----------------------------------------------------------------------------------------
def cmd_get(args: argparse.Namespace) -> int:
    mode = args.bytes_mode
    key = render.parse_key(args.key, mode == "hex", "KEY")
    with open_db(args.path) as db:
        e = db._get_entry(key, None, args.include_expired, args.at)
    if e is None:
        if args.json:
            render.print_json(None)
        render.error(f"key {render.bytes_for_table(key, mode)} not found (absent, deleted or expired)")
        return 1
    if args.json:
        render.print_json(entry_json(e, mode))
    else:
        render.print_text(
            render.properties(
                [
                    ("key", render.bytes_for_table(e.key, mode)),
                    ("value", render.bytes_for_table(e.value, mode)),
                    ("seq", e.seq),
                    ("ts", render.time_detail(e.ts)),
                    ("expire_ts", render.time_detail(e.expire_ts)),
                ]
            )
        )
    return 0


def cmd_scan(args: argparse.Namespace) -> int:
    mode = args.bytes_mode
    hex_in = mode == "hex"
    start = None if args.start is None else render.parse_key(args.start, hex_in, "--from")
    end = None if args.end is None else render.parse_key(args.end, hex_in, "--to")
    prefix = None if args.prefix is None else render.parse_key(args.prefix, hex_in, "--prefix")
    if args.limit is not None and args.limit < 0:
        raise ValueError("--limit must be >= 0")
    with open_db(args.path) as db:
        rows = db._scan(start, end, args.reverse, prefix, None, args.include_expired, args.at, True)
        try:
            limited: Iterator[Entry] = itertools.islice(rows, args.limit) if args.limit is not None else rows
            if args.json:
                render.print_json_array(entry_json(e, mode) for e in limited)
            else:
                render.print_text(render.table(ENTRY_HEADERS, [entry_cells(e, mode) for e in limited]))
        finally:
            rows.close()
    return 0


# -- check ------------------------------------------------------------------------------------------------
class Problem(Exception):
    """What `check` found wrong; the message names the file and what is wrong."""


@dataclasses.dataclass
class CheckReport:
    manifest_id: int = 0
    manifest_versions: int = 0
    ssts: int = 0
    rows: int = 0
    sst_bytes: int = 0
    l0: int = 0
    runs: int = 0
    wal_segments: int = 0
    wal_records: int = 0
    notes: list[str] = dataclasses.field(default_factory=list)


def _overlap(a_first: bytes, a_last: bytes, b_first: bytes, b_last: bytes) -> bool:
    return a_first <= b_last and b_first <= a_last


def _source_ranges(m: Manifest) -> list[tuple[str, bytes, bytes, int, int]]:
    """(label, first_key, last_key, min_seq, max_seq) of each read-path source, newest first."""
    out = [
        (f"L0 SST {e.name}", e.info.first_key, e.info.last_key, e.info.min_seq, e.info.max_seq) for e in m.l0
    ]
    for r in m.runs:
        if r.ssts:
            i = [e.info for e in r.ssts]
            out.append(
                (
                    f"run {r.id}",
                    i[0].first_key,
                    i[-1].last_key,
                    min(x.min_seq for x in i),
                    max(x.max_seq for x in i),
                )
            )
    return out


def _sst_number(name: str) -> int | None:
    head = name.split("-", 1)[0].split(".", 1)[0]
    return int(head) if head.isdigit() else None


def check_database(path: str) -> CheckReport:
    """Run every check once; raise Problem naming the first failure."""
    from lsm import wal as wal_files
    from lsm.manifest import ManifestStore

    store = ManifestStore(path)
    rep = CheckReport()
    ids = store.ids()
    for mid in ids:
        try:
            store.read(mid)
        except FileNotFoundError:
            continue  # pruned by a running writer since we listed
        except CorruptionError as e:
            raise Problem(str(e)) from None
        rep.manifest_versions += 1
    rep.manifest_id, m = latest_manifest(path)
    entries: list[tuple[str, SstEntry]] = [(lvl, e) for lvl, ssts in levels(m) for e in ssts]
    rep.l0, rep.runs = len(m.l0), len(m.runs)
    seen: set[str] = set()
    mpath = store.path(rep.manifest_id)
    for lvl, e in entries:
        if e.name in seen:
            raise Problem(f"{mpath}: SST {e.name} is referenced twice")
        seen.add(e.name)
        p = os.path.join(path, "sst", e.name)
        if not os.path.exists(p):
            raise Problem(f"{p}: missing, but manifest {rep.manifest_id} lists it in {lvl}")
        try:
            with SstReader(p) as r:
                verify_sst(r)
                file_info = r.info
        except CorruptionError as e2:
            raise Problem(str(e2)) from None
        diffs = [
            f"{f.name} {getattr(e.info, f.name)!r} != {getattr(file_info, f.name)!r}"
            for f in dataclasses.fields(file_info)
            if getattr(e.info, f.name) != getattr(file_info, f.name)
        ]
        if diffs:
            raise Problem(
                f"{p}: SsTableInfo in manifest {rep.manifest_id} disagrees with the file: {'; '.join(diffs)}"
            )
        rep.ssts += 1
        rep.rows += file_info.num_rows
        rep.sst_bytes += file_info.file_size
        n = _sst_number(e.name)
        if n is not None and n >= m.next_sst_id:
            raise Problem(f"{mpath}: next_sst_id {m.next_sst_id} would reuse the id of {e.name}")
    run_ids = [r.id for r in m.runs]
    if len(set(run_ids)) != len(run_ids):
        raise Problem(f"{mpath}: sorted run ids repeat: {run_ids}")
    for r in m.runs:
        for a, b in itertools.pairwise(r.ssts):
            if not a.info.last_key < b.info.first_key:
                raise Problem(f"{mpath}: run {r.id}: {a.name} and {b.name} overlap or are out of key order")
    sources = _source_ranges(m)
    for i, newer in enumerate(sources):
        for older in sources[i + 1 :]:
            if _overlap(newer[1], newer[2], older[1], older[2]) and not newer[3] > older[4]:
                raise Problem(
                    f"{mpath}: {newer[0]} (seq {newer[3]}-{newer[4]}) is read before {older[0]} "
                    f"(seq {older[3]}-{older[4]}) and their keys overlap, but it does not hold only newer seqs"
                )
    all_infos = [e.info for _, e in entries]
    if all_infos:
        top_seq = max(i.max_seq for i in all_infos)
        if m.last_seq < top_seq:
            raise Problem(f"{mpath}: last_seq {m.last_seq} is below seq {top_seq} stored in an SST")
        ts = [i.max_ts for i in all_infos if i.max_ts is not None]
        if ts and m.clock_watermark < max(ts):
            raise Problem(
                f"{mpath}: clock_watermark {m.clock_watermark} is below ts {max(ts)} stored in an SST"
            )
    sst_dir = os.path.join(path, "sst")
    if os.path.isdir(sst_dir):
        orphans = sorted(n for n in os.listdir(sst_dir) if n.endswith(".sst") and n not in seen)
        if orphans:
            rep.notes.append(
                f"{len(orphans)} SST file(s) in sst/ not referenced by the manifest (left for garbage "
                f"collection): {', '.join(orphans[:5])}{' ...' if len(orphans) > 5 else ''}"
            )
    for sid, p in wal_files.list_segments(os.path.join(path, "wal")):
        if sid < m.wal_replay_from:
            continue
        try:
            records, torn = wal_files.read_segment(p)
        except FileNotFoundError:
            continue
        except CorruptionError as e:
            raise Problem(str(e)) from None
        rep.wal_segments += 1
        rep.wal_records += len(records)
        if torn is not None:
            rep.notes.append(f"{p}: torn tail at offset {torn} (replay stops there)")
    return rep


def cmd_check(args: argparse.Namespace) -> int:
    from lsm.manifest import ManifestStore

    path = db_dir(args.path)
    store = ManifestStore(path)
    problem: Problem | None = None
    for _ in range(3):  # a writer that commits while we check can make a file vanish: check again
        before = store.ids()[-1:]
        try:
            rep = check_database(path)
            problem = None
            break
        except Problem as e:
            problem = e
            if store.ids()[-1:] == before:
                break
    if problem is not None:
        if args.json:
            render.print_json({"ok": False, "problem": str(problem)})
        render.error(str(problem))
        return 1
    if args.json:
        render.print_json({"ok": True, **dataclasses.asdict(rep)})
        return 0
    rows = [
        ("manifest", f"version {rep.manifest_id} ok ({rep.manifest_versions} version(s) kept, all decode)"),
        (
            "ssts",
            f"{rep.ssts} verified ({rep.rows} rows, {render.human_bytes(rep.sst_bytes)}) in L0 ({rep.l0}) and {rep.runs} run(s)",
        ),
        (
            "shape",
            "runs sorted and non-overlapping; seqs ordered across overlapping sources; watermarks cover the SSTs",
        ),
        ("wal", f"{rep.wal_segments} segment(s), {rep.wal_records} record(s) decode"),
    ]
    rows += [("note", n) for n in rep.notes]
    render.print_text(render.properties(rows))
    render.print_text("OK")
    return 0


# -- du ---------------------------------------------------------------------------------------------------
CATEGORIES = ("live", "expired", "tombstone", "shadowed")


def _sst_rows(r: SstReader, src: int) -> Iterator[tuple]:
    """Rows of one SST tagged with their source index and encoded size (row + its offset slot)."""
    fixed = 2 + r.codec.attrs.size + 4
    for key, seq, ts, exp, value in r:
        yield (key, seq, ts, exp, value, src, fixed + len(key) + (len(value) if value is not None else 0))


def space_usage(path: str, now: int | None) -> dict[str, Any]:
    """The du report: per level (wal, L0, each run) bytes and rows by category, judged at `now`."""
    from lsm import wal as wal_files
    from lsm.clock import SystemClock

    _mid, m = latest_manifest(path)
    names: list[str] = []
    sizes: list[int] = []
    counts: list[int] = []
    sources: list[Any] = []
    readers: list[SstReader] = []

    wal_rows: list[tuple] = []
    wal_bytes = 0
    wal_segments = 0
    max_ts = m.clock_watermark
    wal_fixed = 2 + WAL_ROW_CODEC.attrs.size
    for sid, p in wal_files.list_segments(os.path.join(path, "wal")):
        if sid < m.wal_replay_from:
            continue
        try:
            records, _torn = wal_files.read_segment(p)
            wal_bytes += os.path.getsize(p)
        except FileNotFoundError:
            continue
        wal_segments += 1
        for rec in records:
            max_ts = max(max_ts, rec.ts)
            if rec.seq <= m.last_seq:
                continue
            for key, seq, ts, exp, value in rec.rows:
                size = wal_fixed + len(key) + (len(value) if value is not None else 0)
                wal_rows.append((key, seq, ts, exp, value, 0, size))
    wal_rows.sort(key=lambda row: (row[0], -row[1]))
    names.append("wal")
    sizes.append(wal_bytes)
    counts.append(wal_segments)
    sources.append(wal_rows)
    try:
        for name, ssts in levels(m):
            src = len(names)
            names.append(name)
            sizes.append(sum(e.size for e in ssts))
            counts.append(len(ssts))
            opened = [SstReader(os.path.join(path, "sst", e.name)) for e in ssts]
            readers += opened
            if name == "L0":  # overlapping: each SST is a source of its own
                sources += [_sst_rows(r, src) for r in opened]
            else:  # a run's SSTs are disjoint and in key order: one concatenated source
                sources.append(itertools.chain.from_iterable([_sst_rows(r, src) for r in opened]))
        if now is None:
            now = max(SystemClock().now(), max_ts)  # what a read-only DB.open(...) reads by
        stats = [{c: [0, 0] for c in CATEGORIES} for _ in names]
        last_key = None
        for row in merge_sources(sources):
            key = row[0]
            if key == last_key:
                cat = "shadowed"
            else:
                last_key = key
                if row[4] is None:
                    cat = "tombstone"
                elif row[3] is not None and now > row[3]:
                    cat = "expired"
                else:
                    cat = "live"
            s = stats[row[5]][cat]
            s[0] += row[6]
            s[1] += 1
    finally:
        for r in readers:
            r.close()
    out_levels = []
    for i, name in enumerate(names):
        d: dict[str, Any] = {"level": name, "files": counts[i], "size": sizes[i]}
        for c in CATEGORIES:
            d[f"{c}_bytes"], d[f"{c}_rows"] = stats[i][c]
        out_levels.append(d)
    total: dict[str, Any] = {"level": "total"}
    for k in out_levels[0]:
        if k != "level":
            total[k] = sum(x[k] for x in out_levels)
    return {
        "at": now,
        "at_rfc3339": render.rfc3339(now),
        "levels": out_levels,
        "total": total,
        "purge_lag": m.purge_lag,  # the manifest's cumulative histogram (None: nothing purged yet)
    }


def cmd_du(args: argparse.Namespace) -> int:
    rep = space_usage(db_dir(args.path), args.at)
    if args.json:
        render.print_json(rep)
        return 0
    hb = render.human_bytes
    cells = [
        (
            x["level"],
            x["files"],
            hb(x["size"]),
            *(f"{hb(x[c + '_bytes'])} ({x[c + '_rows']})" for c in CATEGORIES),
        )
        for x in [*rep["levels"], rep["total"]]
    ]
    render.print_text(f"expiry judged at {rep['at_rfc3339']} ({rep['at']})")
    render.print_text(render.table(("level", "files", "size", *(f"{c} (rows)" for c in CATEGORIES)), cells))
    render.print_text(f"purge lag: {purge_lag_text(rep['purge_lag'])}")
    return 0
