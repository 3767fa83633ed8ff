"""``lsm sst show|scan|verify|layout``: one SST file (or every SST of a database, for verify).

Modelled on Pebble's ``sstable properties|scan|check|layout`` and RocksDB's ``sst_dump``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator
from typing import Any

from formats.errors import CorruptionError
from formats.row import RowFeature, RowFlags
from formats.sst import COMPRESSION_NAMES, FOOTER, TRAILER, SsTableInfo, SstReader
from formats.verify import verify_sst
from storage import path_kind, ssts, storage_for
from storage.paths import open_store
from tools import render

TIME_FIELDS = ("creation_timestamp", "min_ts", "max_ts", "min_expire_ts", "max_expire_ts")
KEY_FIELDS = ("first_key", "last_key")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sst", help="inspect SST files: show, scan, verify, layout", description=__doc__)
    s = p.add_subparsers(dest="sst_command", metavar="COMMAND", required=True)

    show = s.add_parser(
        "show",
        help="SsTableInfo and derived properties of an SST",
        description="Print the SST's metadata (SsTableInfo) and properties derived from it: format version, "
        "row features, creation time, ts and seq ranges, counts, and the sizes of the data, index, filter "
        "and metadata blocks. Reads the footer, metadata, index and filter only.",
    )
    show.add_argument("file", metavar="FILE")
    render.add_output_args(show)
    show.set_defaults(func=cmd_show)

    scan = s.add_parser(
        "scan",
        help="the rows of an SST, with flags, ts, expire_ts and seq",
        description="Print the rows of FILE in key order. Without --all-versions only the newest version "
        "of each key (which may be a tombstone). Expiry is not applied: this shows what is stored.",
    )
    scan.add_argument("file", metavar="FILE")
    scan.add_argument("--from", dest="start", metavar="KEY", help="first key (inclusive)")
    scan.add_argument("--to", dest="end", metavar="KEY", help="last key (exclusive)")
    scan.add_argument(
        "--all-versions", action="store_true", help="every stored version, newest first per key"
    )
    scan.add_argument("--limit", type=render.int_arg(0), metavar="N", help="stop after N rows")
    render.add_output_args(scan)
    scan.set_defaults(func=cmd_scan)

    verify = s.add_parser(
        "verify",
        help="check every checksum, the key order and the metadata (exit 1 on the first problem)",
        description="Verify each FILE, or every SST in PATH/sst/ when PATH is a database directory: every block "
        "checksum, key order, the index against the blocks, the bloom filter against the keys, and the "
        "metadata (counts, key, seq, ts and expire_ts ranges, byte totals) against the rows. Exits 1 naming "
        "the file and offset of the first problem.",
    )
    verify.add_argument("paths", nargs="+", metavar="FILE|PATH")
    render.add_output_args(verify, bytes_args=False)
    verify.set_defaults(func=cmd_verify)

    layout = s.add_parser(
        "layout",
        help="block-by-block offsets and sizes",
        description="Print every region of FILE in file order: each data block (offset, stored size, rows, "
        "first and last key, compression), the index, filter and metadata blocks, and the footer.",
    )
    layout.add_argument("file", metavar="FILE")
    render.add_output_args(layout)
    layout.set_defaults(func=cmd_layout)


# -- helpers shared with the other commands ------------------------------------------------------------
def open_sst(path: str) -> SstReader:
    """Open an SST named on the command line (a file or an object's URL), with clear errors for the
    usual mistakes."""
    if path_kind(path) == "dir":
        raise ValueError(f"{path}: is a directory, not an SST file")
    return ssts.open_sst(path)


def feature_names(features: tuple[int, ...]) -> list[str]:
    out = []
    for f in features:
        try:
            out.append(RowFeature(f).name)
        except ValueError:
            out.append(str(f))
    return out


def info_json(info: SsTableInfo, mode: str = "auto") -> dict[str, Any]:
    """SsTableInfo as a JSON object: every field under its own name, keys by the bytes convention."""
    d: dict[str, Any] = {}
    for f in dataclasses.fields(info):
        v = getattr(info, f.name)
        if f.name in KEY_FIELDS:
            render.put_bytes(d, f.name, v, mode)
        elif f.name == "row_features":
            d[f.name] = list(v)
        else:
            d[f.name] = v
    return d


def flag_bits(row: tuple) -> int:
    """The RowFlags a row carries (computed, so v0 rows report the same meaning)."""
    flags = 0
    if row[4] is None:
        flags |= RowFlags.TOMBSTONE
    if row[3] is not None:
        flags |= RowFlags.HAS_EXPIRE_TS
    return flags


def flag_text(flags: int) -> str:
    names = [f.name for f in RowFlags if flags & f]
    return "|".join(n for n in names if n) or "-"


def row_json(row: tuple, mode: render.BytesMode) -> dict[str, Any]:
    d: dict[str, Any] = {}
    render.put_bytes(d, "key", row[0], mode.key)
    d["seq"] = row[1]
    d["ts"] = row[2]
    d["expire_ts"] = row[3]
    d["flags"] = flag_bits(row)
    render.put_bytes(d, "value", row[4], mode.value)
    return d


def footer_fields(r: SstReader, data: Any = None) -> tuple[int, int]:
    """(metadata offset, metadata size) from the footer of `r`'s file (from `data`, its bytes, if given);
    the reader has already validated it."""
    size = r.info.file_size
    if data is None:
        footer = storage_for(r.path).read_range(r.path, size - FOOTER.size, size)
    else:
        footer = data[size - FOOTER.size : size]
    meta_offset, meta_size, *_ = FOOTER.unpack(footer)
    return meta_offset, meta_size


# -- show ---------------------------------------------------------------------------------------------
def show_json(r: SstReader, mode: str) -> dict[str, Any]:
    info = r.info
    meta_offset, meta_size = footer_fields(r)
    d = info_json(info, mode)
    d["row_feature_names"] = feature_names(info.row_features)
    for name in TIME_FIELDS:
        d[name + "_rfc3339"] = render.rfc3339(getattr(info, name))
    d["metadata_offset"] = meta_offset
    d["metadata_size"] = meta_size
    d["footer_size"] = FOOTER.size
    d["filter_probes"] = r.bloom.k
    d["filter_bits"] = r.bloom.nbits
    return d


def cmd_show(args: argparse.Namespace) -> int:
    with open_sst(args.file) as r:
        d = show_json(r, args.bytes_mode.key)
        if args.json:
            render.print_json(d)
            return 0
        info = r.info
        key = lambda b: render.bytes_for_table(b, args.bytes_mode)  # noqa: E731
        distinct = max(1, info.num_rows)
        rows = [
            ("file", args.file),
            ("format_version", info.format_version),
            ("row_features", ", ".join(d["row_feature_names"]) or "(none: format version 0)"),
            ("compression", info.compression or "none"),
            ("creation_timestamp", render.time_detail(info.creation_timestamp)),
            ("min_ts", render.time_detail(info.min_ts)),
            ("max_ts", render.time_detail(info.max_ts)),
            ("min_seq", info.min_seq),
            ("max_seq", info.max_seq),
            ("min_expire_ts", render.time_detail(info.min_expire_ts)),
            ("max_expire_ts", render.time_detail(info.max_expire_ts)),
            ("first_key", key(info.first_key)),
            ("last_key", key(info.last_key)),
            ("num_rows", info.num_rows),
            ("num_tombstones", info.num_tombstones),
            ("num_expiring", info.num_expiring),
            ("num_blocks", info.num_blocks),
            ("key_bytes", info.key_bytes),
            ("value_bytes", info.value_bytes),
            ("file_size", _size(info.file_size)),
            ("data_size", _size(info.data_size)),
            ("index_size", f"{_size(info.index_size)} at offset {info.index_offset}"),
            ("filter_size", f"{_size(info.filter_size)} at offset {info.filter_offset}"),
            ("metadata_size", f"{_size(d['metadata_size'])} at offset {d['metadata_offset']}"),
            ("footer_size", _size(FOOTER.size)),
            (
                "filter",
                f"{render.plural(r.bloom.k, 'probe')}, {render.plural(r.bloom.nbits, 'bit')} "
                f"({r.bloom.nbits / distinct:.1f} bits/row)",
            ),
        ]
        render.print_text(render.properties(rows))
    return 0


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n} B ({render.human_bytes(n)})"


# -- scan ---------------------------------------------------------------------------------------------
def scan_rows(r: SstReader, start: bytes | None, end: bytes | None, all_versions: bool) -> Iterator[tuple]:
    last = None
    for row in r.iter(start, end):
        if not all_versions and row[0] == last:
            continue
        last = row[0]
        yield row


def cmd_scan(args: argparse.Namespace) -> int:
    start, end = render.key_range(args)
    mode = args.bytes_mode
    with open_sst(args.file) as r:
        rows = scan_rows(r, start, end, args.all_versions)
        if args.limit is not None:
            rows = (row for _, row in zip(range(args.limit), rows, strict=False))
        if args.json:
            render.print_json_array(row_json(row, mode) for row in rows)
            return 0
        render.print_text(render.table(ROW_HEADERS, [row_cells(row, mode) for row in rows]))
    return 0


ROW_HEADERS = ("key", "seq", "ts", "expire_ts", "flags", "value")


def row_cells(row: tuple, mode: render.BytesMode) -> tuple:
    """The table cells of a stored row (`ROW_HEADERS`), as ``sst scan`` and ``scan --all-versions`` show it."""
    return (
        render.bytes_for_table(row[0], mode.key),
        row[1],
        render.time_cell(row[2]),
        render.time_cell(row[3]),
        flag_text(flag_bits(row)),
        render.bytes_for_table(row[4], mode.value, render.MAX_VALUE_CHARS),
    )


# -- verify -------------------------------------------------------------------------------------------
def sst_files(path: str) -> list[str]:
    """The SSTs to verify for FILE|PATH (a file, a database directory, or the URL of either)."""
    kind = path_kind(path)
    if kind is None:
        raise FileNotFoundError(2, "No such file or directory", path)
    if kind != "dir":
        return [path]
    store = open_store(path)
    st, paths = store.storage, store.paths
    # a database: its manifest says so (an object store has no empty directories, so a database with no
    # SST yet has no sst/ prefix; a directory that is one has both)
    if not (st.holds_directory(paths.sst_dir) or (not st.appends and st.holds_directory(paths.manifest_dir))):
        raise ValueError(f"{path}: is a directory but not an lsm-sim database (no sst/ directory)")
    return [paths.sst(n) for n in sorted(st.list_names(paths.sst_dir)) if n.endswith(".sst")]


def cmd_verify(args: argparse.Namespace) -> int:
    results: list[dict[str, Any]] = []
    failure: CorruptionError | None = None
    files = [(given, p) for given in args.paths for p in sst_files(given)]
    for given, p in files:
        try:
            with open_sst(p) as r:
                verify_sst(r)
                results.append(
                    {"path": p, "ok": True, "num_rows": r.info.num_rows, "num_blocks": r.info.num_blocks}
                )
        except FileNotFoundError:
            if p == given:
                raise
            continue  # deleted by a running compaction since we listed the directory
        except CorruptionError as e:
            results.append({"path": p, "ok": False, "offset": e.offset, "error": e.detail})
            failure = e
            break
    if args.json:
        render.print_json_array(results)
    else:
        cells = [
            (
                x["path"],
                "ok" if x["ok"] else "CORRUPT",
                x.get("num_rows"),
                x.get("num_blocks"),
                x.get("error"),
            )
            for x in results
        ]
        render.print_text(render.table(("file", "status", "rows", "blocks", "problem"), cells))
        if failure is None:
            render.print_text(f"{len(results)} SST{'s' if len(results) != 1 else ''} verified, no problems")
    if failure is not None:
        render.error(str(failure))
        return 1
    return 0


# -- layout -------------------------------------------------------------------------------------------
def layout_regions(r: SstReader) -> list[dict[str, Any]]:
    info = r.info
    st = storage_for(r.path)
    # the file mapped, or the whole object in one GET (not one ranged GET per block's trailer byte)
    data = st.map_whole(r.path)
    meta_offset, meta_size = footer_fields(r, data)
    regions: list[dict[str, Any]] = []
    try:

        def compression(offset: int, size: int) -> str:
            code = data[offset + size - TRAILER.size]
            name = COMPRESSION_NAMES.get(code, f"unknown({code})")
            return name or "none"

        for i, h in enumerate(r.blocks):
            d: dict[str, Any] = {
                "kind": "data",
                "block": i,
                "offset": h.offset,
                "size": h.size,
                "num_rows": h.num_rows,
            }
            d["first_key"] = h.first_key
            d["last_key"] = h.last_key
            d["compression"] = compression(h.offset, h.size)
            regions.append(d)
        for kind, off, size in (
            ("index", info.index_offset, info.index_size),
            ("filter", info.filter_offset, info.filter_size),
            ("metadata", meta_offset, meta_size),
        ):
            regions.append({"kind": kind, "offset": off, "size": size, "compression": compression(off, size)})
    finally:
        if not isinstance(data, bytes):
            data.close()
    regions.append({"kind": "footer", "offset": info.file_size - FOOTER.size, "size": FOOTER.size})
    return regions


def cmd_layout(args: argparse.Namespace) -> int:
    mode = args.bytes_mode.key  # only keys in a layout
    with open_sst(args.file) as r:
        regions = layout_regions(r)
        file_size = r.info.file_size
    if args.json:
        out = []
        for reg in regions:
            d: dict[str, Any] = {}
            for k, v in reg.items():
                if k in KEY_FIELDS:
                    render.put_bytes(d, k, v, mode)
                else:
                    d[k] = v
            out.append(d)
        render.print_json_array(out)
        return 0
    cells = [
        (
            reg["kind"],
            reg.get("block"),
            reg["offset"],
            reg["size"],
            reg.get("num_rows"),
            reg.get("compression"),
            render.bytes_for_table(reg.get("first_key"), mode),
            render.bytes_for_table(reg.get("last_key"), mode),
        )
        for reg in regions
    ]
    render.print_text(
        render.table(
            ("region", "block", "offset", "size", "rows", "compression", "first_key", "last_key"), cells
        )
    )
    data = sum(reg["size"] for reg in regions if reg["kind"] == "data")
    render.print_text(
        f"{render.plural(file_size, 'byte')}: {render.plural(len(regions) - 4, 'data block')} ({data} B), index, "
        "filter, metadata, footer"
    )
    return 0
