"""``--key-encoding`` / ``--value-encoding``: one encoding for every key and one for every value of an
output, chosen once for the command (JSON: utf8 unless asked), never switched row by row; the older
--hex (both hex) and the deprecated --utf8 (with a warning). Real `lsm` subprocesses."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

import lsm
from tests.tools._cli import LSM_CMD, ROOT, lsm_env, one_line_error, run_lsm, run_lsm_each
from tools.render import UTF8_DEPRECATED


@pytest.fixture(scope="module")
def mixed_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Text keys around one key and one value that are not UTF-8."""
    path = tmp_path_factory.mktemp("enc") / "db"
    with lsm.DB.open(path, lsm.DbOptions(background_compaction=False)) as db:
        db.put(b"a", b"text")
        db.put(b"b\xff", b"\x00\xfe")
        db.put(b"c", "été".encode())
    return path


def test_json_writes_every_key_in_one_encoding(mixed_db: Path) -> None:
    as_b64, as_hex, text_only = run_lsm_each(
        [
            ("scan", "--json", "--key-encoding", "base64", "--value-encoding", "base64", mixed_db),
            ("scan", "--json", "--key-encoding", "hex", "--value-encoding", "hex", mixed_db),
            ("scan", "--json", "--to", "b", mixed_db),
        ]
    )
    rows = as_b64.json()
    assert all(r["key_base64"] is True and r["value_base64"] is True for r in rows)  # every row, text too
    assert [(base64.b64decode(r["key"]), base64.b64decode(r["value"])) for r in rows] == [
        (b"a", b"text"),
        (b"b\xff", b"\x00\xfe"),
        (b"c", "été".encode()),
    ]
    assert [(r["key"], r["key_hex"]) for r in as_hex.json()] == [("61", True), ("62ff", True), ("63", True)]
    # the default, utf8: text as its text, with no flag on any row
    assert [sorted(r) for r in text_only.json()] == [["expire_ts", "key", "seq", "ts", "value"]]
    assert [(r["key"], r["value"]) for r in text_only.json()] == [("a", "text")]


def test_json_refuses_bytes_its_encoding_cannot_write(mixed_db: Path) -> None:
    key, value = run_lsm_each(
        [
            ("scan", "--json", mixed_db),
            ("scan", "--json", "--key-encoding", "hex", mixed_db),
        ]
    )
    err = one_line_error(key, 2)
    assert "the key 0x62ff is not UTF-8" in err and "--key-encoding hex or --key-encoding base64" in err
    assert "--value-encoding hex or --value-encoding base64" in one_line_error(value, 2)


def test_key_arguments_are_read_in_the_key_encoding(mixed_db: Path) -> None:
    b64, hexed, table = run_lsm_each(
        [
            ("get", mixed_db, "Yv8=", "--key-encoding", "base64", "--value-encoding", "hex", "--json"),
            ("scan", mixed_db, "--from", "62ff", "--key-encoding", "hex", "--value-encoding", "base64", "--json"),
            ("scan", mixed_db, "--key-encoding", "base64"),
        ]
    )
    assert b64.json()["key"] == "Yv8=" and b64.json()["value"] == "00fe" and b64.json()["value_hex"] is True
    assert [r["key"] for r in hexed.json()] == ["62ff", "63"]
    lines = table.out.splitlines()  # a table in base64 keys; values stay in the table's default
    assert [line.split()[0] for line in lines[1:]] == ["YQ==", "Yv8=", "Yw=="]
    assert lines[2].split()[-1] == "0x00fe"


def test_hex_and_the_deprecated_utf8(mixed_db: Path) -> None:
    hexed, escaped, both = run_lsm_each(
        [
            ("scan", "--json", "--hex", mixed_db),
            ("scan", "--json", "--utf8", mixed_db),
            ("scan", "--json", "--hex", "--key-encoding", "base64", mixed_db),
        ]
    )
    assert [(r["key"], r["key_hex"], r["value_hex"]) for r in hexed.json()][1] == ("62ff", True, True)
    assert escaped.code == 0 and escaped.err == UTF8_DEPRECATED + "\n"  # still works, and says so
    assert [r["key"] for r in escaped.json()] == ["a", "b\\xff", "c"]
    assert "--hex sets both encodings" in one_line_error(both, 2)


def test_log_show_and_write_round_trip_in_base64(tmp_path: Path) -> None:
    """The encoding flags on each record make the output self-describing: lsm log write reads it back."""
    from lsm.sources import LogWriter, PartitionedLog

    a, b = tmp_path / "a", tmp_path / "b"
    with LogWriter(a) as w:
        w.append(0, b"\xff\x00", b"\x80")
        w.append(0, b"text", None)
    shown = run_lsm("log", "show", a, "--json", "--key-encoding", "base64", "--value-encoding", "base64")
    assert shown.code == 0, shown.err
    lines = "".join(json.dumps(o) + "\n" for o in shown.json())
    p = subprocess.run(
        [*LSM_CMD, "log", "write", str(b)], input=lines, cwd=ROOT, env=lsm_env(), capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    assert list(PartitionedLog(b).read(0, 0)) == list(PartitionedLog(a).read(0, 0))
