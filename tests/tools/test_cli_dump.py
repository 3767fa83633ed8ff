"""`lsm dump` and `lsm load`: the lsm-dump text format round-trips a store exactly, and a bad file is
refused whole, before anything is written."""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lsm
from lsm.inspect import stored_versions
from lsm.manifest import ManifestStore
from tests.tools._cli import T0, one_line_error, run_lsm
from tools.cmd_dump import dump_database, load_dump
from tools.dumpfile import parse_dump

KEYS = [b"a", b"\x00", b"\xff", b"\x00\xff\n", b"k\nnl", b"user:1", "é".encode()]
VALUES = st.binary(max_size=12) | st.sampled_from([b"\x00", b"\xff\xfe", b"line\nbreak", b"text", b""])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(KEYS), VALUES, st.none() | st.integers(0, 5_000)),
        st.tuples(st.just("delete"), st.sampled_from(KEYS)),
        st.tuples(st.just("flush")),
        st.tuples(st.just("tick"), st.integers(1, 3_000)),
    ),
    max_size=25,
)


def _build(path: Path, ops: list[tuple]) -> None:
    clock = lsm.ManualClock(T0)
    with lsm.DB.open(path, lsm.DbOptions(clock=clock, background_compaction=False)) as db:
        for op in ops:
            if op[0] == "put":
                db.put(op[1], op[2], ttl=op[3])
            elif op[0] == "delete":
                db.delete(op[1])
            elif op[0] == "flush":
                db.flush()
            else:
                clock.advance(op[1])


def _state(path: Path) -> dict:
    """Every read a user can make of `path`, at several times, and the newest stored version per key."""
    out: dict = {}
    with lsm.DB.open(path, read_only=True) as db:
        for now in (T0, T0 + 2_500, T0 + 10**9):
            opts = lsm.ReadOptions(now=now)
            out[now] = [(e.key, e.value, e.expire_ts) for e in db.scan_entries(options=opts)]
            out[now, "get"] = {k: db.get(k, opts) for k in KEYS}
        out["expired"] = [
            (e.key, e.value, e.expire_ts)
            for e in db.scan_entries(options=lsm.ReadOptions(include_expired=True))
        ]
    newest: dict = {}
    for key, _seq, _ts, exp, value, _level in stored_versions(str(path)):
        newest.setdefault(key, (value, None if value is None else exp))  # tombstones included
    out["stored"] = newest
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_load_of_a_dump_equals_the_source(ops) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "src", Path(tmp) / "dst"
        _build(src, ops)
        buf = io.BytesIO()
        dump_database(str(src), buf)
        data = buf.getvalue()
        assert data.isascii() and data.count(b"\n") == len(data.splitlines())  # ASCII, one record a line
        load_dump(str(dst), parse_dump(data), create=True)
        assert _state(dst) == _state(src)
        again = io.BytesIO()
        dump_database(str(dst), again)  # and the load dumps to the same records
        assert parse_dump(again.getvalue()).records == parse_dump(data).records


# -- the command line ---------------------------------------------------------------------------------------
def _source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    _build(
        src,
        [
            ("put", b"a", b"1", None),
            ("put", b"\x00\xff\n", b"bin\x00\xff", 1_000),
            ("put", b"gone", b"x", None),
            ("flush",),
            ("put", b"a", b"2", None),
            ("delete", b"gone"),
        ],
    )
    return src


def _files(path: Path) -> list:
    return sorted((p.relative_to(path), p.stat().st_size) for p in path.rglob("*") if p.is_file())


def _reseal(lines: list[bytes]) -> bytes:
    """A dump whose trailer matches `lines` (header and records): an edit the checksum cannot see."""
    body = b"".join(line + b"\n" for line in lines)
    trailer = {"end": "lsm-dump", "records": len(lines) - 1, "sha256": hashlib.sha256(body).hexdigest()}
    return body + json.dumps(trailer).encode() + b"\n"


def test_dump_and_load_from_the_command_line(tmp_path: Path) -> None:
    src = _source(tmp_path)
    out = tmp_path / "src.dump"
    r = run_lsm("dump", src, "--out", out)
    assert r.code == 0, r.err
    assert r.out == f"dumped 3 records (1 tombstone, 1 with a TTL) of {src} at seq 5 to {out}\n"
    lines = out.read_bytes().splitlines()
    header = json.loads(lines[0])
    assert {k: header[k] for k in ("format", "version", "source", "seq")} == {
        "format": "lsm-dump",
        "version": 1,
        "source": str(src),
        "seq": 5,
    }
    assert [json.loads(x) for x in lines[1:-1]] == [
        {"key": "00ff0a", "key_hex": True, "value": "62696e00ff", "value_hex": True, "expire_ts": T0 + 1_000},
        {"key": "a", "value": "2", "expire_ts": None},
        {"key": "gone", "value": None, "expire_ts": None},
    ]
    assert json.loads(lines[-1])["records"] == 3
    stdout = run_lsm("dump", src)
    assert stdout.code == 0 and stdout.out.splitlines()[1:-1] == out.read_text().splitlines()[1:-1]

    dst = tmp_path / "dst"
    r = run_lsm("load", dst, out, "--create")
    assert r.code == 0, r.err
    assert (
        r.out == f"loaded 3 records (1 tombstone) into {dst} as one commit, seq 1 (dump of {src} at seq 5)\n"
    )
    for args in (["--include-expired"], ["--expiry-at", T0 + 1_000], []):
        rows = [
            [(x["key"], x["value"], x["expire_ts"]) for x in run_lsm("scan", "--json", "--hex", db, *args).json()]
            for db in (src, dst)
        ]
        assert rows[0] == rows[1], args  # seqs and commit ts are the load's own
    versions = run_lsm(
        "scan", "--all-versions", "--json", "--key-encoding", "base64", "--value-encoding", "base64", dst
    ).json()
    assert [(v["key"], v["seq"], v["expire_ts"], v["flags"]) for v in versions] == [
        ("AP8K", 1, T0 + 1_000, 2),  # the same expire_ts as the source's row, whatever the load's clock
        ("YQ==", 1, None, 0),
        ("Z29uZQ==", 1, None, 1),
    ]
    # from standard input, into a database that has data: the dump's keys are overwritten, others kept
    run_lsm("put", dst, "other", "o")
    r = run_lsm("load", "--json", dst, out)
    assert r.json()["records"] == 3 and r.json()["seq"] == 3
    assert run_lsm("get", dst, "other").code == 0


def test_bad_dumps_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    src = _source(tmp_path)
    out = tmp_path / "src.dump"
    assert run_lsm("dump", src, "--out", out).code == 0
    data = out.read_bytes()
    lines = data.splitlines()
    dst = tmp_path / "dst"
    assert run_lsm("put", "--create", dst, "keep", "me").code == 0
    files, ids = _files(dst), ManifestStore(str(dst)).ids()
    bad = {
        "half": (data[: len(data) // 2], "a truncated file?"),
        "no trailer": (b"".join(x + b"\n" for x in lines[:-1]), "the last line is not the trailer"),
        "a record edited": (data.replace(b'"2"', b'"3"'), "does not match it (an edited file?)"),
        "a record removed": (
            b"".join(x + b"\n" for x in lines[:2] + lines[3:]),
            "the trailer counts 3 records",
        ),
        "wrong format": (
            data.replace(b'"lsm-dump", "version"', b'"csv", "version"', 1),
            'name the format "lsm-dump"',
        ),
        "newer version": (
            _reseal([lines[0].replace(b'"version": 1', b'"version": 2'), *lines[1:-1]]),
            "version 2",
        ),
        "keys out of order": (
            _reseal([lines[0], lines[2], lines[1], lines[3]]),
            "line 3: keys must be strictly",
        ),
        "bad hex": (
            _reseal([lines[0], lines[1].replace(b"00ff0a", b"00zz0a"), *lines[2:-1]]),
            "is not lowercase hex",
        ),
        "empty": (b"", "the file is empty"),
        "not json": (b"key ==> value\n", "line 1: the header is not JSON"),
        "reserved key": (
            _reseal(
                [lines[0], b'{"key": "ffffffff6c736d0001", "key_hex": true, "value": "", "expire_ts": null}']
            ),
            "lies in the engine's reserved key space",
        ),
        # issue 32 defect 10: a deeply nested line with its SHA-256 recomputed was an internal error
        "nested": (
            _reseal([lines[0], b'{"key": ' + b"[" * 100_000 + b"]" * 100_000 + b', "value": "", "expire_ts": null}']),
            "line 2: a record is JSON nested too deeply",
        ),
        "source not text": (
            _reseal([lines[0].replace(json.dumps(str(src)).encode(), b'{"a": 1}'), *lines[1:-1]]),
            "a version 1 header has the fields",
        ),
    }
    for name, (content, message) in bad.items():
        f = tmp_path / "bad.dump"
        f.write_bytes(content)
        line = one_line_error(run_lsm("load", dst, f), 2)
        assert message in line, (name, line)
        assert _files(dst) == files and ManifestStore(str(dst)).ids() == ids, name
    assert run_lsm("get", dst, "a").code == 1 and run_lsm("get", dst, "keep").code == 0


def test_missing_paths(tmp_path: Path) -> None:
    src = _source(tmp_path)
    out = tmp_path / "src.dump"
    assert run_lsm("dump", src, "--out", out).code == 0
    missing = tmp_path / "typo"
    assert one_line_error(run_lsm("dump", missing), 2) == f"lsm: error: {missing}: no such file or directory"
    line = one_line_error(run_lsm("load", missing, out), 2)
    assert (
        line == f"lsm: error: {missing}: no such file or directory (give --create to create a database there)"
    )
    assert not missing.exists()
    line = one_line_error(run_lsm("load", src, tmp_path / "nodump"), 2)
    assert line == f"lsm: error: {tmp_path / 'nodump'}: No such file or directory"
    # --out into a missing directory: nothing is left behind
    assert one_line_error(run_lsm("dump", src, "--out", tmp_path / "no" / "f"), 2).startswith("lsm: error: ")
    assert not (tmp_path / "no").exists()


def test_a_dump_source_with_control_characters_is_printed_escaped(tmp_path: Path) -> None:
    """Issue 32 defect 10: the header's source was printed raw: a newline split the summary line, an ESC
    reached the terminal."""
    src = _source(tmp_path)
    out = tmp_path / "src.dump"
    assert run_lsm("dump", src, "--out", out).code == 0
    lines = out.read_bytes().splitlines()
    header = json.loads(lines[0])
    header["source"] = "evil\nlsm: error: fake\x1b[31mred"
    f = tmp_path / "evil.dump"
    f.write_bytes(_reseal([json.dumps(header).encode(), *lines[1:-1]]))
    r = run_lsm("load", "--create", tmp_path / "dst", f)
    assert r.code == 0 and r.err == "", r.err
    assert r.out.count("\n") == 1 and "\x1b" not in r.out, r.out
    assert r.out.endswith("(dump of evil\\nlsm: error: fake\\x1b[31mred at seq 5)\n")
    assert run_lsm("load", "--json", tmp_path / "dst", f).json()["source"] == header["source"]
