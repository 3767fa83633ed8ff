"""``lsm wal dump``: the WAL records not yet flushed to an SST, and a torn tail if any.

Of a database it shows exactly what recovery replays: the complete records, from the segment the
manifest's ``wal_replay_from`` names on, whose seq is above the manifest's ``last_seq``. A segment may
also hold records already in an SST (an object-store WAL object carries the last records of a memtable
its flush has since written, lsm.wal_object): replay skips those by seq, so the dump counts them apart
(``flushed_records``) instead of listing them; ``--all`` lists every record of every segment on disk."""

from __future__ import annotations

import argparse
import os
from typing import Any

from lsm.wal import TOLERATE_TRUNCATED_TAIL
from storage import path_kind, storage_for
from tools import render
from tools.common import db_dir, latest_manifest


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("wal", help="inspect the write-ahead log: dump")
    s = p.add_subparsers(dest="wal_command", metavar="COMMAND", required=True)
    dump = s.add_parser(
        "dump",
        help="the WAL records not yet flushed (segment, offset, seq, ts, ops) and a torn tail",
        description="Print the records a restart replays, one line per operation: those of the WAL "
        "segments at or after the manifest's replay point whose seq is above its last_seq (a segment may "
        "also hold records already flushed to an SST, which replay skips: they are counted, not listed), "
        "and where a segment ends in a torn record (what a process killed mid-append leaves; replay stops "
        "there). PATH is a database directory, or one .wal segment file to dump whole.",
    )
    dump.add_argument("path", metavar="PATH")
    dump.add_argument(
        "--all",
        action="store_true",
        help="every record of every segment still on disk: also those already flushed, and segments before "
        "the replay point",
    )
    render.add_output_args(dump)
    dump.set_defaults(func=cmd_dump)


def segments_to_dump(path: str, include_all: bool) -> tuple[list[tuple[int | None, str]], int | None]:
    """The (segment id, path) to dump, and the seq above which recovery replays a record: the manifest's
    last_seq for a database, None for one segment file (dumped whole)."""
    from lsm.wal_replay import live_segments
    from storage.paths import open_store, wal_ids

    kind = path_kind(path)
    if kind == "file":
        stem = os.path.basename(path).split(".", 1)[0]
        return [(int(stem) if stem.isdigit() else None, path)], None
    if kind == "other":
        raise ValueError(f"{path}: not a regular file or a database directory")
    _mid, m = latest_manifest(db_dir(path))
    store = open_store(path)
    if include_all:
        return wal_ids(store.storage, store.paths), m.last_seq
    return live_segments(store, m.wal_replay_from), m.last_seq


def op_json(row: tuple, mode: render.BytesMode) -> dict[str, Any]:
    d: dict[str, Any] = {"op": "delete" if row[4] is None else "put"}
    render.put_bytes(d, "key", row[0], mode.key)
    d["expire_ts"] = row[3]
    render.put_bytes(d, "value", row[4], mode.value)
    return d


def segment_json(seg: dict[str, Any], mode: render.BytesMode) -> dict[str, Any]:
    d = dict(seg)
    d["records"] = [
        {"offset": rec.offset, "seq": rec.seq, "ts": rec.ts, "ops": [op_json(r, mode) for r in rec.rows]}
        for rec in seg["records"]
    ]
    return d


def read_segments(path: str, include_all: bool) -> list[dict[str, Any]]:
    """Each segment to dump with its decoded records (`formats.wal.WalRecord`) and torn offset."""
    from lsm.wal_replay import decode

    out = []
    segments, last_seq = segments_to_dump(path, include_all)
    for sid, p in segments:
        try:
            buf = storage_for(p).read(p)
            size = len(buf)
            records, torn, _stop = decode(buf, p, TOLERATE_TRUNCATED_TAIL)
        except FileNotFoundError:
            if p == path:
                raise
            continue  # flushed and deleted by a running writer since we listed the directory
        if p == path and not records and torn is not None:
            # a file named on the command line in which not one record decodes is not a WAL segment
            # (a segment whose very first append was cut short is the only other case: say so)
            raise ValueError(
                f"{path}: not a WAL segment: no complete record (the first {render.plural(size, 'byte')} {'does' if size == 1 else 'do'} not decode as one)"
            )
        flushed = 0 if last_seq is None else sum(1 for r in records if r.seq <= last_seq)
        if flushed and not include_all:  # what replay skips: it is in an SST already
            records = [r for r in records if r.seq > last_seq]
        out.append(
            {
                "segment": sid,
                "path": p,
                "file_size": size,
                "records": records,
                "flushed_records": flushed,
                "torn_offset": torn,
            }
        )
    return out


def cmd_dump(args: argparse.Namespace) -> int:
    mode = args.bytes_mode
    segments = read_segments(args.path, args.all)
    if args.json:
        render.print_json_array(segment_json(seg, mode) for seg in segments)
        return 0
    cells = []
    for seg in segments:
        for rec in seg["records"]:
            for row in rec.rows:
                cells.append(
                    (
                        seg["segment"],
                        rec.offset,
                        rec.seq,
                        render.time_cell(rec.ts),
                        "delete" if row[4] is None else "put",
                        render.bytes_for_table(row[0], mode.key),
                        render.time_cell(row[3]),
                        render.bytes_for_table(row[4], mode.value, render.MAX_VALUE_CHARS),
                    )
                )
    if cells:
        render.print_text(
            render.table(("segment", "offset", "seq", "ts", "op", "key", "expire_ts", "value"), cells)
        )
    nrec = sum(len(s["records"]) for s in segments)
    flushed = sum(s["flushed_records"] for s in segments)
    line = f"{render.plural(len(segments), 'segment')}, {render.plural(nrec, 'record')}"
    if args.all and flushed:
        line += f" ({nrec - flushed} to replay, {flushed} already in SSTs)"
    elif flushed:
        line += f" to replay ({flushed} more already in SSTs, which replay skips: --all shows them)"
    render.print_text(line)
    for seg in segments:
        if seg["torn_offset"] is not None:
            lost = seg["file_size"] - seg["torn_offset"]
            render.print_text(
                f"segment {seg['segment']}: torn tail at offset {seg['torn_offset']} ({render.plural(lost, 'byte')}): "
                "an append cut short; replay stops before it"
            )
    return 0
