"""`lsm sst show|scan|verify|layout` on a fixed SST: golden JSON, tables, and damaged files."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import xxhash

from formats.sst import FOOTER, FOOTER_BODY, write_sst
from storage.ssts import open_sst
from tests.tools._cli import GOLDEN_ROWS, T0, check_golden, one_line_error, run_lsm


def test_show_json_golden(golden_sst: Path) -> None:
    # the file's last key is not UTF-8: JSON, which writes keys as UTF-8 text by default, needs hex or base64
    r = run_lsm("sst", "show", "--json", "--key-encoding", "hex", golden_sst)
    assert r.code == 0, r.err
    check_golden("sst_show.json", r.out)
    d = r.json()
    assert d["row_feature_names"] == ["RowFlags", "Timestamp", "TimeToLive", "Seq"]
    assert d["creation_timestamp_rfc3339"] == "2023-11-14T22:13:20.010Z"
    assert (d["num_rows"], d["num_tombstones"], d["num_expiring"]) == (9, 1, 2)
    assert d["first_key"] == "6170706c65" and d["first_key_hex"] is True  # every key in the one encoding
    assert d["last_key"] == "ff0062696e" and d["last_key_hex"] is True
    err = one_line_error(run_lsm("sst", "show", "--json", golden_sst), 2)
    assert "the last key 0xff0062696e is not UTF-8" in err and "--key-encoding hex" in err


def test_scan_json_golden(golden_sst: Path) -> None:
    r = run_lsm("sst", "scan", "--json", "--key-encoding", "base64", golden_sst)  # values: utf8, the default
    assert r.code == 0, r.err
    check_golden("sst_scan.json", r.out)
    rows = r.json()
    # newest version of each key only: the tombstone hides nothing here, it is shown as stored
    keys = [base64.b64decode(x["key"]) for x in rows]
    assert keys == [b"apple", b"banana", b"cherry", b"date", b"elder", b"fig", b"\xff\x00bin"]
    assert all(x["key_base64"] is True for x in rows)  # one encoding for every key, flagged on each
    assert rows[0] == {
        "key": "YXBwbGU=",
        "key_base64": True,
        "seq": 7,
        "ts": T0 + 7,
        "expire_ts": None,
        "flags": 0,
        "value": "green",
    }
    assert rows[2]["flags"] == 1 and rows[2]["value"] is None  # tombstone
    assert rows[1]["flags"] == 2 and rows[1]["expire_ts"] == T0 + 60_005
    assert rows[3]["value"] == "tab\there" and "value_hex" not in rows[3]  # UTF-8: its text, escaped by JSON
    assert rows[6] == {
        "key": "/wBiaW4=",
        "key_base64": True,
        "seq": 9,
        "ts": T0 + 9,
        "expire_ts": None,
        "flags": 0,
        "value": "\x00\x01\x02",
    }


def test_scan_all_versions_range_and_byte_modes(golden_sst: Path) -> None:
    r = run_lsm("sst", "scan", "--json", "--all-versions", "--from", "apple", "--to", "cherry!", golden_sst)
    assert [(x["key"], x["seq"]) for x in r.json()] == [
        ("apple", 7),
        ("apple", 3),
        ("banana", 5),
        ("cherry", 6),
        ("cherry", 2),
    ]
    r = run_lsm(
        "sst", "scan", "--json", "--hex", "--from", "6669", golden_sst
    )  # --hex: keys in and out in hex
    assert [(x["key"], x.get("key_hex")) for x in r.json()] == [("666967", True), ("ff0062696e", True)]
    r = run_lsm("sst", "scan", "--json", "--utf8", "--from", "date", "--limit", "1", golden_sst)
    assert r.json() == [
        {"key": "date", "seq": 4, "ts": T0 + 4, "expire_ts": None, "flags": 0, "value": "tab\there"}
    ]


def test_scan_table(golden_sst: Path) -> None:
    r = run_lsm("sst", "scan", "--all-versions", golden_sst)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split() == ["key", "seq", "ts", "expire_ts", "flags", "value"]
    assert len(lines) == 1 + len(GOLDEN_ROWS)
    assert lines[1].split() == ["apple", "7", "2023-11-14T22:13:20.007Z", "-", "-", "green"]
    assert lines[3].split() == [
        "banana",
        "5",
        "2023-11-14T22:13:20.005Z",
        "2023-11-14T22:14:20.005Z",
        "HAS_EXPIRE_TS",
        "yellow",
    ]
    assert lines[4].split() == ["cherry", "6", "2023-11-14T22:13:20.006Z", "-", "TOMBSTONE", "-"]
    assert lines[-1].split() == ["0xff0062696e", "9", "2023-11-14T22:13:20.009Z", "-", "-", "0x000102"]


def test_show_table(golden_sst: Path) -> None:
    r = run_lsm("sst", "show", golden_sst)
    assert r.code == 0, r.err
    props = dict(line.split(None, 1) for line in r.out.splitlines())
    assert props["format_version"] == "1"
    assert props["row_features"] == "RowFlags, Timestamp, TimeToLive, Seq"
    assert props["creation_timestamp"] == "2023-11-14T22:13:20.010Z (1700000000010)"
    assert props["min_ts"] == "2023-11-14T22:13:20.001Z (1700000000001)"
    assert props["min_seq"] == "1" and props["max_seq"] == "9"
    assert props["first_key"] == "apple" and props["last_key"] == "0xff0062696e"
    assert props["compression"] == "none"
    assert props["num_blocks"] == str(open_sst(golden_sst).info.num_blocks)


def test_layout_golden_and_table(golden_sst: Path) -> None:
    r = run_lsm("sst", "layout", "--json", "--hex", golden_sst)
    assert r.code == 0, r.err
    check_golden("sst_layout.json", r.out)
    regions = r.json()
    assert [x["kind"] for x in regions[-4:]] == ["index", "filter", "metadata", "footer"]
    pos = 0
    for x in regions:  # contiguous, covering the whole file
        assert x["offset"] == pos
        pos += x["size"]
    assert pos == golden_sst.stat().st_size
    assert sum(x.get("num_rows", 0) for x in regions) == len(GOLDEN_ROWS)
    t = run_lsm("sst", "layout", golden_sst)
    lines = t.out.splitlines()
    assert lines[0].split() == [
        "region",
        "block",
        "offset",
        "size",
        "rows",
        "compression",
        "first_key",
        "last_key",
    ]
    assert lines[1].split()[:2] == ["data", "0"]
    assert lines[-1].startswith(f"{pos} bytes: {len(regions) - 4} data blocks")


def test_verify_ok_file_and_database(golden_sst: Path, small_db: Path) -> None:
    r = run_lsm("sst", "verify", golden_sst)
    assert r.code == 0 and r.out.splitlines()[-1] == "1 SST verified, no problems"
    r = run_lsm("sst", "verify", "--json", small_db)
    assert r.code == 0, r.err
    assert [x["ok"] for x in r.json()] == [True, True]
    assert sum(x["num_rows"] for x in r.json()) == 6


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ 0x40]))


def test_corrupt_data_block_exact_error(golden_sst: Path) -> None:
    with open_sst(golden_sst) as rd:
        block = rd.blocks[2]
    _flip(golden_sst, block.offset + 3)
    expected = f"lsm: error: {golden_sst}: corruption at offset {block.offset}: block checksum mismatch"
    # sst show reads only footer, metadata, index and filter: it still works
    assert run_lsm("sst", "show", golden_sst).code == 0
    # verify: a verification failure, exit 1, the table shows which file
    r = run_lsm("sst", "verify", golden_sst)
    assert one_line_error(r, 1) == expected
    assert "CORRUPT" in r.out
    # scan: the file cannot be read, exit 2, the same line
    assert one_line_error(run_lsm("sst", "scan", golden_sst), 2) == expected
    # relative paths are reported as given
    r = run_lsm("sst", "verify", "golden.sst", cwd=golden_sst.parent)
    assert (
        one_line_error(r, 1)
        == f"lsm: error: golden.sst: corruption at offset {block.offset}: block checksum mismatch"
    )


def test_bad_sst_inputs(tmp_path: Path, golden_sst: Path) -> None:
    missing = tmp_path / "missing.sst"
    assert (
        one_line_error(run_lsm("sst", "show", missing), 2)
        == f"lsm: error: {missing}: No such file or directory"
    )

    text = tmp_path / "notes.txt"
    text.write_text("this is not an SST, but it is long enough to hold a footer\n")
    assert "bad magic number: not an lsm-sim SST" in one_line_error(run_lsm("sst", "scan", text), 2)
    assert "bad magic number" in one_line_error(run_lsm("sst", "verify", text), 1)

    truncated = tmp_path / "truncated.sst"
    truncated.write_bytes(golden_sst.read_bytes()[:-10])
    assert "corruption at offset" in one_line_error(run_lsm("sst", "layout", truncated), 2)

    assert (
        one_line_error(run_lsm("sst", "show", tmp_path), 2)
        == f"lsm: error: {tmp_path}: is a directory, not an SST file"
    )
    assert "not an lsm-sim database" in one_line_error(run_lsm("sst", "verify", tmp_path), 2)

    # a newer format version, with a valid footer checksum
    newer = tmp_path / "newer.sst"
    data = bytearray(golden_sst.read_bytes())
    at = len(data) - FOOTER.size
    meta_offset, meta_size, _version, magic, _check = FOOTER.unpack_from(data, at)
    body = FOOTER_BODY.pack(meta_offset, meta_size, 2, magic)
    data[at:] = body + struct.pack(">I", xxhash.xxh32_intdigest(body))
    newer.write_bytes(bytes(data))
    line = one_line_error(run_lsm("sst", "show", newer), 2)
    assert line == f"lsm: error: {newer}: SST format version 2 is newer than this reader (knows 0 and 1)"


def test_usage_errors_are_one_line(golden_sst: Path) -> None:
    line = one_line_error(run_lsm("sst", "scan"), 2)
    assert (
        line == "lsm: error: sst scan: the following arguments are required: FILE (see 'lsm sst scan --help')"
    )
    assert "--hex" in one_line_error(run_lsm("sst", "scan", "--hex", "--utf8", golden_sst), 2)
    r = run_lsm("sst", "--help")
    assert r.code == 0 and "show" in r.out and "layout" in r.out


def test_compressed_sst_and_a_block_code_this_reader_lacks(tmp_path: Path) -> None:
    path = tmp_path / "z.sst"
    rows = [(b"k%03d" % i, i + 1, T0, None, b"value %d " % (i % 5) * 8) for i in range(60)]
    write_sst(path, rows, block_bytes=256, compression="zstd", sync=False)
    show = run_lsm("sst", "show", path)
    assert show.code == 0, show.err
    assert dict(line.split(None, 1) for line in show.out.splitlines())["compression"] == "zstd"
    regions = run_lsm("sst", "layout", "--json", path).json()
    assert {x["compression"] for x in regions if x["kind"] == "data"} == {"zstd"}
    assert {x["compression"] for x in regions if x["kind"] in ("index", "filter", "metadata")} == {"none"}
    # what a newer writer's codec (code 9) would leave: the checksum holds, so it is not damage
    first = regions[0]
    data = bytearray(path.read_bytes())
    end = first["offset"] + first["size"]
    data[end - 9] = 9
    data[end - 8 : end] = struct.pack(">Q", xxhash.xxh3_64_intdigest(bytes(data[first["offset"] : end - 8])))
    newer = tmp_path / "newer.sst"
    newer.write_bytes(bytes(data))
    expected = f"lsm: error: {newer}: block at offset 0: unknown compression code 9 (this version knows 0, 1, 2, 3)"
    assert one_line_error(run_lsm("sst", "scan", newer), 2) == expected
    # verify does not call it CORRUPT (exit 1): a newer format is exit 2, as a newer format version is
    assert one_line_error(run_lsm("sst", "verify", newer), 2) == expected
    layout = run_lsm("sst", "layout", "--json", newer)
    assert layout.code == 0 and layout.json()[0]["compression"] == "unknown(9)"
