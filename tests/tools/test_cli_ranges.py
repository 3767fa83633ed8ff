"""The ldb habits of the command line: ``get`` of several keys, ``compact --from --to``, ``approx-size``,
``dump --from --to --limit`` (and ``load`` of such a dump), and a --from after --to refused everywhere.
Real `lsm` subprocesses on stores written in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

import lsm
from lsm.inspect import check_database
from tests.tools._cli import T0, one_line_error, run_lsm, run_lsm_each, write_golden_sst


def _store(path: Path) -> Path:
    """One sorted run of 600 keys in small SSTs, then an L0 SST deleting k0100..k0149 and a newer one
    updating k0500 and writing t (with a TTL that has passed)."""
    clock = lsm.ManualClock(T0)
    opts = lsm.DbOptions(clock=clock, background_compaction=False, target_sst_bytes=4096)
    with lsm.DB.open(path, opts) as db:
        for i in range(600):
            db.put(b"k%04d" % i, b"v%d" % i)
        db.flush()
        db.compact(full=True)
        for i in range(100, 150):
            db.delete(b"k%04d" % i)
        db.flush()
        db.put(b"k0500", b"new")
        db.put(b"t", b"expires", ttl=1)
        db.flush()
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _store(tmp_path_factory.mktemp("ranges") / "db")


def test_get_of_several_keys(store: Path) -> None:
    table, as_json, found = run_lsm_each(
        [
            ("get", store, "k0001", "k0120", "nope", "k0500"),
            ("get", store, "k0001", "k0120", "--json"),
            ("get", store, "k0001", "k0500", "--json"),
        ]
    )
    assert table.code == 1 and table.err == "lsm: error: 2 of 4 keys not found (absent, deleted or expired)\n"
    lines = table.out.splitlines()
    assert lines[0].split() == ["key", "seq", "ts", "expire_ts", "value"]
    assert [(line.split()[0], line.split()[-1]) for line in lines[1:]] == [
        ("k0001", "v1"),
        ("k0120", "found)"),  # "(not found)": in the order given, one row per key
        ("nope", "found)"),
        ("k0500", "new"),
    ]
    assert lines[2].split()[1:4] == ["-", "-", "-"]
    rows = as_json.json()
    assert as_json.code == 1 and [(r["key"], r["found"], r["value"]) for r in rows] == [
        ("k0001", True, "v1"),
        ("k0120", False, None),
    ]
    assert rows[0]["seq"] == 2 and rows[1]["seq"] is None
    assert found.code == 0 and found.err == "" and [r["value"] for r in found.json()] == ["v1", "new"]


def test_a_from_after_to_is_a_usage_error_everywhere(store: Path, tmp_path: Path) -> None:
    sst = write_golden_sst(tmp_path / "g.sst")
    runs = [
        ("scan", store, "--from", "z", "--to", "a"),
        ("scan", store, "--from", "z", "--to", "a", "--reverse"),
        ("sst", "scan", sst, "--from", "z", "--to", "a"),
        ("dump", store, "--from", "z", "--to", "a"),
        ("compact", store, "--from", "z", "--to", "a"),
        ("approx-size", store, "--from", "z", "--to", "a"),
    ]
    for args, r in zip(runs, run_lsm_each(runs), strict=True):
        assert "--from 'z' is after --to 'a'" in one_line_error(r, 2), args
        assert r.out == "", args
    empty = run_lsm("scan", store, "--from", "k", "--to", "k", "--json")  # [k, k): empty, not wrong
    assert empty.code == 0 and empty.json() == []


def test_dump_of_a_key_range_loads(store: Path, tmp_path: Path) -> None:
    part = tmp_path / "part.dump"
    r = run_lsm("dump", store, "--from", "k0098", "--to", "k0500", "--limit", "5", "--out", part, "--json")
    assert r.code == 0, r.err
    summary = r.json()
    assert summary["records"] == 5 and summary["tombstones"] == 3
    assert summary["range"] == {"from": "k0098", "to": "k0500", "limit": 5}
    text = run_lsm("dump", store, "--to", "k0002", "--out", tmp_path / "two.dump")
    assert text.out.startswith(f"dumped 2 records (0 tombstones, 0 with a TTL) of {store} (keys [-, k0002))")
    dst = tmp_path / "dst"
    loaded = run_lsm("load", dst, part, "--create")
    assert loaded.code == 0, loaded.err
    assert loaded.out.startswith("loaded 5 records (3 tombstones) into")
    rows = run_lsm("scan", dst, "--json").json()
    assert [(x["key"], x["value"]) for x in rows] == [("k0098", "v98"), ("k0099", "v99")]  # k0100..k0102: deletes
    hexed = run_lsm("dump", store, "--hex", "--from", "6b30353939")  # key arguments in hex: from k0599
    assert [line for line in hexed.out.splitlines()[1:-1]] == [
        '{"key": "k0599", "value": "v599", "expire_ts": null}',
        f'{{"key": "t", "value": "expires", "expire_ts": {T0 + 1}}}',
    ]


def test_compact_of_a_key_range(tmp_path: Path) -> None:
    db = _store(tmp_path / "db")
    with lsm.DB.open(db, read_only=True) as d:
        before = {e.name: e for e in d.manifest.all_ssts()}
        expected = list(d.scan())
    r = run_lsm("compact", db, "--from", "k0100", "--to", "k0150", "--json")
    assert r.code == 0, r.err
    rep = r.json()
    assert rep["range"] == {"from": "k0100", "to": "k0150"} and rep["jobs"] == 1
    assert rep["tombstones_dropped"] >= 50  # the deletes met their rows in the oldest run
    with lsm.DB.open(db, read_only=True) as d:
        after = {e.name: e for e in d.manifest.all_ssts()}
        assert list(d.scan()) == expected
    gone = set(before) - set(after)
    assert rep["ssts_compacted"] == len(gone) and rep["ssts_written"] == len(set(after) - set(before))
    # the run's SSTs that overlap the span of the inputs went; the others are the same files
    assert any(before[n].info.first_key > b"k0300" for n in set(before) & set(after))
    check_database(str(db))
    t = run_lsm("compact", db, "--from", "k0500", "--to", "k0501")
    lines = dict(line.split(None, 1) for line in t.out.splitlines() if line.strip() and "  " in line)
    assert t.code == 0 and lines["range"] == "[k0500, k0501)"
    assert lines["inputs"].endswith("SSTs (those overlapping the range)")


def test_approx_size(store: Path) -> None:
    whole, part, nothing, table = run_lsm_each(
        [
            ("approx-size", store, "--json"),
            ("approx-size", store, "--from", "k0200", "--to", "k0300", "--json"),
            ("approx-size", store, "--from", "u", "--json"),
            ("approx-size", store, "--from", "k0200", "--to", "k0300"),
        ]
    )
    w, p = whole.json(), part.json()
    sizes = sum(e.info.data_size for e in _ssts(store))
    assert w["sst_bytes"] == sizes and w["sst_rows"] == 600 + 52 and w["memtable_rows"] == 0
    assert 0 < p["sst_bytes"] < w["sst_bytes"] / 3 and 100 <= p["sst_rows"] < 200
    assert p["total_bytes"] == p["sst_bytes"] + p["memtable_bytes"] and p["from"] == "k0200"
    assert nothing.json()["total_bytes"] == 0
    props = dict(line.split(None, 1) for line in table.out.splitlines())
    assert props["range"] == "[k0200, k0300)" and props["ssts"].startswith(f"{p['sst_bytes'] / 1024:.1f} KiB")


def _ssts(path: Path):
    with lsm.DB.open(path, read_only=True) as d:
        return d.manifest.all_ssts()
